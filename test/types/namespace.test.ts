/** Types of namespaces (issue #11). Nothing here runs a call. */
import { describe, expectTypeOf, it } from 'vitest';
import type { Cache, Namespace } from '../../src/index.js';

declare const cache: Cache;

describe('namespace types', () => {
  it('cache.namespace returns a Namespace with the cache operations, clear() and nesting; the cache clears too', () => {
    void (() => {
      const users = cache.namespace('users');
      expectTypeOf(users).toEqualTypeOf<Namespace>();
      expectTypeOf(users.namespace('admins')).toEqualTypeOf<Namespace>();
      expectTypeOf(users.clear()).toEqualTypeOf<Promise<void>>();
      expectTypeOf(users.getOrCompute('k', async () => 1, 1000)).toEqualTypeOf<Promise<number>>();
      expectTypeOf(users.getMany<string>(['a'])).toEqualTypeOf<Promise<(string | undefined)[]>>();
      expectTypeOf(users.has('k')).toEqualTypeOf<Promise<boolean>>();
      expectTypeOf(users.name).toEqualTypeOf<string>();
      expectTypeOf(cache.clear()).toEqualTypeOf<Promise<void>>();
    });
  });
});
