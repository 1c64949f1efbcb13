/**
 * The two observability surfaces, both free when unused: counters (`cache.stats()`: a few integer
 * increments per call, no allocation) and a diagnostics_channel TracingChannel (nothing is built or
 * published unless someone subscribes).
 */
import { tracingChannel, type TracingChannel } from 'node:diagnostics_channel';
import type { LockMode } from './options.js';

/**
 * Counters since the cache was created, as returned by `cache.stats()`. "Rebuilds saved" is
 * `coalesced + waited`: in a cold stampede of N callers spread over P processes, `loaderRuns` sums to 1
 * over the processes and `coalesced + waited` to N − 1.
 *
 * Per caller vs per flight: concurrent `getOrCompute` calls on one key in one process share one trip
 * to Redis (a flight; with lock mode `none` they share the store read only, call.ts). Answer counters (`hits`, `localHits`, `staleServed`,
 * `misses`, `coalesced`, `waited`, `degraded`) count CALLERS: every caller of a flight is counted by
 * what its shared answer was. `loaderRuns`, `lockLost` and `writeRejected` count events of a flight.
 * A call that rejects (loader error without a fail-safe value, timeout, abort, close) is counted in no
 * answer counter (the tracing channel's `error` reports it).
 */
export interface CacheStats {
  /** Callers answered with a fresh value, from L1 or Redis (`localHits` included); each key of `get`, `getMany` and `has` that found one counts too. */
  hits: number;
  /** Callers answered with a fresh value from this process's L1 (a subset of `hits`). */
  localHits: number;
  /** Callers answered with an expired value: inside `staleTtl`, or a fail-safe fallback (loader error, backoff, soft or wait timeout). */
  staleServed: number;
  /**
   * Callers whose lookup found no usable value in L1 or Redis (joiners of such a flight included),
   * answered afterwards by a load (here or elsewhere), a wait, or a fail-safe value. Each key of
   * `get`, `getMany` and `has` that found no fresh value counts too (they never load), including a
   * key whose read Redis failed when no degraded copy answered it.
   */
  misses: number;
  /** Loaders started in this process: by a call, a background (stale or early) refresh, or the degraded path. Per loader run, not per caller. */
  loaderRuns: number;
  /**
   * Callers answered by another caller's load in this process: callers that joined an in-process
   * flight whose trip ran a loader (normal or degraded), or that found this process's background
   * refresh already running and were answered by it. The caller that ran the loader is not counted.
   */
  coalesced: number;
  /**
   * Callers answered by another process's load: their flight found no value, waited for the other
   * process's lock (woken or polling) and read its write — or took the lock just after that process
   * released it and found its write on the re-read. Every caller of such a flight is counted.
   */
  waited: number;
  /** Rebuild locks lost while their loader ran (the loader's `ctx.signal` aborted). */
  lockLost: number;
  /** Writes (rebuilds and `set`) the fence refused: a newer write, set or delete existed. */
  writeRejected: number;
  /**
   * Callers answered on the degraded path (Redis failed or timed out; the loader ran here, nothing was
   * written, or this process's degraded copy answered). Each key of `get`, `getMany` and `has` that
   * Redis failed and a degraded copy answered counts too.
   */
  degraded: number;
  /**
   * Early-refresh attempts (`refreshAhead`) this process started: a hit passed the entry's refresh
   * point and no refresh of that key was running or held off here. A loser tries again `pollInterval`
   * later, so one entry can count several attempts. Each counts next in `refreshWon` or `refreshLost`,
   * or in neither when the lock attempt itself failed (Redis unreachable, redlock without a quorum,
   * `failBackoff` in force, `close()`): `refreshStarted ≥ refreshWon + refreshLost`.
   */
  refreshStarted: number;
  /**
   * Early refreshes that won the rebuild lock. A winner whose re-read found the entry already replaced,
   * or could not re-read it, loads nothing; the others' loader runs are in `loaderRuns` too.
   */
  refreshWon: number;
  /** Early-refresh attempts that found the lock held (by another process, or by a rebuild or `forceFresh` here): nothing was loaded. */
  refreshLost: number;
  /**
   * Tagged entries read from Redis and found invalid by a tag (docs/tags.md): a tag invalidated since
   * their grant, or a tag record missing. Each was read as a miss (and counts in `misses` when it
   * answered a call that way).
   */
  tagInvalidations: number;
}

