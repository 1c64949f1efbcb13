import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createCache, type Cache, type LoaderContext } from '../../src/index.js';
import { portFor } from '../../src/client/detect.js';
import { entryKeys } from '../../src/keys.js';
import { TEST_CLIENT } from '../support/clients.js';
import { countCommands, deferred, heldRebuild, missedCall, nextEvent, useRedis } from '../support/harness.js';

const h = useRedis();
const prefixOf = (cache: Cache) => ((cache as unknown as { rt: unknown }).rt as { options: { prefix: string } }).options.prefix;
const keysOf = (cache: Cache, key: string) => entryKeys(prefixOf(cache), key);

describe('the client family under test (SG_TEST_CLIENT)', () => {
  it('h.cache() runs on it: the port the cache picks is that family\'s adapter', () => {
    expect(portFor(h.cacheClient()).family).toBe(TEST_CLIENT === 'ioredis' ? 'ioredis' : 'node-redis');
  });
});

describe('reads', () => {
  it('a fresh hit costs exactly one Redis round trip, and an L1 hit none', async () => {
    const writer = h.cache();
    await writer.set('k', { a: 1 }, 60_000);
    const readerClient = h.cacheClient();
    const reader = createCache({ redis: readerClient, prefix: prefixOf(writer), local: { max: 10 } });
    await readerClient.ping();
    expect(await reader.ready()).toBe(true); // L1 is served and filled only while subscribed
    // A script's first run on a server or client may cost more (ioredis: EVALSHA, NOSCRIPT, EVAL below
    // sendCommand; node-redis: one EVAL with the script's text): warm it up, then count the steady state.
    expect(await reader.get('warm-up')).toBeUndefined();
    const sent = countCommands(readerClient);
    expect(await reader.getOrCompute('k', () => ({ a: 2 }), 60_000)).toEqual({ a: 1 });
    expect(sent.count).toBe(1);
    sent.reset();
    expect(await reader.getOrCompute('k', () => ({ a: 3 }), 60_000)).toEqual({ a: 1 });
    expect(sent.count).toBe(0);
    await reader.close();
  });

  it('L1 hands back the very object the loader returned; Redis hands another process a copy (README "What a value becomes")', async () => {
    const a = h.cache({ local: { max: 10 } });
    const b = createCache({ redis: h.cacheClient(), prefix: prefixOf(a), local: { max: 10 } });
    expect(await a.ready()).toBe(true);
    const made = { nested: { n: 1 }, list: [1, 2] };
    expect(await a.getOrCompute('same', () => made, 60_000)).toBe(made); // the loader's own answer
    expect(await a.getOrCompute('same', () => ({ other: true }), 60_000)).toBe(made); // an L1 hit: the same object
    const copy = await b.getOrCompute('same', () => ({ other: true }), 60_000);
    expect(copy).toEqual(made);
    expect(copy).not.toBe(made); // through Redis: a msgpack round trip
    await b.close();
  });

  it('values msgpackr carries round-trip through Redis: objects, arrays, Date, Map, Set, Buffer, bigint, null', async () => {
    const writer = h.cache();
    const reader = createCache({ redis: h.cacheClient(), prefix: prefixOf(writer) });
    const value = {
      when: new Date(Date.UTC(2026, 0, 1)),
      map: new Map<unknown, unknown>([['a', 1], [2, [3]]]),
      set: new Set(['x', 'y']),
      bytes: Buffer.from([1, 2, 3]),
      big: 2n ** 80n,
      none: null,
      list: [1, 'two', { three: 3 }],
    };
    await writer.getOrCompute('v', () => value, 60_000);
    expect(await reader.get('v')).toEqual(value);
    await reader.close();
  });

  it('get() never runs a loader and returns undefined on a miss', async () => {
    const cache = h.cache();
    expect(await cache.get('absent')).toBeUndefined();
  });
});

