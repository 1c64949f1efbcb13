import { portFor } from '../client/detect.js';
import { CacheClosedError, NoQuorumError, OriginBackoffError } from '../errors.js';
import { nodeProbe, type HealthChange, type NodeHealthReport } from '../health.js';
import { Io } from '../io.js';
import type { EntryKeys } from '../keys.js';
import type { ResolvedCall, ResolvedRedlock } from '../options.js';
import { defineScripts, type Scripts } from './scripts.js';
import { announceInStore, ReleaseOnce, silentInStore } from './grant.js';
import { grantTimeOf, newToken, tagGrant, type LockDeps } from './single.js';
import type { Grant, Locker, ReleaseOutcome, ReleaseResult } from './types.js';
import { Watchdog, type Extension } from './watchdog.js';

// ------------------------------------------------------------------ pure rules (table-tested)

/** Votes needed out of n nodes. */
export function quorum(n: number): number {
  return Math.floor(n / 2) + 1;
}

/** Time left on a lock after `elapsed` ms of acquiring, minus the drift allowance (ttl × factor + 2 ms). */
export function validity(lockTtl: number, elapsed: number, driftFactor: number): number {
  return lockTtl - elapsed - (lockTtl * driftFactor + 2);
}

/**
 * What one round of votes means. `ours`: nodes that granted; `theirs`: nodes held by another token;
 * the rest failed or timed out.
 * - granted: a quorum is ours and validity is left;
 * - contended: another holder has so many nodes that we cannot reach a quorum (wait for them);
 * - unreachable: fewer than a quorum of nodes answered at all (a majority is down);
 * - retry: a split vote or validity spent; release and try again after a random delay.
 * Only 'unreachable' means "no quorum": a split vote that stays split is contention (acquire resolves
 * null and the caller waits), never a reason to fall back to onNoQuorum while a valid holder may hold.
 */
export function voteOutcome(n: number, ours: number, theirs: number, validityLeft: number): 'granted' | 'contended' | 'unreachable' | 'retry' {
  const q = quorum(n);
  if (ours >= q && validityLeft > 0) return 'granted';
  if (theirs > n - q) return 'contended';
  if (ours + theirs < q) return 'unreachable';
  return 'retry';
}

// ------------------------------------------------------------------ the lock

/** What each Redlock node's Io needs: its breaker, the cache's prefix (probe keys) and where health changes go. */
export interface RedlockNodes {
  readonly threshold: number;
  readonly cooldown: number;
  readonly prefix: string;
  readonly onHealth: (change: HealthChange) => void;
}

interface Node {
  readonly io: Io;
  readonly scripts: Scripts;
  /** Stops listening to the node client's reconnections. */
  readonly stopReadyListener: () => void;
}

/**
 * Redlock over independent masters. The lock lives on the nodes; the fence and the value live in the
 * main store, and the write is fenced there — Redlock only decides who rebuilds.
 */
export class RedlockLock implements Locker {
  private readonly nodes: readonly Node[];
  /** Retry sleeps in progress; close() ends them at once. Invariant: empty once closed. */
  private readonly sleeps = new Set<() => void>();
  private closed = false;

  constructor(
    private readonly deps: LockDeps,
    private readonly config: ResolvedRedlock,
    /** Where to go when no quorum is reachable (onNoQuorum 'single' or 'local'); undefined = throw. */
    private readonly fallback: Locker | undefined,
    nodes: RedlockNodes,
  ) {
    // Each node is found hung by time as the store's nodes are (io.ts): suspect after one unanswered
    // nodeTimeout, then refused at once (a failed vote) until its probe answers. Named by its place in
    // `redlock.nodes`, in health() and the health event.
    this.nodes = config.nodes.map((client, i) => {
      const port = portFor(client);
      const name = `redlock[${String(i)}]`;
      const io = new Io(config.nodeTimeout, nodes.threshold, nodes.cooldown, deps.clock, undefined, () => name, () => name, nodes.onHealth, nodeProbe(port, nodes.prefix));
      // A fresh connection ends a suspicion and closes the breaker at once, as for the store: a probe
      // sent on the connection it replaced may never settle (a client that drops unanswered commands).
      return { io, scripts: defineScripts(port), stopReadyListener: port.onReady(() => io.connected()) };
    });
  }

  /** Every Redlock node's state now (cache.health()). */
  health(): NodeHealthReport[] {
    return this.nodes.flatMap((node) => node.io.health().nodes);
  }

