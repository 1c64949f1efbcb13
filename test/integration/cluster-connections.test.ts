import { Redis, type Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCache, type Cache, type RedisClient } from '../../src/index.js';
import { entryKeys } from '../../src/keys.js';
import { clusterClient, nodeRedisClusterClient, subscribed, subscriptionDowns } from '../support/harness.js';
import { startRedisCluster, type RedisClusterHandle } from '../support/redis-server.js';

/**
 * Commands a Cluster client must aim at one connection, on a real Cluster (3 masters, 1 replica each;
 * node timeout 60 s: a paused node is never failed over here), with each client family:
 * - replicaAck's `WAIT` on the connection that ran the write — the slot master's —, since WAIT counts
 *   the replicas that acknowledged that connection's own writes (sent anywhere else it answers "all
 *   replicas" at once). The clients are the default user (WAIT is not among the least-privilege
 *   commands unless replicaAck is on).
 * - the subscriber heartbeat's PING on the pub/sub connection itself, the one node the Cluster
 *   subscribed on.
 */
let cluster: RedisClusterHandle;
const disposals: (() => void)[] = [];
const ioredisClients: Cluster[] = [];
const caches: Cache[] = [];
/** One ioredis connection per node, for INFO and CLUSTER queries. */
const byPort = new Map<number, Redis>();