describe('stale window', () => {
  it('callers that find a stale value get it at once while exactly one refresh runs in the background', async () => {
    const cache = h.cache();
    await cache.getOrCompute('s', () => 'v1', { ttl: 50, staleTtl: 60_000 });
    await new Promise((r) => setTimeout(r, 120)); // let the fresh time pass
    const gate = deferred<string>();
    const started = deferred<void>();
    let runs = 0;
    let sawStale: unknown;
    const loader = (ctx: LoaderContext<string>) => {
      runs++;
      sawStale = ctx.staleValue;
      started.resolve();
      return gate.promise;
    };
    const answers = await Promise.all(Array.from({ length: 20 }, () => cache.getOrCompute('s', loader, { ttl: 60_000, staleTtl: 60_000 })));
    await started.promise;
    // The loader is still blocked on its gate, so every answer above was served without waiting for it.
    expect(answers).toEqual(Array(20).fill('v1'));
    const again = await cache.getOrCompute('s', loader, { ttl: 60_000, staleTtl: 60_000 });
    expect(again).toBe('v1');
    expect(runs).toBe(1);
    expect(sawStale).toBe('v1');
    const written = nextEvent(cache, 'computed');
    gate.resolve('v2');
    expect((await written).written).toBe(true);
    expect(await cache.get('s')).toBe('v2');
  });
});

describe('loader errors', () => {
  it('reach every caller sharing the flight, and the lock is freed at once', async () => {
    const cache = h.cache();
    const boom = new Error('origin down');
    let runs = 0;
    const results = await Promise.allSettled(
      Array.from({ length: 25 }, () => cache.getOrCompute('e', async () => { runs++; await new Promise((r) => setTimeout(r, 50)); throw boom; }, 60_000)),
    );
    expect(runs).toBe(1);
    expect(results.every((r) => r.status === 'rejected' && r.reason === boom)).toBe(true);
    expect(await h.admin.exists(keysOf(cache, 'e').lock)).toBe(0);
  });

  it('wake waiters in other processes at once: one of them takes the lock and computes (no poll, no waitTimeout)', async () => {
    const a = h.cache();
    // b can only progress by a notification: its poll and wait timeout are far beyond the test timeout.
    const b = createCache({ redis: h.cacheClient(), prefix: prefixOf(a), defaults: { pollInterval: 3_600_000, waitTimeout: 3_600_000 } });
    await Promise.all([a.ready(), b.ready()]);
    const held = await heldRebuild<never>(a, 'x');
    const waiting = await missedCall(b, 'x', () => 'from-b');
    await new Promise((r) => setTimeout(r, 50)); // b is now parked on its waiter
    held.fail(new Error('a failed'));
    await expect(held.call).rejects.toThrow('a failed');
    await expect(waiting.call).resolves.toBe('from-b');
    await b.close();
  });
});

describe('waiting', () => {
  it('a waiter in another process is woken by the winner\'s write (pub/sub), not by its poll', async () => {
    const a = h.cache();
    const b = createCache({ redis: h.cacheClient(), prefix: prefixOf(a), defaults: { pollInterval: 3_600_000, waitTimeout: 3_600_000 } });
    await Promise.all([a.ready(), b.ready()]);
    const held = await heldRebuild<string>(a, 'w');
    let bRuns = 0;
    const waiting = await missedCall(b, 'w', () => (bRuns++, 'from-b'));
    held.open('from-a');
    expect(await held.call).toBe('from-a');
    expect(await waiting.call).toBe('from-a');
    expect(bRuns).toBe(0);
    await b.close();
  });

  it('a loader returning undefined: callers get undefined and nothing is stored', async () => {
    const cache = h.cache();
    expect(await cache.getOrCompute('u', () => undefined, 60_000)).toBeUndefined();
    expect(await h.admin.exists(keysOf(cache, 'u').value)).toBe(0);
    expect(await h.admin.exists(keysOf(cache, 'u').lock)).toBe(0);
  });

  it("a caller's signal rejects only that caller with ERR_ABORTED", async () => {
    const cache = h.cache();
    const gate = deferred<string>();
    const ac = new AbortController();
    const aborted = cache.getOrCompute('ab', () => gate.promise, { ttl: 60_000, signal: ac.signal });
    const kept = cache.getOrCompute('ab', () => gate.promise, 60_000);
    ac.abort();
    await expect(aborted).rejects.toMatchObject({ code: 'ERR_ABORTED', key: 'ab' });
    gate.resolve('ok');
    expect(await kept).toBe('ok');
  });
});

