import type { DegradedMemo } from '../degraded-memo.js';
import type { Emit } from '../emit.js';
import type { Stop, Work } from '../flight.js';
import type { LocalTier } from '../local-tier.js';
import type { GrantRegistry } from '../lock/grant.js';
import type { Locker } from '../lock/types.js';
import type { Clock, LockMode } from '../options.js';
import type { Present, Store } from '../store.js';
import type { HeardTags } from '../tags.js';
import type { Trip } from './trip.js';
import type { Telemetry } from '../telemetry.js';
import type { Waiters } from '../wait.js';
import type { WakeChannels } from '../wake.js';

/** Which refresh a hold-off is for: the early refresh of a fresh entry, or the stale window's. */
export type RefreshPath = 'early' | 'stale';

/**
 * This process's own background loads of a key (call.ts keeps them beside the callers' flights): an
 * early refresh, the stale window's refresh, a rebuild that outlived its soft timeout. At most one
 * per key, and none beside another load of the key in this process.
 */
export interface OwnLoads {
  /** The key's background load in progress, if any (settles, never rejects). */
  pending(key: string): Promise<unknown> | undefined;
  /**
   * A refresh of the entry `fence` may start at `now`: no load of the key runs in this process (other
   * than the flight `own`, the call that found the entry) and the entry is not held off on `path`.
   */
  mayRefresh(path: RefreshPath, key: string, fence: number, now: number, own?: Stop): boolean;
  /**
   * Runs `work` as the key's background load; its failure is a `refreshError` (not a backoff, not
   * close()). `tags`: those its value may carry, as far as known when it starts (a tag note that
   * reaches them abandons it; tags its loader adds later are judged by THE TAG RULE at its write).
   */
  background(key: string, work: Work<unknown>, tags?: readonly string[]): void;
  /** A trip's fresh hit from the store (its read `sent` then): the refresh ahead, if the entry asks for one and is due (refresh.ts). */
  refreshAheadOnFresh(t: Trip, found: Present, sent: number): void;
  /** A trip served a stale value: the stale window's refresh (refresh.ts). */
  refreshStale(t: Trip, stale: Present): void;
  /** No refresh of the entry `fence` of `key` on `path` before `until` (monotonic ms; Infinity: for good). */
  holdOff(path: RefreshPath, key: string, fence: number, until: number): void;
}

/** What one cache lends every call's protocol. */
export interface ProtocolDeps {
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
  /** Aborts on close(): no loader starts and nothing is written after it. */
  readonly lifetime: AbortSignal;
  readonly clock: Clock;
  readonly emit: Emit;
  /** Counters behind cache.stats(). */
  readonly telemetry: Telemetry;
  /** This process's background loads (the key's calls: call.ts). */
  readonly loads: OwnLoads;
  /** The tag notes this process heard, numbered (THE JOIN RULE, call.ts). */
  readonly heard: HeardTags;
}
