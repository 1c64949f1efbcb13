/**
 * One socket write per tick for the commands the cache sends on a caller's ioredis connection.
 *
 * ioredis (without `enableAutoPipelining`) writes every command to its socket as it is called: ten
 * calls answered by one reply chunk send their ten next reads as ten `write` syscalls. node-redis
 * gathers a tick's commands into one write by itself. Here the cache corks the connection's socket
 * before its first command of a tick and uncorks it on `process.nextTick`, so every command written
 * in that tick — the cache's, and any the caller's own code writes on the same connection meanwhile —
 * leaves in one write. Nothing is reordered or held past the current tick (the nextTick queue runs
 * before the event loop polls for I/O again). Measured in bench:hit (`bare-cork` beside `bare`).
 *
 * Invariant: every cork() here is matched by exactly one uncork() of the same socket, on the next
 * tick, even if ioredis replaced its socket meanwhile (a reconnection): a caller's own cork() of the
 * socket is never undone, and a socket is never left corked by the cache.
 */

/** What a corkable connection offers: ioredis's `status` and its current socket, `stream`. */
interface Corkable {
  cork(): void;
  uncork(): void;
}
interface Connection {
  readonly status?: string;
  readonly stream?: Partial<Corkable>;
}

export interface TickWrites {
  /** Called just before a command is sent: the tick's writes are gathered from here on. */
  gather(): void;
}

/** No gathering: an ioredis Cluster (its commands go to per-node connections it picks later). */
export const NO_TICK_WRITES: TickWrites = { gather: () => undefined };

export class SocketTickWrites implements TickWrites {
  /** The socket corked in this tick (until the nextTick that uncorks it), else undefined. */
  private corked: Corkable | undefined;

  private readonly flush = (): void => {
    const socket = this.corked;
    this.corked = undefined;
    socket?.uncork();
  };

  constructor(private readonly connection: Connection) {}

  gather(): void {
    if (this.corked !== undefined) return;
    const c = this.connection;
    // Only a connection that writes at once: before 'ready', ioredis queues commands (offline queue)
    // and writes them itself when it connects.
    if (c.status !== 'ready') return;
    const socket = c.stream;
    if (socket === undefined || typeof socket.cork !== 'function' || typeof socket.uncork !== 'function') return;
    socket.cork();
    this.corked = socket as Corkable;
    process.nextTick(this.flush);
  }
}