describe('corrupt and oversized bytes', () => {
  it('undecodable bytes are a miss plus a decodeError event, and the rebuild overwrites them', async () => {
    const cache = h.cache();
    await h.admin.set(keysOf(cache, 'c').value, Buffer.from([0xc1, 0xff, 0x00]), 'PX', 60_000);
    const reported = nextEvent(cache, 'decodeError');
    expect(await cache.getOrCompute('c', () => 'rebuilt', 60_000)).toBe('rebuilt');
    expect((await reported).key).toBe('c');
    expect(await cache.get('c')).toBe('rebuilt');
  });

  it('bytes over maxValueBytes are never decoded: a miss plus decodeError naming the cap', async () => {
    const cache = h.cache({ maxValueBytes: 1024 });
    await h.admin.set(keysOf(cache, 'big').value, Buffer.alloc(4096, 0x90), 'PX', 60_000);
    const reported = nextEvent(cache, 'decodeError');
    expect(await cache.getOrCompute('big', () => 'small', 60_000)).toBe('small');
    expect((await reported).reason).toContain('maxValueBytes');
  });

  it('a key of the wrong Redis type is a miss, not a crash', async () => {
    const cache = h.cache();
    await h.admin.hset(keysOf(cache, 'h').value, 'f', 'v');
    expect(await cache.getOrCompute('h', () => 'ok', 60_000)).toBe('ok');
  });
});

describe('set, delete and fencing', () => {
  it('delete() removes the entry from the store and from other processes\' L1', async () => {
    const a = h.cache({ local: { max: 10 } });
    const b = createCache({ redis: h.cacheClient(), prefix: prefixOf(a), local: { max: 10 } });
    await Promise.all([a.ready(), b.ready()]);
    await a.set('d', 'v', 60_000);
    expect(await b.get('d')).toBe('v'); // now in b's L1
    const dropped = nextEvent(b, 'remoteChange');
    await a.delete('d');
    expect(await dropped).toEqual({ key: 'd', kind: 'deleted' });
    expect(await b.get('d')).toBeUndefined();
    await b.close();
  });

  it('a delete during an in-flight rebuild makes its write rejected: deleted data is not resurrected', async () => {
    const cache = h.cache();
    const held = await heldRebuild<string>(cache, 'r');
    await cache.delete('r');
    const rejected = nextEvent(cache, 'writeRejected');
    held.open('old');
    expect(await held.call).toBe('old');
    await rejected;
    expect(await h.admin.exists(keysOf(cache, 'r').value)).toBe(0);
  });

  it('a set() during an in-flight rebuild wins over the rebuild\'s older write', async () => {
    const cache = h.cache();
    const held = await heldRebuild<string>(cache, 's2');
    await cache.set('s2', 'newer', 60_000);
    held.open('older');
    await held.call;
    expect(await cache.get('s2')).toBe('newer');
  });

  it('fencing tokens strictly increase across grants, sets and deletes of a key', async () => {
    const cache = h.cache();
    const fences: number[] = [];
    const grab = (ctx: LoaderContext) => (fences.push(ctx.fencingToken as number), 'v');
    await cache.getOrCompute('f', grab, 60_000);
    await cache.delete('f');
    await cache.getOrCompute('f', grab, 60_000);
    await cache.set('f', 'x', 60_000);
    await cache.delete('f');
    await cache.getOrCompute('f', grab, { ttl: 60_000, lock: 'local' });
    expect(fences).toHaveLength(3);
    expect(fences[1] as number).toBeGreaterThan(fences[0] as number);
    expect(fences[2] as number).toBeGreaterThan(fences[1] as number);
  });
});

describe('lock lifetime', () => {
  it('the watchdog keeps the lock while a loader runs past lockTtl: no lockLost, no second loader', async () => {
    const a = h.cache();
    const b = createCache({ redis: h.cacheClient(), prefix: prefixOf(a), defaults: { pollInterval: 50 } });
    let lost = 0;
    a.on('lockLost', () => lost++);
    let runs = 0;
    // The loader runs 2.5 × lockTtl: unextended, the lock would lapse mid-run and b would take it. A
    // lockTtl of 1 s (an extension every ~333 ms) lets a loaded machine stall ~600 ms without a lapse.
    const slow = async () => {
      runs++;
      await new Promise((r) => setTimeout(r, 2500));
      return 'slow';
    };
    const [x, y] = await Promise.all([
      a.getOrCompute('wd', slow, { ttl: 60_000, lockTtl: 1000 }),
      new Promise((r) => setTimeout(r, 100)).then(() => b.getOrCompute('wd', slow, { ttl: 60_000, lockTtl: 1000, waitTimeout: 30_000 })),
    ]);
    expect([x, y]).toEqual(['slow', 'slow']);
    expect(runs).toBe(1);
    expect(lost).toBe(0);
    await b.close();
  });

  it('when the lock is taken over, ctx.signal aborts with ERR_LOCK_LOST', async () => {
    const cache = h.cache();
    const started = deferred<void>();
    const call = cache.getOrCompute(
      'lost',
      (ctx) =>
        new Promise((_, reject) => {
          ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason as Error));
          started.resolve();
        }),
      { ttl: 60_000, lockTtl: 300 },
    );
    await started.promise;
    await h.admin.set(keysOf(cache, 'lost').lock, 'someone-else', 'PX', 60_000);
    await expect(call).rejects.toMatchObject({ code: 'ERR_LOCK_LOST', key: 'lost' });
    expect(await h.admin.get(keysOf(cache, 'lost').lock)).toBe('someone-else'); // our release left it alone
  });
});

