export const UNSAFE = Symbol.for('stampede-guard.unsafe');
export interface UnsafeSwitches {
  unfencedWrites?: boolean;
  incoherentL1?: boolean;
  /** Negative control (cluster campaign): one circuit breaker for the whole cache, not one per slot owner. */
  sharedBreaker?: boolean;
  /** Negative control (fresh-hit tests): every sample of a node's clock is wrong by this many ms (node-clock.ts). */
  clockSkewMs?: number;
  /** Negative control (tags tests): a tagged write carries the server's time at the write instead of its grant's (store.ts). */
  tagSnapshotAtWrite?: boolean;
  /** Negative control (Cluster tags tests): a tagged entry read from Redis is served without the check of its tag records (store.ts). */
  tagReadUnchecked?: boolean;
  /** Negative control (tracking tests): tracking is on, but the server's invalidation pushes are dropped unread (runtime.ts startTracking). */
  ignoreInvalidations?: boolean;
  /** Negative control (tag-state tests): a tag note does not drop this process's kept tag states (tag-states.ts). */
  tagStatesUndropped?: boolean;
}