  /**
   * Resolves a grant, or null when another holder has (or may have) the lock: contended, or a split
   * vote still split after `retryCount` retries. Falls back to onNoQuorum only when fewer than a
   * quorum of nodes answered. Rejects with CacheClosedError once close() was called (a pending retry
   * sleep ends at once).
   */
  async acquire(key: string, keys: EntryKeys, call: ResolvedCall): Promise<Grant | null> {
    const token = newToken();
    const { clock } = this.deps;
    const n = this.nodes.length;
    for (let attempt = 0; attempt <= this.config.retryCount; attempt++) {
      if (attempt > 0) await this.sleep(this.config.retryDelay + Math.random() * this.config.retryJitter, key);
      this.assertOpen(key);
      const started = clock.now();
      const { ours, theirs, allAnswered } = await this.collectVotes(key, keys.lock, token, call.lockTtl);
      const outcome = voteOutcome(n, ours, theirs, validity(call.lockTtl, clock.now() - started, this.config.driftFactor));
      if (outcome === 'granted' && !this.closed) {
        const grant = await this.grant(key, keys, token, call, started, allAnswered);
        if (grant) return grant;
        continue; // validity ran out while taking the fence: try again
      }
      await this.releaseNodes(keys.lock, token);
      // A straggler may still grant us its vote after that release: release again once all answered.
      void allAnswered.then(() => this.releaseNodes(keys.lock, token));
      this.assertOpen(key);
      if (outcome === 'contended') return null;
      if (outcome === 'unreachable') return this.noQuorum(key, keys, call, ours);
    }
    return null; // still split: someone may hold a valid lock; wait for them like any loser
  }

  /** The retry delay, ended early (rejecting CacheClosedError) by close(). Leaves no timer behind. */
  private sleep(ms: number, key: string): Promise<void> {
    this.assertOpen(key);
    return new Promise((resolve, reject) => {
      const wake = (): void => {
        clearTimeout(timer);
        this.sleeps.delete(wake);
        if (this.closed) reject(new CacheClosedError(key));
        else resolve();
      };
      const timer = setTimeout(wake, ms);
      this.sleeps.add(wake);
    });
  }

  /** Retry sleeps in progress (0 once closed). */
  get retrying(): number {
    return this.sleeps.size;
  }

  private assertOpen(key: string): void {
    if (this.closed) throw new CacheClosedError(key);
  }

  /**
   * Fans out and resolves as soon as the outcome is decided — a quorum is ours, or another holder
   * has too many nodes for us to reach one — or every node answered or timed out. A slow or frozen
   * minority then costs nothing; its late votes are undone by the release that follows any outcome
   * but a grant (and a grant's own release covers every node).
   */
  private collectVotes(key: string, lockKey: string, token: string, ttl: number): Promise<{ ours: number; theirs: number; allAnswered: Promise<unknown> }> {
    const n = this.nodes.length;
    const q = quorum(n);
    return new Promise((resolve) => {
      let ours = 0;
      let theirs = 0;
      let answered = 0;
      const votes: Promise<unknown>[] = [];
      const allAnswered = new Promise<unknown>((done) => queueMicrotask(() => done(Promise.all(votes))));
      for (const node of this.nodes) {
        votes.push(
          this.vote(node, key, lockKey, token, ttl).then((v) => {
            answered++;
            if (v === 'ours') ours++;
            else if (v === 'theirs') theirs++;
            if (ours >= q || theirs > n - q || answered === n) resolve({ ours, theirs, allAnswered });
          }),
        );
      }
    });
  }

  private async vote(node: Node, key: string, lockKey: string, token: string, ttl: number): Promise<'ours' | 'theirs' | 'failed'> {
    try {
      // A node that did not answer in time may still apply the vote: undo it by token.
      const undo = () => void node.scripts.release(lockKey, lockKey, token, '', '', 0).catch(() => undefined);
      const r = await node.io.run('redlock-acquire', () => node.scripts.redlockAcquire(lockKey, token, ttl), key, undo);
      return r === 1 ? 'ours' : 'theirs';
    } catch {
      return 'failed';
    }
  }

  /** Quorum reached: take the fence in the store, then re-check validity before handing out the grant. */
  private async grant(key: string, keys: EntryKeys, token: string, call: ResolvedCall, started: number, allAnswered: Promise<unknown>): Promise<Grant | null> {
    const { io, scripts, clock } = this.deps;
    let granted: number;
    let fence: number;
    let grantedAt: number | undefined;
    // Every way out but a grant frees the nodes now and again once every vote is in (a straggler may grant late).
    const giveUp = async (): Promise<void> => {
      await this.releaseNodes(keys.lock, token);
      void allAnswered.then(() => this.releaseNodes(keys.lock, token));
    };
    try {
      // The fence and the grant's time G (THE TAG RULE) are the main store's (on a Cluster, its records' node's).
      const { args: tags, apart } = tagGrant(this.deps, key, call);
      let scriptG: number | undefined;
      [granted, fence, scriptG] = (await io.run('acquire', () => scripts.acquireTagged(keys.lock, keys.fence, keys.backoff, '', 0, call.lockTtl, false, tags), key)) as [number, number, number | undefined];
      grantedAt = grantTimeOf(scriptG, await apart, call);
    } catch (err) {
      await giveUp();
      throw err;
    }
    if (granted === 2) {
      await giveUp();
      throw new OriginBackoffError(key, fence);
    }
    const left = validity(call.lockTtl, clock.now() - started, this.config.driftFactor);
    if (left <= 0) {
      await giveUp();
      return null;
    }
    return new RedlockGrant(this.deps, this, key, keys, token, fence, call.lockTtl, call.failBackoff, clock.now() + left, allAnswered, grantedAt);
  }