describe('bad input fails with a typed error before any Redis traffic', () => {
  // A client that has never connected: any command would change its status from 'wait'.
  const offline = new Redis({ port: 1, lazyConnect: true, enableOfflineQueue: false });
  const cache = createCache({ redis: offline });
  const loader = () => 'v';
  const cases: [string, () => Promise<unknown>, string][] = [
    ['empty key', () => cache.getOrCompute('', loader, 1000), 'ERR_INVALID_KEY'],
    ['non-string key', () => cache.getOrCompute(42 as never, loader, 1000), 'ERR_INVALID_KEY'],
    ['key over maxKeyLength', () => cache.getOrCompute('k'.repeat(1025), loader, 1000), 'ERR_INVALID_KEY'],
    ['lone surrogate key', () => cache.getOrCompute('\uD800', loader, 1000), 'ERR_INVALID_KEY'],
    ['ttl 0', () => cache.getOrCompute('k', loader, 0), 'ERR_INVALID_OPTION'],
    ['ttl negative', () => cache.getOrCompute('k', loader, -1), 'ERR_INVALID_OPTION'],
    ['ttl fractional', () => cache.getOrCompute('k', loader, 1.5), 'ERR_INVALID_OPTION'],
    ['ttl Infinity', () => cache.getOrCompute('k', loader, Infinity), 'ERR_INVALID_OPTION'],
    ['ttl missing', () => cache.getOrCompute('k', loader), 'ERR_INVALID_OPTION'],
    ['negative staleTtl', () => cache.getOrCompute('k', loader, { ttl: 1000, staleTtl: -1 }), 'ERR_INVALID_OPTION'],
    ['loader not a function', () => cache.getOrCompute('k', 'nope' as never, 1000), 'ERR_INVALID_OPTION'],
    ['unknown lock mode', () => cache.getOrCompute('k', loader, { ttl: 1000, lock: 'mutex' as never }), 'ERR_INVALID_OPTION'],
    ['unknown option', () => cache.getOrCompute('k', loader, { ttl: 1000, ttlMs: 5 } as never), 'ERR_INVALID_OPTION'],
    ['set undefined', () => cache.set('k', undefined, 1000), 'ERR_INVALID_OPTION'],
    ['delete empty key', () => cache.delete(''), 'ERR_INVALID_KEY'],
    ['get non-string', () => cache.get({} as never), 'ERR_INVALID_KEY'],
  ];
  it.each(cases)('%s', async (_name, run, code) => {
    await expect(run()).rejects.toMatchObject({ code });
    expect(offline.status).toBe('wait');
  });
});

describe('close()', () => {
  it('leaves no subscription, keeps the caller\'s client usable, and later calls reject with ERR_CLOSED', async () => {
    const redis = h.cacheClient();
    const listeners = redis.listenerCount('ready');
    const cache = createCache({ redis, prefix: 'closing' });
    await cache.ready();
    await cache.set('k', 1, 1000);
    await cache.close();
    await cache.close(); // idempotent
    await new Promise((r) => setTimeout(r, 50));
    const [, subscribers] = (await h.admin.pubsub('NUMSUB', 'closing:events')) as [string, number];
    expect(subscribers).toBe(0);
    expect(await redis.ping()).toBe('PONG');
    expect(redis.listenerCount('ready')).toBe(listeners); // its reconnect listener is gone
    await expect(cache.getOrCompute('k', () => 2, 1000)).rejects.toMatchObject({ code: 'ERR_CLOSED' });
  });
});
