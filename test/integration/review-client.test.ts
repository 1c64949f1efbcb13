/**
 * Review of the client-cost changes (1035015: ioredis tick writes; 7601606: node-redis commands with
 * `timeout: undefined`). Each test names what it checks; see the commit messages for what failed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { Redis as Redis6 } from 'ioredis6';
import { createClient } from 'redis';
import { createClient as createClient5 } from 'redis5';
import { createCache } from '../../src/index.js';
import { useRedis } from '../support/harness.js';
import { startRedisServer, type RedisServer } from '../support/redis-server.js';

const h = useRedis();
let n = 0;
const prefix = () => `rc${process.pid}x${++n}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Counts the PINGs sent through `client.sendCommand` that have not settled yet. */
function outstandingPings(client: object): { readonly count: number } {
  const c = client as { sendCommand: (...a: unknown[]) => Promise<unknown> };
  const send = c.sendCommand.bind(client);
  const out = { count: 0 };
  c.sendCommand = (...a: unknown[]) => {
    const sent = send(...a);
    if (Array.isArray(a[0]) && a[0][0] === 'PING') {
      out.count++;
      const done = () => void out.count--;
      sent.then(done, done);
    }
    return sent;
  };
  return out;
}

describe('node-redis 6: what waits in the offline queue while Redis is down', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedisServer();
  });
  afterAll(async () => {
    await server.stop();
  });

  it.each([
    ['node-redis 6', 6],
    ['node-redis 5', 5],
  ] as const)("%s: ready() polled during an outage queues at most one PING in the caller's offline queue, and answers true once Redis is back", async (_name, major) => {
    const client = major === 6 ? createClient({ url: server.url }) : createClient5({ url: server.url });
    client.on('error', () => undefined);
    await client.connect();
    const pings = outstandingPings(client);
    const cache = createCache({ redis: client, prefix: prefix(), redisTimeout: 200 });
    let restarted = false;
    try {
      expect(await cache.ready()).toBe(true);
      await server.kill();
      // A health check polling ready() while Redis is down: each call answers false within redisTimeout.
      for (let i = 0; i < 20; i++) expect(await cache.ready()).toBe(false);
      // node-redis 6's default per-command timeout is 5 s: before 7601606 a PING sent that long ago was dropped by it.
      await sleep(5_500);
      expect(pings.count).toBeLessThanOrEqual(1);
      await server.restart();
      restarted = true;
      let ready = false;
      for (let i = 0; i < 50 && !ready; i++) ready = await cache.ready();
      expect(ready).toBe(true);
    } finally {
      await cache.close();
      client.destroy();
      if (!restarted) await server.restart();
    }
  });
});

describe("node-redis 6: the cache's commands ignore the client's commandOptions.timeout (as docs/operations.md now says)", () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedisServer();
  });
  afterAll(async () => {
    await server.stop();
  });

  it("a delete() sent while Redis is down stays queued past the client's own 100 ms timeout; the caller's own command is dropped by it", async () => {
    const client = createClient({ url: server.url, commandOptions: { timeout: 100 } });
    client.on('error', () => undefined);
    await client.connect();
    const c = client as unknown as { sendCommand: (...a: unknown[]) => Promise<unknown> };
    const send = c.sendCommand.bind(client);
    let outstanding = 0;
    c.sendCommand = (...a: unknown[]) => {
      const sent = send(...a);
      outstanding++;
      const done = () => void outstanding--;
      sent.then(done, done);
      return sent;
    };
    const cache = createCache({ redis: client, prefix: prefix(), redisTimeout: 200 });
    try {
      expect(await cache.ready()).toBe(true);
      await server.kill();
      outstanding = 0;
      await expect(cache.delete('k')).rejects.toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE' });
      const own = client.get('own').then(() => 'answered', (e: unknown) => (e as Error).constructor.name);
      await sleep(600);
      expect(await own).toBe('TimeoutError'); // node-redis's own timer, 100 ms
      // The cache's delete and the probe its timeout sent (the node became suspect), still in node-redis's offline queue.
      expect(outstanding).toBe(2);
    } finally {
      await cache.close();
      client.destroy();
      await server.restart();
    }
  });
});

interface SocketView {
  writableCorked: number;
  cork(): void;
  uncork(): void;
  destroy(): void;
}
const streamOf = (client: Redis) => (client as unknown as { stream: SocketView }).stream;
const nextMacrotask = () => new Promise((r) => setImmediate(r));