  private async noQuorum(key: string, keys: EntryKeys, call: ResolvedCall, granted: number): Promise<Grant | null> {
    if (!this.fallback) throw new NoQuorumError(key, granted, quorum(this.nodes.length));
    return this.fallback.acquire(key, keys, call);
  }

  /**
   * Release on every node at once: one round, never retried, never throws. Resolves once a quorum of
   * nodes answered (or every node answered or timed out): a frozen minority does not hold up the
   * caller, and its key lapses with the lock's TTL. 'released' when a node that answered still held
   * our token, 'not-ours' when none did, 'unknown' when fewer than a quorum answered.
   */
  releaseNodes(lockKey: string, token: string): Promise<ReleaseResult> {
    const n = this.nodes.length;
    const q = quorum(n);
    return new Promise((resolve) => {
      let freed = 0;
      let confirmed = 0;
      let answered = 0;
      for (const node of this.nodes) {
        void node.io
          .run('redlock-release', () => node.scripts.release(lockKey, lockKey, token, '', '', 0), undefined)
          .then(
            (r) => {
              confirmed++;
              if (r === 1) freed++;
            },
            () => undefined,
          )
          .finally(() => {
            answered++;
            if (confirmed >= q || answered === n) resolve(confirmed < q ? 'unknown' : freed > 0 ? 'released' : 'not-ours');
          });
      }
    });
  }

  /** Ends pending retry sleeps (their acquire rejects CacheClosedError) and stops the nodes' timeout sweepers. Idempotent. */
  close(): void {
    this.closed = true;
    for (const wake of [...this.sleeps]) wake();
    for (const node of this.nodes) {
      node.io.close();
      node.stopReadyListener();
    }
  }

  /** Validity of a lock (re)set at some instant, counted from that instant. */
  validityFrom(ttl: number): number {
    return validity(ttl, 0, this.config.driftFactor);
  }

  /** Extends on every node; true while a quorum extended. */
  async extendNodes(key: string, keys: EntryKeys, token: string, ttl: number): Promise<boolean> {
    const results = await Promise.all(
      this.nodes.map((node) => node.io.run('redlock-extend', () => node.scripts.extend(keys.lock, keys.fence, token, ttl), key).catch(() => 0)),
    );
    return results.filter((r) => r === 1).length >= quorum(this.nodes.length);
  }
}

class RedlockGrant implements Grant {
  readonly mode = 'redlock' as const;
  readonly exclusive = true;
  readonly signal: AbortSignal;
  private readonly watchdog: Watchdog;
  private readonly once = new ReleaseOnce();

  constructor(
    private readonly deps: LockDeps,
    private readonly lock: RedlockLock,
    private readonly key: string,
    private readonly keys: EntryKeys,
    readonly token: string,
    readonly fence: number,
    private readonly ttl: number,
    private readonly backoffMs: number,
    validUntil: number,
    /** Settles when every node answered the acquisition (a straggler may grant its vote late). */
    private readonly allAnswered: Promise<unknown>,
    readonly grantedAt: number | undefined,
  ) {
    const extendOnce = async (): Promise<Extension> => {
      const kept = await lock.extendNodes(key, keys, token, ttl);
      // Keep the store's fence alive for as long as the loader runs, too.
      await deps.io.run('extend', () => deps.scripts.extend(keys.lock, keys.fence, '', ttl), key).catch(() => undefined);
      return kept ? 'kept' : 'lost';
    };
    this.watchdog = new Watchdog(key, deps.clock, ttl, validUntil, extendOnce, lock.validityFrom(ttl), deps.onLost);
    this.signal = this.watchdog.signal;
  }

  markReleased(): void {
    // The store write does not free Redlock nodes; release() still does.
    this.watchdog.stop();
  }

  /** Frees the nodes for every outcome (a store write does not free them), then announces it in the store. */
  release(outcome: ReleaseOutcome): Promise<ReleaseResult> {
    return this.once.run(async () => {
      this.watchdog.stop();
      const result = await this.lock.releaseNodes(this.keys.lock, this.token);
      void this.allAnswered.then(() => this.lock.releaseNodes(this.keys.lock, this.token));
      // The store holds no Redlock key: token '' frees nothing, it only announces (and sets the backoff).
      if (!silentInStore(outcome)) await announceInStore(this.deps, this.key, this.keys, '', outcome, this.backoffMs);
      // Fewer than a quorum answered: our lock may still hold a quorum. Release again once Redis answers
      // (lock/grant.ts ReleaseRetries), then wake the waiters, instead of leaving them the whole lease.
      if (result === 'unknown') {
        this.deps.retries?.add(`${this.keys.lock}\n${this.token}`, this.deps.clock.now() + this.ttl, async () => {
          if ((await this.lock.releaseNodes(this.keys.lock, this.token)) === 'unknown') throw new Error('no quorum answered the release');
          await announceInStore(this.deps, this.key, this.keys, '', 'cancelled', 0);
        });
      }
      return result;
    });
  }
}
