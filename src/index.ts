/**
 * The public surface, listed explicitly: everything a user may need to name. Internals (resolved
 * option types, the test-only UNSAFE switches) are deliberately not here.
 */
export { Cache, createCache, type Loader, type LoaderContext } from './cache.js';
export type { CacheEvents } from './events.js';
export type { CacheHealth, HealthChange, NodeHealthReport, NodeState } from './health.js';
export type { Namespace } from './namespace.js';
export type { BatchLoader, BatchLoaderContext } from './many.js';
export { GET_CHANNEL, GET_OR_COMPUTE_CHANNEL, type CacheStats, type GetContext, type GetOrComputeContext, type Outcome, type ReadOutcome } from './telemetry.js';
export {
  DEFAULTS,
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
  type ReplicaAckOptions,
  type RefreshAhead,
} from './options.js';
export {
  AbortedError,
  CacheClosedError,
  ClientNotConnectedError,
  InvalidKeyError,
  InvalidOptionError,
  LoaderTimeoutError,
  LockLostError,
  NoQuorumError,
  OriginBackoffError,
  RedisPermissionError,
  RedisUnavailableError,
  StampedeGuardError,
  TooManyWaitersError,
  UnstorableValueError,
  WaitTimeoutError,
  type ErrorCode,
  type RedisFailure,
} from './errors.js';
export type { RedisClient } from './redis-types.js';
