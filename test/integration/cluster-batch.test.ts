/**
 * The batch API on a real 3-master Redis Cluster (issue #11): getMany, deleteMany, getOrComputeMany and
 * namespace clear() over keys that span slots and nodes.
 */
import { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCache, type Cache } from '../../src/index.js';
import { entryKeys, hashSlot } from '../../src/keys.js';
import { ACL_USER, AS_ACL_USER, startRedisCluster, type RedisClusterHandle } from '../support/redis-server.js';

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

function clusterClient(admin = false): Cluster {
  const auth = AS_ACL_USER && !admin ? ACL_USER : {};
  const c = new Cluster(cluster.startup, { redisOptions: { maxRetriesPerRequest: 1, ...auth } });
  c.on('error', () => undefined);
  clients.push(c);
  return c;
}

function cache(prefix: string, client = clusterClient()): Cache {
  const c = createCache({ redis: client, prefix });
  caches.push(c);
  return c;
}

const KEYS = [...Array.from({ length: 60 }, (_, i) => `k${i}`), '}', 'a{b}c', '{}'];

describe('batch API on a Redis Cluster (3 masters)', () => {
  it('hashSlot agrees with the cluster’s CLUSTER KEYSLOT for every entry key', async () => {
    const admin = clusterClient(true);
    for (const key of KEYS) expect(await admin.cluster('KEYSLOT', entryKeys('cb', key).value)).toBe(hashSlot(key));
  });

  it('getMany and deleteMany over keys on every node: one pipeline per slot, no CROSSSLOT, values aligned', async () => {
    const client = clusterClient();
    const c = cache('cb1', client);
    for (const key of KEYS.slice(0, 40)) await c.set(key, `v:${key}`, 60_000);
    let pipelines = 0;
    const original = client.pipeline.bind(client);
    client.pipeline = ((...args: Parameters<Cluster['pipeline']>) => (pipelines++, original(...args))) as Cluster['pipeline'];
    const values = await c.getMany(KEYS);
    expect(values).toEqual(KEYS.map((k, i) => (i < 40 ? `v:${k}` : undefined)));
    expect(pipelines).toBe(new Set(KEYS.map(hashSlot)).size);
    await c.deleteMany(KEYS.slice(0, 20));
    expect(await c.getMany(KEYS.slice(0, 40))).toEqual(KEYS.slice(0, 40).map((k, i) => (i < 20 ? undefined : `v:${k}`)));
  });

  it('getOrComputeMany from two caches at once loads every key exactly once, in one loadMany call per cache', async () => {
    const a = cache('cb2');
    const b = cache('cb2');
    await Promise.all([a.ready(), b.ready()]);
    const loads = new Map<string, number>();
    const calls: string[][] = [];
    const loadMany = async (missing: string[]) => {
      calls.push(missing);
      for (const k of missing) loads.set(k, (loads.get(k) ?? 0) + 1);
      await new Promise((r) => setTimeout(r, 100));
      return new Map(missing.map((k) => [k, `v:${k}`]));
    };
    const [va, vb] = await Promise.all([a.getOrComputeMany(KEYS, loadMany, 60_000), b.getOrComputeMany([...KEYS].reverse(), loadMany, 60_000)]);
    expect(va).toEqual(KEYS.map((k) => `v:${k}`));
    expect(vb).toEqual([...KEYS].reverse().map((k) => `v:${k}`));
    for (const k of KEYS) expect(loads.get(k), k).toBe(1);
    expect(calls.length).toBeLessThanOrEqual(2);
  });

  it('namespace clear() on a Cluster: the old entries are gone for the clearing cache at once', async () => {
    const c = cache('cb3');
    await c.ready();
    const ns = c.namespace('users');
    for (const key of KEYS.slice(0, 10)) await ns.set(key, 1, 60_000);
    await ns.clear();
    expect(await ns.getMany(KEYS.slice(0, 10))).toEqual(KEYS.slice(0, 10).map(() => undefined));
  });
});
