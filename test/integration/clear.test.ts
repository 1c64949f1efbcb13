/**
 * The cache's own clear() (issue #11): every entry, plain and namespaced, in every process, by SCAN
 * and per-entry invalidation (src/clear.ts). Two caches on two clients with one prefix stand for two
 * processes; the Cluster case is in cluster.test.ts. The wait for every subscriber's acknowledgement is
 * the namespaces' (Generations.clear), tested with a slow subscriber in namespace.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { createCache, type Cache } from '../../src/index.js';
import { entryKeyPattern, entryOfKey } from '../../src/clear.js';
import { entryKeys } from '../../src/keys.js';
import { deferred, heldRebuild, keysOf, nextEvent, prefixOf, useRedis } from '../support/harness.js';

const h = useRedis();
const twin = (cache: Cache): Cache => createCache({ redis: h.cacheClient(), prefix: prefixOf(cache), local: { max: 5000 } });

/** Redis's count of calls of `command` so far (INFO commandstats). */
async function calls(command: string): Promise<number> {
  const info = await h.admin.info('commandstats');
  const m = new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(info);
  return m ? Number(m[1]) : 0;
}

describe('entry keys found by SCAN', () => {
  it('value and fence keys map back to their user key and both Redis keys; lock and backoff keys do not', () => {
    for (const [prefix, key] of [['sg', 'k'], ['a*b?[c]\\', 'x:v:y'], ['p', '\u0000ns\u0000k'], ['p', '{braces}']] as const) {
      const keys = entryKeys(prefix, key);
      const entry = { key, value: keys.value, fence: keys.fence };
      expect(entryOfKey(prefix, keys.value)).toEqual(entry);
      expect(entryOfKey(prefix, keys.fence)).toEqual(entry);
      expect(entryOfKey(prefix, keys.lock)).toBeUndefined();
      expect(entryOfKey(prefix, keys.backoff)).toBeUndefined();
    }
    expect(entryKeyPattern('a*b?[c]\\')).toBe('a\\*b\\?\\[c\\]\\\\:{????????}:[vf]:*');
  });
});

