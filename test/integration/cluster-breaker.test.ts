import { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCache, type Cache, type RedisClient } from '../../src/index.js';
import { entryKeys, slotTag } from '../../src/keys.js';
import { namespacedKey } from '../../src/namespace.js';
import { portFor } from '../../src/client/detect.js';
import { TEST_CLIENT } from '../support/clients.js';
import { clusterClient as sharedClusterClient, nodeRedisClusterClient } from '../support/harness.js';
import { startRedisCluster, type RedisClusterHandle } from '../support/redis-server.js';

/**
 * Issue #13 §2 on a real 3-master Cluster: one master SIGKILLed, no failover (node timeout 60 s, so
 * the cluster never notices during the test). The circuit breaker is kept per slot owner: the dead
 * shard's failures open its own breaker only, and keys on the two live masters keep their lock — not
 * one degraded (unfenced, unlocked) loader run there. The caches' clients are of the family under
 * test (SG_TEST_CLIENT: an ioredis Cluster, or a node-redis createCluster()); the test's own reads
 * (CLUSTER SLOTS, KEYSLOT, GET) go through an ioredis Cluster as admin.
 */
let cluster: RedisClusterHandle;
const clients: Cluster[] = [];
const disposals: (() => void)[] = [];
const caches: Cache[] = [];

beforeAll(async () => {
  cluster = await startRedisCluster(3, 60_000);
});
afterAll(async () => {
  await Promise.all(caches.map((c) => c.close()));
  for (const c of clients) c.disconnect();
  for (const dispose of disposals) dispose();
  await cluster.stop();
});

function clusterClient(admin = false): Cluster {
  return sharedClusterClient(cluster, clients, admin);
}

/** A cluster client of the family under test (node-redis: connected as a caller would, its destroy in disposals). */
async function familyCluster(admin = false): Promise<RedisClient> {
  if (TEST_CLIENT === 'ioredis' || TEST_CLIENT === 'ioredis6') return clusterClient(admin);
  return nodeRedisClusterClient(cluster, disposals, TEST_CLIENT === 'node-redis' ? 6 : 5, admin);
}

/**
 * The caches' clients, made before the kill: a node-redis Cluster's connect() connects to every
 * master first, so one made while a master is dead never connects (an ioredis Cluster connects
 * lazily either way). Each cache takes one: the clients are as fresh as the caches.
 */
const made: RedisClient[] = [];
beforeAll(async () => {
  for (let i = 0; i < 3; i++) made.push(await familyCluster());
});
function cacheClient(): RedisClient {
  const c = made.shift();
  if (!c) throw new Error('no cluster client left: make more in beforeAll');
  return c;
}

/** The port of the master owning `redisKey`, asked of the cluster itself (CLUSTER KEYSLOT + SLOTS). */
function redisKeyOwner(admin: Cluster): (redisKey: string) => Promise<number> {
  let ranges: ReturnType<Cluster['cluster']> | undefined; // asked once, on first use
  return async (redisKey) => {
    const table = await (ranges ??= admin.cluster('SLOTS'));
    const slot = await admin.cluster('KEYSLOT', redisKey);
    const owner = table.find(([from, to]) => slot >= from && slot <= to)?.[2];
    if (!owner) throw new Error(`slot ${slot} unassigned`);
    return owner[1];
  };
}

/** The port of the master owning each user key's entry. */
async function ownerPorts(admin: Cluster, prefix: string, keys: readonly string[]): Promise<Map<string, number>> {
  const ownerOf = redisKeyOwner(admin);
  const owners = new Map<string, number>();
  for (const key of keys) owners.set(key, await ownerOf(entryKeys(prefix, key).value));
  return owners;
}

describe('the port routes by slot owner on a real cluster (the breaker\'s nodeOf, replicaAck\'s WAIT)', () => {
  it('nodeOf names, and commandOnNodeOf runs on, the master that owns each key\'s slot (as CLUSTER KEYSLOT + SLOTS say)', async () => {
    const prefix = 'no';
    const admin = clusterClient(true);
    const keys = Array.from({ length: 20 }, (_, i) => `key${i}`);
    const owners = await ownerPorts(admin, prefix, keys);
    const c = await familyCluster(true); // CONFIG GET below tells which node answered
    if (c instanceof Cluster) await c.ping(); // the client loads its slot table (node-redis: connect() did)
    const port = portFor(c);
    for (const key of keys) {
      const redisKey = entryKeys(prefix, key).value;
      expect(port.nodeOf(redisKey)).toBe(`127.0.0.1:${owners.get(key)}`);
      const reply = await port.commandOnNodeOf(redisKey, ['CONFIG', 'GET', 'port']);
      // RESP2 answers a flat [name, value] list; RESP3 a map (node-redis 6's default: an object).
      const answeredBy = Array.isArray(reply) ? (reply as string[])[1] : (reply as Record<string, string>).port;
      expect(Number(answeredBy)).toBe(owners.get(key));
    }
    expect(new Set(owners.values()).size).toBeGreaterThan(1);
  });
});

