import { Breaker } from './breaker.js';
import { BreakerOpen, CacheClosedError, RedisPermissionError, RedisTimeout, RedisUnavailableError, redisText, type Subject } from './errors.js';
import type { NodeOf, OwnKey } from './node-of.js';
import type { Clock } from './options.js';

/**
 * Every Redis operation goes through `Io.run`: it is bounded by `redisTimeout` (ioredis may keep a
 * command in its offline queue far longer), and a circuit breaker stops sending commands after
 * `threshold` consecutive failures, so an outage costs callers nothing but the degraded path. The
 * breaker is kept per node (`nodeOf`: per slot owner on a Cluster, one for a plain client): a dead
 * shard opens its own breaker only, and keys on the healthy shards keep their lock. Its policy
 * (jittered, growing cooldown; one half-open probe; closings judged over a window) is breaker.ts.
 *
 * Invariant: a timed-out command may still run on the server later (it sat in ioredis' offline queue,
 * or its reply was lost). Callers whose command creates state (a lock) pass `compensate`, which runs
 * at the timeout (sent on the same connection, so the server applies it after the command) and again
 * if a late success reply arrives. It must be idempotent (a release by token is).
 */
/**
 * One operation in flight: settled by its reply, or by the sweeper once past its deadline, whichever
 * comes first (`settled` says which already did). Once settled, its callbacks are dropped, so a
 * settled entry waiting for the next sweep retains no caller's promise or value.
 */
interface InFlight {
  /** When it was sent (clock time). */
  readonly start: number;
  /** When it times out: start + redisTimeout, moved later by stalls of this process (see startSweeper). */
  deadline: number;
  settled: boolean;
  prev: InFlight | undefined;
  next: InFlight | undefined;
  expire: () => void;
  /** close(): settle with CacheClosedError; not a Redis failure (the breaker counts nothing). */
  abandon: () => void;
}

const SETTLED = (): void => undefined;

/** The most stall time one operation's deadline is moved by, in units of redisTimeout. */
const MAX_STALL_CREDIT = 2;

export class Io {
  /** After close(): every operation rejects with CacheClosedError at once. */
  private closed = false;
  /** One breaker per node, created on first use (a Cluster has few masters; bounded by BREAKER_NODES). */
  private readonly breakers = new Map<string, Breaker>();
  /**
   * Operations awaiting a reply. Invariant: an entry is settled exactly once — by its reply or by
   * the sweeper (settle() decides, and unlinks it) — and whoever settles it settles the caller's
   * promise. One sweeping interval per Io (instead of a timer per command) keeps the hot path cheap;
   * a timeout fires within [redisTimeout, 1.25 × redisTimeout] after it was sent, later by the stall
   * credit startSweeper gives it (at most 2 × redisTimeout), after the poll phase that follows the sweep.
   */
  private readonly inFlight = new InFlightList();
  private sweeper: NodeJS.Timeout | undefined;
  /** When the sweeper last ran (or started): a sweep much later than its period means this process stalled. */
  private lastSweep = 0;

  constructor(
    private readonly timeoutMs: number,
    private readonly threshold: number,
    private readonly cooldownMs: number,
    private readonly clock: Clock,
    /**
     * Called after every answered operation, `recovered` true when it closes its node's open breaker
     * (an outage ended), and on the client's ready event (`recovered` true). Must be cheap: it is on the hot path.
     */
    private readonly onAnswer: (recovered: boolean) => void = () => undefined,
    /** The node that owns a key: one breaker each. */
    private readonly nodeOf: NodeOf = () => '',
    /** The node that owns a Redis key given as is (OwnKey). */
    private readonly nodeOfRedisKey: (redisKey: string) => string = () => '',
  ) {}

  run<T>(operation: string, fn: () => Promise<T>, target?: string | OwnKey, compensate?: () => void): Promise<T> {
    const key = typeof target === 'object' ? undefined : target;
    const subject: Subject = typeof target === 'object' ? { namespace: target.namespace } : target;
    if (this.closed) return Promise.reject(new CacheClosedError(key));
    const breaker = this.breakerOf(target);
    if (!breaker.admit(this.clock.now())) {
      return Promise.reject(new RedisUnavailableError(operation, new BreakerOpen(breaker.failures, breaker.lastFailure), subject));
    }
    return new Promise<T>((resolve, reject) => {
      const start = this.clock.now();
      const entry: InFlight = {
        start,
        deadline: start + this.timeoutMs,
        settled: false,
        prev: undefined,
        next: undefined,
        expire: () => {
          const timeout = new RedisTimeout(this.timeoutMs);
          breaker.failed(redisText(timeout), this.clock.now());
          compensate?.();
          reject(new RedisUnavailableError(operation, timeout, subject));
        },
        abandon: () => {
          compensate?.();
          reject(new CacheClosedError(key));
        },
      };
      this.inFlight.add(entry);
      if (!this.sweeper) this.startSweeper();
      fn().then(
        (value) => {
          if (!this.settle(entry)) {
            // Timed out earlier, yet applied: undo what it created (again, in case the first undo ran first).
            compensate?.();
            return;
          }
          const recovered = breaker.succeeded(this.clock.now());
          resolve(value);
          this.onAnswer(recovered);
        },
        (err: unknown) => {
          if (!this.settle(entry)) return;
          breaker.failed(redisText(err), this.clock.now());
          reject(classify(operation, err, subject));
        },
      );
    });
  }

