import { Redis } from 'ioredis';
import { describe, expect, it, vi } from 'vitest';
import { createCache, type Cache, type CacheEvents } from '../../src/index.js';
import { entryKeys } from '../../src/keys.js';
import { deferred, nextEvent, useRedis } from '../support/harness.js';

const h = useRedis();
const prefixOf = (cache: Cache) => ((cache as unknown as { rt: unknown }).rt as { options: { prefix: string } }).options.prefix;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Writes `value` for `key`, then lets its fresh time (50 ms) pass; the value is kept for fail-safe. */
async function expiredButKept(cache: Cache, key: string, value: unknown) {
  await cache.getOrCompute(key, () => value, { ttl: 50, failSafeTtl: 60_000 });
  await sleep(100);
}

function staleReasons(cache: Cache): CacheEvents['stale'][0]['reason'][] {
  const reasons: CacheEvents['stale'][0]['reason'][] = [];
  cache.on('stale', (e) => reasons.push(e.reason));
  return reasons;
}

describe('fail-safe', () => {
  it('a failing loader with a kept value: the caller gets the old value, flagged by a stale event (reason loaderError)', async () => {
    const cache = h.cache();
    await expiredButKept(cache, 'fs', 'old');
    const reasons = staleReasons(cache);
    const got = await cache.getOrCompute('fs', () => Promise.reject(new Error('origin down')), { ttl: 50, failSafeTtl: 60_000 });
    expect(got).toBe('old');
    expect(reasons).toEqual(['loaderError']);
  });

  it('without a kept value the loader error reaches the caller', async () => {
    const cache = h.cache();
    await expect(cache.getOrCompute('nofs', () => Promise.reject(new Error('origin down')), { ttl: 50 })).rejects.toThrow('origin down');
  });

  it('a failure sets a fleet-wide backoff: another process neither calls the loader nor waits; it gets ERR_BACKOFF, or the kept value', async () => {
    const a = h.cache();
    const b = createCache({ redis: h.client(), prefix: prefixOf(a) });
    const opts = { ttl: 60_000, failBackoff: 60_000 };
    await expect(a.getOrCompute('bo', () => Promise.reject(new Error('boom')), opts)).rejects.toThrow('boom');
    let bRuns = 0;
    await expect(b.getOrCompute('bo', () => (bRuns++, 'x'), opts)).rejects.toMatchObject({ code: 'ERR_BACKOFF', key: 'bo' });
    expect(bRuns).toBe(0);
    // With a kept value, the backoff serves it instead.
    await b.set('bo2', 'kept', { ttl: 50, failSafeTtl: 60_000 });
    await sleep(100);
    await expect(a.getOrCompute('bo2', () => Promise.reject(new Error('boom')), { ...opts, failSafeTtl: 60_000 })).resolves.toBe('kept');
    const reasons = staleReasons(b);
    await expect(b.getOrCompute('bo2', () => (bRuns++, 'x'), { ...opts, failSafeTtl: 60_000 })).resolves.toBe('kept');
    expect(bRuns).toBe(0);
    expect(reasons).toEqual(['backoff']);
    await b.close();
  });

  it('the backoff lapses after failBackoff, and the next caller calls the loader again', async () => {
    const cache = h.cache();
    await expect(cache.getOrCompute('lapse', () => Promise.reject(new Error('boom')), { ttl: 60_000, failBackoff: 100 })).rejects.toThrow('boom');
    await sleep(150);
    expect(await cache.getOrCompute('lapse', () => 'recovered', { ttl: 60_000, failBackoff: 100 })).toBe('recovered');
  });
});

