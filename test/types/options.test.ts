/**
 * The option types, at compile time: the public interfaces and the schema list the same options with
 * the same value types (so they cannot drift), typos and wrong value types are compile errors, and
 * the package's entry point exports every public type and none of the internals.
 */
import type { Cluster, Redis } from 'ioredis';
import type { Cluster as Cluster6, Redis as Redis6 } from 'ioredis6';
import type { createClient, createCluster } from 'redis';
import type { createClient as createClient5, createCluster as createCluster5 } from 'redis5';
import { describe, expectTypeOf, it } from 'vitest';
import type * as api from '../../src/index.js';
import type { Cache, CacheOptions, CallOptions, RedlockOptions } from '../../src/index.js';
import type { Parsed } from '../../src/options/fields.js';
import type { CACHE_FIELDS, CALL_FIELDS, DEFAULTS, LOCAL_FIELDS, REDLOCK_FIELDS, ResolvedCall, UNSAFE_FIELDS } from '../../src/options/schema.js';
import type { UnsafeSwitches } from '../../src/unsafe.js';

declare const cache: Cache;
declare const createCache: typeof api.createCache;
declare const redis: CacheOptions['redis'];
type ParsedAll<S> = { [K in keyof S]: Parsed<S[K]> };
type Given<O> = { [K in keyof O]-?: NonNullable<O[K]> };

describe('the schema and the public option types list the same options', () => {
  it('call options: same names, same value types', () => {
    expectTypeOf<keyof typeof CALL_FIELDS>().toEqualTypeOf<keyof CallOptions>();
    expectTypeOf<ParsedAll<typeof CALL_FIELDS>>().toEqualTypeOf<Given<CallOptions>>();
  });

  it('createCache options: same names (unsafeUnfencedWrites is not among them)', () => {
    expectTypeOf<keyof typeof CACHE_FIELDS>().toEqualTypeOf<keyof CacheOptions>();
    expectTypeOf<CacheOptions>().not.toHaveProperty('unsafeUnfencedWrites');
  });

  it('replicaAck: { replicas, timeout }, both required numbers; the resolved value is the same shape', () => {
    expectTypeOf<NonNullable<CacheOptions['replicaAck']>>().toEqualTypeOf<api.ReplicaAckOptions>();
    expectTypeOf<api.ReplicaAckOptions>().toEqualTypeOf<{ replicas: number; timeout: number }>();
    expectTypeOf<Parsed<(typeof CACHE_FIELDS)['replicaAck']>>().toEqualTypeOf<api.ReplicaAckOptions>();
    // @ts-expect-error timeout is required
    expectTypeOf(() => createCache({ redis, replicaAck: { replicas: 1 } })).toBeFunction();
  });

  it("local: { max, invalidation }; the resolved value has both, invalidation defaulting to 'notes'", () => {
    expectTypeOf<keyof typeof LOCAL_FIELDS>().toEqualTypeOf<keyof api.LocalTierOptions>();
    expectTypeOf<ParsedAll<typeof LOCAL_FIELDS>>().toEqualTypeOf<Given<api.LocalTierOptions>>();
    expectTypeOf<(typeof DEFAULTS)['invalidation']>().toEqualTypeOf<'notes'>();
    expectTypeOf(() => createCache({ redis, local: { max: 10, invalidation: 'tracking' } })).returns.toEqualTypeOf<Cache>();
    // @ts-expect-error invalidation is 'notes' or 'tracking'
    expectTypeOf(() => createCache({ redis, local: { max: 10, invalidation: 'server' } })).toBeFunction();
    // @ts-expect-error max is required
    expectTypeOf(() => createCache({ redis, local: { invalidation: 'tracking' } })).toBeFunction();
  });

  it('redlock options: same names', () => {
    expectTypeOf<keyof typeof REDLOCK_FIELDS>().toEqualTypeOf<keyof RedlockOptions>();
  });

  it('test-only switches: same names as UnsafeSwitches', () => {
    expectTypeOf<keyof typeof UNSAFE_FIELDS>().toEqualTypeOf<keyof UnsafeSwitches>();
  });

  it('a resolved call has every call option, lock as a mode, signal possibly undefined', () => {
    expectTypeOf<keyof ResolvedCall>().toEqualTypeOf<keyof CallOptions>();
    expectTypeOf<ResolvedCall['lock']>().toEqualTypeOf<api.LockMode>();
    expectTypeOf<ResolvedCall['signal']>().toEqualTypeOf<AbortSignal | undefined>();
    expectTypeOf<ResolvedCall['ttl']>().toEqualTypeOf<number>();
  });

  it('DEFAULTS keeps literal types and has no ttl', () => {
    expectTypeOf<(typeof DEFAULTS)['lock']>().toEqualTypeOf<'single'>();
    expectTypeOf<(typeof DEFAULTS)['redisTimeout']>().toEqualTypeOf<500>();
    expectTypeOf<typeof DEFAULTS>().not.toHaveProperty('ttl');
    expectTypeOf<typeof DEFAULTS>().not.toHaveProperty('signal');
  });
});