/** The outcomes of an early refresh that the counters keep (the `refresh` event also reports `already-refreshed` and `abandoned`). */
export type RefreshCounted = 'started' | 'won' | 'lost';
const REFRESH_COUNTER = { started: 'refreshStarted', won: 'refreshWon', lost: 'refreshLost' } as const satisfies Record<RefreshCounted, keyof CacheStats>;

/** How a `getOrCompute` call was answered, as the tracing channel's context reports it. */
export type Outcome = 'hit' | 'localHit' | 'stale' | 'computed' | 'coalesced' | 'waited' | 'degraded';

/** The context object of the `stampede-guard:getOrCompute` tracing channel (one per call, only while subscribed). */
export interface GetOrComputeContext {
  /** The key as the caller gave it (for a namespaced call, without the namespace). */
  readonly key: string;
  /** The namespace's path (`users`, `users/admins`) of a namespaced call; absent for a plain key. */
  readonly namespace?: string;
  /** The call's lock mode; `undefined` when the call's options were invalid (it then ends in `error`). */
  lock: LockMode | undefined;
  /** Set before `asyncStart`/`asyncEnd` on success; absent on `error`. */
  outcome?: Outcome;
  /** Set by Node on success (the value) or on `error` (the error). */
  result?: unknown;
  error?: unknown;
}

/** The channel APM tools subscribe to: start / end / asyncStart / asyncEnd / error for every getOrCompute call. */
export const GET_OR_COMPUTE_CHANNEL = 'stampede-guard:getOrCompute';

export const getOrComputeChannel = tracingChannel<string, GetOrComputeContext>(GET_OR_COMPUTE_CHANNEL);

/**
 * Is anyone listening on `channel`? TracingChannel#hasSubscribers exists only on newer Node versions
 * (20.13+, 22); before that, any of the sub-channels having a subscriber counts.
 */
function listened(channel: TracingChannel<unknown, object>): () => boolean {
  if (typeof (channel as { hasSubscribers?: unknown }).hasSubscribers === 'boolean') return () => channel.hasSubscribers;
  return () => channel.start.hasSubscribers || channel.end.hasSubscribers || channel.asyncStart.hasSubscribers || channel.asyncEnd.hasSubscribers || channel.error.hasSubscribers;
}

/** Is anyone listening on the getOrCompute channel? */
export const traced: () => boolean = listened(getOrComputeChannel);

/** How a key of `get()` / `getMany()` was answered, as the `get` tracing channel reports it. */
export type ReadOutcome = 'hit' | 'localHit' | 'miss' | 'degraded';

/** The context object of the `stampede-guard:get` tracing channel: one per `get()`/`has()` and one per `getMany()` (only while subscribed). */
export interface GetContext {
  /** `get()`/`has()`: the key as the caller gave it; `getMany()`: `undefined` (see `keys`). */
  readonly key: string | undefined;
  /** `getMany()`: its keys as the caller gave them, in order. */
  readonly keys?: readonly string[];
  /** The namespace's path for a namespaced read; absent for plain keys. */
  readonly namespace?: string;
  readonly operation: 'get' | 'getMany';
  /** `get()`: set before `asyncStart`/`asyncEnd` on success. */
  outcome?: ReadOutcome;
  /** `getMany()`: one outcome per key, aligned with `keys`, set on success. */
  outcomes?: ReadOutcome[];
  result?: unknown;
  error?: unknown;
}

/** The channel for reads that never load: start / end / asyncStart / asyncEnd / error for every get(), has() and getMany(). */
export const GET_CHANNEL = 'stampede-guard:get';

export const getChannel = tracingChannel<unknown, GetContext>(GET_CHANNEL);

/** Is anyone listening on the `get` channel? */
export const readTraced: () => boolean = listened(getChannel);