describe('loader timeouts', () => {
  it('soft timeout with a kept value: the caller gets it at once, and the slow loader still fills the cache', async () => {
    const cache = h.cache();
    await expiredButKept(cache, 'soft', 'old');
    const gate = deferred<string>();
    const reasons = staleReasons(cache);
    const got = await cache.getOrCompute('soft', () => gate.promise, { ttl: 60_000, failSafeTtl: 60_000, softTimeout: 30 });
    expect(got).toBe('old');
    expect(reasons).toEqual(['softTimeout']);
    const computed = nextEvent(cache, 'computed');
    gate.resolve('new');
    expect((await computed).written).toBe(true);
    expect(await cache.get('soft')).toBe('new');
  });

  it('soft timeout with a kept value and a loader that fails fast: the soft-timeout timer is cleared when the call settles, not left running', async () => {
    const cache = h.cache();
    await expiredButKept(cache, 'soft-fail', 'old');
    const SOFT = 54_321; // a delay nothing else in this process uses: it names the soft-timeout timer
    const set = vi.spyOn(globalThis, 'setTimeout');
    const cleared = vi.spyOn(globalThis, 'clearTimeout');
    try {
      const got = await cache.getOrCompute('soft-fail', () => Promise.reject(new Error('origin down')), { ttl: 60_000, failSafeTtl: 60_000, softTimeout: SOFT });
      expect(got).toBe('old');
      const timers = set.mock.calls.flatMap((args, i) => (args[1] === SOFT ? [set.mock.results[i]?.value as unknown] : []));
      expect(timers).toHaveLength(1); // the soft timeout was armed…
      expect(cleared.mock.calls.map((args) => args[0] as unknown)).toContain(timers[0]); // …and cleared once the rebuild failed
    } finally {
      set.mockRestore();
      cleared.mockRestore();
    }
  });

  it('hard timeout: callers get ERR_LOADER_TIMEOUT, the loader signal aborts with it, the lock is released', async () => {
    const cache = h.cache();
    let reason: unknown;
    const call = cache.getOrCompute(
      'hard',
      (ctx) =>
        new Promise(() => {
          ctx.signal.addEventListener('abort', () => {
            reason = ctx.signal.reason;
          });
        }),
      { ttl: 60_000, hardTimeout: 50 },
    );
    await expect(call).rejects.toMatchObject({ code: 'ERR_LOADER_TIMEOUT', key: 'hard' });
    expect(reason).toMatchObject({ code: 'ERR_LOADER_TIMEOUT' });
    expect(await h.admin.exists(entryKeys(prefixOf(cache), 'hard').lock)).toBe(0);
  });
});

describe('bounded waiting', () => {
  it('past maxWaitersPerKey, callers of one key get a fast ERR_TOO_MANY_WAITERS; the rest get the value', async () => {
    const cache = h.cache({ maxWaitersPerKey: 10 });
    const gate = deferred<string>();
    const calls = Array.from({ length: 15 }, () => cache.getOrCompute('flood', () => gate.promise, 60_000));
    gate.resolve('v');
    const results = await Promise.allSettled(calls);
    expect(results.filter((r) => r.status === 'fulfilled' && r.value === 'v')).toHaveLength(10);
    expect(results.filter((r) => r.status === 'rejected' && (r.reason as { code?: string }).code === 'ERR_TOO_MANY_WAITERS')).toHaveLength(5);
  });
});

