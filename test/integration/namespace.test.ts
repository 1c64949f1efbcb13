/**
 * Namespaces and clear() (issue #11, part 3) on a real Redis. Two caches on two clients with one prefix
 * stand for two processes.
 */
import { tracingChannel } from 'node:diagnostics_channel';
import { describe, expect, it } from 'vitest';
import { createCache, InvalidKeyError, InvalidOptionError, type Cache } from '../../src/index.js';
import { asAppUser } from '../support/redis-server.js';
import { dropConnection, familyClient, subscribeVia } from '../support/clients.js';
import { deferred, nextEvent, prefixOf, subscriptionDowns, useRedis } from '../support/harness.js';
import { startProxy } from '../support/proxy.js';

const h = useRedis();
const twin = (cache: Cache): Cache => createCache({ redis: h.cacheClient(), prefix: prefixOf(cache), local: { max: 1000 } });

describe('namespace', () => {
  it('is its own key space: the same key in the cache, a namespace and a nested one are three entries', async () => {
    const cache = h.cache();
    const users = cache.namespace('users');
    const admins = users.namespace('admins');
    await cache.set('k', 'root', 60_000);
    await users.set('k', 'users', 60_000);
    await admins.set('k', 'admins', 60_000);
    expect(await cache.get('k')).toBe('root');
    expect(await users.get('k')).toBe('users');
    expect(await admins.get('k')).toBe('admins');
    expect(await cache.namespace('users').getMany(['k', 'x'])).toEqual(['users', undefined]);
    expect(await users.getOrCompute('n', (ctx) => `loaded ${ctx.key}`, 60_000)).toBe('loaded n'); // ctx.key is the caller's key
    expect(await users.has('n')).toBe(true);
    await users.deleteMany(['k', 'n']);
    expect(await users.has('k')).toBe(false);
    expect(await cache.get('k')).toBe('root');
    expect(admins.name).toBe('users/admins');
  });

  it('refuses bad names, and plain keys that could collide with a namespace’s', async () => {
    const cache = h.cache();
    for (const bad of ['', 'a b', 'a/b', 'x{y}', 'a\0b', 5]) expect(() => cache.namespace(bad as string)).toThrow(InvalidOptionError);
    await expect(cache.get('\u00001\u0000users\u00000\u0000k')).rejects.toBeInstanceOf(InvalidKeyError);
    await expect(cache.namespace('users').get('')).rejects.toBeInstanceOf(InvalidKeyError);
  });
});

