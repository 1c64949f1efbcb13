/**
 * Loader control (issue #11, part 1): ctx.setOptions, ctx.skip() and forceFresh, on a real Redis.
 * Two caches on two clients with one prefix stand for two processes.
 */
import { describe, expect, it } from 'vitest';
import { decodeEntry } from '../../src/codec.js';
import { createCache, InvalidOptionError, type Cache } from '../../src/index.js';
import { deferred, heldRebuild, keysOf, missedCall, nextEvent, prefixOf, untilPttlAtMost, useRedis } from '../support/harness.js';

const h = useRedis();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const twin = (cache: Cache, local = false): Cache => createCache({ redis: h.cacheClient(), prefix: prefixOf(cache), ...(local ? { local: { max: 100 } } : {}) });

async function stored(cache: Cache, key: string) {
  const bytes = await h.admin.getBuffer(keysOf(cache, key).value);
  return bytes === null ? undefined : decodeEntry(bytes);
}

describe('ctx.setOptions', () => {
  it('sets the ttl, stale and fail-safe windows of the entry being written, and only of that entry', async () => {
    const cache = h.cache();
    await cache.getOrCompute('p:404', (ctx) => {
      ctx.setOptions({ ttl: 5_000 });
      ctx.setOptions({ staleTtl: 1_000, failSafeTtl: 7_000 }); // merged with the earlier call
      return null;
    }, 3_600_000);
    const short = await stored(cache, 'p:404');
    expect(short).toMatchObject({ value: null, ttlMs: 5_000, staleMs: 1_000, graceMs: 7_000, refreshAhead: undefined });
    // Physical TTL follows the entry's options: ttl + max(staleTtl, failSafeTtl) = 12 s, not the call's hour.
    const pttl = await h.admin.pttl(keysOf(cache, 'p:404').value);
    expect(pttl).toBeGreaterThan(0);
    expect(pttl).toBeLessThanOrEqual(12_000);
    // The next entry of the same call site gets the call's options again.
    await cache.getOrCompute('p:1', () => ({ id: 1 }), 3_600_000);
    expect(await stored(cache, 'p:1')).toMatchObject({ ttlMs: 3_600_000, staleMs: 0, graceMs: 0 });
  });

  it('a waiter in another process gets the value and reads the entry as written: it expires at the ttl the loader chose', async () => {
    const a = h.cache();
    const b = twin(a);
    const gate = deferred<string>();
    const started = deferred<void>();
    // 1 s: b's wake-up re-read and its get() below land well inside it; the call's own ttl is a minute.
    const call = a.getOrCompute('w', async (ctx) => {
      started.resolve();
      const v = await gate.promise;
      ctx.setOptions({ ttl: 1000 });
      return v;
    }, 60_000);
    await started.promise;
    let bRuns = 0;
    const { call: waiting } = await missedCall(b, 'w', () => (bRuns++, 'b'), { ttl: 60_000, waitTimeout: 60_000, onWaitTimeout: 'throw', pollInterval: 60_000 });
    gate.resolve('a'); // b has missed and goes to a's lock
    await expect(call).resolves.toBe('a');
    await expect(waiting).resolves.toBe('a');
    expect(bRuns).toBe(0);
    expect(await b.get('w')).toBe('a');
    expect(await h.admin.pttl(keysOf(a, 'w').value)).toBeLessThanOrEqual(1000); // the loader's ttl, not the call's
    await untilPttlAtMost(h.admin, a, 'w', -2); // Redis dropped it at that ttl
    expect(await b.get('w')).toBeUndefined();
    expect(await b.getOrCompute('w', () => 'again', 60_000)).toBe('again');
    await b.close();
  });

  it('a stale window set by the loader is served by another process after the entry’s ttl', async () => {
    const a = h.cache();
    const b = twin(a);
    await a.getOrCompute('sw', (ctx) => (ctx.setOptions({ ttl: 50, staleTtl: 60_000 }), 'old'), 60_000);
    await sleep(100);
    const gate = deferred<string>();
    // b's own call has no stale window, yet the entry has one: it is served at once, refreshed behind.
    await expect(b.getOrCompute('sw', () => gate.promise, 60_000)).resolves.toBe('old');
    gate.resolve('new');
    await b.close();
  });

  it('refreshAhead set by the loader is carried in the entry: another process whose call has it off still refreshes early', async () => {
    const a = h.cache();
    const b = twin(a);
    // The refresh point 500 ms in, 9.5 s of fresh time after it for b's hit and its refresh.
    await a.getOrCompute('ra', (ctx) => (ctx.setOptions({ ttl: 10_000, refreshAhead: 0.05 }), 'v1'), 60_000);
    expect((await stored(a, 'ra'))?.refreshAhead).toBe(0.05);
    await untilPttlAtMost(h.admin, a, 'ra', 9_450); // past the refresh point, still fresh
    const refreshed = nextEvent(b, 'computed');
    expect(await b.getOrCompute('ra', () => 'v2', 60_000)).toBe('v1'); // b's call: refreshAhead 0 (off)
    expect((await refreshed).written).toBe(true);
    expect(await b.get('ra')).toBe('v2');
    await b.close();
  });

  it('a bad value is an InvalidOptionError for every caller naming the option; nothing is written and the lock is released', async () => {
    const cache = h.cache();
    const calls = Array.from({ length: 5 }, () =>
      cache.getOrCompute('bad', (ctx) => {
        try {
          ctx.setOptions({ ttl: -5 });
        } catch {
          // a loader that swallows the error still fails its callers with it
        }
        return 'v';
      }, 60_000),
    );
    for (const call of calls) {
      await expect(call).rejects.toBeInstanceOf(InvalidOptionError);
      await expect(call).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'ctx.setOptions.ttl', value: -5, key: 'bad' });
    }
    expect(await h.admin.exists(keysOf(cache, 'bad').value)).toBe(0);
    expect(await h.admin.exists(keysOf(cache, 'bad').lock)).toBe(0);
    // A name the loader may not set: refused the same way.
    await expect(cache.getOrCompute('bad2', (ctx) => (ctx.setOptions({ lockTtl: 5 } as never), 'v'), 60_000)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'ctx.setOptions.lockTtl' });
  });

  it('a bad value is not hidden by a fail-safe value, and sets no fleet-wide backoff', async () => {
    const cache = h.cache();
    await cache.getOrCompute('fsbad', () => 'kept', { ttl: 50, failSafeTtl: 60_000 });
    await sleep(100);
    const opts = { ttl: 60_000, failSafeTtl: 60_000, failBackoff: 60_000 };
    await expect(cache.getOrCompute('fsbad', (ctx) => (ctx.setOptions({ staleTtl: 'x' as never }), 'v'), opts)).rejects.toMatchObject({ option: 'ctx.setOptions.staleTtl' });
    expect(await h.admin.exists(keysOf(cache, 'fsbad').backoff)).toBe(0);
    expect(await cache.getOrCompute('fsbad', () => 'fixed', opts)).toBe('fixed');
  });
});

