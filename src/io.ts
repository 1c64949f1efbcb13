import { isNoPerm } from './client/port.js';
import { BreakerOpen, CacheClosedError, NodeSuspect, RedisPermissionError, RedisTimeout, RedisUnavailableError, redisText, type Subject } from './errors.js';
import { NodeHealth, type CacheHealth, type HealthChange, type Probe, type ProbeTarget } from './health.js';
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
 * A hung node is found by time, not by counting (health.ts): when an operation has gone unanswered
 * for `redisTimeout` (after the stall credit below) and its node answered nothing else since it was
 * sent, the node is suspect. Every operation still in flight to it fails then — together ONE breaker
 * failure, however many keys were waiting — and nothing more is sent to it (operations fail at once
 * with `NodeSuspect`) until it answers anything: a background probe (one outstanding at a time), or a
 * late reply to an operation already given up on. The subscriber's heartbeat can find it hung first
 * (`silent`). One slow reply on a node that answers other operations
 * meanwhile times out alone, as before: it never makes the node suspect.
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
  /** The node it went to. */
  readonly node: NodeHealth;
  /** What it was about (where a probe goes if it finds its node hung). */
  readonly target: ProbeTarget;
  /** A background probe of a suspect node: its timeout counts as no failure and fails no caller. */
  readonly probe: boolean;
  /** A read (operation 'read'): settled at close()'s start (stopReads), not at its end. */
  readonly read: boolean;
  /** When it times out: start + redisTimeout, moved later by stalls of this process (see startSweeper). */
  deadline: number;
  settled: boolean;
  prev: InFlight | undefined;
  next: InFlight | undefined;
  /** Times it out; `counted` false when its node's suspicion already counted the failure (one for every operation in flight). */
  expire: (counted: boolean) => void;
  /** close(): settle with CacheClosedError; not a Redis failure (the breaker counts nothing). */
  abandon: () => void;
}

const SETTLED = (): void => undefined;

/** The most stall time one operation's deadline (or the subscriber's heartbeat, wait.ts) is moved by, in units of redisTimeout. */
export const MAX_STALL_CREDIT = 2;

