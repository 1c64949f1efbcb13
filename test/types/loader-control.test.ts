/** Types of the loader-control API (issue #11): ctx.setOptions, ctx.skip, forceFresh. Nothing here runs a call. */
import { describe, expectTypeOf, it } from 'vitest';
import type { Cache, CallOptions, EntryOptions, LoaderContext } from '../../src/index.js';

declare const cache: Cache;
declare const db: { product(id: number): Promise<{ id: number } | null> };

describe('loader control types', () => {
  it('ctx.setOptions takes the five entry options; ctx.skip takes nothing', () => {
    expectTypeOf<LoaderContext['setOptions']>().toEqualTypeOf<(options: EntryOptions) => void>();
    expectTypeOf<LoaderContext['skip']>().toEqualTypeOf<() => void>();
    expectTypeOf<keyof EntryOptions>().toEqualTypeOf<'ttl' | 'staleTtl' | 'failSafeTtl' | 'refreshAhead' | 'tags'>();
    expectTypeOf<EntryOptions['refreshAhead']>().toEqualTypeOf<CallOptions['refreshAhead']>();
  });

  it('a loader using setOptions and skip keeps its inferred value type', () => {
    expectTypeOf(() =>
      cache.getOrCompute('k', async (ctx) => {
        if (Math.random() > 0.5) ctx.skip();
        const p = await db.product(1);
        if (!p) ctx.setOptions({ ttl: 5_000 });
        return p;
      }, 3_600_000),
    ).returns.toEqualTypeOf<Promise<{ id: number } | null>>();
  });

  it('forceFresh is a boolean call option', () => {
    expectTypeOf<CallOptions['forceFresh']>().toEqualTypeOf<boolean | undefined>();
    // @ts-expect-error lockTtl is not an entry option
    const bad: EntryOptions = { lockTtl: 5 };
    void bad;
  });
});
