/** Event names and payloads are typed: a listener sees its event's payload, an unknown name is an error. */
import { describe, expectTypeOf, it } from 'vitest';
import type { Cache, CacheEvents, LockMode } from '../../src/index.js';

declare const cache: Cache;

describe('cache.on: event payload types', () => {
  it('hit carries the key, the namespace of a namespaced key, and the tier', () => {
    expectTypeOf(() =>
      cache.on('hit', (e) => {
        expectTypeOf(e).toEqualTypeOf<{ key: string; namespace?: string; tier: 'local' | 'redis' }>();
      }),
    ).returns.toEqualTypeOf<Cache>();
  });

  it('computed carries lock, fence, loadMs and written', () => {
    expectTypeOf(() =>
      cache.on('computed', (e) => {
        expectTypeOf(e.lock).toEqualTypeOf<LockMode | 'degraded'>();
        expectTypeOf(e.fence).toEqualTypeOf<number | undefined>();
        expectTypeOf(e.written).toEqualTypeOf<boolean>();
      }),
    ).toBeFunction();
  });

  it('stale and waited carry their reason / outcome unions', () => {
    expectTypeOf(() =>
      cache.on('stale', (e) => expectTypeOf(e.reason).toEqualTypeOf<CacheEvents['stale'][0]['reason']>()),
    ).toBeFunction();
    expectTypeOf<CacheEvents['waited'][0]['outcome']>().toEqualTypeOf<'value' | 'stale' | 'took-over' | 'timeout'>();
  });

  it('degraded may have no key (the subscription is not about one key)', () => {
    expectTypeOf<CacheEvents['degraded'][0]['key']>().toEqualTypeOf<string | undefined>();
  });

  it('an unknown event name is a compile error', () => {
    // @ts-expect-error there is no 'hits' event
    expectTypeOf(() => cache.on('hits', () => undefined)).toBeFunction();
    // @ts-expect-error the hit payload has no 'value'
    expectTypeOf(() => cache.on('hit', (e) => void e.value)).toBeFunction();
  });
});