describe('cache.clear()', () => {
  it('removes every entry of the cache, plain and namespaced, walking the keys with SCAN (never KEYS); another prefix keeps its own', async () => {
    const cache = h.cache();
    const other = h.cache();
    const plain = Array.from({ length: 2500 }, (_, i) => `k${i}`);
    // 2,500 entries: SCAN (1,000 keys a step) must take several steps. Written 100 at a time: 2,500
    // set() at once queue ~5,000 scripts, and on a busy 2-core machine the last ones waited past the
    // 500 ms redisTimeout (which bounds them, as designed): a flood the property does not need.
    for (let i = 0; i < plain.length; i += 100) await Promise.all(plain.slice(i, i + 100).map((k) => cache.set(k, `v${k}`, 60_000)));
    await cache.namespace('users').set('u', 'user', 60_000);
    await other.set('k1', 'theirs', 60_000);
    const [scansBefore, keysBefore] = [await calls('scan'), await calls('keys')];
    await cache.clear();
    expect(await calls('scan')).toBeGreaterThan(scansBefore + 1);
    expect(await calls('keys')).toBe(keysBefore);
    expect(await cache.getMany(['k0', 'k1', 'k2499'])).toEqual([undefined, undefined, undefined]);
    expect(await cache.namespace('users').get('u')).toBeUndefined();
    const [, left] = await h.admin.scan('0', 'MATCH', `${prefixOf(cache)}:{????????}:v:*`, 'COUNT', 100_000);
    expect(left).toEqual([]);
    expect(await other.get('k1')).toBe('theirs');
  });

  it('clears through an ioredis client with keyPrefix (SCAN\'s MATCH gets the client\'s prefix, which the client adds to keys only)', async () => {
    const client = h.client({ keyPrefix: 'app:' });
    const cache = createCache({ redis: client, prefix: `kp${process.pid}` });
    await cache.set('k', 'old', 60_000);
    expect(await h.admin.exists(`app:${keysOf(cache, 'k').value}`)).toBe(1);
    await cache.clear();
    expect(await cache.get('k')).toBeUndefined();
    expect(await h.admin.exists(`app:${keysOf(cache, 'k').value}`)).toBe(0);
    await cache.close();
  });

  it('an ioredis client with keyPrefix reads what it wrote: the read script (a plain EVALSHA) gets the prefix as the write scripts do', async () => {
    const client = h.client({ keyPrefix: 'app:' });
    const cache = createCache({ redis: client, prefix: `kpr${process.pid}` });
    await cache.set('k', 'stored', 60_000);
    let loads = 0;
    expect(await cache.getOrCompute('k', () => (loads++, 'loaded'), 60_000)).toBe('stored');
    expect(loads).toBe(0);
    expect(await h.admin.exists(`app:${keysOf(cache, 'k').value}`)).toBe(1);
    await cache.close();
  });

  it('an ioredis client with enableAutoPipelining reads what it wrote: the read script (ioredis\'s own EVALSHA) keeps its command name in the auto-pipeline', async () => {
    const client = h.client({ enableAutoPipelining: true });
    const cache = createCache({ redis: client, prefix: `ap${process.pid}` });
    const degraded: unknown[] = [];
    cache.on('degraded', (e) => degraded.push(e.error));
    await cache.set('k', 'stored', 60_000);
    let loads = 0;
    // Concurrent calls on different keys, so the auto-pipeline carries several reads at once.
    const values = await Promise.all(['k', 'k', 'other'].map((k) => cache.getOrCompute(k, () => (loads++, `loaded-${k}`), 60_000)));
    expect(values).toEqual(['stored', 'stored', 'loaded-other']);
    expect(loads).toBe(1);
    expect(degraded).toEqual([]);
    await cache.close();
  });

  it('an ioredis-shaped client without evalsha/evalshaBuffer (a wrapper) still serves hits, through defineCommand', async () => {
    const real = h.client();
    const hidden = new Set<PropertyKey>(['evalsha', 'evalshaBuffer']);
    const wrapper = new Proxy(real, {
      get(target, prop) {
        if (hidden.has(prop)) return undefined;
        const v: unknown = Reflect.get(target, prop, target);
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    const cache = createCache({ redis: wrapper, prefix: `wr${process.pid}` });
    const degraded: unknown[] = [];
    cache.on('degraded', (e) => degraded.push(e.error));
    await cache.set('k', 'stored', 60_000);
    let loads = 0;
    expect(await cache.getOrCompute('k', () => (loads++, 'loaded'), 60_000)).toBe('stored');
    expect(loads).toBe(0);
    expect(degraded).toEqual([]);
    await cache.close();
  });

  it('once it resolves, no process returns an entry written before it, L1 included', async () => {
    const a = twin(h.cache());
    const b = twin(a);
    expect(await a.ready()).toBe(true);
    expect(await b.ready()).toBe(true);
    await a.set('k', 'old', 60_000);
    await a.namespace('users').set('u', 'old user', 60_000);
    expect(await b.get('k')).toBe('old'); // in b's L1 now
    expect(await b.namespace('users').get('u')).toBe('old user');
    await a.clear();
    // No waiting for any event: the clear resolved only after b acknowledged it.
    expect(await b.get('k')).toBeUndefined();
    expect(await b.namespace('users').get('u')).toBeUndefined();
    let runs = 0;
    expect(await b.getOrCompute('k', () => (runs++, 'new'), 60_000)).toBe('new');
    expect(runs).toBe(1);
    await a.close();
    await b.close();
  });

  it('a rebuild holding its lock across the clear answers its callers but its write is refused', async () => {
    const a = h.cache();
    const b = twin(a);
    expect(await b.ready()).toBe(true);
    await a.set('other', 'x', 60_000); // something for the walk to find besides
    const held = await heldRebuild<string>(a, 'slow', 60_000);
    const computed = nextEvent(a, 'computed');
    await b.clear();
    held.open('pre-clear');
    expect(await held.call).toBe('pre-clear');
    expect((await computed).written).toBe(false);
    expect(await a.get('slow')).toBeUndefined();
    expect(await b.get('slow')).toBeUndefined();
    expect(await h.admin.exists(keysOf(a, 'slow').lock)).toBe(0);
    await b.close();
  });

  it('abandons an early refresh running in a process that hears it', async () => {
    const a = h.cache();
    const b = twin(a);
    expect(await a.ready()).toBe(true);
    expect(await b.ready()).toBe(true);
    const options = { ttl: 20_000, refreshAhead: 0.05 };
    expect(await a.getOrCompute('k', async () => 'v1', options)).toBe('v1');
    for (;;) {
      if ((await h.admin.pttl(keysOf(a, 'k').value)) <= 18_950) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const started = deferred<AbortSignal>();
    const won = new Promise<void>((resolve) => a.on('refresh', (e) => e.outcome === 'won' && resolve()));
    expect(await a.getOrCompute('k', (ctx) => (started.resolve(ctx.signal), new Promise<string>(() => undefined)), options)).toBe('v1');
    await won;
    const signal = await started.promise;
    await b.clear();
    expect(signal.aborted).toBe(true);
    await b.close();
  });
});
