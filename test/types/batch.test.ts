/** Types of the batch API (issue #11): has, getMany, deleteMany. Nothing here runs a call. */
import { describe, expectTypeOf, it } from 'vitest';
import type { BatchLoader, BatchLoaderContext, Cache, EntryOptions } from '../../src/index.js';

declare const cache: Cache;

describe('batch API types', () => {
  it('has is Promise<boolean>; getMany is aligned values | undefined, typed by its parameter; deleteMany is Promise<void>', () => {
    // Inside a function never invoked: `cache` is only declared.
    void (() => {
    expectTypeOf(cache.has('k')).toEqualTypeOf<Promise<boolean>>();
    expectTypeOf(cache.getMany(['a', 'b'])).toEqualTypeOf<Promise<unknown[]>>();
    expectTypeOf(cache.getMany<number>(['a'])).toEqualTypeOf<Promise<(number | undefined)[]>>();
    expectTypeOf(cache.deleteMany(['a'])).toEqualTypeOf<Promise<void>>();
    // A readonly array is accepted.
    const keys: readonly string[] = ['a'];
    expectTypeOf(cache.getMany<string>(keys)).toEqualTypeOf<Promise<(string | undefined)[]>>();
    });
  });
});

describe('getOrComputeMany types', () => {
  it('values are typed by the Map loadMany returns, aligned | undefined; ctx has signal, fencingTokens and setOptions(key, options)', () => {
    void (() => {
      expectTypeOf(
        cache.getOrComputeMany(['a'], async (missing, ctx) => {
          expectTypeOf(missing).toEqualTypeOf<string[]>();
          expectTypeOf(ctx.signal).toEqualTypeOf<AbortSignal>();
          expectTypeOf(ctx.fencingTokens).toEqualTypeOf<ReadonlyMap<string, number | undefined>>();
          expectTypeOf(ctx.setOptions).toEqualTypeOf<(key: string, options: EntryOptions) => void>();
          return new Map(missing.map((k) => [k, { id: k }]));
        }, 60_000),
      ).toEqualTypeOf<Promise<({ id: string } | undefined)[]>>();
      expectTypeOf<BatchLoader<number>>().toEqualTypeOf<(missing: string[], ctx: BatchLoaderContext) => Map<string, number | Error> | PromiseLike<Map<string, number | Error>>>();
    });
  });

  it('an Error value (that key alone fails) is allowed in the Map and does not widen the values', () => {
    void (() => {
      expectTypeOf(
        cache.getOrComputeMany(['a', 'b'], async (missing) => {
          const found = new Map<string, { id: string } | Error>();
          for (const k of missing) found.set(k, k === 'b' ? new Error('b is gone') : { id: k });
          return found;
        }, 60_000),
      ).toEqualTypeOf<Promise<({ id: string } | undefined)[]>>();
      // A loader that returns only values still infers them.
      expectTypeOf(cache.getOrComputeMany(['a'], () => new Map([['a', 1]]), 60_000)).toEqualTypeOf<Promise<(number | undefined)[]>>();
    });
  });
});