describe('ctx.skip()', () => {
  it('every coalesced caller gets the value, nothing is written, and a waiter in another process is woken at once and loads in turn', async () => {
    const a = h.cache();
    const b = twin(a);
    const gate = deferred<{ ok: boolean }>();
    const started = deferred<void>();
    let aRuns = 0;
    const loader = async (ctx: { skip(): void }) => {
      aRuns++;
      started.resolve();
      const r = await gate.promise;
      if (!r.ok) ctx.skip();
      return r;
    };
    const callers = Array.from({ length: 10 }, () => a.getOrCompute('sk', loader, 60_000));
    await started.promise;
    let bRuns = 0;
    // No poll and no timeout would end b's wait: only the release note can.
    const waiting = b.getOrCompute('sk', () => (bRuns++, { ok: true, from: 'b' }), { ttl: 60_000, waitTimeout: 600_000, onWaitTimeout: 'throw', pollInterval: 600_000 });
    await sleep(50);
    gate.resolve({ ok: false });
    expect(await Promise.all(callers)).toEqual(Array(10).fill({ ok: false }));
    expect(aRuns).toBe(1);
    await expect(waiting).resolves.toEqual({ ok: true, from: 'b' });
    expect(bRuns).toBe(1);
    // b's own load was cached; a's skipped one never was.
    expect((await stored(a, 'sk'))?.value).toEqual({ ok: true, from: 'b' });
    await b.close();
  });

  it('skips the write even after setOptions, and leaves neither value nor lock behind', async () => {
    const cache = h.cache();
    const local = twin(cache, true);
    await local.ready();
    expect(await local.getOrCompute('sk2', (ctx) => (ctx.setOptions({ ttl: 1_000 }), ctx.skip(), 'not cached'), 60_000)).toBe('not cached');
    expect(await h.admin.exists(keysOf(cache, 'sk2').value, keysOf(cache, 'sk2').lock)).toBe(0);
    // Not in L1 either: the next call loads again.
    expect(await local.getOrCompute('sk2', () => 'loaded', 60_000)).toBe('loaded');
    await local.close();
  });
});

describe('forceFresh', () => {
  it('runs the loader even with a fresh value in Redis and L1, writes it fenced, and the next normal call reads it', async () => {
    const cache = twin(h.cache(), true);
    await cache.ready();
    await cache.getOrCompute('ff', () => 'v1', 60_000);
    const before = (await stored(cache, 'ff'))?.fence ?? 0;
    expect(await cache.getOrCompute('ff', () => 'v2', { ttl: 60_000, forceFresh: true })).toBe('v2');
    const after = await stored(cache, 'ff');
    expect(after?.value).toBe('v2');
    expect(after?.fence).toBeGreaterThan(before);
    expect(await cache.getOrCompute('ff', () => 'v3', 60_000)).toBe('v2');
    await cache.close();
  });

  it('is coalesced: concurrent forceFresh calls in one process share one loader run', async () => {
    const cache = h.cache();
    await cache.set('ffc', 'old', 60_000);
    let runs = 0;
    const gate = deferred<string>();
    const calls = Array.from({ length: 8 }, () => cache.getOrCompute('ffc', () => (runs++, gate.promise), { ttl: 60_000, forceFresh: true }));
    await sleep(50);
    gate.resolve('new');
    expect(await Promise.all(calls)).toEqual(Array(8).fill('new'));
    expect(runs).toBe(1);
  });

  it('is locked: another process’s forceFresh call waits for the holder and takes its new value, never the entry it bypassed', async () => {
    const a = h.cache();
    const b = twin(a);
    await a.set('ffl', 'old', 60_000);
    const held = await heldRebuild<string>(a, 'ffl', { ttl: 60_000, forceFresh: true });
    let bRuns = 0;
    // b polls often: each poll re-reads the old, still fresh entry, which it must not take.
    const waiting = b.getOrCompute('ffl', () => (bRuns++, 'b'), { ttl: 60_000, forceFresh: true, pollInterval: 10, waitTimeout: 60_000, onWaitTimeout: 'throw' });
    await sleep(150);
    held.open('new');
    await expect(held.call).resolves.toBe('new');
    await expect(waiting).resolves.toBe('new');
    expect(bRuns).toBe(0);
    await b.close();
  });
});