describe('clear()', () => {
  it('once it resolves, no process returns an entry written before it, L1 included; the cache and other namespaces keep theirs', async () => {
    const a = twin(h.cache());
    const b = twin(a);
    expect(await a.ready()).toBe(true);
    expect(await b.ready()).toBe(true);
    const keys = Array.from({ length: 50 }, (_, i) => `u${i}`);
    for (const k of keys) await a.namespace('users').set(k, `old ${k}`, 60_000);
    await a.namespace('users').namespace('admins').set('root', 'old admin', 60_000);
    await a.namespace('orders').set('o1', 'order', 60_000);
    await a.set('u0', 'plain', 60_000);
    // b reads everything: now in b's L1 too.
    expect(await b.namespace('users').getMany(keys)).toEqual(keys.map((k) => `old ${k}`));
    expect(await b.namespace('users').namespace('admins').get('root')).toBe('old admin');
    await a.namespace('users').clear();
    // No waiting for any event: the clear resolved only after b acknowledged it.
    expect(await b.namespace('users').getMany(keys)).toEqual(keys.map(() => undefined));
    expect(await a.namespace('users').get('u1')).toBeUndefined();
    expect(await b.namespace('users').namespace('admins').get('root')).toBeUndefined(); // nested namespaces clear with their parent
    let runs = 0;
    expect(await b.namespace('users').getOrCompute('u2', () => (runs++, 'new'), 60_000)).toBe('new');
    expect(runs).toBe(1);
    expect(await b.namespace('orders').get('o1')).toBe('order');
    expect(await b.get('u0')).toBe('plain');
    await a.close();
    await b.close();
  });

  it('waits for a slow subscriber to take the note: right after it resolves, that process has dropped its generation', async () => {
    const a = h.cache();
    const proxy = await startProxy({ host: '127.0.0.1', port: Number(new URL(h.url).port) });
    const client = h.cacheClient();
    const dropSubscriber = subscribeVia(client, asAppUser(proxy.url));
    const b = createCache({ redis: client, prefix: prefixOf(a), local: { max: 100 } });
    expect(await b.ready()).toBe(true);
    await a.namespace('users').set('k', 'old', 60_000);
    expect(await b.namespace('users').get('k')).toBe('old'); // in b's L1, generation cached
    proxy.delay('down', 300); // notes now reach b 300 ms late
    await a.namespace('users').clear();
    expect(await b.namespace('users').get('k')).toBeUndefined();
    await b.close();
    dropSubscriber();
    await proxy.close();
  });

  it('a rebuild that started before it answers its callers but never lands after it', async () => {
    const a = h.cache();
    const b = twin(a);
    await b.ready();
    const gate = deferred<string>();
    const started = deferred<void>();
    const call = a.namespace('users').getOrCompute('slow', () => (started.resolve(), gate.promise), 60_000);
    await started.promise;
    await a.namespace('users').clear();
    gate.resolve('pre-clear');
    await expect(call).resolves.toBe('pre-clear');
    expect(await a.namespace('users').get('slow')).toBeUndefined();
    expect(await b.namespace('users').get('slow')).toBeUndefined();
    await b.close();
  });

  it('a process whose subscription is down reads the generation from Redis on every call, so it never misses a clear', async () => {
    const a = h.cache();
    // b's subscriber connects through a proxy; its commands go directly.
    const proxy = await startProxy({ host: '127.0.0.1', port: Number(new URL(h.url).port) });
    const client = h.cacheClient();
    const dropSubscriber = subscribeVia(client, asAppUser(proxy.url));
    const b = createCache({ redis: client, prefix: prefixOf(a), local: { max: 1000 } });
    expect(await b.ready()).toBe(true);
    await a.namespace('users').set('k', 'old', 60_000);
    expect(await b.namespace('users').get('k')).toBe('old'); // b has cached the generation
    // b's subscriber goes away for good (the proxy closes: no reconnect gets through): the clear's note never reaches it.
    const downs = subscriptionDowns(b);
    await proxy.close();
    while (downs.count === 0) await new Promise((r) => setTimeout(r, 5));
    await a.namespace('users').clear();
    expect(await b.namespace('users').get('k')).toBeUndefined();
    await b.close();
    dropSubscriber();
  });

  it('a lost generation counter (evicted, or a restart without persistence) never brings back the entries of the generations it had passed', async () => {
    const cache = h.cache();
    const users = cache.namespace('users');
    await users.set('k', 'before the clear', 60_000);
    await users.clear();
    expect(await users.get('k')).toBeUndefined();
    // The counter goes, as allkeys-lru eviction would take it (the old entries are still there, by their TTL).
    await h.admin.del(`${prefixOf(cache)}:ns:{users}`);
    const other = twin(cache); // a process that never cached the generation
    try {
      expect(await other.namespace('users').get('k')).toBeUndefined();
      expect(await other.namespace('users').getOrCompute('k', () => 'rebuilt', 60_000)).toBe('rebuilt');
      // Lost again, then cleared: the clear moves past a fresh seed, not back to an old generation.
      await h.admin.del(`${prefixOf(cache)}:ns:{users}`);
      await other.namespace('users').clear();
      expect(await other.namespace('users').get('k')).toBeUndefined();
    } finally {
      await other.close();
    }
  });

  it('the cached generations are bounded: 10,050 namespace paths in one process keep at most 10,000', async () => {
    const cache = h.cache();
    expect(await cache.ready()).toBe(true); // generations are cached only while subscribed
    // 200 at a time: 1,000 first uses at once queued past the 500 ms redisTimeout on a busy 2-core
    // machine, and a generation Redis did not give in time is not cached (the bound is not the point).
    for (let i = 0; i < 10_050; i += 200) {
      await Promise.all(Array.from({ length: Math.min(200, 10_050 - i) }, (_, j) => cache.namespace(`tenant-${i + j}`).get('k')));
    }
    const known = ((cache as unknown as { rt: unknown }).rt as { generations: { known: { size: number } } }).generations.known;
    expect(known.size).toBe(10_000);
  });

  it('first uses of many other namespaces in another process do not empty this process\'s cached generations', async () => {
    const a = h.cache();
    const b = twin(a);
    try {
      expect(await a.ready()).toBe(true);
      expect(await b.ready()).toBe(true);
      await a.namespace('hot').get('k');
      const known = ((a as unknown as { rt: unknown }).rt as { generations: { known: { has(path: string): boolean } } }).generations.known;
      expect(known.has('hot')).toBe(true);
      // 4,200 first uses in b: each publishes its path's note (more than the 4,096 drops a process remembers).
      for (let i = 0; i < 4_200; i += 600) await Promise.all(Array.from({ length: 600 }, (_, j) => b.namespace(`tenant-${i + j}`).get('k')));
      // A clear acknowledged by a: every note published before it reached a first (one channel, in order).
      await b.namespace('last').clear();
      expect(known.has('hot')).toBe(true);
    } finally {
      await b.close();
    }
  });

  it('costs O(1) in Redis: the old entries are not touched (they expire by their TTL), one generation counter moves', async () => {
    const cache = h.cache();
    const ns = cache.namespace('big');
    for (let i = 0; i < 300; i++) await ns.set(`k${i}`, i, 60_000);
    const before = await h.admin.dbsize();
    const counter = `${prefixOf(cache)}:ns:{big}`;
    const generation = Number(await h.admin.get(counter)); // seeded from TIME by the first use
    await ns.clear();
    expect(Number(await h.admin.get(counter))).toBe(generation + 1);
    // Everything written before is still there, unreachable, until its TTL (plus the counter and the ack key).
    expect(await h.admin.dbsize()).toBeLessThanOrEqual(before + 2);
    expect(await ns.get('k0')).toBeUndefined();
  });
});

