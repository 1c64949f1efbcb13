/** Types of tags (issue #27): the invalidations' signatures. Nothing here runs a call. */
import { describe, expectTypeOf, it } from 'vitest';
import type { Cache } from '../../src/index.js';

declare const cache: Cache;

describe('tag types', () => {
  it('deleteByTag and expireByTag take a tag or an array of tags, on a cache and a namespace, and resolve to void', () => {
    void (() => {
      const users = cache.namespace('users');
      for (const target of [cache, users]) {
        expectTypeOf<Parameters<typeof target.deleteByTag>>().toEqualTypeOf<[tag: string | readonly string[]]>();
        expectTypeOf<Parameters<typeof target.expireByTag>>().toEqualTypeOf<[tag: string | readonly string[]]>();
        expectTypeOf(target.expireByTag('org:3')).toEqualTypeOf<Promise<void>>();
        expectTypeOf(target.expireByTag(['org:3', 'user:1'] as const)).toEqualTypeOf<Promise<void>>();
      }
      // @ts-expect-error a tag is a string
      void cache.expireByTag(3);
    });
  });
});
