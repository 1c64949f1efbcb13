/**
 * The plain read (GETRANGE judged by freshUntil) at its edges, on the client family under test: an ACL
 * without +getrange, a Redis far away, client options, every entry point near the fresh → stale
 * boundary, values that are not entries, reconnections, every write path's stamp, mixed batches.
 */
import { describe, expect, it } from 'vitest';
import { createCache } from '../../src/index.js';
import { familyClient } from '../support/clients.js';
import { commandCalls, useRedis } from '../support/harness.js';

const h = useRedis();
let n = 0;

async function cacheWithoutGetrange() {
  await h.admin.call('ACL', 'SETUSER', 'nogetrange', 'on', '>pw', '~*', '&*', '+@all', '-getrange');
  const u = new URL(h.url.replace(/\/\/[^@]*@/, '//'));
  u.username = 'nogetrange';
  u.password = 'pw';
  const { client, dispose } = familyClient(u.toString());
  const cache = createCache({ redis: client, prefix: `np${process.pid}x${++n}` });
  const degraded: string[] = [];
  cache.on('degraded', (e) => degraded.push(`${e.operation}: ${String((e.error as Error).message)}`));
  return { cache, degraded, dispose };
}

describe('no +getrange in the ACL: reads fall back to the script and nothing fails', () => {
  it('single reads (getOrCompute) then batches (get, getMany, has, getOrComputeMany)', async () => {
    const { cache, degraded, dispose } = await cacheWithoutGetrange();
    try {
      await cache.set('k', 'v', 60_000);
      expect(await cache.getOrCompute('k', () => 'loaded', 60_000)).toBe('v'); // script: samples the clock
      expect(await cache.getOrCompute('k', () => 'loaded', 60_000)).toBe('v'); // GETRANGE refused: the script
      expect(await cache.get('k')).toBe('v');
      expect(await cache.getMany(['k', 'absent'])).toEqual(['v', undefined]);
      expect(await cache.has('k')).toBe(true);
      expect(await cache.getOrComputeMany(['k'], async (ks) => new Map(ks.map((k) => [k, 'loaded'])), 60_000)).toEqual(['v']);
      expect(degraded).toEqual([]);
      // GETRANGE was tried (and refused) at least once.
      expect((await commandCalls(h.admin)).rejected('getrange')).toBeGreaterThan(0);
    } finally {
      await cache.close();
      dispose();
    }
  });

  it('a batch first (getMany refused in the pipeline)', async () => {
    const { cache, degraded, dispose } = await cacheWithoutGetrange();
    try {
      await cache.set('a', 'A', 60_000);
      await cache.set('b', 'B', 60_000);
      expect(await cache.get('a')).toBe('A'); // script: samples
      expect(await cache.getMany(['a', 'b', 'c'])).toEqual(['A', 'B', undefined]);
      expect(await cache.getMany(['a', 'b'])).toEqual(['A', 'B']);
      expect(await cache.getOrCompute('a', () => 'loaded', 60_000)).toBe('A');
      expect(degraded).toEqual([]);
    } finally {
      await cache.close();
      dispose();
    }
  });
});

import { createServer, connect, type Server, type Socket } from 'node:net';