describe('namespaces while Redis cannot give the generation (issue #11 review: calls rejected during an outage)', () => {
  let unique = 0;
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  /**
   * A cache whose commands go through a proxy (their replies can be held past redisTimeout) while
   * its subscriber connects directly, so the subscription holds through the outage. redisTimeout is
   * the default 1 s: the calls made between outages must not time out on a loaded machine.
   */
  async function slowCommands() {
    const proxy = await startProxy({ host: '127.0.0.1', port: Number(new URL(h.url).port) });
    const { client } = familyClient(asAppUser(proxy.url));
    const dropSubscriber = subscribeVia(client, h.url);
    const cache = createCache({ redis: client, prefix: `ns-outage-${process.pid}-${++unique}`, redisTimeout: 1000, breakerThreshold: 1000 });
    expect(await cache.ready()).toBe(true);
    /**
     * Replies held (late past redisTimeout), then on time again: heal() lets the held chunks through,
     * in order, before any later reply, so none overtakes another.
     */
    const outage = () => proxy.hold('down', true);
    /** Resolves once the node answers again: the held replies end its suspicion (io.ts), so later calls reach Redis. */
    const heal = async () => {
      const healthy = new Promise<void>((resolve) => {
        if (cache.health().healthy) resolve();
        cache.on('health', (e) => e.state === 'recovered' && resolve());
      });
      proxy.hold('down', false);
      await healthy;
    };
    const done = async () => {
      await cache.close();
      dropConnection(client);
      dropSubscriber();
      await proxy.close();
    };
    return { cache, outage, heal, done };
  }

  /** A degraded load of users/'k' that has started and waits for `gate`. */
  async function degradedLoadRunning(users: ReturnType<Cache['namespace']>) {
    const gate = deferred<string>();
    const started = deferred<void>();
    const first = users.getOrCompute('k', () => (started.resolve(), gate.promise), 60_000);
    await started.promise;
    return { first, gate };
  }

  /** slowCommands plus a second process (direct, subscribed), both closed after `body`. */
  async function withTwin(body: (s: Awaited<ReturnType<typeof slowCommands>> & { other: Cache }) => Promise<void>): Promise<void> {
    const slow = await slowCommands();
    const other = twin(slow.cache);
    try {
      expect(await other.ready()).toBe(true);
      await body({ ...slow, other });
    } finally {
      await other.close();
      await slow.done();
    }
  }

  it('reads answer the degraded copy or miss, and loads run here (degraded, once per key within its ttl); writes reject with ERR_REDIS_UNAVAILABLE; nothing is stored under an unknown generation', async () => {
    const { cache, outage, heal, done } = await slowCommands();
    try {
      const users = cache.namespace('users');
      const degraded: string[] = [];
      cache.on('degraded', (e) => degraded.push(e.operation));
      let runs = 0;
      const loader = () => `v${++runs}`;
      outage();
      // Both contenders start before either is awaited: one loader run answers both.
      const both = [users.getOrCompute('k', loader, 60_000), users.getOrCompute('k', loader, 60_000)];
      expect(await Promise.all(both)).toEqual(['v1', 'v1']);
      expect(await users.getOrCompute('k', loader, 60_000)).toBe('v1'); // the degraded memo answers within the ttl
      expect(runs).toBe(1);
      expect(await users.get('k')).toBe('v1'); // get() answers the degraded copy too (never a loader)
      expect(await users.has('k')).toBe(true);
      expect(await users.getMany(['k', 'x'])).toEqual(['v1', undefined]);
      const batches: string[][] = [];
      const loadMany = async (missing: string[]) => {
        batches.push(missing);
        return new Map(missing.map((k) => [k, `m:${k}`]));
      };
      expect(await users.getOrComputeMany(['a', 'b', 'a'], loadMany, 60_000)).toEqual(['m:a', 'm:b', 'm:a']);
      expect(batches).toEqual([['a'], ['b']]); // as the cache's own batch in an outage: each key on its own degraded path
      await expect(users.set('k', 'x', 60_000)).rejects.toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE' });
      await expect(users.delete('k')).rejects.toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE' });
      expect(degraded.length).toBeGreaterThan(0);
      await heal();
      // Redis answers again: the call is served through the store, under the real generation.
      expect(await users.getOrCompute('k', () => 'stored', 60_000)).toBe('stored');
      expect(await users.get('k')).toBe('stored');
      const all = await h.admin.keys(`${prefixOf(cache)}:*`);
      expect(all.filter((k) => k.includes('\0-1\0'))).toEqual([]); // generation -1 (unknown) names no stored key
      const generation = await h.admin.get(`${prefixOf(cache)}:ns:{users}`);
      expect(all.filter((k) => k.endsWith(`\0users\0${String(generation)}\0k`))).toHaveLength(2); // the entry under the real generation: its value and its fence
    } finally {
      await done();
    }
  });

  it('forceFresh on the degraded path does not join a degraded load that began before it', async () => {
    const { cache, outage, heal, done } = await slowCommands();
    try {
      const users = cache.namespace('users');
      outage();
      const { first, gate } = await degradedLoadRunning(users);
      const forcedStarted = deferred<void>();
      const forced = users.getOrCompute('k', () => (forcedStarted.resolve(), 'forced'), { ttl: 60_000, forceFresh: true });
      // The earlier load ends once the forced call's own loader started (or, had it joined, after 5 s: then it gets 'earlier').
      await Promise.race([forcedStarted.promise, sleep(5000)]);
      gate.resolve('earlier');
      expect(await forced).toBe('forced');
      expect(await first).toBe('earlier');
      await heal();
    } finally {
      await done();
    }
  });

  it('a value computed degraded before a clear() is never served after it, even when the next call runs degraded too', async () => {
    await withTwin(async ({ cache, other, outage, heal }) => {
      const users = cache.namespace('users');
      outage();
      expect(await users.getOrCompute('k', () => 'before clear', 60_000)).toBe('before clear');
      await heal();
      await other.namespace('users').clear(); // resolves once this cache acknowledged the note
      outage();
      expect(await users.getOrCompute('k', () => 'after clear', 60_000)).toBe('after clear');
      await heal();
    });
  });

  it('a degraded load that began before a clear() is not joined by a call made after it', async () => {
    await withTwin(async ({ cache, other, outage, heal }) => {
      const users = cache.namespace('users');
      outage();
      const { first, gate } = await degradedLoadRunning(users);
      await other.namespace('users').clear(); // this cache's subscriber (direct) heard it before acknowledging
      const second = users.getOrCompute('k', () => 'after clear', 60_000);
      gate.resolve('before clear');
      expect(await second).toBe('after clear');
      expect(await first).toBe('before clear'); // its own caller still gets it
      expect(await users.getOrCompute('k', () => 'again', 60_000)).toBe('after clear'); // the memo holds the newer one
      await heal();
    });
  });

  it("a delete or set — this process's, even one that failed, or another process's — drops the degraded copy", async () => {
    await withTwin(async ({ cache, other, outage, heal }) => {
      const users = cache.namespace('users');
      outage();
      expect(await users.getOrCompute('k', () => 'v1', 60_000)).toBe('v1');
      await expect(users.delete('k')).rejects.toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE' }); // own, failed
      expect(await users.getOrCompute('k', () => 'v2', 60_000)).toBe('v2');
      await expect(users.set('k', 'x', 60_000)).rejects.toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE' });
      expect(await users.getOrCompute('k', () => 'v3', 60_000)).toBe('v3');
      await heal();
      const deleted = nextEvent(cache, 'remoteChange');
      await other.namespace('users').delete('k'); // another process's: its note names the real key
      await deleted;
      outage();
      expect(await users.getOrCompute('k', () => 'v4', 60_000)).toBe('v4');
      await heal();
    });
  });
});

