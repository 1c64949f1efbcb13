import type { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { portFor } from '../../src/client/detect.js';
import { createCache, type Cache } from '../../src/index.js';
import { entryKeys } from '../../src/keys.js';
import { tagRecordKey } from '../../src/tags.js';
import { whenReady } from '../support/family.js';
import { clusterClient } from '../support/harness.js';
import { startRedisCluster, type RedisClusterHandle } from '../support/redis-server.js';
import { until } from '../support/schedule.js';

let cluster: RedisClusterHandle;
const clients: Cluster[] = [];
const caches: Cache[] = [];

beforeAll(async () => {
  cluster = await startRedisCluster(3);
});
afterAll(async () => {
  await Promise.all(caches.map((c) => c.close()));
  for (const c of clients) c.disconnect();
  await cluster.stop();
});

describe('tags on a Cluster, degraded path (docs/tags.md, On a Cluster)', () => {
  it('a call that declares no tags whose loader adds tags fails with ERR_INVALID_OPTION (ctx.setOptions.tags) when its master does not answer too, as when it does', async () => {
    const client = clusterClient(cluster, clients);
    const cache = createCache({ redis: client, prefix: 'rv2dg', redisTimeout: 300 });
    caches.push(cache);
    // A precondition (see the next test): the cache reaches Redis, asked again until it does.
    await until('the cache ready', () => cache.ready(), 100, 0);
    const degraded: string[] = [];
    cache.on('degraded', (e) => degraded.push(e.operation));
    const loader = (ctx: { setOptions(o: { tags: string[] }): void }): string => (ctx.setOptions({ tags: ['org:1'] }), 'undeclared');
    const refused = { code: 'ERR_INVALID_OPTION', option: 'ctx.setOptions.tags' };

    // The master answering: refused, nothing written (the documented rule).
    await expect(cache.getOrCompute('k', loader, 60_000)).rejects.toMatchObject(refused);
    expect(degraded).toEqual([]);

    // The entry's master not answering: the call takes the degraded path; the same loader, the same call.
    const owner = portFor(client).nodeOf(entryKeys('rv2dg', 'k').value);
    const master = cluster.nodes.find((n) => owner === `${n.host}:${n.port}` || owner.endsWith(`:${n.port}`));
    expect(master).toBeDefined();
    master?.pause();
    let outcome: unknown;
    try {
      outcome = await cache.getOrCompute('k', loader, 60_000).then(
        (value) => ({ resolved: value }),
        (error: unknown) => error,
      );
    } finally {
      master?.resume();
    }
    expect(degraded.length).toBeGreaterThan(0); // the degraded path was taken
    expect(outcome).toMatchObject(refused);
  });

  it("the records' master not answering: a read of an untagged entry is not affected; a read of a tagged entry, by a call with or without tags, is judged by the tag states this process keeps, else degraded (its check is the rule's gate: docs/tags.md)", async () => {
    const client = clusterClient(cluster, clients);
    const readerClient = clusterClient(cluster, clients);
    // Connected, with their slot maps, before the caches' ready() is asked: on a busy machine the Cluster
    // clients' start-up alone outlasted the 300 ms redisTimeout and ready() answered false.
    await Promise.all([whenReady(client), whenReady(readerClient)]);
    const prefix = 'rv2rm';
    const writer = createCache({ redis: client, prefix, redisTimeout: 300, local: false });
    const reader = createCache({ redis: readerClient, prefix, redisTimeout: 300, local: false });
    caches.push(writer, reader);
    // A precondition, not the property: both caches reach Redis. ready() answers within the 300 ms
    // redisTimeout, which the subscription's start-up outlasted under a full suite on 2 cores: asked again until both hold.
    await until('both caches ready', async () => (await writer.ready()) && (await reader.ready()), 100, 0);
    const port = portFor(client);
    const recordsNode = port.nodeOf(tagRecordKey(prefix, '', 'org:1'));
    // A key whose entry is on another master than the records.
    const key = Array.from({ length: 64 }, (_, i) => `k${i}`).find((k) => port.nodeOf(entryKeys(prefix, k).value) !== recordsNode) as string;
    expect(await writer.getOrCompute(key, () => 'v', { ttl: 60_000, tags: ['org:1'] })).toBe('v');
    expect(await reader.get(key)).toBe('v');
    const plain = Array.from({ length: 64 }, (_, i) => `p${i}`).find((k) => port.nodeOf(entryKeys(prefix, k).value) !== recordsNode) as string;
    expect(await writer.getOrCompute(plain, () => 'p', 60_000)).toBe('p');
    // Tagged with a tag whose record the reader never read: no state kept for it.
    const unread = Array.from({ length: 64 }, (_, i) => `u${i}`).find((k) => port.nodeOf(entryKeys(prefix, k).value) !== recordsNode) as string;
    expect(await writer.getOrCompute(unread, () => 'u', { ttl: 60_000, tags: ['org:2'] })).toBe('u');
    const degraded: string[] = [];
    reader.on('degraded', (e) => degraded.push(e.operation));

    const master = cluster.nodes.find((n) => recordsNode.endsWith(`:${n.port}`));
    expect(master).toBeDefined();
    master?.pause();
    let untagged: unknown;
    let tagged: unknown;
    let unreadTagged: unknown;
    let degradedUntagged: string[] = [];
    try {
      // Neither call declares tags; both entries' masters answer.
      untagged = await reader.getOrCompute(plain, () => 'reloaded', 60_000);
      degradedUntagged = [...degraded];
      tagged = await reader.getOrCompute(key, () => 'reloaded', 60_000);
      unreadTagged = await reader.getOrCompute(unread, () => 'reloaded', 60_000);
    } finally {
      master?.resume();
    }
    expect({ untagged, degradedUntagged }).toEqual({ untagged: 'p', degradedUntagged: [] });
    expect(tagged).toBe('v'); // its record's state, read just before, is kept here
    expect(unreadTagged).toBe('reloaded'); // its loader, here, without a write
    expect(degraded).toContain('read');
  });
});
