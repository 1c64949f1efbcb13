/**
 * The options module everyone imports. The pieces live in src/options/: `public.ts` (the option types,
 * documented), `schema.ts` (one entry per option: DEFAULTS, validation and the resolved types derive
 * from it), `resolve.ts` (createCache and per-call resolution), `effective.ts` (effective-value rules).
 */
export {
  LOCK_MODES,
  systemClock,
  type CacheOptions,
  type CallOptions,
  type Clock,
  type EntryOptions,
  type LocalInvalidation,
  type LocalTierOptions,
  type LockMode,
  type LockPolicy,
  type Notes,
  type OnNoQuorum,
  type OnWaitTimeout,
  type RedlockOptions,
  type RefreshAhead,
  type ReplicaAckOptions,
} from './options/public.js';
export { DEFAULTS, validateEntryOptions, type EntryOverrides, type ResolvedCache, type ResolvedCall, type ResolvedDefaults, type ResolvedLocal, type ResolvedRedlock } from './options/schema.js';
export { resolveCacheOptions, resolveCallOptions } from './options/resolve.js';
export { BREAKER_MAX_GROWTH, mayWaitOnOthers, breakerCooldown, breakerJudgementWindow, breakerOpenings, entryCall, graceWindow, loaderTimeout, lockModeFor, physicalTtl, pollDelay, watchdogInterval, writeTtl } from './options/effective.js';
