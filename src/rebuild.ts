import { freshRemaining, refreshDue, refreshPolicyFor, staleRemaining, type EntryFacts } from './entry.js';
import { CacheClosedError, OriginBackoffError, RedisUnavailableError, UnstorableValueError, WaitTimeoutError } from './errors.js';
import type { DegradedMemo } from './degraded-memo.js';
import type { CacheEvents } from './events.js';
import type { EntryKeys } from './keys.js';
import type { GrantRegistry } from './lock/grant.js';
import type { Grant, Locker, ReleaseOutcome } from './lock/types.js';
import type { Stop } from './flight.js';
import { runLoader, type Loader, type LoadResult } from './loader.js';
import type { LocalTier, Ticket } from './local-tier.js';
import { entryCall, loaderTimeout, mayWaitOnOthers, pollDelay, writeTtl, type Clock, type EntryOverrides, type LockMode, type ResolvedCall } from './options.js';
import type { Found, Store } from './store.js';
import type { Answered, Outcome, RefreshCounted, Telemetry } from './telemetry.js';
import type { Waiters } from './wait.js';
import type { WakeChannels } from './wake.js';

/** Emits a cache event; a throwing listener is reported, never propagated into the protocol. */
export type Emit = <E extends keyof CacheEvents>(name: E, ...payload: CacheEvents[E]) => void;

/** What one cache lends every call's protocol. */
export interface RebuildDeps {
  readonly store: Store;
  readonly lockers: Readonly<Record<LockMode, Locker>>;
  /** Fence-only grants (no lock): computing after `waitTimeout`. */
  readonly fenceOnly: Locker;
  readonly local: LocalTier;
  /** Degraded results kept for their ttl while Redis is unavailable (or a no-op). */
  readonly memo: DegradedMemo;
  readonly waiters: Waiters;
  /** The key's wake channel held while a call waits on or rebuilds it (`notes: 'sharded'`; else a no-op). */
  readonly wake: WakeChannels;
  readonly grants: GrantRegistry;
  readonly background: Background;
  /** Aborts on close(): no loader starts and nothing is written after it. */
  readonly lifetime: AbortSignal;
  readonly clock: Clock;
  readonly emit: Emit;
  /** Counters behind cache.stats(). */
  readonly telemetry: Telemetry;
}

/** An expired value kept for fail-safe. */
type Fallback = { readonly value: unknown };
type StaleReason = CacheEvents['stale'][0]['reason'];
const SOFT_TIMEOUT = Symbol('soft timeout');

/**
 * Reads the entry; a fresh value is served (a `hit`) and fills L1 — only if no invalidation of the key
 * reached this process while the read was in flight (the ticket is taken before the read is sent).
 * Throws RedisUnavailableError.
 */
export async function readEntry(d: RebuildDeps, key: string, keys: EntryKeys, sent = d.clock.now(), serves = true): Promise<Found> {
  const ticket = d.local.begin(key);
  return entryRead(d, key, ticket, sent, await d.store.read(key, keys), serves);
}

/**
 * What a read found, once it arrived: fills L1 (if `ticket`, taken before the read was sent, still
 * holds) and reports a hit — unless the reader does not serve what it reads (`serves` false: a
 * `forceFresh` call bypasses the entry it finds).
 */
export function entryRead(d: RebuildDeps, key: string, ticket: Ticket, sent: number, found: Found, serves = true): Found {
  // The store holds a value for this key again: it is the truth, the degraded copy goes. A miss says
  // nothing newer than the copy (this process's deletes and other processes' notes drop it anyway).
  if (found.state !== 'miss') d.memo.invalidate(key);
  if (found.state === 'fresh') {
    // Redis measured PTTL somewhere between `sent` and now: count L1's copy from `sent`, so a slow reply
    // never makes L1 outlive the entry in Redis.
    d.local.fill(ticket, key, found.value, freshRemaining(found.pttl, found.graceMs) - (d.clock.now() - sent), found);
    if (serves) d.emit('hit', { key, tier: 'redis' });
  } else if (found.state === 'stale') {
    // The stale window is served from L1 too, briefly: the winner's write note drops the copy in every
    // other process, this process's own write replaces it; STALE_L1_MS (and the window's end) bound it.
    d.local.fillStale(ticket, key, found.value, Math.min(STALE_L1_MS, staleRemaining(found.pttl, found.graceMs, found.staleMs)) - (d.clock.now() - sent));
  }
  return found;
}