/**
 * The caches' redisTimeout: the default (1 s). The property is that a live master's calls never count
 * as failures; with 200 ms, a live master slowed by a loaded CI machine (two test files at once on 2
 * cores) timed out three times in a row once, opened its own breaker and degraded its keys.
 */
const LIVE_TIMEOUT_MS = 1000;

let killed = false;
/** The first master, killed once for the file (no failover: it stays dead). */
async function killDead(): Promise<void> {
  if (!killed) await cluster.nodes[0]!.kill();
  killed = true;
}

describe('Redis Cluster, one master dead without failover', () => {
  it('keys on the live masters keep their lock (no degraded run) while the dead shard\'s keys degrade', async () => {
    const prefix = 'cb';
    const admin = clusterClient(true);
    const all = Array.from({ length: 30 }, (_, i) => `key${i}`);
    const owners = await ownerPorts(admin, prefix, all);
    const dead = cluster.nodes[0]!;
    const onDead = all.filter((k) => owners.get(k) === dead.port);
    const onLive = all.filter((k) => owners.get(k) !== dead.port);
    expect(onDead.length).toBeGreaterThan(0);
    expect(onLive.length).toBeGreaterThan(0);

    // A cooldown longer than the test: the dead shard's breaker, once open, stays open.
    const cache = createCache({ redis: cacheClient(), prefix, redisTimeout: LIVE_TIMEOUT_MS, breakerThreshold: 3, breakerCooldown: 60_000 });
    caches.push(cache);
    const locks = new Map<string, string[]>();
    cache.on('computed', (e) => {
      const list = locks.get(e.key) ?? [];
      list.push(String(e.lock));
      locks.set(e.key, list);
    });
    const loader = (ctx: { key: string }) => `v-${ctx.key}`;
    // The client learns the slot table before the kill.
    await Promise.all(all.map((k) => cache.getOrCompute(k, loader, 50)));
    locks.clear();

    await killDead();
    for (let round = 0; round < 8; round++) {
      // Every contender starts before any is awaited; the short ttl makes every round a rebuild.
      const results = await Promise.allSettled(all.map((k) => cache.getOrCompute(k, loader, 50)));
      expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
      await new Promise((r) => setTimeout(r, 60));
    }
    const liveLocks = onLive.flatMap((k) => locks.get(k) ?? []);
    const deadLocks = onDead.flatMap((k) => locks.get(k) ?? []);
    // The dead shard degrades (the property is reachable) …
    expect(deadLocks.filter((l) => l === 'degraded').length).toBeGreaterThan(0);
    // … and the live shards never do: every one of their rebuilds ran under the store lock.
    for (const k of onLive) expect(locks.get(k)?.length ?? 0).toBeGreaterThan(0);
    expect(liveLocks.filter((l) => l !== 'single')).toEqual([]);
  });

  it("a namespace's generation counter on a live master is charged to that master's breaker, not the dead one's: its live keys keep their lock", async () => {
    const prefix = 'cbns';
    const admin = clusterClient(true);
    const ownerOf = redisKeyOwner(admin);
    const dead = cluster.nodes[0]!;
    // A path whose counter lives on a live master, while its name routed as an entry's key would land on the dead one.
    let path: string | undefined;
    for (let i = 0; i < 1000 && path === undefined; i++) {
      const p = `t${i}`;
      if ((await ownerOf(`${prefix}:ns:{${p}}`)) !== dead.port && (await ownerOf(`{${slotTag(p)}}`)) === dead.port) path = p;
    }
    expect(path).toBeDefined();
    const seed = createCache({ redis: cacheClient(), prefix });
    caches.push(seed);
    await seed.namespace(path as string).get('x'); // creates the counter (seeded from TIME)
    const generation = Number(await admin.get(`${prefix}:ns:{${path as string}}`));
    const candidates = Array.from({ length: 30 }, (_, i) => `k${i}`);
    const live: string[] = [];
    for (const k of candidates) if ((await ownerOf(entryKeys(prefix, namespacedKey([path as string], [generation], k)).value)) !== dead.port) live.push(k);
    const plainOnDead = [...(await ownerPorts(admin, prefix, candidates.map((k) => `plain-${k}`)))].find(([, port]) => port === dead.port)?.[0];
    expect(live.length).toBeGreaterThan(0);
    expect(plainOnDead).toBeDefined();

    await killDead();
    const cache = createCache({ redis: cacheClient(), prefix, redisTimeout: LIVE_TIMEOUT_MS, breakerThreshold: 3, breakerCooldown: 60_000 });
    caches.push(cache);
    const locks: string[] = [];
    cache.on('computed', (e) => locks.push(String(e.lock)));
    // Open the dead shard's breaker (its keys degrade; that is expected).
    for (let i = 0; i < 4; i++) await cache.getOrCompute(plainOnDead as string, () => 'plain', 50);
    locks.length = 0;
    const ns = cache.namespace(path as string);
    const results = await Promise.allSettled(live.map((k) => ns.getOrCompute(k, () => `v-${k}`, 50)));
    expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
    expect(locks).toHaveLength(live.length);
    expect(locks.filter((l) => l !== 'single')).toEqual([]); // not one degraded run on a live shard
  });
});
