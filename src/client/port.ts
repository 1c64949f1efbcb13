import { createHash } from 'node:crypto';

/**
 * The client port: the few operations the cache needs from a Redis client, whatever its family.
 * Nothing outside `src/client/` touches a client object; a new family (Valkey GLIDE, …) is one adapter
 * file plus one line in `detect.ts`. Adapters detect their family structurally and never import it,
 * so the caller needs only the client they already have installed.
 */

/** A script argument: numbers are sent as decimal strings, Buffers as raw bytes. */
export type ScriptArg = string | Buffer | number;

/** A Lua script with its SHA-1 (EVALSHA) and name (ioredis `defineCommand`). Versioned names: a changed script is a new name. */
export interface Script {
  readonly name: string;
  readonly numberOfKeys: number;
  readonly lua: string;
  readonly sha: string;
  /**
   * The script changes nothing (a read). An adapter may then send EVALSHA before the server is known
   * to hold the script: if the NOSCRIPT reply is lost, only a read is lost, which its caller retries
   * or reports. A script with effects is sent with EVAL first on each connection, so that an undo
   * that must land (a release by token) is never lost behind a NOSCRIPT round trip.
   */
  readonly readOnly: boolean;
}

export function script(name: string, numberOfKeys: number, lua: string, readOnly = false): Script {
  return Object.freeze({ name, numberOfKeys, lua, sha: createHash('sha1').update(lua).digest('hex'), readOnly });
}

/** What the Bus needs from its own subscriber connection (a duplicate of the caller's client). */
export interface SubscriberPort {
  /**
   * SUBSCRIBE on the current connection; resolves once the server confirmed it. Repeating it for a
   * channel already subscribed is harmless. `onMessage` gets every message on the channel (the first
   * listener given is kept).
   */
  subscribe(channel: string, onMessage: (channel: string, message: string) => void): Promise<unknown>;
  /**
   * 'ready': a (re)connection is ready for commands. 'close': the connection closed or failed (notes
   * may be missed until the next SUBSCRIBE holds). Both emitted after the state change, once per event.
   */
  on(event: 'ready' | 'close', listener: () => void): void;
  on(event: 'error', listener: (err: unknown) => void): void;
  /** A round trip on the subscriber connection itself (the heartbeat). */
  ping(): Promise<unknown>;
  /** Drops the connection and lets it reconnect (the heartbeat's verdict on a silently dead socket). */
  reconnect(): void;
  /** Drops the connection for good, without waiting for a reply (Redis may be down). Idempotent. */
  close(): void;
}

/**
 * Sharded pub/sub for the per-key wake channels (`notes: 'sharded'`, see wake.ts), on a connection of
 * its own (a duplicate of the caller's client; on a Cluster, one per master, opened by the client).
 */
export interface ShardSubscriberPort {
  /**
   * SSUBSCRIBE `channel` (on a Cluster, at the master of its slot). Where the server has no sharded
   * pub/sub (Redis < 7.0: an "unknown command" reply), SUBSCRIBE instead, and from then on for every
   * channel (the scripts publish with PUBLISH there too). Resolves once the server confirmed it; rejects
   * with the client's error otherwise (a closed or not yet ready connection, a refusal).
   */
  subscribe(channel: string): Promise<void>;
  /** SUNSUBSCRIBE (or UNSUBSCRIBE, as above). Never rejects: a connection gone holds nothing anyway. */
  unsubscribe(channel: string): Promise<void>;
  /** `listener` gets every message on every channel subscribed through this port (one listener). */
  onMessage(listener: (channel: string, message: string) => void): void;
  /**
   * `listener` is called when subscriptions may have been lost (a connection closed or was replaced, a
   * slot moved): messages sent meanwhile are not delivered, and a channel must be subscribed again.
   */
  onLost(listener: () => void): void;
  /**
   * Drops the connection(s) and lets them reconnect (the wake's verdict on a SSUBSCRIBE that went
   * unanswered for redisTimeout: a silently dead socket); subscriptions are then lost (onLost fires)
   * and taken again by the caller. Never throws; a call while a reconnection is already under way may
   * be a no-op; a no-op after close().
   */
  reconnect(): void;
  /** Drops the connection(s) for good, without waiting for a reply. Idempotent. */
  close(): void;
}

/** The channel a RESP2 redirect target receives the server's invalidations on (CLIENT TRACKING … REDIRECT). */
export const INVALIDATE_CHANNEL = '__redis__:invalidate';

/**
 * Server-assisted L1 invalidation (`local.invalidation: 'tracking'`, docs/tracking.md): two connections
 * of the cache's own, duplicates of the caller's client. `reads` carries the reads that fill L1 and
 * nothing else; the *listener* (RESP2, subscribed to INVALIDATE_CHANNEL) receives the server's
 * invalidations of every key read on `reads` once tracking is on. The caller's connection is never tracked.
 */
export interface TrackingPort {
  /** The reads' connection, as a port (scripts, GETRANGE, pipelines). */
  readonly reads: RedisPort;
  /**
   * On the current connections: CLIENT ID and SUBSCRIBE INVALIDATE_CHANNEL on the listener (once per
   * listener connection: a RESP2 connection takes no CLIENT ID once subscribed), then `CLIENT TRACKING
   * on REDIRECT <id>` on `reads`. Resolves once the server confirmed tracking; from then on every read
   * sent on `reads` is tracked. Rejects with the client's error otherwise.
   */
  track(): Promise<void>;
  /**
   * 'close': either connection closed or was replaced (invalidations may be lost from now, and reads
   * may go out untracked). 'ready': either connection is ready again (`track()` may now hold).
   */
  on(event: 'ready' | 'close', listener: () => void): void;
  on(event: 'error', listener: (err: unknown) => void): void;
  /** Every invalidation the listener receives: the Redis keys (as the server names them), or null (all: a flush). */
  onInvalidate(listener: (keys: readonly string[] | null) => void): void;
  /** A round trip on the listener connection itself (the heartbeat: PING is allowed in subscribed mode). */
  ping(): Promise<unknown>;
  /** Drops the listener connection and makes it again (the heartbeat's verdict on a silently dead socket): a 'close', then a 'ready'. */
  reconnect(): void;
  /** Drops both connections for good, without waiting for a reply. Idempotent. */
  close(): void;
}

