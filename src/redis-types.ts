/**
 * The slice of an ioredis client (`Redis` or `Cluster`, ioredis 5 or 6) the cache uses.
 * Structural on purpose: the caller's ioredis version is theirs, so we never import its classes.
 */
export interface RedisClient {
  defineCommand(name: string, definition: { numberOfKeys?: number; lua: string }): void;
  /** ioredis `duplicate()`: a new connection with the same options; used once, for pub/sub only. */
  duplicate(...args: never[]): unknown;
  /** ioredis emits 'ready' on every (re)connection; the cache listens (and stops listening on close()). */
  on?(event: 'ready', listener: () => void): unknown;
  off?(event: 'ready', listener: () => void): unknown;
  /** True on an ioredis `Cluster`. */
  readonly isCluster?: boolean;
}

/**
 * What the subscriber connection (our duplicate) must offer. The Bus relies on ioredis's event
 * contract: 'ready' after every (re)connection's ready check, 'close' after every closed or failed
 * connection, both emitted on nextTick after the status change.
 */
export interface SubscriberClient {
  subscribe(...channels: string[]): Promise<unknown>;
  unsubscribe(...channels: string[]): Promise<unknown>;
  on(event: 'message', listener: (channel: string, message: string) => void): unknown;
  on(event: 'messageBuffer', listener: (channel: Buffer, message: Buffer) => void): unknown;
  on(event: 'error', listener: (err: Error) => void): unknown;
  on(event: 'ready' | 'close', listener: () => void): unknown;
  /** Valid in subscriber mode: the Bus's heartbeat. */
  ping(): Promise<unknown>;
  quit(): Promise<unknown>;
  /** `reconnect: true` drops the socket and lets ioredis reconnect (the heartbeat's verdict on a dead socket). */
  disconnect(reconnect?: boolean): void;
}