describe('option mistakes are compile errors', () => {
  it('a misspelt call option', () => {
    // @ts-expect-error stalTtl is not an option (staleTtl is)
    expectTypeOf(() => cache.getOrCompute('k', async () => 1, { ttl: 1, stalTtl: 2 })).toBeFunction();
    expectTypeOf(() => cache.getOrCompute('k', async () => 1, { ttl: 1, staleTtl: 2 })).toBeFunction();
  });

  it('a call option of the wrong type', () => {
    // @ts-expect-error ttl is a number of ms
    expectTypeOf(() => cache.getOrCompute('k', async () => 1, { ttl: '1000' })).toBeFunction();
    // @ts-expect-error not a lock mode
    expectTypeOf(() => cache.getOrCompute('k', async () => 1, { ttl: 1, lock: 'mutex' })).toBeFunction();
    // @ts-expect-error onWaitTimeout is 'compute' or 'throw'
    expectTypeOf(() => cache.set('k', 1, { ttl: 1, onWaitTimeout: 'wait' })).toBeFunction();
  });

  it('a misspelt or mistyped createCache option, including the retired unsafeUnfencedWrites', () => {
    expectTypeOf(() => createCache({ redis, prefix: 'x', defaults: { ttl: 1 } })).returns.toEqualTypeOf<Cache>();
    // @ts-expect-error prefx is not an option
    expectTypeOf(() => createCache({ redis, prefx: 'x' })).toBeFunction();
    // @ts-expect-error the negative control is not public API
    expectTypeOf(() => createCache({ redis, unsafeUnfencedWrites: true })).toBeFunction();
    // @ts-expect-error local is { max } or false
    expectTypeOf(() => createCache({ redis, local: true })).toBeFunction();
    // @ts-expect-error a misspelt default
    expectTypeOf(() => createCache({ redis, defaults: { lockTTL: 1 } })).toBeFunction();
    // @ts-expect-error a misspelt redlock option
    expectTypeOf(() => createCache({ redis, redlock: { nodes: [redis, redis, redis], retries: 3 } })).toBeFunction();
  });
});

describe('the entry point', () => {
  it('exports every public option, event, loader and error type', () => {
    expectTypeOf<api.CallOptions>().toBeObject();
    expectTypeOf<api.CacheOptions>().toBeObject();
    expectTypeOf<api.RedlockOptions>().toBeObject();
    expectTypeOf<api.LocalTierOptions>().toEqualTypeOf<{ max: number; invalidation?: api.LocalInvalidation }>();
    expectTypeOf<api.LocalInvalidation>().toEqualTypeOf<'notes' | 'tracking'>();
    expectTypeOf<api.OnNoQuorum>().toEqualTypeOf<'throw' | 'single' | 'local'>();
    expectTypeOf<api.OnWaitTimeout>().toEqualTypeOf<'compute' | 'throw'>();
    expectTypeOf<api.LockMode>().toEqualTypeOf<'none' | 'local' | 'single' | 'redlock'>();
    expectTypeOf<api.LockPolicy>().toEqualTypeOf<api.LockMode | ((key: string) => api.LockMode)>();
    expectTypeOf<api.Clock>().toEqualTypeOf<{ now(): number }>();
    expectTypeOf<api.ErrorCode>().toExtend<string>();
    expectTypeOf<api.CacheEvents>().toHaveProperty('hit');
    expectTypeOf<api.Loader<number>>().returns.toEqualTypeOf<number | PromiseLike<number>>();
    expectTypeOf<api.LoaderContext<number>['staleValue']>().toEqualTypeOf<number | undefined>();
    expectTypeOf<api.RedisClient>().toHaveProperty('duplicate');
  });

  it('RedisClient accepts both client families, each in both major versions', () => {
    expectTypeOf<Redis>().toExtend<api.RedisClient>();
    expectTypeOf<Cluster>().toExtend<api.RedisClient>();
    expectTypeOf<Redis6>().toExtend<api.RedisClient>();
    expectTypeOf<Cluster6>().toExtend<api.RedisClient>();
    expectTypeOf<ReturnType<typeof createClient>>().toExtend<api.RedisClient>();
    expectTypeOf<ReturnType<typeof createCluster>>().toExtend<api.RedisClient>();
    expectTypeOf<ReturnType<typeof createClient5>>().toExtend<api.RedisClient>();
    expectTypeOf<ReturnType<typeof createCluster5>>().toExtend<api.RedisClient>();
    expectTypeOf<CacheOptions['redis']>().toEqualTypeOf<api.RedisClient>();
    expectTypeOf<RedlockOptions['nodes']>().toEqualTypeOf<api.RedisClient[]>();
    expectTypeOf<{ get(): void }>().not.toExtend<api.RedisClient>();
  });

  it('does not export the internals (UNSAFE, resolved option types)', () => {
    expectTypeOf<typeof api>().not.toHaveProperty('UNSAFE');
    expectTypeOf<typeof api>().not.toHaveProperty('resolveCacheOptions');
    // @ts-expect-error internal
    expectTypeOf<api.ResolvedCall>().toBeObject();
    // @ts-expect-error internal
    expectTypeOf<api.ResolvedCache>().toBeObject();
    // @ts-expect-error internal
    expectTypeOf<api.UnsafeSwitches>().toBeObject();
  });
});
