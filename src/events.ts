import type { HealthChange } from './health.js';
import type { LockMode } from './options.js';

/**
 * What the cache reports. Emitting with no listener costs a map lookup; listeners must not throw.
 * Every event carries the user key (where there is one); count them to see which path calls took.
 * An event about a key of a namespace carries the key as the caller gave it in `key` and the
 * namespace's path (`users`, `users/admins`) in `namespace`; `namespace` is absent for a plain key.
 */
export interface CacheEvents {
  /** A fresh value was served, from L1 (`local`) or Redis (`redis`). */
  hit: [{ key: string; namespace?: string; tier: 'local' | 'redis' }];
  /**
   * A stale value was served. `reason`: `window` (inside staleTtl; a refresh runs in the background),
   * or a fail-safe fallback after `loaderError`, `backoff`, `softTimeout` or `waitTimeout`.
   */
  stale: [{ key: string; namespace?: string; reason: 'window' | 'loaderError' | 'cancelled' | 'backoff' | 'softTimeout' | 'waitTimeout' }];
  /** No usable value in Redis; this call went on to the lock. */
  miss: [{ key: string; namespace?: string }];
  /** A loader ran in this process. `written` is false when the fence rejected it or Redis was unavailable. */
  computed: [{ key: string; namespace?: string; lock: LockMode | 'degraded'; fence: number | undefined; loadMs: number; written: boolean }];
  /** A call waited for another process's rebuild. `outcome` is how the wait ended. */
  waited: [{ key: string; namespace?: string; ms: number; outcome: 'value' | 'stale' | 'took-over' | 'timeout' }];
  /** A rebuild's lock was lost while its loader ran; `ctx.signal` aborted with `error`. */
  lockLost: [{ key: string; namespace?: string; error: Error }];
  /** A write was refused by the fence: a newer write, set, delete or re-seed of the key's fence exists (see docs/guarantees.md). */
  writeRejected: [{ key: string; namespace?: string; fence: number }];
  /** Redis failed or timed out; the call ran degraded (local single-flight, no store). */
  degraded: [{ key: string | undefined; namespace?: string; operation: string; error: unknown }];
  /** Bytes at a key could not be used (oversized, undecodable, wrong type); treated as a miss. */
  decodeError: [{ key: string; namespace?: string; reason: string; error: unknown }];
  /** A loader threw or rejected; the error reached its callers. */
  loaderError: [{ key: string; namespace?: string; error: unknown }];
  /** Another cache instance wrote, set or deleted a key (pub/sub); this instance dropped its L1 copy. */
  remoteChange: [{ key: string; namespace?: string; kind: 'written' | 'set' | 'deleted' }];
  /**
   * A loader's value could never be read back from Redis (a function, a symbol, a cycle, a type the
   * decoder refuses, larger than `maxValueBytes`): its callers got it, nothing was written, and waiters in
   * other processes were told so (they reject with UnstorableValueError instead of rebuilding in turn).
   */
  unstorable: [{ key: string; namespace?: string; reason: string; error: unknown }];
  /** A background refresh (stale or early) failed; the value stays until it expires. */
  refreshError: [{ key: string; namespace?: string; error: unknown }];
  /**
   * Refresh ahead (`refreshAhead`): a hit past the entry's refresh point started an early refresh in
   * the background (`started`); it then won the rebuild lock (`won`) or lost it (`lost`: another
   * process refreshes, this one does nothing). A winner whose re-read finds the entry already replaced
   * (refreshed, set, deleted or expired since the hit) loads nothing (`already-refreshed`). A refresh
   * whose key changes while it runs (a delete or set here, a delete, set or write note from another
   * process) is abandoned (`abandoned`): its loader's `ctx.signal` aborts and its lock is released at
   * once, so callers of the changed key do not wait for a load whose write could no longer land.
   */
  refresh: [{ key: string; namespace?: string; outcome: 'started' | 'won' | 'lost' | 'already-refreshed' | 'abandoned' }];
  /**
   * A Redis node's health changed (see `cache.health()`): `suspect` (an operation went unanswered for
   * `redisTimeout` while the node answered nothing else: nothing more is sent to it but a background
   * probe, calls answer from memory or run their loader here), `open` (its circuit breaker opened), or
   * `recovered` (it answers again). `ms`: how long the oldest operation waited (suspect), or how long
   * the node has been, or was, unhealthy (open, recovered). One event per change, not per call.
   */
  health: [HealthChange];
}