beforeAll(async () => {
  cluster = await startRedisCluster(3, 60_000, 1);
  for (const n of cluster.nodes) {
    const c = new Redis(n.adminUrl, { maxRetriesPerRequest: 1 });
    c.on('error', () => undefined);
    byPort.set(n.port, c);
  }
  // Every replica linked and in sync before a test counts on its acknowledgement.
  for (const c of byPort.values()) {
    for (;;) {
      const info = await c.info('replication');
      if (info.includes('role:master') ? /slave0:.*state=online/.test(info) : /master_link_status:up/.test(info)) break;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}, 60_000);
afterAll(async () => {
  await Promise.all(caches.map((c) => c.close()));
  for (const dispose of disposals) dispose();
  for (const c of ioredisClients) c.disconnect();
  for (const c of byPort.values()) c.disconnect();
  await cluster?.stop();
});

type Family = 'ioredis' | 'node-redis' | 'node-redis5';

async function clusterOf(family: Family): Promise<RedisClient> {
  if (family === 'ioredis') {
    const c = clusterClient(cluster, ioredisClients, true);
    await c.ping();
    return c;
  }
  return nodeRedisClusterClient(cluster, disposals, family === 'node-redis' ? 6 : 5, true);
}

/**
 * The master serving a Redis key's slot (CLUSTER KEYSLOT + SLOTS), and its replica (the master's own
 * INFO replication: CLUSTER SLOTS lists replicas only once gossip has spread them).
 */
async function shardOf(redisKey: string): Promise<{ master: number; replica: number }> {
  const any = byPort.values().next().value as Redis;
  const slot = await any.cluster('KEYSLOT', redisKey);
  const ranges = await any.cluster('SLOTS');
  const master = ranges.find(([from, to]) => slot >= from && slot <= to)?.[2]?.[1];
  const info = master === undefined ? '' : await (byPort.get(master) as Redis).info('replication');
  const replica = Number(/slave0:[^\r\n]*port=(\d+)/.exec(info)?.[1]);
  if (master === undefined || !Number.isInteger(replica)) throw new Error(`slot ${slot}: no master with a replica (${info})`);
  return { master, replica };
}

/** WAIT calls each master answered so far (INFO commandstats). */
async function waitCalls(): Promise<Map<number, number>> {
  const calls = new Map<number, number>();
  for (const [port, c] of byPort) calls.set(port, Number(/cmdstat_wait:calls=(\d+)/.exec(await c.info('commandstats'))?.[1] ?? 0));
  return calls;
}

const ACK = { replicas: 1, timeout: 1000 };

describe.each<Family>(['ioredis', 'node-redis', 'node-redis5'])('replicaAck on a Redis Cluster with one replica per master, %s client', (family) => {
  async function cache(): Promise<Cache> {
    const c = createCache({ redis: await clusterOf(family), prefix: `rack-${family}`, replicaAck: ACK, redisTimeout: 3000, breakerThreshold: 1000 });
    caches.push(c);
    return c;
  }

  it("a rebuild's grant and write are each confirmed by WAIT on the key's slot master, and nowhere else; the value is stored", async () => {
    const c = await cache();
    const { master } = await shardOf(entryKeys(`rack-${family}`, 'in-sync').value);
    const locks: string[] = [];
    c.on('computed', (e) => locks.push(`${String(e.lock)}:${String(e.written)}`));
    const before = await waitCalls();
    expect(await c.getOrCompute('in-sync', () => 'v', 60_000)).toBe('v');
    const after = await waitCalls();
    const moved = [...after].filter(([port, n]) => n !== before.get(port));
    expect(moved).toEqual([[master, (before.get(master) ?? 0) + 2]]);
    expect(locks).toEqual(['single:true']);
    expect(await c.get('in-sync')).toBe('v');
  });

  it("with the replica of the key's master stopped, the grant is not trusted: the call runs degraded and nothing is stored", async () => {
    const c = await cache();
    const key = 'replica-stopped';
    const { replica } = await shardOf(entryKeys(`rack-${family}`, key).value);
    const server = cluster.nodes.find((n) => n.port === replica);
    if (!server) throw new Error(`no node on port ${replica}`);
    const locks: string[] = [];
    c.on('computed', (e) => locks.push(String(e.lock)));
    server.pause();
    try {
      expect(await c.getOrCompute(key, () => 'v', 60_000)).toBe('v');
    } finally {
      server.resume();
    }
    expect(locks).toEqual(['degraded']);
    const { master } = await shardOf(entryKeys(`rack-${family}`, key).value);
    expect(await byPort.get(master)?.exists(entryKeys(`rack-${family}`, key).value)).toBe(0);
    expect(await byPort.get(master)?.exists(entryKeys(`rack-${family}`, key).lock)).toBe(0); // the untrusted grant was freed
  });
});

/** The pub/sub connections (CLIENT LIST TYPE pubsub ids) of each node. */
async function pubsubIds(): Promise<Map<number, Set<string>>> {
  const ids = new Map<number, Set<string>>();
  for (const [port, c] of byPort) {
    const list = String(await c.call('CLIENT', 'LIST', 'TYPE', 'pubsub'));
    ids.set(port, new Set([...list.matchAll(/\bid=(\d+)/g)].map((m) => m[1] as string)));
  }
  return ids;
}

describe.each<Family>(['ioredis', 'node-redis', 'node-redis5'])('the subscriber heartbeat on a Redis Cluster, %s client', (family) => {
  it('a pub/sub node that stops answering (SIGSTOP: the socket stays open, no FIN) is found out by the heartbeat: the subscription counts as down and L1 is flushed; another node stopping is not', async () => {
    const prefix = `hb-${family}`;
    // redisTimeout: the heartbeat's period; down after two unanswered. 1 s: a stall of the machine
    // shorter than a period is no false verdict while `other` is paused.
    const PERIOD = 1000;
    const before = await pubsubIds();
    const a = createCache({ redis: await clusterOf(family), prefix, local: { max: 10 }, redisTimeout: PERIOD });
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
    try {
      // ready() waits redisTimeout at most: ask again until the Cluster's pub/sub node is connected.
      for (let i = 0; i < 20 && !(await subscribed(a)); i++);
      expect(await subscribed(a)).toBe(true);
      // The node a subscribed on: the one with pub/sub connections that were not there before a.
      const fresh = new Set([...(await pubsubIds())].flatMap(([port, ids]) => [...ids].filter((id) => !before.get(port)?.has(id)).map(() => port)));
      expect(fresh.size).toBe(1);
      const subscribedOn = [...fresh][0] as number;
      // A key another master serves, in a's L1.
      let key = '';
      let keyMaster = 0;
      for (let i = 0; key === ''; i++) {
        const { master } = await shardOf(entryKeys(prefix, `k${i}`).value);
        if (master !== subscribedOn) [key, keyMaster] = [`k${i}`, master];
      }
      expect(await a.getOrCompute(key, () => 'old', 600_000)).toBe('old');
      const l1 = ((a as unknown as { rt: unknown }).rt as { local: { get(k: string): { value: unknown } | undefined } }).local;
      expect(l1.get(key)?.value).toBe('old');
      const downs = subscriptionDowns(a);
      const nodeOn = (port: number) => cluster.nodes.find((n) => n.port === port) as (typeof cluster.nodes)[number];

      // First a node that neither holds the subscription nor the key: four periods, no verdict (a PING
      // aimed at the Cluster, not at the pub/sub connection, could land there).
      const other = nodeOn(cluster.nodes.map((n) => n.port).find((p) => p !== subscribedOn && p !== keyMaster) as number);
      other.pause();
      try {
        await sleep(4 * PERIOD);
      } finally {
        other.resume();
      }
      expect(downs.count).toBe(0);
      expect(l1.get(key)?.value).toBe('old');

      const server = nodeOn(subscribedOn);
      server.pause();
      try {
        for (let i = 0; i < 1000 && downs.count === 0; i++) await sleep(10); // ~2 periods expected
      } finally {
        server.resume();
      }
      expect(downs.count).toBeGreaterThan(0);
      expect(l1.get(key)).toBeUndefined();
      // It subscribes again once the node answers.
      for (let i = 0; i < 40 && !(await subscribed(a)); i++);
      expect(await subscribed(a)).toBe(true);
    } finally {
      await a.close();
    }
  });
});
