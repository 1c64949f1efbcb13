import { Cluster, Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { createCache, type Cache, type CacheOptions, type RedisClient } from '../../src/index.js';
import { portFor } from '../../src/client/detect.js';
import { entryKeys } from '../../src/keys.js';
import { clusterClient, deferred, heldRebuild, missedCall, nodeRedisClusterClient, subscribed, type NodeRedisClusterExtras } from '../support/harness.js';
import { ACL_USER, AS_ACL_USER, NODE_REDIS_CLUSTER_ACL_USER, startRedisCluster, type RedisClusterHandle, type RedisServer } from '../support/redis-server.js';
import { sleep, until } from '../support/schedule.js';
import { TEST_CLIENT } from '../support/family.js';

/**
 * Issue #13 §1 and §3 on a real Redis Cluster with a real, automatic failover: 3 masters with one
 * replica each, a short node timeout (so a SIGKILLed master is failed over by the cluster itself:
 * FAIL, election, the replica takes the slots). Each test runs once per Cluster client family the
 * caches are built on: an ioredis Cluster, and a node-redis 6 createCluster() (connected as a caller
 * would, before any fault: its connect() needs every master). The test's own reads and fault
 * injection go through ioredis connections to single nodes as the default user, whatever the family.
 *
 * - §1: the tokens served for a key never repeat or go backwards across a failover to a lagging
 *   replica with `replicaAck` on; without it (the negative control) the promoted replica serves
 *   again tokens its old master already served.
 * - §3: a holder whose write and release died with its master releases again, by token, on the
 *   promoted replica once Redis answers it; a waiter then takes over without waiting out the lease.
 *   Negative control: the same run with the holder's kept release dropped leaves the lock there.
 *
 * The lag is made with a SIGSTOPped replica whose replication connection the master closes
 * (`CLIENT KILL TYPE replica`): what the replica's kernel had buffered it reads on resume (everything
 * up to the cut, which the test confirms with WAIT), and nothing after the cut ever reaches it — a
 * SIGSTOP alone would not lose a byte (RELIABILITY.md gap 4).
 */
const NODE_TIMEOUT_MS = 2000;
/** As in replica-ack.test.ts: generous, so that only a cut stream fails it on a loaded machine; below redisTimeout. */
const ACK = { replicas: 1, timeout: 1000 };

let cluster: RedisClusterHandle | undefined;
let clients: Cluster[] = [];
let disposals: (() => void)[] = [];
let caches: Cache[] = [];
let admins: Redis[] = [];
let noperm: string[] = [];

afterEach(async () => {
  await Promise.all(caches.map((c) => c.close()));
  for (const c of clients) c.disconnect();
  for (const dispose of disposals) dispose();
  for (const a of admins) a.disconnect();
  await cluster?.stop();
  cluster = undefined;
  clients = [];
  disposals = [];
  caches = [];
  admins = [];
  const refused = noperm;
  noperm = [];
  if (refused.length > 0) throw new Error(`Redis refused (NOPERM) operations the README's ACL should allow: ${refused.join(', ')}`);
});



/** The Cluster client family the caches are built on. */
type Family = 'ioredis' | 'node-redis';
// The family under test (SG_TEST_CLIENT): ioredis in the first pass, node-redis 6 (as its ACL user)
// in the second. node-redis 5 has no slot-map refresh of its own while a master stays dead (it learns
// the new owner only from a MOVED), so a node-redis run is always on v6.
const FAMILIES: readonly Family[] = [TEST_CLIENT === 'node-redis' || TEST_CLIENT === 'node-redis5' ? 'node-redis' : 'ioredis'];

/**
 * A cache's Cluster client of `family`, as the cache's user (in ACL mode that family's
 * least-privilege user); `extras` are createCluster() options for node-redis.
 */
async function cacheClient(family: Family, extras: NodeRedisClusterExtras = {}): Promise<RedisClient> {
  return family === 'ioredis' ? clusterClient(cluster!, clients) : nodeRedisClusterClient(cluster!, disposals, 6, false, extras);
}

/** The ACL user `family`'s Cluster clients authenticate as in ACL mode (redis-server.ts). */
const aclUserOf = (family: Family): string => (family === 'ioredis' ? ACL_USER : NODE_REDIS_CLUSTER_ACL_USER).username;

/** A default-user connection straight to one node (fault injection, raw reads). */
function adminOf(node: RedisServer): Redis {
  const a = new Redis(node.adminUrl, { maxRetriesPerRequest: 1 });
  a.on('error', () => undefined);
  admins.push(a);
  return a;
}

/** A healthy cluster: every replica linked and in sync. */
async function healthyCluster(): Promise<{ nodeAt: (port: number) => RedisServer; admin: (port: number) => Redis }> {
  const c = (cluster = await startRedisCluster(3, NODE_TIMEOUT_MS, 1));
  const byPort = new Map(c.nodes.map((n) => [n.port, { node: n, admin: adminOf(n) }]));
  for (const { admin } of byPort.values()) {
    await until('replication in sync', async () => {
      const info = await admin.info('replication');
      return info.includes('role:master') ? /slave0:.*state=online/.test(info) : /master_link_status:up/.test(info);
    });
  }
  const at = (port: number) => {
    const n = byPort.get(port);
    if (!n) throw new Error(`no node on ${port}`);
    return n;
  };
  return { nodeAt: (port) => at(port).node, admin: (port) => at(port).admin };
}

/** The master serving a Redis key's slot (CLUSTER KEYSLOT + SLOTS) and its replica (the master's INFO replication). */
async function shardOf(admin: (port: number) => Redis, anyPort: number, redisKey: string): Promise<{ master: number; replica: number }> {
  const any = admin(anyPort);
  const slot = await any.cluster('KEYSLOT', redisKey);
  const ranges = await any.cluster('SLOTS');
  const master = ranges.find(([from, to]) => slot >= from && slot <= to)?.[2]?.[1];
  const info = master === undefined ? '' : await admin(master).info('replication');
  const replica = Number(/slave0:[^\r\n]*port=(\d+)/.exec(info)?.[1]);
  if (master === undefined || !Number.isInteger(replica)) throw new Error(`slot ${slot}: no master with a replica (${info})`);
  return { master, replica };
}

/**
 * The cluster failed the dead master over by itself: `replica` is a master, owns `redisKey`'s slot in
 * its own and every other live node's view, and every live node reports cluster_state:ok.
 */
async function failedOver(admin: (port: number) => Redis, live: number[], replica: number, redisKey: string): Promise<void> {
  await until(`automatic failover to ${replica}`, async () => {
    const role = (await admin(replica).role())[0];
    if (role !== 'master') return `role ${String(role)}`;
    const slot = await admin(replica).cluster('KEYSLOT', redisKey);
    for (const port of live) {
      if (!(await admin(port).cluster('INFO')).includes('cluster_state:ok')) return `${port} not ok`;
      const ranges = await admin(port).cluster('SLOTS');
      if (ranges.find(([from, to]) => slot >= from && slot <= to)?.[2]?.[1] !== replica) return `${port} routes the slot elsewhere`;
    }
    return true;
  });
}

/**
 * The client routes `redisKey` to the node on `port` (what the cache's breaker and WAIT go by).
 * ioredis learns a new slot owner on MOVED or when asked; the test asks it rather than wait for a miss.
 * node-redis 6 learns it on MOVED or by its own topology refresh, which it runs while a node's
 * connection keeps failing (topologyRefreshOnReconnectionAttemptStrategy: by default 5 s after the
 * first failed reconnect, then every 5 s while it fails); it has no public "re-read the slot map",
 * so the test waits for that refresh, with the old master still down (once that node answers again
 * the connection to it succeeds, and no refresh follows until a MOVED).
 */
async function routes(client: RedisClient, redisKey: string, port: number): Promise<void> {
  await until(`client routes to ${port}`, async () => {
    if (portFor(client).nodeOf(redisKey) === `127.0.0.1:${port}`) return true;
    if (client instanceof Cluster) await new Promise<void>((resolve) => client.refreshSlotsCache(() => resolve()));
    return portFor(client).nodeOf(redisKey) === `127.0.0.1:${port}` || portFor(client).nodeOf(redisKey);
  });
}

/** Confirms that `primary`'s replica holds everything `primary` applied so far (a write on the slot, then WAIT: the stream is ordered). */
async function replicated(primary: Redis, sameSlotKey: string): Promise<number> {
  await primary.set(`${sameSlotKey}:probe`, '1');
  return Number(await primary.call('WAIT', '1', '10000'));
}

function cacheOn(options: CacheOptions): Cache {
  const c = createCache(options);
  // In the ACL run a missing permission would only show as a degraded call: collected, and afterEach fails on it.
  c.on('degraded', (e) => {
    if ((e.error as { code?: string }).code === 'ERR_REDIS_NOPERM') noperm.push(e.operation);
  });
  caches.push(c);
  return c;
}

describe.each(FAMILIES)('replicaAck on a Redis Cluster: an automatic failover to a lagging replica (issue #13 §1), %s Cluster client', (family) => {
  /**
   * One key rebuilt 5 times (replica in sync, confirmed), 5 times while the slot master's replica
   * lags (SIGSTOPped, its replication connection cut), then the master is SIGKILLed, the replica
   * resumed and promoted by the cluster, the old master restarted (it rejoins as the new master's
   * replica, so WAIT can be acknowledged again), and the key rebuilt 5 more times on the promoted
   * master. One cache, one Cluster client of the family throughout. Each value is the token its loader was
   * handed (a degraded run carries none).
   */
  async function failover(ack: boolean) {
    const { nodeAt, admin } = await healthyCluster();
    const prefix = ack ? 'cfa' : 'cfn';
    const keys = entryKeys(prefix, 'k');
    const { master, replica } = await shardOf(admin, cluster!.nodes[0]!.port, keys.value);
    // The README's least-privilege list: "with replicaAck, also: +wait".
    if (ack && AS_ACL_USER) for (const n of cluster!.nodes) await adminOf(n).call('ACL', 'SETUSER', aclUserOf(family), '+wait');
    const client = await cacheClient(family);
    const c = cacheOn({ redis: client, prefix, redisTimeout: 3000, breakerThreshold: 1000, ...(ack ? { replicaAck: ACK } : {}) });
    const served: number[] = [];
    /** How each rebuild ran, by phase: `<phase>:<lock>:<written>`. */
    const how: string[] = [];
    let phase = 'before';
    c.on('computed', (e) => how.push(`${phase}:${String(e.lock)}:${String(e.written)}`));
    const rebuild = async (): Promise<void> => {
      // lockTtl also bounds the fence hash's life: long, so the replica's copy outlives the run (see replica-ack.test.ts).
      const token = await c.getOrCompute<number | undefined>('k', (ctx) => ctx.fencingToken, { ttl: 1, lockTtl: 60_000 });
      if (token !== undefined) served.push(token);
      await sleep(5);
    };

    for (let i = 0; i < 5; i++) await rebuild();
    const primary = admin(master);
    const inSync = await replicated(primary, keys.value);

    phase = 'lag';
    nodeAt(replica).pause();
    const cut = Number(await primary.call('CLIENT', 'KILL', 'TYPE', 'replica'));
    for (let i = 0; i < 5; i++) await rebuild();
    const grantedOnOld = Number(await primary.hget(keys.fence, 'n'));

    phase = 'failover';
    await nodeAt(master).kill();
    nodeAt(replica).resume();
    const live = cluster!.nodes.map((n) => n.port).filter((p) => p !== master);
    await failedOver(admin, live, replica, keys.value);
    const grantedOnPromoted = Number(await admin(replica).hget(keys.fence, 'n'));
    // node-redis: its own refresh, while the old master is still down (see routes()).
    if (family === 'node-redis') await routes(client, keys.value, replica);
    // The old master comes back empty and rejoins as the promoted one's replica.
    await nodeAt(master).restart();
    await until('old master rejoined as a replica', async () => /slave0:[^\r\n]*state=online/.test(await admin(replica).info('replication')));
    await routes(client, keys.value, replica);

    phase = 'after';
    for (let i = 0; i < 5; i++) await rebuild();
    const repeats = served.length - new Set(served).size;
    const base = served[0] ?? 0;
    console.log(
      `cluster failover §1, ${family}, replicaAck ${ack ? 'on' : 'off'}: ${served.length} tokens served, ${repeats} repeated: ` +
        `${served.map((t) => t - base).join(',')} (after ${base}); fence counter ${grantedOnOld - base} on the old master, ${grantedOnPromoted - base} on the promoted replica`,
    );
    return { served, how, inSync, cut, grantedOnOld, grantedOnPromoted };
  }

  /** What every run must show, whatever the setting: a real lag (grants lost by the failover) and rebuilds under the lock on both sides. */
  function scenarioHeld(r: Awaited<ReturnType<typeof failover>>): void {
    const says = `${r.how.join(' ')} | served ${r.served.join(',')}`;
    expect(r.inSync, says).toBe(1); // the replica held everything before the cut
    expect(r.cut, says).toBe(1); // the replication connection was cut
    expect(r.grantedOnPromoted, says).toBeLessThan(r.grantedOnOld); // the promoted replica lacks the grants made during the lag
    expect(r.how.filter((h) => h === 'before:single:true'), says).toHaveLength(5);
    expect(r.how.filter((h) => h === 'after:single:true'), says).toHaveLength(5);
    expect(r.how.filter((h) => h.startsWith('failover:')), says).toEqual([]);
  }

  it('with replicaAck: the grants the lagging replica did not acknowledge run degraded, and the tokens served never repeat or go backwards', async () => {
    const r = await failover(true);
    scenarioHeld(r);
    const says = `${r.how.join(' ')} | served ${r.served.join(',')}`;
    expect(r.how.filter((h) => h.startsWith('lag:')), says).toEqual(Array(5).fill('lag:degraded:false'));
    expect(r.served, says).toHaveLength(10);
    for (let i = 1; i < r.served.length; i++) expect(r.served[i], says).toBeGreaterThan(r.served[i - 1]!);
  });

  it('negative control: without replicaAck the promoted replica serves tokens already served', async () => {
    const r = await failover(false);
    scenarioHeld(r);
    const says = `${r.how.join(' ')} | served ${r.served.join(',')}`;
    expect(r.how.filter((h) => h.startsWith('lag:')), says).toEqual(Array(5).fill('lag:single:true'));
    expect(new Set(r.served).size, says).toBeLessThan(r.served.length);
  });
});

describe.each(FAMILIES)('a lock abandoned across an automatic Cluster failover is released by its holder (issue #13 §3), %s Cluster client', (family) => {
  /**
   * The holder's loader runs on the slot master (its grant confirmed on the replica); the master is
   * SIGKILLed; the loader finishes, so the holder's write and release fail (breakerThreshold 1: the
   * write's failure opens the dead node's breaker and the release is refused unsent). Only then is
   * the replica allowed to fail over (`cluster-replica-no-failover` until then: the order is fixed,
   * not raced). The promoted replica holds the holder's lock with most of its 60 s lease left. A
   * waiter in another cache starts, finds the lock held and waits (pollInterval 60 s: only a note
   * wakes it early). Then the holder's cache gets answers from Redis again (set() on other keys).
   * On node-redis the holder's client re-reads the slot map only once the waiter waits (its topology
   * refresh held back until then, see `follow`): the promoted master's connection going ready is a
   * reconnection, which sends the kept release at once (ioredis emits no 'ready' for a slot-map
   * refresh, so there the first answered set() sends it).
   * `keepRetries: false` drops the holder's kept release (the mechanism under test) for the negative control.
   */
  async function abandoned(keepRetries: boolean) {
    const { nodeAt, admin } = await healthyCluster();
    const prefix = keepRetries ? 'cfr' : 'cfx';
    const keys = entryKeys(prefix, 'k');
    const { master, replica } = await shardOf(admin, cluster!.nodes[0]!.port, keys.value);
    await admin(replica).config('SET', 'cluster-replica-no-failover', 'yes');

    // node-redis: the holder's Cluster re-reads its slot map (its own refresh, on a failed reconnect to
    // the dead master) only once `follow` is set; until then it routes the lock's slot to the dead
    // master, as the ioredis holder does until routes() asks it.
    let follow = false;
    const holderClient = await cacheClient(family, { topologyRefreshOnReconnectionAttemptStrategy: () => (follow ? 1 : false) });
    const waiterClient = await cacheClient(family);
    const holder = cacheOn({ redis: holderClient, prefix, redisTimeout: 1000, breakerThreshold: 1, breakerCooldown: 60_000 });
    const waiter = cacheOn({ redis: waiterClient, prefix, redisTimeout: 1000 });
    if (!keepRetries) {
      const retries = ((holder as unknown as { rt: unknown }).rt as { retries: { add: (...args: unknown[]) => void } }).retries;
      retries.add = () => undefined;
    }
    // ready() waits redisTimeout at most: ask again until each Cluster's pub/sub node is connected.
    await until('holder subscribed', async () => subscribed(holder));
    await until('waiter subscribed', async () => subscribed(waiter));
    const options = { ttl: 60_000, lockTtl: 60_000, waitTimeout: 60_000, pollInterval: 60_000 };

    const held = await heldRebuild<string>(holder, 'k', options);
    const holderToken = await admin(master).get(keys.lock);
    expect(holderToken).not.toBeNull();
    expect(await replicated(admin(master), keys.value)).toBe(1); // the grant is on the replica: the promotion keeps it

    await nodeAt(master).kill();
    const degraded: string[] = [];
    holder.on('degraded', (e) => degraded.push(e.operation));
    held.open('from-holder');
    expect(await held.call).toBe('from-holder');
    expect(degraded).toContain('write');

    await admin(replica).config('SET', 'cluster-replica-no-failover', 'no');
    const live = cluster!.nodes.map((n) => n.port).filter((p) => p !== master);
    await failedOver(admin, live, replica, keys.value);
    if (family === 'ioredis') await routes(holderClient, keys.lock, replica);
    await routes(waiterClient, keys.lock, replica);
    const promoted = admin(replica);
    // The promoted replica kept the abandoned lock, with most of its lease left.
    expect(await promoted.get(keys.lock)).toBe(holderToken);
    const leaseLeft = await promoted.pttl(keys.lock);
    expect(leaseLeft).toBeGreaterThan(30_000);

    // The waiter: its subscription back after the failover, then a call that finds the lock held.
    await until('waiter subscribed', async () => subscribed(waiter));
    const refused = deferred<void>();
    const single = ((waiter as unknown as { rt: unknown }).rt as { lockers: { single: { acquire: (...args: unknown[]) => Promise<unknown> } } }).lockers.single;
    const acquire = single.acquire.bind(single);
    single.acquire = async (...args: unknown[]) => {
      const grant = await acquire(...args);
      if (grant === null) refused.resolve();
      return grant;
    };
    const waiterRuns: string[] = [];
    const waited: string[] = [];
    waiter.on('computed', (e) => waiterRuns.push(`${String(e.lock)}:${String(e.written)}`));
    waiter.on('waited', (e) => waited.push(e.outcome));
    const { call } = await missedCall(waiter, 'k', () => 'from-waiter', options);
    let settled = false;
    const waiting = call.finally(() => (settled = true));
    await refused.promise; // the waiter found the holder's lock and waits
    if (family === 'node-redis') {
      follow = true;
      await routes(holderClient, keys.lock, replica);
    }

    // Redis answers the holder's cache again: 20 set()s on other keys, each resolved (so answered).
    let answered = 0;
    let lockGone = false;
    for (let i = 0; i < 20 && !lockGone; i++) {
      await holder.set(`probe-${i}`, i, 60_000);
      answered++;
      await sleep(50);
      lockGone = (await promoted.exists(keys.lock)) === 0;
    }
    console.log(`cluster failover §3, ${family}, kept release ${keepRetries ? 'on' : 'dropped'}: lock ${lockGone ? 'deleted' : 'still held'} after ${answered} answered set()s; lease left at promotion ${leaseLeft} ms`);
    return { holder, promoted, keys, holderToken, answered, lockGone, waiting, isSettled: () => settled, waiterRuns, waited };
  }

  it('the holder releases its lock on the promoted replica by token once Redis answers it or its client reconnects; the waiter takes over under the lock', async () => {
    const r = await abandoned(true);
    expect(r.lockGone).toBe(true);
    expect(await r.waiting).toBe('from-waiter');
    expect(r.waited).toEqual(['took-over']); // it waited for the holder's lock, then took it
    expect(r.waiterRuns).toEqual(['single:true']); // under the lock, and stored
    expect(((r.holder as unknown as { rt: unknown }).rt as { retries: { size: number } }).retries.size).toBe(0);
  });

  it('negative control: with the kept release dropped, the abandoned lock stays on the promoted replica and the waiter keeps waiting', async () => {
    const r = await abandoned(false);
    r.waiting.catch(() => undefined); // rejects with CacheClosedError when afterEach closes the cache
    expect(r.answered).toBe(20);
    expect(r.lockGone).toBe(false);
    expect(await r.promoted.get(r.keys.lock)).toBe(r.holderToken);
    expect(r.isSettled()).toBe(false);
    expect(r.waiterRuns).toEqual([]);
  });
});