/**
 * One call's trip through the protocol, after L1 and the in-process flight:
 * store → fresh/stale → lock → re-read → loader → fenced write → release → notify; losers wait to be
 * woken (or poll) until `waitTimeout`. Ownership: every grant this trip acquires is released by the
 * one `finally` in `rebuild`, which starts right after the acquisition returns.
 */
export class Rebuild implements Answered {
  /** An expired value at hand, served if the loader fails, backs off or is slow (fail-safe). */
  private fallback: Fallback | undefined;
  /** How this trip answers, updated as it goes; frozen into `answered` when run() settles (a rebuild past its soft timeout keeps going). */
  private current: Outcome = 'hit';
  /** Set once by answer(): what every caller of this trip's flight was answered with. */
  outcome: Outcome = 'hit';
  value: unknown;
  /** The first store read found no usable value. */
  missed = false;
  /** `forceFresh`: the fence of the entry this call bypassed; only a newer entry may answer its wait. */
  private bypassed: number | undefined;
  /**
   * When this call found no usable value (monotonic ms): its one `waitTimeout` counts from here,
   * whatever it waits on first (this process's own background rebuild, then the lock).
   */
  private missedAt: number | undefined;

  constructor(
    private readonly d: RebuildDeps,
    readonly key: string,
    readonly keys: EntryKeys,
    private readonly loader: Loader<unknown>,
    readonly call: ResolvedCall,
    /** Its signal aborts when every caller sharing this trip left (or, for a background refresh, on close()). */
    readonly stop: Stop,
  ) {}

  /** The same call with another loader (a batch key won: its value comes from the batch's one loadMany). */
  withLoader(loader: Loader<unknown>): Rebuild {
    return new Rebuild(this.d, this.key, this.keys, loader, this.call, this.stop);
  }

  /** Read only off the hit path: a flight makes its signal on first use. */
  private get signal(): AbortSignal {
    return this.stop.signal;
  }

  /** Runs the trip and resolves with itself: the value and how it was obtained, for every caller of the flight. */
  async answer(): Promise<Answered> {
    this.value = await this.run();
    this.outcome = this.current;
    return this;
  }

  /**
   * A batch key this call's read found without a usable value (`found`) and whose lock the batch won
   * (`grant`) with other keys': the same miss, re-read, soft and hard timeouts, fenced write and
   * release as a single-key rebuild; `reread` is the re-read under the grant, sent with the others'.
   */
  async answerWon(found: Found, grant: Grant, reread: () => Found | undefined): Promise<Answered> {
    this.missedWith(found);
    this.value = await whileHeld(this.d, this.key, this.keys, () => this.loadWithin(grant, reread));
    this.outcome = this.current;
    return this;
  }

  /**
   * The call found no usable value (`found`: a miss, or for `forceFresh` whatever was there): a
   * `miss`, the start of its wait, an expired value kept as the fail-safe fallback, and for
   * `forceFresh` the fence of the entry it bypassed.
   */
  private missedWith(found: Found): void {
    this.d.emit('miss', { key: this.key });
    this.missed = true;
    this.missedAt ??= this.d.clock.now();
    if (found.state === 'miss') return;
    if (this.call.forceFresh === true) this.bypassed = found.fence;
    if (found.state === 'kept' || (this.call.forceFresh === true && found.state === 'stale')) this.fallback = found;
  }

  /**
   * Answers on the degraded path from the start, for `cause`, without a command to Redis: a namespace
   * whose generation Redis could not give (the entry's key is unknown, so the store cannot be asked).
   */
  async answerDegraded(cause: RedisUnavailableError): Promise<Answered> {
    // No L1 copy: nothing reads L1 under a degraded-path key, so one would only push real entries out.
    this.value = await this.degraded('read', cause, false);
    this.outcome = this.current;
    return this;
  }

