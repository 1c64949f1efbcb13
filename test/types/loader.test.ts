/**
 * The value type of getOrCompute is inferred from the loader, whatever the loader does with `ctx`.
 * Compile-time checks: `npm run typecheck` (tsc) and vitest's typecheck pass fail on them. At run time
 * nothing here runs a call: `cache` is only declared, and every call sits in a function never invoked.
 */
import { describe, expectTypeOf, it } from 'vitest';
import type { Cache, CacheOptions, Loader, LoaderContext } from '../../src/index.js';

interface User {
  id: string;
  name: string;
}
declare const cache: Cache;
declare const db: { loadUser(id: string, opts: { signal: AbortSignal }): Promise<User> };
declare const id: string;
declare function renderHome(): Promise<string>;

describe('getOrCompute infers the value type from its loader', () => {
  it("the README's first example, a loader using ctx.signal, is Promise<User>", () => {
    expectTypeOf(() => cache.getOrCompute(`user:${id}`, (ctx) => db.loadUser(id, { signal: ctx.signal }), 60_000)).returns.toEqualTypeOf<Promise<User>>();
  });

  it('an unannotated (ctx) => … loader infers T from its return value; its staleValue is unknown', () => {
    expectTypeOf(() =>
      cache.getOrCompute('k', (ctx) => {
        // TypeScript types ctx before it reads the body, so it cannot know T here.
        expectTypeOf(ctx.staleValue).toEqualTypeOf<unknown>();
        return db.loadUser(id, { signal: ctx.signal });
      }, 1000),
    ).returns.toEqualTypeOf<Promise<User>>();
  });

  it('with an explicit <T> or a typed Loader<T>, ctx.staleValue is T | undefined', () => {
    expectTypeOf(() =>
      cache.getOrCompute<User>('k', (ctx) => {
        expectTypeOf(ctx.staleValue).toEqualTypeOf<User | undefined>();
        return db.loadUser(id, { signal: ctx.signal });
      }, 1000),
    ).returns.toEqualTypeOf<Promise<User>>();
    const loadUser: Loader<User> = (ctx) => {
      expectTypeOf(ctx.staleValue).toEqualTypeOf<User | undefined>();
      return db.loadUser(ctx.key, { signal: ctx.signal });
    };
    expectTypeOf(() => cache.getOrCompute('k', loadUser, 1000)).returns.toEqualTypeOf<Promise<User>>();
  });

  it('a loader without ctx: async () => 1 is Promise<number>; a named function keeps its type', () => {
    expectTypeOf(() => cache.getOrCompute('k', async () => 1, 1000)).returns.toEqualTypeOf<Promise<number>>();
    expectTypeOf(() => cache.getOrCompute('home', renderHome, { ttl: 30_000, staleTtl: 300_000 })).returns.toEqualTypeOf<Promise<string>>();
  });

  it('a synchronous loader using ctx is inferred', () => {
    expectTypeOf(() => cache.getOrCompute('k', (ctx) => ctx.key.length, 1000)).returns.toEqualTypeOf<Promise<number>>();
  });

  it('a loader returning T | undefined (undefined = do not cache) is Promise<T | undefined>', () => {
    const maybe = async (ctx: LoaderContext): Promise<User | undefined> => (ctx.key === 'x' ? undefined : { id: 'x', name: 'y' });
    expectTypeOf(() => cache.getOrCompute('k', maybe, 1000)).returns.toEqualTypeOf<Promise<User | undefined>>();
    expectTypeOf(() => cache.getOrCompute('k', async (ctx) => (ctx.signal.aborted ? undefined : ctx.key.length), 1000)).returns.toEqualTypeOf<Promise<number | undefined>>();
  });

  it('an explicit <T> is checked against the loader, not widened to it', () => {
    // @ts-expect-error the loader returns a number, not a User
    expectTypeOf(() => cache.getOrCompute<User>('k', async () => 1, 1000)).toBeFunction();
  });

  it('get<T>() and set() keep their types', () => {
    expectTypeOf(() => cache.get<User>('k')).returns.toEqualTypeOf<Promise<User | undefined>>();
    expectTypeOf(() => cache.get('k')).returns.toEqualTypeOf<Promise<unknown>>();
    expectTypeOf(() => cache.set('k', { id: 'x', name: 'y' }, 1000)).returns.toEqualTypeOf<Promise<void>>();
  });
});

describe('review: loader and defaults types', () => {
  it('a loader may return a thenable (a query builder), inferred as its value', () => {
    const never = (cache: Cache, query: PromiseLike<{ id: number }[]>) => cache.getOrCompute('q', () => query, 1000);
    expectTypeOf(never).returns.toEqualTypeOf<Promise<{ id: number }[]>>();
  });

  it('defaults take no signal (it belongs to one call)', () => {
    // @ts-expect-error signal is per call only
    const options: CacheOptions = { redis: {} as CacheOptions['redis'], defaults: { signal: AbortSignal.abort() } };
    expectTypeOf(options).toExtend<CacheOptions>();
  });
});
