/**
 * A fresh hit is one plain read (GETRANGE up to the size cap), judged by the entry's `freshUntil` in
 * its node's clock (node-clock.ts, store.ts); the read script answers only where the plain read cannot
 * decide. Run on both client families. The counts come from the test's own server (INFO commandstats).
 */
import { describe, expect, it } from 'vitest';
import { type CacheOptions } from '../../src/index.js';
import { UNSAFE } from '../../src/unsafe.js';
import { decodeEntry as previousDecodeEntry } from '../fixtures/previous-codec.js';
import { commandCalls, keysOf, prefixOf, useRedis } from '../support/harness.js';

const h = useRedis();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));


/** A cache whose node-clock samples are all wrong by `skewMs` (the negative control), else a plain one. */
function cacheWithSkew(skewMs: number, options: Partial<CacheOptions> = {}) {
  return h.cache(skewMs === 0 ? options : ({ ...options, [UNSAFE]: { clockSkewMs: skewMs } } as Partial<CacheOptions>));
}

describe('a fresh hit', () => {
  it('is one GETRANGE once the node\'s clock is sampled: 200 hits send 200 reads and no script', async () => {
    const cache = h.cache();
    await cache.set('k', { v: 1 }, 60_000);
    await cache.get('k'); // the first read of a node samples its clock with the read script
    await h.admin.config('RESETSTAT');
    // One after another: concurrent calls of one key share one read (one load per key per process).
    const hits: { v: number }[] = [];
    for (let i = 0; i < 200; i++) hits.push(await cache.getOrCompute('k', () => ({ v: 2 }), 60_000));
    expect(hits.every((v) => v.v === 1)).toBe(true);
    const calls = await commandCalls(h.admin);
    // A GETRANGE per hit. The read script only where a hit could not be judged (a reply delayed past
    // the clock window by a busy machine: then the script follows the GETRANGE) or re-samples the clock.
    expect(calls.calls('getrange')).toBeGreaterThanOrEqual(195);
    expect(calls.scripts).toBeLessThanOrEqual(5);
  });

  it('getMany reads its keys with GETRANGE too', async () => {
    const cache = h.cache();
    for (const k of ['a', 'b', 'c']) await cache.set(k, k, 60_000);
    await cache.get('a');
    await h.admin.config('RESETSTAT');
    expect(await cache.getMany(['a', 'b', 'c', 'absent'])).toEqual(['a', 'b', 'c', undefined]);
    const calls = await commandCalls(h.admin);
    expect({ getrange: calls.calls('getrange'), evalsha: calls.calls('evalsha') }).toEqual({ getrange: 4, evalsha: 0 });
  });

  it.each<[string, number]>([
    ['a correct clock', 0],
    // Negative control: the node's clock is taken to be 10 s behind; the entry then still looks fresh.
    ...(process.env.SG_NEGATIVE_CONTROL === 'clock-behind' ? [['a clock sampled 10 s behind', -10_000] as [string, number]] : []),
  ])('with %s, an entry past its ttl is not served as fresh (freshness follows the node\'s clock)', async (_name, skew) => {
    const cache = cacheWithSkew(skew);
    await cache.set('k', 'old', { ttl: 150, staleTtl: 60_000 });
    await cache.get('k'); // samples the clock
    await sleep(250);
    expect(await cache.get('k')).toBeUndefined(); // stale now: get() answers fresh values only
    expect(await cache.getMany(['k'])).toEqual([undefined]);
    expect(await cache.has('k')).toBe(false);
  });

  it.each<[string, number]>([
    ['a correct clock', 0],
    // Negative control: the node's clock is taken to be 10 min ahead; a fresh entry then looks stale.
    ...(process.env.SG_NEGATIVE_CONTROL === 'clock-ahead' ? [['a clock sampled 10 min ahead', 600_000] as [string, number]] : []),
  ])('with %s, an entry within its ttl is served as fresh from the plain read', async (_name, skew) => {
    const cache = cacheWithSkew(skew);
    await cache.set('k', 'v', { ttl: 60_000, staleTtl: 3_600_000 });
    await cache.get('k');
    await h.admin.config('RESETSTAT');
    expect(await cache.get('k')).toBe('v');
    expect(await cache.getMany(['k'])).toEqual(['v']);
    expect((await commandCalls(h.admin)).calls('getrange')).toBe(2);
  });

  it('a key of another type is a decodeError and a miss on the plain read, not a Redis failure', async () => {
    const cache = h.cache();
    await cache.set('warm', 'w', 60_000);
    await cache.get('warm');
    const reasons: string[] = [];
    cache.on('decodeError', (e) => reasons.push(e.reason));
    const degraded: string[] = [];
    cache.on('degraded', (e) => degraded.push(e.operation));
    await h.admin.hset(keysOf(cache, 'hash').value, 'f', '1');
    expect(await cache.get('hash')).toBeUndefined();
    expect(await cache.getMany(['hash'])).toEqual([undefined]);
    expect(reasons).toEqual(['not a string value', 'not a string value']);
    expect(degraded).toEqual([]);
  });

  it('a value over maxValueBytes leaves Redis as at most maxValueBytes + 1 bytes and is a decodeError', async () => {
    const writer = h.cache();
    const reader = h.cache({ prefix: prefixOf(writer), maxValueBytes: 64 });
    await writer.set('big', 'x'.repeat(500), 60_000);
    await writer.set('small', 's', 60_000);
    await reader.get('small');
    const reasons: string[] = [];
    reader.on('decodeError', (e) => reasons.push(e.reason));
    await h.admin.config('RESETSTAT');
    expect(await reader.get('big')).toBeUndefined();
    expect(reasons).toEqual(['larger than maxValueBytes (64)']);
    expect((await commandCalls(h.admin)).calls('getrange')).toBe(1);
  });
});

