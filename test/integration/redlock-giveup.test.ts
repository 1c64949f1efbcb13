import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCache, type Cache } from '../../src/index.js';
import { entryKeys } from '../../src/keys.js';
import { startRedisServer, type RedisServer } from '../support/redis-server.js';

/**
 * Redlock won a quorum but the store refused the fence (a fleet-wide failBackoff): the nodes are freed
 * and the caller gets the store's answer (OriginBackoffError), not a stack overflow from the give-up
 * path (it called itself instead of releasing the nodes).
 */
let servers: RedisServer[];
const clients: Redis[] = [];
const caches: Cache[] = [];

beforeAll(async () => {
  servers = await Promise.all(Array.from({ length: 4 }, () => startRedisServer()));
});
afterAll(async () => {
  await Promise.all(caches.map((c) => c.close()));
  for (const c of clients) c.disconnect();
  await Promise.all(servers.map((s) => s.stop()));
});

function client(url: string): Redis {
  const c = new Redis(url, { maxRetriesPerRequest: 1 });
  c.on('error', () => undefined);
  clients.push(c);
  return c;
}

describe('redlock: quorum won, fence refused by the store', () => {
  it('a fleet-wide failBackoff reaches the caller as ERR_BACKOFF, and every node\'s lock is freed', async () => {
    const [store, ...nodes] = servers as [RedisServer, ...RedisServer[]];
    const nodeClients = nodes.map((n) => client(n.url));
    const cache = createCache({ redis: client(store.url), prefix: 'rlg', lock: 'redlock', redlock: { nodes: nodeClients } });
    caches.push(cache);
    const options = { ttl: 60_000, failBackoff: 60_000 };
    await expect(cache.getOrCompute('k', () => Promise.reject(new Error('origin down')), options)).rejects.toThrow('origin down');
    await expect(cache.getOrCompute('k', () => 'v', options)).rejects.toMatchObject({ code: 'ERR_BACKOFF' });
    const lockKey = entryKeys('rlg', 'k').lock;
    for (const c of nodeClients) expect(await c.exists(lockKey)).toBe(0);
  });
});