describe('what events and traces show of a namespaced key', () => {
  it('the caller\'s key and the namespace, in separate fields, never the internal key', async () => {
    const cache = h.cache();
    const seen: Record<string, unknown>[] = [];
    for (const name of ['miss', 'computed', 'hit'] as const) cache.on(name, (e: { key: string; namespace?: string }) => seen.push({ event: name, ...e }));
    const traced: { key: string; namespace?: string }[] = [];
    const channel = tracingChannel<unknown, { key: string; namespace?: string }>('stampede-guard:getOrCompute');
    const handlers = { start: (ctx: { key: string; namespace?: string }) => void traced.push({ key: ctx.key, namespace: ctx.namespace }), end: () => undefined, asyncStart: () => undefined, asyncEnd: () => undefined, error: () => undefined };
    channel.subscribe(handlers);
    try {
      const admins = cache.namespace('users').namespace('admins');
      expect(await admins.getOrCompute('user:1', () => 'v', 60_000)).toBe('v');
      expect(await admins.getOrCompute('user:1', () => 'other', 60_000)).toBe('v');
      expect(await cache.getOrCompute('plain', () => 'p', 60_000)).toBe('p');
    } finally {
      channel.unsubscribe(handlers);
    }
    expect(seen.map(({ event, key, namespace }) => ({ event, key, namespace }))).toEqual([
      { event: 'miss', key: 'user:1', namespace: 'users/admins' },
      { event: 'computed', key: 'user:1', namespace: 'users/admins' },
      { event: 'hit', key: 'user:1', namespace: 'users/admins' },
      { event: 'miss', key: 'plain', namespace: undefined },
      { event: 'computed', key: 'plain', namespace: undefined },
    ]);
    expect(seen.filter((e) => e.key === 'plain').every((e) => !('namespace' in e))).toBe(true);
    expect(traced).toEqual([
      { key: 'user:1', namespace: 'users/admins' },
      { key: 'user:1', namespace: 'users/admins' },
      { key: 'plain', namespace: undefined },
    ]);
    expect(JSON.stringify([seen, traced])).not.toContain('\\u0000');
  });
});