describe('a fleet mid-upgrade', () => {
  it('an entry the previous release wrote (no freshUntil) is judged by the read script: fresh, then stale', async () => {
    const cache = h.cache();
    await cache.set('warm', 'w', 60_000);
    await cache.get('warm');
    // The previous release's bytes: v4 with nine elements, its physical ttl = ttl + grace (1 h stale).
    const bytes = (await import('msgpackr')).pack([4, 'old-format', 1, 0, Date.now(), 3_600_000, 3_600_000, 300, null]);
    await h.admin.set(keysOf(cache, 'legacy').value, bytes, 'PX', 300 + 3_600_000);
    await h.admin.config('RESETSTAT');
    expect(await cache.get('legacy')).toBe('old-format');
    expect((await commandCalls(h.admin)).calls('evalsha')).toBeGreaterThan(0); // the script decided
    await sleep(400);
    expect(await cache.get('legacy')).toBeUndefined(); // stale by the server's PTTL
  });

  it('the previous release reads what this release writes (the tenth element is ignored)', async () => {
    const cache = h.cache();
    await cache.set('k', { deep: [1, 'two'] }, { ttl: 60_000, staleTtl: 5_000 });
    const bytes = await h.admin.getBuffer(keysOf(cache, 'k').value);
    const old = previousDecodeEntry(bytes as Buffer);
    expect(old.value).toEqual({ deep: [1, 'two'] });
    expect([old.ttlMs, old.staleMs, old.graceMs]).toEqual([60_000, 5_000, 5_000]);
  });

  it('the write script stamps freshUntil from the server\'s TIME: within the write\'s round trip, plus the ttl', async () => {
    const cache = h.cache();
    const [s0, us0] = await h.admin.time();
    await cache.set('k', 'v', 60_000);
    const [s1, us1] = await h.admin.time();
    const { decodeEntry } = await import('../../src/codec.js');
    const until = decodeEntry((await h.admin.getBuffer(keysOf(cache, 'k').value)) as Buffer).freshUntil as number;
    const ms = (s: number | string | undefined, us: number | string | undefined) => Number(s) * 1000 + Number(us) / 1000;
    expect(until - 60_000).toBeGreaterThanOrEqual(ms(s0, us0));
    expect(until - 60_000).toBeLessThanOrEqual(ms(s1, us1));
  });
});
