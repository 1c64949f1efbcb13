import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCache, type Cache } from '../../src/index.js';
import { entryKeys } from '../../src/keys.js';
import { familyClient } from '../support/clients.js';
import { startRedisServer, type RedisServer } from '../support/redis-server.js';

/**
 * Redlock won a quorum but the store refused the fence (a fleet-wide failBackoff): the nodes are freed
 * and the caller gets the store's answer (OriginBackoffError), not a stack overflow from the give-up
 * path (it called itself instead of releasing the nodes).
 */
let servers: RedisServer[];
const clients: Redis[] = [];
const disposals: (() => void)[] = [];
const caches: Cache[] = [];

beforeAll(async () => {
  servers = await Promise.all(Array.from({ length: 4 }, () => startRedisServer()));
});
afterAll(async () => {
  await Promise.all(caches.map((c) => c.close()));
  for (const c of clients) c.disconnect();
  for (const dispose of disposals) dispose();
  await Promise.all(servers.map((s) => s.stop()));
});

/** An ioredis client: the test's own raw reads. */
function client(url: string): Redis {
  const c = new Redis(url, { maxRetriesPerRequest: 1 });
  c.on('error', () => undefined);
  clients.push(c);
  return c;
}

/** A client of the family under test (SG_TEST_CLIENT), for the cache's store or a redlock node. */
function cacheClient(url: string) {
  const { client: c, dispose } = familyClient(url);
  disposals.push(dispose);
  return c;
}

describe('redlock: quorum won, fence refused by the store', () => {
  it('a fleet-wide failBackoff reaches the caller as ERR_BACKOFF, and every node\'s lock is freed', async () => {
    const [store, ...nodes] = servers as [RedisServer, ...RedisServer[]];
    const nodeClients = nodes.map((n) => cacheClient(n.url));
    const cache = createCache({ redis: cacheClient(store.url), prefix: 'rlg', lock: 'redlock', redlock: { nodes: nodeClients } });
    caches.push(cache);
    const options = { ttl: 60_000, failBackoff: 60_000 };
    await expect(cache.getOrCompute('k', () => Promise.reject(new Error('origin down')), options)).rejects.toThrow('origin down');
    await expect(cache.getOrCompute('k', () => 'v', options)).rejects.toMatchObject({ code: 'ERR_BACKOFF' });
    const lockKey = entryKeys('rlg', 'k').lock;
    // The release resolves once a quorum answered: a ping on each node's own connection, answered
    // after the release sent before it, says every node has applied it before the raw reads look.
    await Promise.all(nodeClients.map((c) => c.ping()));
    for (const n of nodes) expect(await client(n.adminUrl).exists(lockKey)).toBe(0);
  });
});
