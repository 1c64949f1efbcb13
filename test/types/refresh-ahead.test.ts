/** The refresh-ahead options at compile time: both forms of `refreshAhead`, `ttlJitter`, the event, the exported type. */
import { describe, expectTypeOf, it } from 'vitest';
import type * as api from '../../src/index.js';
import type { Cache } from '../../src/index.js';

declare const cache: Cache;

describe('refreshAhead, ttlJitter and the refresh event', () => {
  it('accepts a fraction or { beta } per call and in defaults; refuses other shapes', () => {
    expectTypeOf(() => cache.getOrCompute('k', async () => 1, { ttl: 1, refreshAhead: 0.8, ttlJitter: 0.2 })).toBeFunction();
    expectTypeOf(() => cache.getOrCompute('k', async () => 1, { ttl: 1, refreshAhead: { beta: 1 } })).toBeFunction();
    // @ts-expect-error refreshAhead is a number or { beta }
    expectTypeOf(() => cache.getOrCompute('k', async () => 1, { ttl: 1, refreshAhead: '0.8' })).toBeFunction();
    // @ts-expect-error XFetch's parameter is beta
    expectTypeOf(() => cache.getOrCompute('k', async () => 1, { ttl: 1, refreshAhead: { delta: 1 } })).toBeFunction();
    // @ts-expect-error ttlJitter is a number
    expectTypeOf(() => cache.set('k', 1, { ttl: 1, ttlJitter: true })).toBeFunction();
  });

  it('exports RefreshAhead and types the refresh event', () => {
    expectTypeOf<api.RefreshAhead>().toEqualTypeOf<number | { beta: number }>();
    expectTypeOf<api.CallOptions['refreshAhead']>().toEqualTypeOf<api.RefreshAhead | undefined>();
    expectTypeOf<api.CacheEvents['refresh'][0]>().toEqualTypeOf<{ key: string; namespace?: string; outcome: 'started' | 'won' | 'lost' | 'already-refreshed' | 'abandoned' }>();
  });
});