  /**
   * The client reports a fresh connection: close the breaker now instead of waiting out the cooldown
   * (after a Redis restart, recovery then takes the reconnect, not reconnect + cooldown).
   */
  connected(): void {
    for (const breaker of this.breakers.values()) breaker.reset();
    this.onAnswer(true);
  }

  /** Why operations are refused now: the open breaker of the first node refusing (its cause), or undefined when none is. */
  refusal(): RedisUnavailableError | undefined {
    const now = this.clock.now();
    for (const breaker of this.breakers.values()) {
      if (breaker.refusing(now)) return new RedisUnavailableError('ready', new BreakerOpen(breaker.failures, breaker.lastFailure));
    }
    return undefined;
  }

  /** The breaker of the node that owns `target`: a user key's entry, or a Redis key of its own. */
  private breakerOf(target: string | OwnKey | undefined): Breaker {
    const node = typeof target === 'object' ? this.nodeOfRedisKey(target.redisKey) : this.nodeOf(target);
    let breaker = this.breakers.get(node);
    if (!breaker) {
      // Node names come from the client's slot table: few, but a long-lived cache across many
      // reshards could see more; forgetting a closed one's history costs nothing.
      if (this.breakers.size >= BREAKER_NODES) this.breakers.clear();
      breaker = new Breaker(this.threshold, this.cooldownMs);
      this.breakers.set(node, breaker);
    }
    return breaker;
  }

  /** Stops the sweeper; operations still in flight settle at once with CacheClosedError (not a Redis failure), and so does every later one. */
  close(): void {
    this.closed = true;
    for (let entry = this.inFlight.first; entry; entry = this.inFlight.first) {
      const abandon = entry.abandon;
      this.settle(entry);
      abandon();
    }
    clearInterval(this.sweeper);
    this.sweeper = undefined;
  }

  /** Marks `entry` settled, unlinks it and drops its callbacks; false if it already was (the other side won). */
  private settle(entry: InFlight): boolean {
    if (entry.settled) return false;
    entry.settled = true;
    this.inFlight.remove(entry);
    entry.expire = SETTLED;
    entry.abandon = SETTLED;
    return true;
  }

  /** Times out each of `due` that no reply (nor close()) has settled since the sweep found it late. */
  private expire(due: readonly InFlight[]): void {
    for (const entry of due) {
      if (entry.settled) continue;
      const expire = entry.expire;
      this.settle(entry);
      expire();
    }
  }

  /**
   * A stall of this process (a long GC pause, synchronous work) is not Redis's delay, in two ways:
   * - Time this process spent stalled is not counted against redisTimeout: a sweep that runs more
   *   than a period late moves the deadlines in flight later by its lateness. Without it, a
   *   command written after the stall (node-redis and ioredis autopipelining write on setImmediate),
   *   a reply larger than one read pass, or a second round trip would time out with Redis on time.
   * - The verdict waits for the next check phase, after the poll phase that reads the replies that
   *   came in meanwhile.
   * An operation is credited only the part of a stall after it was sent, and at most
   * MAX_STALL_CREDIT × redisTimeout in all (so a process that lags on every turn still times out).
   */
  private startSweeper(): void {
    const period = Math.max(1, Math.floor(this.timeoutMs / 4));
    // The latest a deadline may be moved to, from its operation's start.
    const latest = (1 + MAX_STALL_CREDIT) * this.timeoutMs;
    this.lastSweep = this.clock.now();
    this.sweeper = setInterval(() => {
      if (!this.inFlight.first) {
        // Idle for a whole tick: stop, so an idle cache holds no timer.
        clearInterval(this.sweeper);
        this.sweeper = undefined;
        return;
      }
      const now = this.clock.now();
      const late = now - this.lastSweep - period;
      this.lastSweep = now;
      const stalled = late > period ? late : 0;
      let due: InFlight[] | undefined;
      for (let entry: InFlight | undefined = this.inFlight.first; entry; entry = entry.next) {
        if (stalled > 0) {
          const credit = Math.min(stalled, now - entry.start, entry.start + latest - entry.deadline);
          if (credit > 0) entry.deadline += credit;
        }
        if (entry.deadline <= now) (due ??= []).push(entry);
      }
      if (due) setImmediate(() => this.expire(due));
    }, period);
    this.sweeper.unref();
  }

}

/**
 * The operations in flight, linked through the entries themselves. Not a Set: a Set held by the
 * long-lived Io keeps every operation reachable from an old-generation table, and its add and delete
 * per operation cost ~4 µs of GC each (measured without Redis: an Io.run took 4.8 µs with a Set, 0.5 µs with this list). A reply unlinks
 * its entry at once, so nothing outlives its operation.
 */
class InFlightList {
  first: InFlight | undefined;
  private last: InFlight | undefined;

  add(entry: InFlight): void {
    entry.prev = this.last;
    if (this.last) this.last.next = entry;
    else this.first = entry;
    this.last = entry;
  }

  remove(entry: InFlight): void {
    if (entry.prev) entry.prev.next = entry.next;
    else this.first = entry.next;
    if (entry.next) entry.next.prev = entry.prev;
    else this.last = entry.prev;
    entry.prev = entry.next = undefined;
  }
}

/** At most this many nodes' breakers are kept (a Cluster has at most a few hundred masters). */
const BREAKER_NODES = 1024;

function classify(operation: string, err: unknown, subject: Subject): RedisUnavailableError {
  if (err instanceof RedisUnavailableError) return err;
  if (err instanceof Error && err.message.startsWith('NOPERM')) return new RedisPermissionError(operation, err, subject);
  return new RedisUnavailableError(operation, err, subject);
}
