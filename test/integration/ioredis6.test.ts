/**
 * The caller may be on ioredis 5 or 6 (peer range "^5 || ^6"). The rest of the suite runs on ioredis 5;
 * this file runs the core behaviours with ioredis 6 clients (installed as the alias `ioredis6`).
 */
import { Redis as Redis6 } from 'ioredis6';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCache, type Cache, type CacheOptions } from '../../src/index.js';
import { heldRebuild, missedCall, nextEvent } from '../support/harness.js';
import { startRedisServer, type RedisServer } from '../support/redis-server.js';

let server: RedisServer;
const clients: Redis6[] = [];
const caches: Cache[] = [];
beforeAll(async () => {
  server = await startRedisServer();
});
afterAll(async () => {
  await Promise.all(caches.map((c) => c.close()));
  for (const c of clients) c.disconnect();
  await server.stop();
});

function cache(extra: Partial<CacheOptions> = {}): Cache {
  const redis = new Redis6(server.url, { maxRetriesPerRequest: 1 });
  redis.on('error', () => undefined);
  clients.push(redis);
  const c = createCache({ redis, prefix: 'v6', ...extra });
  caches.push(c);
  return c;
}

describe('with ioredis 6 clients', () => {
  it('one loader for a stampede from two instances; the loser is woken by pub/sub', async () => {
    const a = cache();
    const b = cache({ defaults: { pollInterval: 3_600_000, waitTimeout: 3_600_000 } });
    await Promise.all([a.ready(), b.ready()]);
    let runs = 0;
    const held = await heldRebuild<string>(a, 'k', 60_000, () => runs++);
    const waiting = await missedCall(b, 'k', () => (runs++, 'b'));
    held.open('a');
    expect([await held.call, await waiting.call]).toEqual(['a', 'a']);
    expect(runs).toBe(1);
  });

  it('stale serving, fenced set during a rebuild, and delete dropping another instance\'s L1', async () => {
    const a = cache({ local: { max: 10 } });
    const b = cache({ local: { max: 10 } });
    await Promise.all([a.ready(), b.ready()]);
    await a.getOrCompute('s', () => 'old', { ttl: 30, staleTtl: 60_000 });
    await new Promise((r) => setTimeout(r, 60));
    expect(await b.getOrCompute('s', () => 'new', { ttl: 60_000, staleTtl: 60_000 })).toBe('old');
    const held = await heldRebuild<string>(a, 'f');
    await b.set('f', 'newer', 60_000);
    held.open('older');
    await held.call;
    expect(await b.get('f')).toBe('newer');
    expect(await a.get('f')).toBe('newer');
    const dropped = nextEvent(a, 'remoteChange');
    await b.delete('f');
    await dropped;
    expect(await a.get('f')).toBeUndefined();
  });

  it('Redis paused: calls still answer through the loader; close() leaves the caller\'s client usable', async () => {
    const c = cache({ redisTimeout: 200 });
    await c.ready();
    server.pause();
    try {
      expect(await c.getOrCompute('p', () => 'local', 60_000)).toBe('local');
    } finally {
      server.resume();
    }
    await c.close();
    expect(await (clients[clients.length - 1] as Redis6).ping()).toBe('PONG');
  });
});