describe('hostile server conditions', () => {
  it('SCRIPT FLUSH during traffic: every call still answers with the right value', async () => {
    const cache = h.cache();
    const flusher = h.adminClient();
    let flushing = true;
    const flushes = (async () => {
      let n = 0;
      while (flushing) {
        await flusher.script('FLUSH');
        n++;
        await sleep(2);
      }
      return n;
    })();
    const calls = Array.from({ length: 300 }, (_, i) => cache.getOrCompute(`sf${i % 30}`, () => `v${i % 30}`, 60_000).then((v) => [i, v] as const));
    const results = await Promise.all(calls);
    flushing = false;
    expect(await flushes).toBeGreaterThan(0);
    for (const [i, v] of results) expect(v).toBe(`v${i % 30}`);
  });

  it('after SCRIPT FLUSH a warm key is still a hit from Redis: the read script is loaded again, no loader runs, nothing is degraded', async () => {
    const cache = h.cache();
    const degraded: string[] = [];
    cache.on('degraded', (e) => degraded.push(e.operation));
    await cache.set('flushed', 'warm', 60_000);
    expect(await cache.getOrCompute('flushed', () => 'loaded', 60_000)).toBe('warm'); // the script is known to the server
    await h.adminClient().script('FLUSH');
    let loads = 0;
    const after = await Promise.all(Array.from({ length: 5 }, () => cache.getOrCompute('flushed', () => (loads++, 'loaded'), 60_000)));
    expect(after).toEqual(['warm', 'warm', 'warm', 'warm', 'warm']);
    expect(loads).toBe(0);
    expect(degraded).toEqual([]);
    expect(cache.stats().hits).toBeGreaterThanOrEqual(2);
  });

  it('OOM error replies (maxmemory reached): the caller still gets the loader value, reported as degraded', async () => {
    const admin = h.adminClient();
    const cache = h.cache();
    const degraded: string[] = [];
    cache.on('degraded', (e) => degraded.push(e.operation));
    await admin.config('SET', 'maxmemory', '1');
    await admin.config('SET', 'maxmemory-policy', 'noeviction');
    try {
      expect(await cache.getOrCompute('oom', () => 'v', 60_000)).toBe('v');
      expect(degraded.length).toBeGreaterThan(0);
    } finally {
      await admin.config('SET', 'maxmemory', '0');
    }
  });

  it('an acquire that timed out but ran later on the server leaves no orphan lock (released by its token)', async () => {
    const redis = h.client();
    const cache = createCache({ redis, prefix: `orph${process.pid}`, redisTimeout: 100 });
    await cache.get('warm');
    const keys = entryKeys(`orph${process.pid}`, 'o');
    // Block the server for 400 ms between the read and the acquire (the 'miss' event fires in between,
    // synchronously): the acquire times out client-side, then runs on the server when it wakes.
    const blocker = h.adminClient();
    await blocker.ping();
    let blocked: Promise<unknown> = Promise.resolve();
    cache.once('miss', () => {
      blocked = blocker.call('DEBUG', 'SLEEP', '0.4');
    });
    let loaderRan = false;
    expect(await cache.getOrCompute('o', () => ((loaderRan = true), 'v'), { ttl: 60_000, lockTtl: 60_000 })).toBe('v'); // degraded
    await blocked;
    expect(loaderRan).toBe(true);
    // The late reply arrives and the release by token runs, on the cache's connection: h.admin reads on
    // another, so wait for it (lockTtl 60 s: an orphan lock would still be there).
    await vi.waitFor(async () => expect(await h.admin.exists(keys.lock)).toBe(0), { timeout: 5000 });
    await cache.close();
  });
});

describe('wrong credentials', () => {
  it('fail fast into the degraded path, and the password never appears in any error or event', async () => {
    const secret = 'hunter2-very-secret';
    await h.admin.acl('SETUSER', 'credsuser', 'on', '>the-right-one', '~*', '&*', '+@all');
    const { hostname, port } = new URL(h.url); // host and port only: no credentials from the url
    const redis = new Redis({ host: hostname, port: Number(port), username: 'credsuser', password: secret, maxRetriesPerRequest: 1 });
    const logged: string[] = [];
    redis.on('error', (e: Error) => logged.push(`${e.message} ${e.stack ?? ''}`));
    const cache = createCache({ redis, prefix: 'creds', redisTimeout: 300 });
    cache.on('degraded', (e) => logged.push(JSON.stringify({ ...e, error: String(e.error), cause: String((e.error as { cause?: unknown }).cause) })));
    expect(await cache.getOrCompute('k', () => 'v', 1000)).toBe('v');
    await expect(cache.set('k', 'v', 1000)).rejects.toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE' });
    await cache.close();
    redis.disconnect();
    expect(logged.length).toBeGreaterThan(0);
    expect(logged.join('\n')).not.toContain(secret);
  });
});