  async run(): Promise<unknown> {
    let found: Found;
    const sent = this.d.clock.now();
    try {
      found = await readEntry(this.d, this.key, this.keys, sent, this.call.forceFresh !== true);
    } catch (error) {
      return this.degraded('read', error);
    }
    if (this.call.forceFresh === true) return this.forced(found);
    if (found.state === 'fresh') {
      if (refreshPolicyFor(this.call.refreshAhead, found) !== 0) {
        const freshUntil = sent + freshRemaining(found.pttl, found.graceMs);
        refreshAheadOnHit(this.d, this.key, () => this.keys, this.loader, this.call, { value: found.value, freshUntil, facts: found });
      }
      return found.value;
    }
    if (found.state === 'stale') {
      this.refreshInBackground(found);
      return this.serveStale(found.value, 'window');
    }
    // This process is already rebuilding the key in the background (an early refresh, a rebuild past its
    // soft timeout): wait for it and read again, rather than start a second loader here (lock 'local'
    // would grant one at once).
    this.missedWith(found);
    const running = this.d.background.pending(this.key);
    if (running) {
      // Bounded like any wait: at most waitTimeout, and a note on the key (a delete, a set, another
      // process's write) ends it at once — the background work may hang, and could no longer write anyway.
      const waiter = this.d.waiters.register(this.key);
      const hold = this.d.wake.hold(this.key, this.keys);
      try {
        await Promise.race([running, waiter.next(this.call.waitTimeout, this.signal)]);
      } finally {
        waiter.wake('r'); // settles next() and clears its timer if the work finished first
        waiter.dispose();
        hold.release();
      }
      this.assertRunning();
      try {
        found = await readEntry(this.d, this.key, this.keys);
      } catch (error) {
        return this.degraded('read', error);
      }
      // Answered by this process's background rebuild.
      this.current = 'coalesced';
      if (found.state === 'fresh') return found.value;
      if (found.state === 'stale') return this.serveStale(found.value, 'window');
    }
    if (found.state === 'kept') this.fallback = found;
    return this.lockOrWait();
  }

  /**
   * `forceFresh`: whatever the read found is not served; the lock is taken and the loader run (no
   * re-read under the grant). A waiter accepts only an entry newer than the one bypassed (a greater
   * fence: written after this call's read). An expired value at hand is the fail-safe fallback.
   */
  private forced(found: Found): Promise<unknown> {
    this.missedWith(found);
    return this.lockOrWait();
  }

  /** A value a waiter may answer with: any, unless `forceFresh` bypassed an entry; then only a newer one. */
  private acceptable(found: Found): boolean {
    return found.state !== 'miss' && (this.bypassed === undefined || found.fence > this.bypassed);
  }

  /** Take the lock and rebuild, or wait to be woken by the winner; retry the lock after each wake. */
  private async lockOrWait(): Promise<unknown> {
    const { clock, waiters } = this.d;
    const waiter = waiters.register(this.key); // before the first attempt: no notification can slip by
    // Sharded notes: the key's channel is subscribed before the first attempt, for the same reason
    // (bounded by redisTimeout; without it the waiter polls). Held until this trip ends, so a change
    // of the key while this process rebuilds it is heard too (forget(): no later caller joins).
    const hold = this.d.wake.hold(this.key, this.keys);
    const started = this.missedAt ?? clock.now();
    const deadline = started + this.call.waitTimeout;
    try {
      // A fence-only grant is never refused: such a call never waits, so its subscription is not awaited.
      if (mayWaitOnOthers(this.call.lock)) await hold.ready;
      for (let attempt = 0; ; attempt++) {
        this.assertRunning();
        // The store lock reads the entry with its grant (the re-read, in the same step): the L1 ticket
        // is taken before that is sent, as before any read.
        const ticket = this.d.local.begin(this.key);
        const sent = clock.now();
        let grant: Grant | null;
        try {
          grant = await this.d.lockers[this.call.lock].acquire(this.key, this.keys, this.call, { readUpTo: this.d.store.maxValueBytes });
        } catch (error) {
          return await this.acquireFailed(error);
        }
        if (grant) {
          const answer = this.loadWithin(grant, this.readWithGrant(grant, ticket, sent)); // owns the grant from here on
          if (attempt > 0) this.d.emit('waited', { key: this.key, ms: clock.now() - started, outcome: 'took-over' });
          return await answer;
        }
        const remaining = deadline - clock.now();
        if (remaining <= 0) {
          this.d.emit('waited', { key: this.key, ms: clock.now() - started, outcome: 'timeout' });
          if (this.fallback) return this.serveStale(this.fallback.value, 'waitTimeout');
          return await this.afterWaitTimeout();
        }
        const woken = await waiter.next(pollDelay(this.call.pollInterval, remaining, Math.random()), this.signal);
        this.assertRunning();
        // The winner's value can never reach this process through Redis: rebuilding in turn would fail the same way.
        if (woken === 'u') throw new UnstorableValueError(this.key, 'reported by the process that ran the loader');
        let found: Found;
        try {
          found = await readEntry(this.d, this.key, this.keys);
        } catch (error) {
          return await this.degraded('read', error);
        }
        if ((found.state === 'fresh' || found.state === 'stale') && this.acceptable(found)) {
          this.d.emit('waited', { key: this.key, ms: clock.now() - started, outcome: found.state === 'fresh' ? 'value' : 'stale' });
          // Another process's load, or this process's own (a forceFresh call, a batch) that held the lock.
          this.current = this.d.telemetry.answeredBy(this.key, found.fence);
          return found.state === 'fresh' ? found.value : this.serveStale(found.value, 'window');
        }
        if (found.state === 'kept' || (found.state === 'stale' && !this.acceptable(found))) this.fallback = found;
      }
    } finally {
      waiter.dispose();
      hold.release();
    }
  }