export class Io {
  /** After close(): every operation rejects with CacheClosedError at once. */
  private closed = false;
  /**
   * After stopReads() (close() began): reads reject with CacheClosedError at once. Other operations
   * go on until close(): close() still releases the grants it holds, and sends their notes.
   */
  private readsStopped = false;
  /** One breaker and suspicion per node, created on first use (a Cluster has few masters; bounded by BREAKER_NODES). */
  private readonly nodes = new Map<string, NodeHealth>();
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
    private readonly nodeOfKey: NodeOf = () => '',
    /** The node that owns a Redis key given as is (OwnKey). */
    private readonly nodeOfRedisKey: (redisKey: string) => string = () => '',
    /** Reports each change of a node's health (the `health` event). */
    private readonly onHealth: (change: HealthChange) => void = () => undefined,
    /** Probes a suspect node; without one, a hung node is found by counting timeouts only (no suspicion). */
    private readonly probe?: Probe,
  ) {}

  run<T>(operation: string, fn: () => Promise<T>, target?: string | OwnKey, compensate?: () => void): Promise<T> {
    const key = typeof target === 'object' ? target.key : target;
    const subject: Subject = typeof target === 'object' ? (target.key ?? { namespace: target.namespace }) : target;
    const read = operation === 'read';
    if (this.closed || (read && this.readsStopped)) return Promise.reject(new CacheClosedError(key));
    const node = this.nodeOf(target);
    const start = this.clock.now();
    const refused = this.notSendable(node, operation, subject, start);
    if (refused) return Promise.reject(refused);
    return new Promise<T>((resolve, reject) => {
      const entry: InFlight = {
        start,
        node,
        target,
        probe: false,
        read,
        deadline: start + this.timeoutMs,
        settled: false,
        prev: undefined,
        next: undefined,
        expire: (counted) => {
          const timeout = new RedisTimeout(this.timeoutMs);
          if (counted) this.failed(node, redisText(timeout), start);
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
            // Still, the node answers: a suspicion ends (the breaker waits for a timely answer).
            if (!this.closed && this.answered(node, false)) this.onAnswer(true);
            return;
          }
          const recovered = this.answered(node, true);
          resolve(value);
          this.onAnswer(recovered);
        },
        (err: unknown) => {
          const timely = this.settle(entry);
          const error = classify(operation, err, subject);
          // An error reply, or a write its replicas did not confirm in time (WAIT answered), is an answer
          // too — the node is not hung — though a failure for the breaker.
          if (!this.closed && (error.failure === 'reply' || error.failure === 'replicaAck') && this.answered(node, false)) this.onAnswer(true);
          if (!timely) return;
          this.failed(node, redisText(err), start);
          reject(error);
        },
      );
    });
  }

  /** Why nothing may be sent to `node` now (hung, or its breaker open), else undefined (a half-open breaker's probe is claimed). */
  private notSendable(node: NodeHealth, operation: string, subject: Subject, now: number): RedisUnavailableError | undefined {
    // Hung: fail at once (the caller answers from memory), not queue behind it for another redisTimeout.
    if (node.suspect) return new RedisUnavailableError(operation, new NodeSuspect(node.name, now - node.silentSince, this.timeoutMs), subject);
    if (!node.breaker.admit(now)) return new RedisUnavailableError(operation, new BreakerOpen(node.breaker.failures, node.breaker.lastFailure), subject);
    return undefined;
  }

  /**
   * The client reports a fresh connection: close the breaker now instead of waiting out the cooldown
   * (after a Redis restart, recovery then takes the reconnect, not reconnect + cooldown).
   */
  connected(): void {
    const now = this.clock.now();
    for (const node of this.nodes.values()) {
      node.breaker.reset();
      node.suspect = false;
      node.sync(now, now, 'the client reconnected');
    }
    this.onAnswer(true);
  }

  /** Why operations are refused now: the first node suspect or with its breaker refusing (its cause), or undefined when none is. */
  refusal(): RedisUnavailableError | undefined {
    const now = this.clock.now();
    for (const node of this.nodes.values()) {
      if (node.suspect) return new RedisUnavailableError('ready', new NodeSuspect(node.name, now - node.silentSince, this.timeoutMs));
      const breaker = node.breaker;
      if (breaker.refusing(now)) return new RedisUnavailableError('ready', new BreakerOpen(breaker.failures, breaker.lastFailure));
    }
    return undefined;
  }

  /** Every node's state now (`cache.health()`): a walk over the few nodes seen. The keyless operations' node ('') is not listed. */
  health(): CacheHealth {
    const now = this.clock.now();
    const nodes = [];
    for (const node of this.nodes.values()) if (node.name !== '') nodes.push(node.snapshot(now));
    return { healthy: nodes.every((n) => n.state === 'healthy'), nodes };
  }

  /** The node that owns `target`: a user key's entry, or a Redis key of its own. */
  private nodeOf(target: string | OwnKey | undefined): NodeHealth {
    return this.nodeNamed(typeof target === 'object' ? this.nodeOfRedisKey(target.redisKey) : this.nodeOfKey(target));
  }

  private nodeNamed(name: string): NodeHealth {
    let node = this.nodes.get(name);
    if (!node) {
      // Node names come from the client's slot table: few, but a long-lived cache across many
      // reshards could see more; forgetting a healthy one's history costs nothing.
      if (this.nodes.size >= BREAKER_NODES) this.nodes.clear();
      node = new NodeHealth(name, this.threshold, this.cooldownMs, name === '' ? () => undefined : this.onHealth);
      this.nodes.set(name, node);
    }
    return node;
  }

  /** The node answered (`timely`: an operation in time). True when that ends an outage: a suspicion, or an open breaker (a timely answer only). */
  private answered(node: NodeHealth, timely: boolean): boolean {
    const now = this.clock.now();
    node.lastAnswer = now;
    let recovered = false;
    if (node.suspect) {
      node.suspect = false;
      // The end of a suspicion is a recovery only when no open breaker still refuses the node: until the
      // breaker closes, calls still skip Redis and must keep their degraded copies (the memo).
      recovered = !node.breaker.isOpen;
    }
    if (timely) recovered = node.breaker.succeeded(now) || recovered;
    if (recovered) node.sync(now, now, 'answered');
    return recovered;
  }

  /** One failure for the node's breaker (an operation sent at `since` failed); reports an opening. */
  private failed(node: NodeHealth, text: string, since: number): void {
    const now = this.clock.now();
    node.breaker.failed(text, now);
    node.sync(now, since, text);
  }

  /**
   * Another connection to node `name` (the subscriber's, its heartbeat unanswered) has heard nothing
   * from it since `since`, for over `redisTimeout` of this process's running time (the heartbeat
   * applies the stall credit, wait.ts): if
   * no operation of ours was answered by the node since then either, it is hung, as if one of ours
   * had found it — so calls stop waiting on it before any of them has to time out first.
   */
  silent(name: string, since: number): void {
    if (this.closed || !this.probe) return;
    const node = this.nodeNamed(name);
    if (node.suspect || node.lastAnswer >= since) return;
    this.suspect(node, since, undefined);
  }

  /**
   * An operation sent at `since` (about `target`) went unanswered past its deadline and its node
   * answered nothing since it was sent: the node is hung. One breaker failure for the lot; every operation in flight to it fails now (they
   * would wait behind it); a probe goes out.
   */
  private suspect(node: NodeHealth, since: number, target: ProbeTarget): void {
    node.becameSuspect(since, target);
    const text = redisText(new RedisTimeout(this.timeoutMs));
    this.failed(node, text, since);
    const stuck: InFlight[] = [];
    for (let entry = this.inFlight.first; entry; entry = entry.next) if (entry.node === node && !entry.probe) stuck.push(entry);
    for (const entry of stuck) {
      const expire = entry.expire;
      this.settle(entry);
      expire(false);
    }
    this.sendProbe(node);
  }

  /** One probe of a suspect node at a time, outstanding until it settles: its reply (even an error reply) ends the suspicion. */
  private sendProbe(node: NodeHealth): void {
    const probe = this.probe;
    if (!probe || node.probing || !node.suspect || this.closed) return;
    node.probing = true;
    const start = this.clock.now();
    const entry: InFlight = {
      start,
      node,
      target: node.probeTarget,
      probe: true,
      read: false,
      // Never timed out: a probe unanswered stays the node's one probe until its reply or error (a
      // silently dead socket would otherwise queue one more EXISTS per redisTimeout behind it).
      deadline: Number.POSITIVE_INFINITY,
      settled: false,
      prev: undefined,
      next: undefined,
      expire: () => undefined,
      abandon: () => {
        node.probing = false;
      },
    };
    this.inFlight.add(entry);
    if (!this.sweeper) this.startSweeper();
    const done = (answer: boolean): void => {
      if (this.settle(entry)) node.probing = false;
      if (answer && !this.closed && this.answered(node, false)) this.onAnswer(true);
    };
    let sent: Promise<unknown>;
    try {
      sent = probe(node.probeTarget);
    } catch (error) {
      sent = Promise.reject(error instanceof Error ? error : new Error(String(error)));
    }
    sent.then(
      () => done(true),
      (err: unknown) => done(classify('probe', err, undefined).failure === 'reply'),
    );
  }

  /**
   * close() began: every read in flight settles now with CacheClosedError (not a Redis failure), and so
   * does every later one, so a call waiting on a read (shared by other calls: call.ts) is settled at
   * once, as one waiting on a load is (flight.ts).
   */
  stopReads(): void {
    this.readsStopped = true;
    const reads: InFlight[] = [];
    for (let entry = this.inFlight.first; entry; entry = entry.next) if (entry.read) reads.push(entry);
    for (const entry of reads) {
      const abandon = entry.abandon;
      this.settle(entry);
      abandon();
    }
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
      // Found hung by time: its node answered nothing since this was sent (replies read in the poll
      // phase before this check count). Without a probe there is no way back from suspicion: count.
      if (!entry.probe && this.probe && entry.node.lastAnswer < entry.start && !entry.node.suspect) {
        this.suspect(entry.node, entry.start, entry.target);
        continue;
      }
      const expire = entry.expire;
      this.settle(entry);
      expire(true);
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
      // A suspect node is probed again once its last probe failed without a reply (a refused connection).
      for (const node of this.nodes.values()) if (node.suspect && !node.probing) this.sendProbe(node);
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
  if (isNoPerm(err)) return new RedisPermissionError(operation, err, subject);
  return new RedisUnavailableError(operation, err, subject);
}