/** What a trip through the protocol answered, shared by every caller of its flight. */
export interface Answered {
  readonly value: unknown;
  /** The trip's own outcome (from the point of view of the caller that started it). */
  readonly outcome: Outcome;
  /** The trip's store read found no usable value. */
  readonly missed: boolean;
  /** THE JOIN RULE (call.ts): every tag its value may carry, and the last tag note heard before it began. */
  readonly carried: ReadonlySet<string> | undefined;
  readonly heardAt: number;
}

const OWN_WRITES_KEPT = 1000;

/** What wrote an entry this process wrote: a load (any call kind) or `set()`. */
export type OwnWriter = 'load' | 'set';

/** Owns the counters. Invariant: fields only ever increase; stats() copies them. */
export class Telemetry {
  private readonly c: CacheStats = { hits: 0, localHits: 0, staleServed: 0, misses: 0, loaderRuns: 0, coalesced: 0, waited: 0, lockLost: 0, writeRejected: 0, degraded: 0, refreshStarted: 0, refreshWon: 0, refreshLost: 0, tagInvalidations: 0 };

  /**
   * The fence of this process's latest write per key and what wrote it (a load, or `set()`), recorded
   * when the write is sent (bounded: the oldest is forgotten first). A read that finds it was answered
   * by this process (a load: `coalesced`; a set: a plain hit), not by another process's load.
   * Forgetting one can only count such a caller as `waited`; it never affects a value.
   */
  private readonly own = new Map<string, { readonly fence: number; readonly by: OwnWriter }>();

  ownWrite(key: string, fence: number, by: OwnWriter): void {
    this.own.delete(key);
    if (this.own.size >= OWN_WRITES_KEPT) this.own.delete(this.own.keys().next().value as string);
    this.own.set(key, { fence, by });
  }

  /** How a caller that read the entry `fence` of `key` written by someone else than itself was answered. */
  answeredBy(key: string, fence: number): 'hit' | 'coalesced' | 'waited' {
    const own = this.own.get(key);
    if (own?.fence !== fence) return 'waited';
    return own.by === 'set' ? 'hit' : 'coalesced';
  }

  loaderRun(): void {
    this.c.loaderRuns++;
  }

  lockLost(): void {
    this.c.lockLost++;
  }

  writeRejected(): void {
    this.c.writeRejected++;
  }

  tagInvalidated(): void {
    this.c.tagInvalidations++;
  }

  refresh(outcome: RefreshCounted): void {
    this.c[REFRESH_COUNTER[outcome]]++;
  }

  localHit(): void {
    this.c.hits++;
    this.c.localHits++;
  }

  /** A fresh value from Redis answered outside any flight: a key of a batch (getOrComputeMany), get(), getMany(). */
  redisHit(): void {
    this.c.hits++;
  }

  /** get() / getMany() found no fresh value for a key (they never load: nothing else is counted). */
  readMiss(): void {
    this.c.misses++;
  }

  /** get() / getMany() could not reach Redis for a key: answered by this process's degraded copy (`degraded`), or a miss. */
  readDegraded(copy: boolean): void {
    if (copy) this.c.degraded++;
    else this.c.misses++;
  }

  /** A caller answered with an expired value straight from L1 (no flight): for a cache whose L1 serves stale values. */
  localStale(): void {
    this.c.staleServed++;
  }

  /**
   * Counts one caller of a flight and returns its outcome. `led`: this caller's work ran the trip;
   * a joiner of a trip that ran a loader was answered by another caller's load (`coalesced`).
   */
  caller(a: Answered, led: boolean): Outcome {
    const c = this.c;
    if (a.missed) c.misses++;
    switch (a.outcome) {
      case 'hit':
      case 'localHit':
        c.hits++;
        return a.outcome;
      case 'stale':
        c.staleServed++;
        return 'stale';
      case 'waited':
        c.waited++;
        return 'waited';
      case 'coalesced':
        c.coalesced++;
        return 'coalesced';
      case 'degraded':
        c.degraded++;
        if (!led) c.coalesced++;
        return 'degraded';
      case 'computed':
        if (led) return 'computed';
        c.coalesced++;
        return 'coalesced';
    }
  }

  stats(): CacheStats {
    return { ...this.c };
  }
}