/** A TCP proxy to the test's server that delays every chunk by `ms` each way (a remote Redis: RTT ≈ 2 × ms). */
async function delayingProxy(target: URL, ms: number): Promise<{ url: string; close(): void }> {
  const sockets: Socket[] = [];
  const server: Server = createServer((inbound) => {
    const outbound = connect(Number(target.port), target.hostname);
    sockets.push(inbound, outbound);
    inbound.on('data', (d) => void setTimeout(() => outbound.write(d), ms));
    outbound.on('data', (d) => void setTimeout(() => inbound.write(d), ms));
    inbound.on('error', () => outbound.destroy());
    outbound.on('error', () => inbound.destroy());
    inbound.on('close', () => outbound.destroy());
    outbound.on('close', () => inbound.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const u = new URL(target.toString());
  u.port = String((server.address() as { port: number }).port);
  u.hostname = '127.0.0.1';
  return { url: u.toString(), close: () => { for (const s of sockets) s.destroy(); server.close(); } };
}

describe('a Redis 60 ms away (cross-region, or replies delayed by a busy event loop)', () => {
  it('concurrent fresh hits stay one round trip (the docs: the script\'s second round trip is "rare")', async () => {
    const proxy = await delayingProxy(new URL(h.url), 30);
    const { client, dispose } = familyClient(proxy.url);
    const cache = createCache({ redis: client, prefix: `lat${process.pid}` });
    try {
      const keys = Array.from({ length: 20 }, (_, i) => `k${i}`);
      for (const k of keys) await cache.set(k, k, 60_000);
      await cache.get('k0'); // samples the node's clock
      await h.admin.config('RESETSTAT');
      for (let round = 0; round < 5; round++) await Promise.all(keys.map((k) => cache.getOrCompute(k, () => 'loaded', 60_000)));
      const { calls, scripts } = await commandCalls(h.admin);
      const stats = { getrange: calls('getrange'), scripts };
      // 100 hits: a GETRANGE each, a handful of scripts (samples re-taken), never a second read per hit.
      expect(stats.getrange, JSON.stringify(stats)).toBe(100);
      expect(stats.scripts, JSON.stringify(stats)).toBeLessThanOrEqual(10);
    } finally {
      await cache.close();
      dispose();
      proxy.close();
    }
  }, 30_000);

  it('a node answering in 400 ms (under redisTimeout 1000): a hit is one operation, not two (redisTimeout bounds "any Redis operation")', async () => {
    const proxy = await delayingProxy(new URL(h.url), 200);
    const { client, dispose } = familyClient(proxy.url);
    const cache = createCache({ redis: client, prefix: `slow${process.pid}`, redisTimeout: 1000 });
    const writer = h.cache({ prefix: `slow${process.pid}` });
    const degraded: string[] = [];
    cache.on('degraded', (e) => degraded.push(e.operation));
    try {
      await writer.set('a', 'A', 60_000);
      await writer.set('b', 'B', 60_000);
      await client.ping(); // connected
      await cache.get('a'); // samples the node's clock
      await cache.get('a');
      await h.admin.config('RESETSTAT');
      expect(await Promise.all([cache.getOrCompute('a', () => 'loaded', 60_000), cache.getOrCompute('b', () => 'loaded', 60_000)])).toEqual(['A', 'B']);
      expect(degraded).toEqual([]);
      const { calls, scripts } = await commandCalls(h.admin);
      expect({ getrange: calls('getrange'), scripts }).toEqual({ getrange: 2, scripts: 0 });
    } finally {
      await cache.close();
      dispose();
      proxy.close();
    }
  }, 30_000);
});

import { Redis as IoRedis } from 'ioredis';
import { createClient } from 'redis';
import { createClient as createClient5 } from 'redis5';
import type { Cache } from '../../src/index.js';

async function exercise(cache: Cache, hashKey: (k: string) => Promise<void>) {
  await cache.set('a', { v: 'A' }, 60_000);
  await cache.set('b', 'B', 60_000);
  await hashKey('h');
  expect(await cache.get('a')).toEqual({ v: 'A' }); // samples
  await h.admin.config('RESETSTAT');
  const reasons: string[] = [];
  cache.on('decodeError', (e) => reasons.push(e.reason));
  const degraded: string[] = [];
  cache.on('degraded', (e) => degraded.push(e.operation));
  expect(await Promise.all([cache.getOrCompute('a', () => 'x', 60_000), cache.getOrCompute('b', () => 'x', 60_000), cache.get('h')])).toEqual([{ v: 'A' }, 'B', undefined]);
  expect(await cache.getMany(['a', 'b', 'h', 'none'])).toEqual([{ v: 'A' }, 'B', undefined, undefined]);
  expect(await cache.has('b')).toBe(true);
  expect(degraded).toEqual([]);
  expect(reasons).toEqual(['not a string value', 'not a string value']);
  expect((await commandCalls(h.admin)).calls('getrange')).toBeGreaterThanOrEqual(5);
}

describe('client variants', () => {
  it('ioredis with keyPrefix and enableAutoPipelining', async () => {
    const c = new IoRedis(h.url, { keyPrefix: 'kp:', enableAutoPipelining: true, maxRetriesPerRequest: 1 });
    c.on('error', () => undefined);
    const cache = createCache({ redis: c, prefix: `kp${process.pid}` });
    try {
      await exercise(cache, async (k) => void (await h.admin.hset(`kp:${keysOfPrefix(`kp${process.pid}`, k)}`, 'f', '1')));
    } finally {
      await cache.close();
      c.disconnect();
    }
  });
  it.each([3, 2] as const)('node-redis 6 and 5, RESP%s', async (resp) => {
    for (const make of [createClient, createClient5]) {
      const c = (make as typeof createClient)({ url: h.url, RESP: resp });
      c.on('error', () => undefined);
      await c.connect();
      const prefix = `nr${resp}x${++n}`;
      const cache = createCache({ redis: c, prefix });
      try {
        await exercise(cache, async (k) => void (await h.admin.hset(keysOfPrefix(prefix, k), 'f', '1')));
      } finally {
        await cache.close();
        c.destroy();
      }
    }
  });
});

import { entryKeys } from '../../src/keys.js';
function keysOfPrefix(prefix: string, key: string): string {
  return entryKeys(prefix, key).value;
}

import { decodeEntry } from '../../src/codec.js';
import { pack } from 'msgpackr';

describe('never fresh past freshUntil (server clock), through L1 and every read entry point', () => {
  it.each(['get', 'getMany', 'has', 'getOrCompute', 'getOrComputeMany'] as const)('%s', async (entry) => {
    const prefix = `fu${process.pid}x${++n}`;
    const writer = h.cache({ prefix });
    const reader = h.cache({ prefix, local: { max: 100 } });
    await writer.set('warm', 'w', 60_000);
    await reader.get('warm'); // samples
    const violations: string[] = [];
    for (let round = 0; round < 3; round++) {
      await writer.set('k', `v${round}`, { ttl: 150, staleTtl: 60_000 });
      const until = decodeEntry((await h.admin.getBuffer(entryKeys(prefix, 'k').value)) as Buffer).freshUntil as number;
      for (;;) {
        const [s, us] = await h.admin.time();
        const before = Number(s) * 1000 + Number(us) / 1000;
        if (before > until + 100) break;
        let fresh: boolean;
        switch (entry) {
          case 'get': fresh = (await reader.get('k')) !== undefined; break;
          case 'getMany': fresh = (await reader.getMany(['k']))[0] !== undefined; break;
          case 'has': fresh = await reader.has('k'); break;
          case 'getOrCompute': {
            const served: string[] = [];
            const onHit = () => served.push('hit');
            reader.on('hit', onHit);
            await reader.getOrCompute('k', () => Promise.reject(new Error('no refresh: the entry stays the one written')), { ttl: 150, staleTtl: 60_000 }).catch(() => undefined);
            reader.off('hit', onHit);
            fresh = served.length > 0;
            break;
          }
          case 'getOrComputeMany': {
            const served: string[] = [];
            const onHit = () => served.push('hit');
            reader.on('hit', onHit);
            await reader.getOrComputeMany(['k'], () => Promise.reject(new Error('no refresh')), { ttl: 150, staleTtl: 60_000 }).catch(() => undefined);
            reader.off('hit', onHit);
            fresh = served.length > 0;
            break;
          }
        }
        if (fresh && before >= until) violations.push(`round ${round}: fresh at server ${before.toFixed(2)} ≥ freshUntil ${until.toFixed(2)}`);
      }
    }
    expect(violations).toEqual([]);
  }, 30_000);
});

describe('values that are not entries, on the plain read as on the script', () => {
  it('a key of another type under getOrCompute: decodeError, miss, the loader\'s value, no degraded', async () => {
    const cache = h.cache();
    await cache.set('warm', 'w', 60_000);
    await cache.get('warm');
    const reasons: string[] = [];
    cache.on('decodeError', (e) => reasons.push(e.reason));
    const degraded: string[] = [];
    cache.on('degraded', (e) => degraded.push(e.operation));
    await h.admin.rpush(keysOfPrefix(prefixOfCache(cache), 'list'), 'x');
    expect(await cache.getOrCompute('list', () => 'loaded', 60_000)).toBe('loaded');
    expect(degraded).toEqual([]);
    expect(reasons[0]).toBe('not a string value');
  });

});

import { prefixOf as prefixOfCache } from '../support/harness.js';

describe('samples and reconnections', () => {
  it('after the client reconnects, the first read samples again (a script), then plain reads resume', async () => {
    const { client, dispose } = familyClient(h.url);
    const cache = createCache({ redis: client, prefix: `rc${process.pid}x${++n}` });
    try {
      await cache.set('k', 'v', 60_000);
      expect(await cache.get('k')).toBe('v');
      expect(await cache.get('k')).toBe('v');
      await h.admin.call('CLIENT', 'KILL', 'TYPE', 'normal');
      for (let i = 0; i < 50; i++) {
        try { await client.ping(); break; } catch { await sleepMs(50); }
      }
      await sleepMs(100);
      await h.admin.config('RESETSTAT');
      expect(await cache.get('k')).toBe('v');
      const { calls, scripts } = await commandCalls(h.admin);
      expect({ getrange: calls('getrange'), scripts }).toEqual({ getrange: 0, scripts: 1 });
      await h.admin.config('RESETSTAT');
      expect(await cache.get('k')).toBe('v');
      expect((await commandCalls(h.admin)).calls('getrange')).toBe(1);
    } finally {
      await cache.close();
      dispose();
    }
  });
});
const sleepMs = (ms: number) => new Promise((r) => setTimeout(r, ms));

import { UNSAFE as UNSAFE_SWITCHES } from '../../src/unsafe.js';

describe('the write script stamps freshUntil on every path', () => {
  it('set(), getOrCompute\'s write, getOrComputeMany\'s writes, writeUnfenced, replicaAck-less and jittered ttl', async () => {
    const plain = h.cache();
    const unfenced = h.cache({ [UNSAFE_SWITCHES]: { unfencedWrites: true } } as never);
    const [s0, us0] = await h.admin.time();
    const t0 = Number(s0) * 1000 + Number(us0) / 1000;
    await plain.set('s', 1, 60_000);
    await plain.getOrCompute('g', () => 2, { ttl: 60_000, ttlJitter: 0.5 });
    await plain.getOrComputeMany(['m1', 'm2'], async (ks) => new Map(ks.map((k) => [k, 3])), 60_000);
    await unfenced.set('u', 4, 60_000);
    await unfenced.getOrCompute('ug', () => 5, 60_000);
    const [s1, us1] = await h.admin.time();
    const t1 = Number(s1) * 1000 + Number(us1) / 1000;
    for (const [cache, key] of [[plain, 's'], [plain, 'g'], [plain, 'm1'], [plain, 'm2'], [unfenced, 'u'], [unfenced, 'ug']] as const) {
      const e = decodeEntry((await h.admin.getBuffer(keysOfPrefix(prefixOfCache(cache), key))) as Buffer);
      const pttl = await h.admin.pttl(keysOfPrefix(prefixOfCache(cache), key));
      expect(e.freshUntil, key).toBeDefined();
      expect((e.freshUntil as number) - (e.ttlMs as number), key).toBeGreaterThanOrEqual(t0);
      expect((e.freshUntil as number) - (e.ttlMs as number), key).toBeLessThanOrEqual(t1);
      // Redis's own expiry is freshUntil + grace (within the ms PTTL rounds to).
      expect(Math.abs(t1 + pttl - ((e.freshUntil as number) + e.graceMs)), key).toBeLessThan(t1 - t0 + 2);
    }
  });
});

describe('readMany: decided, undecided and failed keys keep their places', () => {
  it.each(['getMany', 'getOrComputeMany'] as const)('%s over fresh, unstamped, stale, other-type, oversized and absent keys', async (entry) => {
    const prefix = `rm${process.pid}x${++n}`;
    // What the previous release's set() stores: v4 with nine elements (no freshUntil), PX = ttl.
    const previous = { set: (key: string, value: unknown, ttl: number) => h.admin.set(keysOfPrefix(prefix, key), pack([4, value, 1, 0, Date.now(), 0, 0, ttl, null]), 'PX', ttl) };
    const cache = h.cache({ prefix, maxValueBytes: 200 });
    {
      await cache.set('warm', 'w', 60_000);
      await cache.get('warm'); // samples
      await cache.set('f1', 'F1', 60_000);
      await previous.set('u1', 'U1', 60_000);
      await cache.set('f2', 'F2', 60_000);
      await previous.set('u2', 'U2', 60_000);
      await cache.set('st', 'ST', { ttl: 50, staleTtl: 60_000 });
      await h.admin.hset(keysOfPrefix(prefix, 'h'), 'f', '1');
      await h.admin.set(keysOfPrefix(prefix, 'big'), Buffer.alloc(500, 1));
      await sleepMs(80);
      const keys = ['u1', 'f1', 'absent', 'h', 'u2', 'st', 'big', 'f2'];
      if (entry === 'getMany') {
        expect(await cache.getMany(keys)).toEqual(['U1', 'F1', undefined, undefined, 'U2', undefined, undefined, 'F2']);
      } else {
        const got = await cache.getOrComputeMany(keys, async (ks) => new Map(ks.map((k) => [k, `L:${k}`])), { ttl: 60_000, staleTtl: 60_000 });
        expect(got).toEqual(['U1', 'F1', 'L:absent', 'L:h', 'U2', 'ST', 'L:big', 'F2']);
      }
    }
  });
});