  /**
   * The entry the store lock read with `grant` (acquireRead), as the re-read `rebuild` runs once it
   * owns the grant: decoded then, filling L1 only if `ticket` (taken before the acquire was sent)
   * still holds. Undefined when nothing was read with the grant: rebuild re-reads on its own.
   */
  private readWithGrant(grant: Grant, ticket: Ticket, sent: number): (() => Found) | undefined {
    let raw = grant.takeRead?.();
    if (raw === undefined) return undefined;
    return () => {
      const found = this.d.store.found(this.key, raw ?? null);
      raw = undefined; // the bytes are not kept for the loader's run
      return entryRead(this.d, this.key, ticket, sent, found, doneOnReread(found, this.bypassed) || this.call.forceFresh !== true);
    };
  }

  /** Runs the rebuild; with a fail-safe value and a soft timeout, answers with that value once it passes (the rebuild goes on). */
  private async loadWithin(grant: Grant, reread: (() => Found | undefined) | undefined): Promise<unknown> {
    const rebuilding = this.rebuild(grant, undefined, undefined, reread);
    const fallback = this.fallback;
    const wait = loaderTimeout(fallback !== undefined, this.call.softTimeout, this.call.hardTimeout);
    if (!fallback || wait.kind !== 'soft') return rebuilding;
    this.d.background.track(this.key, rebuilding, this.d.emit);
    let timer: NodeJS.Timeout | undefined;
    try {
      const soft = new Promise<typeof SOFT_TIMEOUT>((resolve) => (timer = setTimeout(() => resolve(SOFT_TIMEOUT), wait.ms)));
      const first = await Promise.race([rebuilding, soft]);
      return first === SOFT_TIMEOUT ? this.serveStale(fallback.value, 'softTimeout') : first;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * We hold `grant`: re-read (someone may have just written), run the loader, write fenced, and release
   * in this one `finally` with the outcome — whatever throws in between. `done` says from the re-read
   * whether the work is already done (then nothing is loaded); by default an exclusive grant's
   * re-read finding a fresh value is; for `forceFresh`, only a fresh value newer than the entry it
   * bypassed (another process's load that finished between this call's last read and its grant).
   */
  async rebuild(grant: Grant, staleValue: unknown, doneIf?: (again: Found | undefined) => boolean, reread?: () => Found | undefined): Promise<unknown> {
    const done = doneIf ?? (grant.exclusive ? (again: Found | undefined) => doneOnReread(again, this.bypassed) : undefined);
    let outcome: ReleaseOutcome = 'empty';
    try {
      if (!this.d.grants.hold(grant) || this.d.lifetime.aborted) {
        outcome = 'cancelled';
        throw new CacheClosedError(this.key);
      }
      if (done) {
        // `reread`: the re-read under the grant, already made — with the grant itself (the store lock's
        // acquireRead) or sent with other keys' (getOrComputeMany). Else it is read now.
        const again = reread ? reread() : await readEntry(this.d, this.key, this.keys).catch(() => undefined);
        if (done(again)) {
          // Someone wrote between our miss and our grant: another process's load answers us ('waited'),
          // this process's own load ('coalesced'), or its own set() (a plain hit).
          this.current = again !== undefined && again.state !== 'miss' ? this.d.telemetry.answeredBy(this.key, again.fence) : 'waited';
          return again?.state === 'miss' ? undefined : again?.value;
        }
      }
      // Re-checked after the awaits above: close() or every caller leaving meanwhile starts no loader.
      if (this.d.lifetime.aborted || this.signal.aborted) {
        outcome = 'cancelled';
        throw this.d.lifetime.aborted ? new CacheClosedError(this.key) : this.stopped();
      }
      this.d.telemetry.loaderRun();
      this.current = 'computed';
      const result = await runLoader(this.loader, {
        key: this.key,
        fencingToken: grant.fence,
        staleValue,
        signals: [this.signal, grant.signal],
        lifetime: this.d.lifetime,
        hardTimeout: this.call.hardTimeout,
        clock: this.d.clock,
      });
      if (result.kind === 'cancelled') {
        outcome = 'cancelled';
        // close(): no fail-safe answer either; a background refresh's tracker drops CacheClosedError.
        if (result.error instanceof CacheClosedError) throw result.error;
        return this.failSafe(result.error, 'cancelled');
      }
      if (result.kind === 'failed') {
        outcome = 'failed';
        this.d.emit('loaderError', { key: this.key, error: result.error });
        return this.failSafe(result.error, 'loaderError');
      }
      // A bad ctx.setOptions is the caller's bug, not the origin's: no fail-safe value hides it, no backoff.
      if (result.kind === 'invalid') throw result.error;
      // `undefined` or ctx.skip() means "do not cache": callers get the value, nothing is written, waiters are told to retry.
      if (result.value === undefined || result.entry.skipped) return result.value;
      outcome = await this.write(grant, result.value, result.loadMs, result.entry.overrides);
      return result.value;
    } finally {
      this.d.grants.drop(grant);
      await grant.release(outcome);
    }
  }

  /** The fenced write; never throws. Returns how the grant ends. */
  private async write(grant: Grant, value: unknown, loadMs: number, overrides: EntryOverrides | undefined): Promise<ReleaseOutcome> {
    if (this.d.lifetime.aborted) return 'cancelled'; // closed while loading: write nothing
    const { key } = this;
    const ticket = this.d.local.begin(key);
    this.d.memo.invalidate(key); // this process's own write: an older degraded copy must not outlive it
    let outcome: ReleaseOutcome;
    let written = false;
    // The loader's ctx.setOptions apply to this entry only.
    const call = entryCall(this.call, overrides);
    const refreshAhead = overrides?.refreshAhead;
    const ttl = writeTtl(call);
    // Redis counts the ttl from when it ran the write: L1's copy starts counting when it was sent.
    const sent = this.d.clock.now();
    try {
      this.d.telemetry.ownWrite(key, grant.fence, 'load');
      written = (await this.d.store.write(key, this.keys, grant, value, call, loadMs, 'w', ttl, refreshAhead)) === 'accepted';
      const freshMs = ttl - (this.d.clock.now() - sent);
      this.d.local.written(ticket, key, value, freshMs, written, { fence: grant.fence, ttlMs: ttl, loadMs: Math.round(loadMs), refreshAhead });
      if (!written) {
        this.d.telemetry.writeRejected();
        this.d.emit('writeRejected', { key, fence: grant.fence });
      }
      outcome = 'written'; // the write script released the lock and announced the outcome
    } catch (error) {
      if (error instanceof UnstorableValueError) {
        this.d.emit('unstorable', { key, reason: error.reason, error });
        outcome = 'unstorable';
      } else {
        this.d.emit('degraded', { key, operation: 'write', error });
        outcome = 'empty';
      }
    }
    this.d.emit('computed', { key, lock: grant.mode, fence: grant.fence, loadMs, written });
    return outcome;
  }

  /** After `waitTimeout`: throw, or compute under a fence-only grant (its write still cannot clobber a newer value). */
  private async afterWaitTimeout(): Promise<unknown> {
    if (this.call.onWaitTimeout === 'throw') throw new WaitTimeoutError(this.key, this.call.waitTimeout);
    let grant: Grant | null;
    try {
      grant = await this.d.fenceOnly.acquire(this.key, this.keys, this.call);
    } catch (error) {
      return this.acquireFailed(error);
    }
    if (!grant) throw new Error('unreachable: a fence-only grant is never refused');
    return this.rebuild(grant, undefined);
  }

  /** An acquire failed: backoff serves the fail-safe value or rethrows; an unreachable store degrades; anything else reaches the caller. */
  private acquireFailed(error: unknown): unknown {
    if (error instanceof OriginBackoffError) return this.failSafe(error, 'backoff');
    if (error instanceof RedisUnavailableError) return this.degraded('acquire', error);
    throw error;
  }

  /**
   * Redis failed: serve the value this process computed degraded within the last ttl (the memo), or run
   * the loader here (still one per key per process through the flight) and keep its value; no store write.
   */
  private async degraded(operation: string, error: unknown, fillLocal = true): Promise<unknown> {
    const { key, d } = this;
    if (error instanceof CacheClosedError) throw error; // close(), not a Redis failure
    d.emit('degraded', { key, operation, error });
    this.assertRunning();
    this.current = 'degraded';
    // forceFresh asks for the origin's value: never answered from memory, its load refills the memo.
    const kept = this.call.forceFresh === true ? undefined : d.memo.get(key);
    if (kept) return kept.value;
    const ticket = d.local.begin(key);
    const memoTicket = d.memo.begin(key);
    d.telemetry.loaderRun();
    let result: LoadResult;
    try {
      result = await runLoader(this.loader, {
        key,
        fencingToken: undefined,
        staleValue: undefined,
        signals: [this.signal],
        lifetime: d.lifetime,
        hardTimeout: this.call.hardTimeout,
        clock: d.clock,
      });
    } finally {
      // Done running; fill() below follows synchronously (no invalidation can slip in) and still checks the ticket.
      d.memo.abandon(memoTicket);
    }
    if (result.kind !== 'value') {
      if (result.kind === 'failed') d.emit('loaderError', { key, error: result.error });
      throw result.error;
    }
    if (result.value !== undefined && !result.entry.skipped) {
      const { ttl } = entryCall(this.call, result.entry.overrides);
      if (fillLocal) d.local.fill(ticket, key, result.value, ttl);
      d.memo.fill(memoTicket, result.value, ttl);
    }
    d.emit('computed', { key, lock: 'degraded', fence: undefined, loadMs: result.loadMs, written: false });
    return result.value;
  }

  /** Stale served: refresh once per key per process, only if this process wins the lock. */
  private refreshInBackground(stale: { readonly value: unknown; readonly fence: number }): void {
    const { d, key } = this;
    const now = d.clock.now();
    if (!d.background.mayStart('stale', key, stale.fence, now) || d.lifetime.aborted) return;
    const refresh = new Rebuild(d, key, this.keys, this.loader, this.call, { signal: d.lifetime });
    const work = (async () => {
      const grant = await d.lockers[this.call.lock].acquire(key, this.keys, this.call);
      if (grant) await whileHeld(d, key, this.keys, () => refresh.rebuild(grant, stale.value));
      // Lost: another process refreshes. This process tries that entry's lock again only after
      // pollInterval (in case the winner fails), not on every stale read of the window.
      else d.background.holdOff('stale', key, stale.fence, d.clock.now() + this.call.pollInterval);
    })();
    d.background.track(key, work, d.emit);
  }


  /** Serves the fail-safe value when one is kept, else throws `error` (a loader's own error reaches its callers unchanged). */
  private failSafe(error: unknown, reason: StaleReason): unknown {
    if (!this.fallback) throw error;
    return this.serveStale(this.fallback.value, reason);
  }

  /** Serves an expired value, flagged with a `stale` event naming why. */
  private serveStale(value: unknown, reason: StaleReason): unknown {
    this.d.emit('stale', { key: this.key, reason });
    this.current = 'stale';
    return value;
  }

  private assertRunning(): void {
    if (this.d.lifetime.aborted) throw new CacheClosedError(this.key);
    if (this.signal.aborted) throw this.stopped();
  }

  /** Why this trip stopped once its signal aborted (every caller left: nobody awaits this error). */
  private stopped(): Error {
    return this.signal.reason instanceof Error ? this.signal.reason : new CacheClosedError(this.key);
  }
}

/**
 * Runs a rebuild that holds its grant already (a background refresh, a batch's won key) with the key's
 * wake channel held (`notes: 'sharded'`), so a change of the key made elsewhere meanwhile is heard as
 * with broadcast notes (an early refresh is abandoned; later callers join no rebuild begun before it).
 * The subscription is not awaited: the grant is held, so no note this work waits for can be missed.
 */
export async function whileHeld<T>(d: RebuildDeps, key: string, keys: EntryKeys, work: () => Promise<T>): Promise<T> {
  const hold = d.wake.hold(key, keys);
  try {
    return await work();
  } finally {
    hold.release();
  }
}

/** How long a stale value may sit in L1 without the note that ends its window. */
const STALE_L1_MS = 50;

/**
 * Whether the re-read under an exclusive grant finds the work already done, so nothing is loaded: a
 * fresh value — for `forceFresh` (`bypassed`: the fence of the entry it bypassed), only one newer
 * than that entry (a load that finished between the call's read and its grant).
 */
export function doneOnReread(again: Found | undefined, bypassed: number | undefined): boolean {
  return again?.state === 'fresh' && (bypassed === undefined || again.fence > bypassed);
}

/** What a hit saw: the value, the entry's facts, and when (monotonic ms) it stops being fresh. */
export interface Seen {
  readonly value: unknown;
  readonly freshUntil: number;
  readonly facts: EntryFacts;
}

/** XFetch's rand in (0, 1]: ln never sees 0. */
const unitInterval = (): number => 1 - Math.random();

/**
 * Refresh ahead, on a hit (Redis or L1) of a fresh entry. Callers test `refreshPolicyFor(call.refreshAhead,
 * facts) !== 0` first (the entry's own policy, set by its loader, wins), so the option costs nothing when off; `keysOf` is called only when a refresh starts. If the entry passed its refresh point, this returns at
 * once and refreshes in the background:
 * - at most one per key per process (Background) and one per key across the fleet: the rebuild's lock
 *   (a process that loses it does nothing) and, under the grant, a re-read that goes on only if the
 *   entry is still the one that was hit (same fence); the write is fenced like any rebuild;
 * - a process tries an entry (one fence) once: after a failure, or a refresh that wrote nothing, it
 *   does not try that entry again — the value is served until it expires, and then the miss path
 *   (and fail-safe) apply; after losing the lock it may try again `pollInterval` later (the
 *   winner may fail), and after Redis failed it (the acquire, or the re-read under a won lock) too.
 *   With `failBackoff`, a failure stops every process's attempts for that long. These hold-offs are
 *   the early path's own: the stale window's refresh of the same entry keeps its own (Background).
 */
export function refreshAheadOnHit(d: RebuildDeps, key: string, keysOf: () => EntryKeys, loader: Loader<unknown>, call: ResolvedCall, seen: Seen): void {
  const now = d.clock.now();
  if (!refreshDue(refreshPolicyFor(call.refreshAhead, seen.facts), seen.facts, call.ttl, seen.freshUntil - now, unitInterval)) return;
  const { background, emit } = d;
  if (!background.mayStart('early', key, seen.facts.fence, now) || d.lifetime.aborted) return;
  const report = (outcome: RefreshCounted): void => {
    d.telemetry.refresh(outcome);
    emit('refresh', { key, outcome });
  };
  report('started');
  const keys = keysOf(); // only now: hashing the key is the costliest part of a hit not due
  // A change of the key (a delete, a set, another process's write) abandons this refresh: its write
  // could no longer land, or is no longer needed, and its lock would hold callers up until the loader ends.
  const stop = new AbortController();
  const work = (async () => {
    // Tried once: never again for this entry (fence). Not `seen.freshUntil`: that is a lower bound
    // (counted from when the hit's read was sent), and a later, faster read of the same entry counts
    // it fresh for longer, so a hold-off ending there let a process try the entry again in its last
    // moments. An entry's fresh life is fixed when it is written (nothing extends it), so no fresh hit
    // of it comes after its expiry anyway; another fence ends the hold-off (Background.heldOff), and
    // the stale window's refresh keeps records of its own.
    let retryAt = Number.POSITIVE_INFINITY;
    // Redis failing says nothing about the origin: try again soon, not only after the entry expired.
    const soon = (): number => d.clock.now() + call.pollInterval;
    try {
      let grant: Grant | null;
      try {
        grant = await d.lockers[call.lock].acquire(key, keys, call);
      } catch (error) {
        if (error instanceof RedisUnavailableError) retryAt = soon();
        throw error;
      }
      if (!grant) {
        report('lost');
        retryAt = soon();
        return;
      }
      report('won');
      // Already done unless the re-read finds the very entry that was hit, still fresh.
      const done = (again: Found | undefined): boolean => {
        if (again === undefined) {
          retryAt = soon(); // the re-read failed: nothing is known to be refreshed
          return true;
        }
        const same = again.state === 'fresh' && again.fence === seen.facts.fence;
        if (!same) emit('refresh', { key, outcome: 'already-refreshed' });
        return !same;
      };
      await whileHeld(d, key, keys, () => new Rebuild(d, key, keys, abandonable(loader, stop.signal), call, stop).rebuild(grant, seen.value, done));
    } catch (error) {
      // Only the abandonment itself: a loader failure or a bad setOptions that lands as the key changes is still reported.
      if (!(error instanceof RefreshAbandoned)) throw error;
      if (!d.lifetime.aborted) emit('refresh', { key, outcome: 'abandoned' });
    } finally {
      background.holdOff('early', key, seen.facts.fence, retryAt);
    }
  })();
  background.track(key, work, emit, stop);
}

/**
 * The loader, settling at once (rejecting with the signal's reason) when `signal` aborts: the rebuild
 * then releases its grant with 'cancelled' (waiters elsewhere retry the lock) without waiting for a
 * loader that ignores its `ctx.signal`. The loader's own late result is dropped.
 */
function abandonable(loader: Loader<unknown>, signal: AbortSignal): Loader<unknown> {
  return (ctx) =>
    new Promise((resolve, reject) => {
      const onAbort = (): void => reject(signal.reason as Error); // always a RefreshAbandoned
      signal.addEventListener('abort', onAbort, { once: true });
      Promise.resolve()
        .then(() => loader(ctx))
        .then(resolve, reject)
        .finally(() => signal.removeEventListener('abort', onAbort));
    });
}

/** Why an abandoned refresh stopped (its loader's `ctx.signal.reason`); never reaches a caller or an event. */
class RefreshAbandoned extends Error {
  constructor(readonly key: string) {
    super(`the early refresh of ${JSON.stringify(key)} was abandoned: the key changed while it ran`);
    this.name = 'RefreshAbandoned';
  }
}

/** How many keys' early-refresh hold-offs are remembered; forgetting one costs one more attempt, never a wrong value. */
const MAX_HELD_OFF = 10_000;

/** Which refresh a hold-off is for: the early refresh of a fresh entry, or the stale window's. */
export type RefreshPath = 'early' | 'stale';

/**
 * Background work on keys (a stale or early refresh, a rebuild that outlived its soft timeout): at
 * most one per key per process, never an unhandled rejection. Invariant: a key is in `byKey` only
 * while its work runs.
 */
export class Background {
  private readonly byKey = new Map<string, Promise<void>>();
  /**
   * The stop of the key's early refresh while it runs, with the tracked work that owns it. Another
   * work tracked for the key meanwhile (a rebuild past its soft timeout, lock 'local'/'none') neither
   * replaces nor removes it: only its owner's end does.
   */
  private readonly stops = new Map<string, { readonly stop: AbortController; readonly owner: Promise<void> }>();
  /**
   * Refreshes this process will not start, per path: per key, the entry (fence) already tried and
   * until when (monotonic ms; Infinity: for good). A record for another fence, or past its time, is
   * obsolete. One map per path: an entry stays one fence from fresh to stale, and an early refresh
   * that failed while it was fresh must not stop the stale window's refresh of it. Each bounded.
   */
  private readonly tried: Record<RefreshPath, Map<string, { readonly fence: number; readonly until: number }>> = { early: new Map(), stale: new Map() };

  /** Nothing runs for the key and its entry `fence` is not held off on `path` at `now`: a refresh may start. */
  mayStart(path: RefreshPath, key: string, fence: number, now: number): boolean {
    return !this.byKey.has(key) && !this.heldOff(path, key, fence, now);
  }

  /** The key's work in progress, if any (settles, never rejects). */
  pending(key: string): Promise<void> | undefined {
    return this.byKey.get(key);
  }

  /** Records that the entry `fence` of `key` was tried on `path`: no refresh of it there before `until`. */
  holdOff(path: RefreshPath, key: string, fence: number, until: number): void {
    const tried = this.tried[path];
    tried.delete(key);
    if (tried.size >= MAX_HELD_OFF) tried.delete(tried.keys().next().value as string);
    tried.set(key, { fence, until });
  }

  /** Is a refresh of the entry `fence` of `key` on `path` held off at `now`? */
  heldOff(path: RefreshPath, key: string, fence: number, now: number): boolean {
    const tried = this.tried[path];
    const t = tried.get(key);
    if (!t) return false;
    if (t.fence === fence && now < t.until) return true;
    tried.delete(key);
    return false;
  }

  /** `stop`: aborted by `abandon(key)` while this work runs (the work then settles soon, without a value). */
  track(key: string, work: Promise<unknown>, emit: Emit, stop?: AbortController): void {
    const tracked: Promise<void> = work
      .then(
        () => undefined,
        (error: unknown) => {
          if (!(error instanceof OriginBackoffError) && !(error instanceof CacheClosedError)) emit('refreshError', { key, error });
        },
      )
      .finally(() => {
        // Only if the entry is still ours: work started after this one may have replaced it.
        if (this.byKey.get(key) === tracked) this.byKey.delete(key);
        if (this.stops.get(key)?.owner === tracked) this.stops.delete(key);
      });
    this.byKey.set(key, tracked);
    if (stop) this.stops.set(key, { stop, owner: tracked });
  }

  /** The key changed (deleted, set, written elsewhere): abandon its early refresh, if one runs here. */
  abandon(key: string): void {
    const stop = this.stops.get(key)?.stop;
    if (stop && !stop.signal.aborted) stop.abort(new RefreshAbandoned(key));
  }

  /** Every key changed (the cache's clear()): abandon every early refresh running here. */
  abandonAll(): void {
    for (const key of [...this.stops.keys()]) this.abandon(key);
  }

  clear(): void {
    this.byKey.clear();
    this.stops.clear();
    this.tried.early.clear();
    this.tried.stale.clear();
  }
}
