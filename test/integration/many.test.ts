/**
 * getOrComputeMany on a real Redis (issue #11, part 4): one loadMany call for the misses, held keys
 * waited for, per-key failure, fail-safe and stale windows. Two caches on two clients with one prefix
 * stand for two processes (the cross-process count is in many-multiprocess.test.ts).
 */
import { describe, expect, it } from 'vitest';
import { createCache, InvalidOptionError, type Cache } from '../../src/index.js';
import { deferred, heldRebuild, keysOf, prefixOf, refreshOutcomes, untilPttlAtMost, useRedis } from '../support/harness.js';
import { countPipelines } from '../support/pipelines.js';

const h = useRedis();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));


function recording(values: (key: string) => unknown = (k) => `v:${k}`) {
  const calls: string[][] = [];
  const loadMany = async (missing: string[]) => {
    calls.push([...missing].sort());
    await sleep(10);
    return new Map(missing.map((k) => [k, values(k)]).filter(([, v]) => v !== undefined) as [string, unknown][]);
  };
  return { calls, loadMany };
}

describe('getOrComputeMany', () => {
  it('answers hits from one pipelined read and sends only the misses to ONE loadMany call; values are aligned with keys', async () => {
    const client = h.cacheClient();
    const cache = createCache({ redis: client, prefix: `many${process.pid}a` });
    await cache.set('a', 'cached a', 60_000);
    await cache.set('c', 'cached c', 60_000);
    const pipelines = countPipelines(client);
    const { calls, loadMany } = recording((k) => (k === 'gone' ? undefined : `v:${k}`));
    const values = await cache.getOrComputeMany(['a', 'b', 'c', 'd', 'gone', 'b'], loadMany, 60_000);
    expect(values).toEqual(['cached a', 'v:b', 'cached c', 'v:d', undefined, 'v:b']);
    expect(calls).toEqual([['b', 'd', 'gone']]);
    // The read of all keys, the misses' locks taken together, and the re-read of the keys won.
    expect(pipelines.count).toBe(3);
    // Written fenced per key, 'gone' not cached: the next call loads only 'gone'.
    expect(await cache.getMany(['b', 'd', 'gone'])).toEqual(['v:b', 'v:d', undefined]);
    const again = recording();
    expect(await cache.getOrComputeMany(['a', 'b', 'd', 'gone'], again.loadMany, 60_000)).toEqual(['cached a', 'v:b', 'v:d', 'v:gone']);
    expect(again.calls).toEqual([['gone']]);
    await cache.close();
  });

  it('takes the locks of all its misses together: 50 cold keys cost three pipelines: the read, the locks, the re-read', async () => {
    const client = h.cacheClient();
    const cache = createCache({ redis: client, prefix: `many${process.pid}locks` });
    const keys = Array.from({ length: 50 }, (_, i) => `cold${i}`);
    const pipelines = countPipelines(client);
    const { calls, loadMany } = recording();
    expect(await cache.getOrComputeMany(keys, loadMany, 60_000)).toEqual(keys.map((k) => `v:${k}`));
    expect(calls).toHaveLength(1);
    expect(pipelines.count).toBe(3); // with an acquire per key: 2 (the reads)
    await cache.close();
  });

  it('a lock pipeline that times out but is applied later leaves no lock behind: each grant is undone by its token', async () => {
    const client = h.client();
    const cache = createCache({ redis: client, prefix: `many${process.pid}undo`, redisTimeout: 200, breakerThreshold: 1000 });
    await client.ping();
    const stall = h.adminClient();
    await stall.ping();
    const keys = ['u1', 'u2', 'u3'];
    // The second pipeline (the locks) reaches a server stalled for 600 ms: it times out, then is applied.
    let pipelines = 0;
    const original = client.pipeline.bind(client);
    client.pipeline = ((...args: Parameters<typeof client.pipeline>) => {
      const p = original(...args);
      const exec = p.exec.bind(p);
      p.exec = (async (...a: Parameters<typeof p.exec>) => {
        if (++pipelines === 2) {
          // CLIENT PAUSE ALL holds every client's commands for 600 ms; its reply says the stall has begun,
          // so the pipeline surely reaches a stalled server.
          await stall.call('CLIENT', 'PAUSE', '600', 'ALL');
        }
        return exec(...a);
      });
      return p;
    });
    const { loadMany } = recording();
    // The keys then go the single-key way (a failed acquire); their loads end and release their own grants.
    const values = await cache.getOrComputeMany(keys, loadMany, { ttl: 60_000, lockTtl: 60_000, waitTimeout: 60_000 });
    expect(values).toEqual(keys.map((k) => `v:${k}`));
    expect(await h.admin.exists(...keys.map((k) => keysOf(cache, k).lock))).toBe(0);
    await cache.close();
  });

  it('close() while the keys won are re-read leaves none of their locks behind', async () => {
    const client = h.client();
    const cache = createCache({ redis: client, prefix: `many${process.pid}close` });
    await client.ping();
    const keys = ['c1', 'c2'];
    // The third pipeline is the re-read under the grants: close() goes out as it is sent.
    let pipelines = 0;
    let closed: Promise<void> | undefined;
    const original = client.pipeline.bind(client);
    client.pipeline = ((...args: Parameters<typeof client.pipeline>) => {
      const p = original(...args);
      const exec = p.exec.bind(p);
      p.exec = ((...a: Parameters<typeof p.exec>) => {
        if (++pipelines === 3) closed = cache.close();
        return exec(...a);
      });
      return p;
    });
    const { calls, loadMany } = recording();
    await expect(cache.getOrComputeMany(keys, loadMany, { ttl: 60_000, lockTtl: 60_000 })).rejects.toMatchObject({ code: 'ERR_CLOSED' });
    await closed;
    expect(calls).toEqual([]);
    expect(await h.admin.exists(...keys.map((k) => keysOf(cache, k).lock))).toBe(0);
  });

  it('waits for a key whose lock another process holds instead of reloading it, and is woken by its write', async () => {
    const a = h.cache();
    const b = createCache({ redis: h.cacheClient(), prefix: prefixOf(a) });
    const held = await heldRebuild<string>(a, 'busy', 60_000);
    const { calls, loadMany } = recording();
    const loading = deferred<void>();
    const many = b.getOrComputeMany(['busy', 'free'], (missing) => (loading.resolve(), loadMany(missing)), { ttl: 60_000, pollInterval: 600_000, waitTimeout: 600_000, onWaitTimeout: 'throw' });
    await loading.promise; // its one loadMany call
    expect(calls).toEqual([['free']]);
    held.open('from a');
    expect(await many).toEqual(['from a', 'v:free']);
    expect(calls).toEqual([['free']]);
    await b.close();
  });

  it('a key mapped to an Error fails alone: the others are cached, its kept value is served (fail-safe), else the call rejects with it', async () => {
    const cache = h.cache();
    await cache.set('kept', 'old kept', { ttl: 20, failSafeTtl: 60_000 });
    await sleep(60);
    const opts = { ttl: 60_000, failSafeTtl: 60_000 };
    const boom = new Error('origin lost this one');
    const failing = async (missing: string[]) => new Map(missing.map((k) => [k, k === 'ok' ? 'fine' : boom]));
    expect(await cache.getOrComputeMany(['ok', 'kept'], failing, opts)).toEqual(['fine', 'old kept']);
    await expect(cache.getOrComputeMany(['ok2', 'bad'], async (m) => new Map(m.map((k) => [k, k === 'bad' ? boom : 'fine2'])), opts)).rejects.toBe(boom);
    expect(await cache.getMany(['ok', 'ok2', 'bad'])).toEqual(['fine', 'fine2', undefined]);
    expect(await h.admin.exists(keysOf(cache, 'bad').lock)).toBe(0);
  });

  it('a loadMany that throws fails only its own keys; cached keys are untouched; a non-Map result is an InvalidOptionError', async () => {
    const cache = h.cache();
    await cache.set('hit', 'h', 60_000);
    const err = new Error('db down');
    await expect(cache.getOrComputeMany(['hit', 'x', 'y'], () => Promise.reject(err), 60_000)).rejects.toBe(err);
    expect(await cache.get('hit')).toBe('h');
    expect(await h.admin.exists(keysOf(cache, 'x').lock, keysOf(cache, 'y').lock)).toBe(0);
    await expect(cache.getOrComputeMany(['z'], (() => [['z', 1]]) as never, 60_000)).rejects.toBeInstanceOf(InvalidOptionError);
    await expect(cache.getOrComputeMany(['z'], 'nope' as never, 60_000)).rejects.toMatchObject({ option: 'loadMany' });
  });

  it('serves a stale key at once and refreshes it in the background with loadMany([key])', async () => {
    const cache = h.cache();
    await cache.set('s', 'stale one', { ttl: 20, staleTtl: 60_000 });
    await sleep(60);
    const { calls, loadMany } = recording();
    const refreshed = new Promise<boolean>((resolve) => cache.on('computed', (e) => e.key === 's' && resolve(e.written)));
    expect(await cache.getOrComputeMany(['s', 'n'], loadMany, { ttl: 60_000, staleTtl: 60_000 })).toEqual(['stale one', 'v:n']);
    expect(await refreshed).toBe(true); // the background refresh of 's' wrote
    expect(calls.sort()).toEqual([['n'], ['s']]);
    expect(await cache.get('s')).toBe('v:s');
  });

  it.each([
    ['from Redis', 0],
    ['from L1', 100],
  ])('refresh ahead (%s): a key past its refresh point answers its value at once and is refreshed once with loadMany([key]); a key before it is not', async (_from, localMax) => {
    const client = h.cacheClient();
    const cache = createCache({ redis: client, prefix: `many${process.pid}ra${localMax}`, ...(localMax > 0 ? { local: { max: localMax } } : {}) });
    try {
      expect(await cache.ready()).toBe(true);
      // 'old': the refresh point 500 ms in, 9.5 s of fresh time after it (a miss of it would wait on the gate below).
      const options = { ttl: 10_000, refreshAhead: 0.05 };
      await cache.getOrComputeMany(['old'], async () => new Map([['old', 'first old']]), options);
      await untilPttlAtMost(h.admin, cache, 'old', 9_450);
      // 'young': written with a 10 min ttl, its point 30 s away, so the batches below surely find it before it.
      await cache.getOrComputeMany(['young'], async () => new Map([['young', 'first young']]), { ...options, ttl: 600_000 });
      const gate = deferred<void>();
      const { calls, loadMany } = recording();
      const held = async (missing: string[]) => (await gate.promise, loadMany(missing));
      const written = new Promise<unknown>((resolve) => cache.on('computed', (e) => resolve(e.key)));
      const outcomes = refreshOutcomes(cache);
      const before = cache.stats();
      // Two batches while the refresh's loader is held: the second finds it running (one per key per process).
      expect(await cache.getOrComputeMany(['old', 'young'], held, options)).toEqual(['first old', 'first young']);
      expect(outcomes[0]).toBe('started'); // before the batch answered
      expect(await cache.getOrComputeMany(['old', 'young'], held, options)).toEqual(['first old', 'first young']);
      gate.resolve();
      expect(await written).toBe('old');
      expect(calls).toEqual([['old']]);
      expect(outcomes).toEqual(['started', 'won']);
      // Every key of both batches was a hit, from L1 where there is one.
      const after = cache.stats();
      expect({ hits: after.hits - before.hits, localHits: after.localHits - before.localHits }).toEqual({ hits: 4, localHits: localMax > 0 ? 4 : 0 });
      expect(await cache.get('old')).toBe('v:old');
    } finally {
      await cache.close();
    }
  });

  it('works in a namespace: loadMany sees and returns the caller’s keys', async () => {
    const cache: Cache = h.cache();
    const { calls, loadMany } = recording();
    expect(await cache.namespace('p').getOrComputeMany(['1', '2'], loadMany, 60_000)).toEqual(['v:1', 'v:2']);
    expect(calls).toEqual([['1', '2']]);
    expect(await cache.namespace('p').get('1')).toBe('v:1');
    expect(await cache.get('1')).toBeUndefined();
  });
});