/** The caller's client, seen through the port. */
export interface RedisPort {
  /** Which adapter: for messages and tests. */
  readonly family: string;
  /**
   * Runs `script` with EVALSHA, falling back to loading it on NOSCRIPT (after SCRIPT FLUSH, a restart,
   * a failover). `bytes`: bulk-string replies come back as Buffers (the entry bytes); otherwise as
   * strings. Integer replies are numbers, nil is null, arrays are arrays. Rejects with the client's
   * error, whose message starts with the server's error code (`NOPERM …`, `OOM …`): Io maps it.
   */
  run(script: Script, keys: readonly string[], args: readonly ScriptArg[], bytes?: boolean): Promise<unknown>;
  /**
   * `GETRANGE key 0 end`, the reply as a Buffer (an empty one for a missing key): a fresh hit's one
   * plain read, auto-pipelined where the client does it. Rejects with the client's error (`WRONGTYPE …`
   * for a key that is not a string).
   */
  getRange(key: string, end: string): Promise<Buffer>;
  /** A new connection of the same client (the only one the cache ever opens), for pub/sub only. */
  subscriber(): SubscriberPort;
  /** A new connection (on a Cluster, a set of them) for the per-key wake channels; see ShardSubscriberPort. */
  shardSubscriber(): ShardSubscriberPort;
  /** Two new connections for server-assisted invalidation (standalone clients only); see TrackingPort. */
  tracking(): TrackingPort;
  /** Calls `listener` on every (re)connection of the caller's client; returns the way to stop. */
  onReady(listener: () => void): () => void;
  /** Which node owns `key` (Cluster: the master of its slot; standalone: one fixed id). */
  nodeOf(key: string): string;
  /** True on a Cluster client: a pipeline must then hold the keys of one slot only. */
  readonly cluster: boolean;
  /**
   * A batch of scripts sent together (one round trip): `queue` them, then `exec` answers each in
   * queue order, a command's own error reply as its entry's error. The keys of one pipeline must
   * share a slot on a Cluster.
   */
  pipeline(): PipelinePort;
  /** A plain command (GET, …), routed by `key` on a Cluster. Replies as `run` without `bytes`. */
  command(key: string, args: readonly ScriptArg[]): Promise<unknown>;
  /**
   * A command on the very connection that runs commands for `key` (on a Cluster, its slot's master):
   * `WAIT` must run where the script it confirms ran. Rejects where the family cannot name that
   * connection.
   */
  commandOnNodeOf(key: string, args: readonly ScriptArg[]): Promise<unknown>;
  /**
   * One raw-command sender per server the client knows: on a Cluster its masters (`'masters'`, where
   * the keys are: SCAN) or every node, replicas too (`'all'`, where subscribers may be connected:
   * PUBSUB NUMSUB); on a standalone client the one server. Replies as `command`.
   */
  eachNode(role: 'masters' | 'all'): ((args: readonly ScriptArg[]) => Promise<unknown>)[];
  /**
   * What the client puts before every key argument on its own (ioredis `keyPrefix`; '' otherwise):
   * SCAN's MATCH has no key argument, so the clear adds it there and strips it from SCAN's replies.
   */
  readonly keyPrefix: string;
  /** True when the client does not verify the server's TLS certificate. */
  readonly skipsTlsVerification: boolean;
}

/** Scripts queued to go out together; see RedisPort.pipeline. */
export interface PipelinePort {
  /** Queues the script; what it returns settles only with exec() and is never rejected (read exec()'s answers). */
  run(script: Script, keys: readonly string[], args: readonly ScriptArg[], bytes?: boolean): Promise<unknown>;
  /** Queues RedisPort.getRange; its answer is in exec()'s list, as a script's. */
  getRange(key: string, end: string): Promise<Buffer>;
  exec(): Promise<[Error | null, unknown][]>;
}

/** What a queued command returns: the answer is in exec()'s list, by position. */
export const QUEUED: Promise<never> = Promise.resolve(undefined as never);

/** Reads a nested property without trusting the shape (adapters look at foreign client objects). */
export function prop(o: unknown, ...path: string[]): unknown {
  let v = o;
  for (const p of path) {
    if ((typeof v !== 'object' && typeof v !== 'function') || v === null) return undefined;
    v = (v as Record<string, unknown>)[p];
  }
  return v;
}

/**
 * A server without the command (an "unknown command" error reply: Redis < 7.0 has no sharded pub/sub,
 * or the command was renamed away). Not NOPERM: an ACL refusal is the caller's to report.
 */
export function isUnknownCommand(err: unknown): boolean {
  return err instanceof Error && /^ERR unknown command/i.test(err.message);
}

/** An ACL refusal (the user lacks the command, key or channel). */
export function isNoPerm(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('NOPERM');
}

/** A command on a key holding another type (a hash, a list: not an entry). */
export function isWrongType(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('WRONGTYPE');
}

export function isNoScript(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('NOSCRIPT');
}