describe('ioredis tick writes: what holds', () => {
  it("the caller's own cork() survives the cache's tick, and its commands leave when it uncorks", async () => {
    const client = h.client();
    const cache = createCache({ redis: client, prefix: prefix() });
    await cache.set('k', 'v', 60_000);
    const socket = streamOf(client);
    socket.cork();
    const hit = cache.get('k');
    await nextMacrotask();
    expect(socket.writableCorked).toBe(1);
    socket.uncork();
    expect(await hit).toBe('v');
    expect(socket.writableCorked).toBe(0);
    await cache.close();
  });

  it('disconnect() in the cache\'s tick: the call settles and the old socket is not left corked', async () => {
    const client = h.client();
    const cache = createCache({ redis: client, prefix: prefix(), redisTimeout: 300 });
    await cache.set('k', 'v', 60_000);
    await cache.get('k');
    const socket = streamOf(client);
    const hit = cache.get('k').then((v) => ({ v }), (e: unknown) => ({ e }));
    for (let i = 0; i < 100 && socket.writableCorked === 0; i++) await Promise.resolve();
    expect(socket.writableCorked).toBe(1);
    client.disconnect();
    const outcome = await hit;
    expect(outcome).toBeDefined();
    expect(socket.writableCorked).toBe(0);
    await cache.close();
  });

  it('the socket replaced between cork and uncork (destroyed in the tick): the next socket is never corked by it, calls answer after the reconnection', async () => {
    const client = h.client();
    const cache = createCache({ redis: client, prefix: prefix(), redisTimeout: 500 });
    await cache.set('k', 'v', 60_000);
    await cache.get('k');
    const old = streamOf(client);
    const hit = cache.get('k').then((v) => ({ v }), (e: unknown) => ({ e }));
    for (let i = 0; i < 100 && old.writableCorked === 0; i++) await Promise.resolve();
    expect(old.writableCorked).toBe(1);
    old.destroy();
    await hit;
    for (let i = 0; i < 100 && !(client.status === 'ready' && streamOf(client) !== old); i++) await sleep(50);
    expect(client.status).toBe('ready');
    expect(streamOf(client)).not.toBe(old);
    let value: unknown;
    for (let i = 0; i < 20 && value !== 'v'; i++) {
      value = await cache.get('k').catch(() => undefined);
      if (value !== 'v') await sleep(100);
    }
    expect(value).toBe('v');
    expect(streamOf(client).writableCorked).toBe(0);
    await cache.close();
  });

  it('enableAutoPipelining: hits answer, the socket ends uncorked', async () => {
    const client = h.client({ enableAutoPipelining: true });
    const cache = createCache({ redis: client, prefix: prefix() });
    const keys = Array.from({ length: 10 }, (_, i) => `k${i}`);
    for (const k of keys) await cache.set(k, k, 60_000);
    expect(await Promise.all(keys.map((k) => cache.getOrCompute(k, () => 'loaded', 60_000)))).toEqual(keys);
    expect(streamOf(client).writableCorked).toBe(0);
    await cache.close();
  });

  it('lazyConnect with the offline queue off: the first calls degrade or answer, nothing stays corked', async () => {
    const client = h.client({ lazyConnect: true, enableOfflineQueue: false });
    const cache = createCache({ redis: client, prefix: prefix(), redisTimeout: 300 });
    const first = await cache.getOrCompute('k', () => 'loaded', 60_000);
    expect(first).toBe('loaded');
    await new Promise<void>((resolve) => (client.status === 'ready' ? resolve() : client.once('ready', () => resolve())));
    await cache.set('k', 'set', 60_000);
    expect(await cache.get('k')).toBe('set');
    expect(streamOf(client).writableCorked).toBe(0);
    await cache.close();
  });

  it('ioredis 6: ten hits started in one tick leave in one write, the socket ends uncorked', async () => {
    const client = new Redis6(h.url, { maxRetriesPerRequest: 1 });
    client.on('error', () => undefined);
    try {
      const cache = createCache({ redis: client, prefix: prefix() });
      const keys = Array.from({ length: 10 }, (_, i) => `k${i}`);
      for (const k of keys) await cache.set(k, k, 60_000);
      await cache.get('k0');
      const socket = (client as unknown as { stream: { _write: (...a: unknown[]) => unknown; _writev: (...a: unknown[]) => unknown; writableCorked: number } }).stream;
      let flushes = 0;
      const write = socket._write.bind(socket);
      const writev = socket._writev.bind(socket);
      socket._write = (...a) => (flushes++, write(...a));
      socket._writev = (...a) => (flushes++, writev(...a));
      const hits = keys.map((k) => cache.getOrCompute(k, () => 'loaded', 60_000));
      await nextMacrotask();
      expect(flushes).toBe(1);
      expect(socket.writableCorked).toBe(0);
      expect(await Promise.all(hits)).toEqual(keys);
      await cache.close();
    } finally {
      client.disconnect();
    }
  });
});
