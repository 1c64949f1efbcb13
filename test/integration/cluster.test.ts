import { Cluster, Redis } from 'ioredis';
import { Cluster as Cluster6 } from 'ioredis6';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { portFor } from '../../src/client/detect.js';
import { clusterReceivers } from '../../src/clear.js';
import { createCache, type Cache, type CacheOptions, type RedisClient } from '../../src/index.js';
import { entryKeys, hashSlot } from '../../src/keys.js';
import { tagRecordKey } from '../../src/tags.js';
import { UNSAFE, type UnsafeSwitches } from '../../src/unsafe.js';
import { clusterClient as sharedClusterClient, deferred, heldRebuild, missedCall, nextEvent, nodeRedisClusterClient, subscribed, subscriptionDowns } from '../support/harness.js';
import { ACL_USER, AS_ACL_USER, startRedisCluster, type RedisClusterHandle } from '../support/redis-server.js';

let cluster: RedisClusterHandle;
const clients: Cluster[] = [];
const disposals: (() => void)[] = [];
const caches: Cache[] = [];

beforeAll(async () => {
  cluster = await startRedisCluster(3);
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

/** Resolves once an ioredis Cluster has connected and read its slot map ('ready'). */
async function clusterReady(c: Cluster | Cluster6): Promise<void> {
  if (c.status === 'ready') return;
  await new Promise<void>((resolve) => c.once('ready', () => resolve()));
}

type Family = 'ioredis' | 'ioredis6' | 'node-redis' | 'node-redis5';

/** The cache's cluster client: ioredis 5 or 6 `Cluster`, or node-redis `createCluster()` connected as a caller would. */
async function cacheClient(family: Family): Promise<RedisClient> {
  if (family === 'ioredis') return clusterClient();
  if (family === 'ioredis6') {
    // The same options as the ioredis 5 client (harness.clusterClient), on the other major version.
    const c = new Cluster6(cluster.startup, { redisOptions: { maxRetriesPerRequest: 1, ...(AS_ACL_USER ? ACL_USER : {}) } });
    c.on('error', () => undefined);
    disposals.push(() => c.disconnect());
    return c;
  }
  return nodeRedisClusterClient(cluster, disposals, family === 'node-redis' ? 6 : 5);
}

const BRACE_KEYS = ['}', '}abc', '{x}', 'a{b}c', '{', '{}', 'x:lock', 'plain', '😀{}', '\r\n{'];

describe.each<Family>(['ioredis', 'ioredis6', 'node-redis', 'node-redis5'])('Redis Cluster (3 masters), %s client', (family) => {
  // Each family on its own prefixes: both run against the same cluster.
  async function cache(prefix: string, extra: Partial<CacheOptions> = {}): Promise<Cache> {
    const c = createCache({ redis: await cacheClient(family), prefix: `${family}-${prefix}`, ...extra });
    caches.push(c);
    return c;
  }

  it('nodeOf(key) names the master that owns the key\'s slot', async () => {
    const admin = clusterClient(true);
    const client = await cacheClient(family);
    // An ioredis Cluster knows its slot map only once it is ready (node-redis' connect() has awaited it).
    if (client instanceof Cluster || client instanceof Cluster6) await clusterReady(client);
    const port = portFor(client);
    const ranges = await admin.cluster('SLOTS');
    const raw = ['foo{}{bar}', 'foo{{bar}}zap', 'a{b}c', '}{', '{}', '😀{x}'];
    for (let i = 0; i < 30 + raw.length; i++) {
      const key = raw[i - 30] ?? entryKeys('cl', `n${i}`).value;
      const slot = await admin.cluster('KEYSLOT', key);
      const range = ranges.find(([from, to]) => slot >= from && slot <= to);
      expect(port.nodeOf(key)).toBe(`${String(range?.[2]?.[0])}:${String(range?.[2]?.[1])}`);
    }
  });

  it.each(BRACE_KEYS)('key %j: getOrCompute, get, set and delete work (all keys of the entry share a slot: no CROSSSLOT)', async (key) => {
    const c = await cache('cl1');
    expect(await c.getOrCompute(key, () => ({ key }), 60_000)).toEqual({ key });
    expect(await c.get(key)).toEqual({ key });
    await c.set(key, 'set', 60_000);
    expect(await c.get(key)).toBe('set');
    await c.delete(key);
    expect(await c.get(key)).toBeUndefined();
  });

  it('cache.clear() walks every master: no entry is left on any node, and every instance has dropped its L1 once it resolves', async () => {
    const a = await cache('clr', { local: { max: 1000 } });
    const b = await cache('clr', { local: { max: 1000 } });
    expect(await a.ready()).toBe(true);
    expect(await b.ready()).toBe(true);
    const keys = Array.from({ length: 60 }, (_, i) => `c${i}`);
    for (const k of keys) await a.set(k, `old ${k}`, 60_000);
    await a.namespace('ns').set('n', 'old n', 60_000);
    expect(await b.getMany(keys)).toEqual(keys.map((k) => `old ${k}`)); // in b's L1 now
    const admin = clusterClient(true);
    await admin.ping(); // connected: its node list is known
    const masters = admin.nodes('master');
    const pattern = `${family}-clr:{????????}:v:*`;
    const valueKeysPerNode = async () => Promise.all(masters.map(async (n) => (await n.scan('0', 'MATCH', pattern, 'COUNT', 10_000))[1].length));
    expect((await valueKeysPerNode()).filter((n) => n > 0).length).toBeGreaterThan(1); // spread over several masters
    await a.clear();
    expect(await valueKeysPerNode()).toEqual(masters.map(() => 0));
    expect(await b.getMany(keys)).toEqual(keys.map(() => undefined));
    expect(await b.namespace('ns').get('n')).toBeUndefined();
  });

  it('cache.clear() on a client still connecting waits for it to know every master, then clears them all', async () => {
    const writer = await cache('clr2');
    const keys = Array.from({ length: 60 }, (_, i) => `c${i}`);
    for (const k of keys) await writer.set(k, `old ${k}`, 60_000);
    // A new client given one startup node, no command sent yet: an ioredis Cluster knows none of its
    // masters at first, then only that node, until its slot map is read.
    const one = family === 'ioredis' ? new Cluster(cluster.startup.slice(0, 1), { redisOptions: { maxRetriesPerRequest: 1, ...(AS_ACL_USER ? ACL_USER : {}) } }) : undefined;
    if (one) {
      one.on('error', () => undefined);
      clients.push(one);
    }
    const fresh = one ? createCache({ redis: one, prefix: `${family}-clr2` }) : await cache('clr2');
    if (one) caches.push(fresh);
    await fresh.clear();
    expect(await writer.getMany(keys)).toEqual(keys.map(() => undefined));
  });

  it('the entry keys of different user keys spread over more than one node', async () => {
    const admin = clusterClient(true);
    const slots = new Set<number>();
    for (let i = 0; i < 50; i++) {
      const slot = (await admin.cluster('KEYSLOT', entryKeys('cl', `k${i}`).value));
      slots.add(Math.floor(slot / (16384 / 3)));
    }
    expect(slots.size).toBeGreaterThan(1);
  });

  it('a stampede from two cache instances runs the loader once', async () => {
    const a = await cache('cl2');
    const b = await cache('cl2');
    let runs = 0;
    const loader = async () => {
      runs++;
      await new Promise((r) => setTimeout(r, 200));
      return 'v';
    };
    const calls = Array.from({ length: 30 }, (_, i) => (i % 2 ? a : b).getOrCompute('hot{1}', loader, { ttl: 60_000, waitTimeout: 30_000 }));
    expect(await Promise.all(calls)).toEqual(Array(30).fill('v'));
    expect(runs).toBe(1);
  });

  it('a waiter is woken by pub/sub on the cluster (its poll is an hour away)', async () => {
    const a = await cache('cl3');
    const b = await cache('cl3', { defaults: { pollInterval: 3_600_000, waitTimeout: 3_600_000 } });
    await Promise.all([a.ready(), b.ready()]);
    const held = await heldRebuild<string>(a, 'w}');
    const waiting = await missedCall(b, 'w}', () => 'from-b');
    held.open('from-a');
    expect(await held.call).toBe('from-a');
    expect(await waiting.call).toBe('from-a');
  });

  it.each(['broadcast', 'sharded'] as const)("notes %s: a waiter is woken by another instance's set(); sharded, the note stays in its shard (no master forwards a PUBLISH over the cluster bus)", async (notes) => {
    const prefix = `cl3${notes[0]}`;
    const a = await cache(prefix, { notes });
    const b = await cache(prefix, { notes, defaults: { pollInterval: 3_600_000, waitTimeout: 3_600_000 } });
    await Promise.all([a.ready(), b.ready()]);
    const admin = clusterClient(true);
    const keys = entryKeys(`${family}-${prefix}`, 'w}');
    // Someone else holds the rebuild: b can only wait, and only a note can wake it (its poll is an hour away).
    await admin.set(keys.lock, 'someone-else', 'PX', 600_000);
    const nodes = cluster.nodes.map((n) => {
      const c = new Redis(n.adminUrl, { maxRetriesPerRequest: 1 });
      c.on('error', () => undefined);
      disposals.push(() => c.disconnect());
      return c;
    });
    const busPublishes = async (): Promise<number> => {
      const sent = await Promise.all(nodes.map(async (n) => Number(/cluster_stats_messages_publish_sent:(\d+)/.exec(String(await n.call('CLUSTER', 'INFO')))?.[1] ?? 0)));
      return sent.reduce((x, y) => x + y, 0);
    };
    const shardSubscribers = async (): Promise<number> => {
      const counts = await Promise.all(nodes.map(async (n) => Number(((await n.call('PUBSUB', 'SHARDNUMSUB', keys.wake)) as [string, number])[1])));
      return counts.reduce((x, y) => x + y, 0);
    };
    const before = await busPublishes();
    const waiting = await missedCall(b, 'w}', () => 'from-b');
    // Sharded: b subscribes to the key's channel before its lock attempt; the set() below comes after.
    if (notes === 'sharded') while ((await shardSubscribers()) === 0) await new Promise((r) => setTimeout(r, 10));
    await a.set('w}', 'from-a', 60_000);
    expect(await waiting.call).toBe('from-a');
    const after = await busPublishes();
    if (notes === 'sharded') {
      expect(after).toBe(before);
      // Subscribed only while it waited.
      while ((await shardSubscribers()) !== 0) await new Promise((r) => setTimeout(r, 10));
    } else {
      expect(after).toBeGreaterThan(before); // the control: a classic note is forwarded to every master
    }
  });

  it("delete() drops another instance's L1 copy over the cluster's pub/sub", async () => {
    const a = await cache('cl4', { local: { max: 10 } });
    const b = await cache('cl4', { local: { max: 10 } });
    await Promise.all([a.ready(), b.ready()]);
    await a.set('{d}', 1, 60_000);
    expect(await b.get('{d}')).toBe(1);
    const dropped = nextEvent(b, 'remoteChange');
    await a.delete('{d}');
    await dropped;
    expect(await b.get('{d}')).toBeUndefined();
  });

  it('a delete made while its pub/sub connection was killed and held out does not survive in its L1; the subscription comes back', async () => {
    const a = await cache('cl4k', { local: { max: 10 } });
    const b = await cache('cl4k', { local: { max: 10 }, redisTimeout: 3000 });
    expect(await a.ready()).toBe(true);
    expect(await b.ready()).toBe(true);
    const l1Of = (c: Cache) => ((c as unknown as { rt: unknown }).rt as { local: { get(k: string): { value: unknown } | undefined } }).local;
    const setSeen = nextEvent(b, 'remoteChange');
    await a.set('{k}', 1, 60_000);
    await setSeen; // (a read racing the set's note would rightly not fill L1)
    expect(await b.get('{k}')).toBe(1);
    expect(l1Of(b).get('{k}')?.value).toBe(1); // in b's L1
    // Count the subscription's downs as b's bus reports them.
    const downs = subscriptionDowns(b);
    const admin = clusterClient(true);
    await admin.cluster('INFO'); // connected: its node list is known
    const masters = admin.nodes('master');
    // Hold every new connection out (maxclients = the clients left once the pub/sub ones are killed),
    // then kill the pub/sub connections: no subscriber can come back before the delete is published.
    const lines = (reply: unknown) => String(reply).split('\n').filter((l) => l.trim() !== '').length;
    for (const n of masters) await n.config('SET', 'maxclients', String(lines(await n.client('LIST')) - lines(await n.call('CLIENT', 'LIST', 'TYPE', 'pubsub'))));
    try {
      const killed = await Promise.all(masters.map((n) => n.client('KILL', 'TYPE', 'pubsub')));
      expect(killed.map(Number).reduce((x, y) => x + y, 0)).toBeGreaterThanOrEqual(2);
      await a.delete('{k}'); // its note reaches no subscriber of b
      for (let i = 0; i < 100 && downs.count === 0; i++) await new Promise((r) => setTimeout(r, 10));
    } finally {
      for (const n of masters) await n.config('SET', 'maxclients', '10000');
    }
    expect(await subscribed(b)).toBe(true); // re-subscribed within redisTimeout
    expect(await b.get('{k}')).toBeUndefined(); // L1 was flushed: the copy the delete dropped elsewhere is gone here too
    expect(downs.count).toBeGreaterThan(0);
    // And coherent again: a later delete reaches b's L1 over the new subscription.
    const setAgain = nextEvent(b, 'remoteChange');
    await a.set('{k}', 2, 60_000);
    await setAgain;
    expect(await b.get('{k}')).toBe(2);
    expect(l1Of(b).get('{k}')?.value).toBe(2);
    const dropped = nextEvent(b, 'remoteChange');
    await a.delete('{k}');
    await dropped;
    expect(await b.get('{k}')).toBeUndefined();
  });

  describe('tags (records in one slot of their own, the check on every read of a tagged entry: docs/tags.md)', () => {
    /** Two caches on one prefix, each with L1: two processes of one service. `unsafe`: negative-control switches for both. */
    async function pair(prefix: string, unsafe?: UnsafeSwitches): Promise<[Cache, Cache]> {
      const extra = { local: { max: 1000 }, ...(unsafe ? { [UNSAFE]: unsafe } : {}) } as Partial<CacheOptions>;
      const a = await cache(prefix, extra);
      const b = await cache(prefix, extra);
      expect(await a.ready()).toBe(true);
      expect(await b.ready()).toBe(true);
      return [a, b];
    }
    const tagged = { ttl: 60_000, tags: ['org:3'] };

    it('deleteByTag: another cache never returns an entry tagged so after it resolves (Redis and its L1), whichever master holds the entry; other tags and untagged entries stay', async () => {
      const [a, b] = await pair('tg1');
      const keys = Array.from({ length: 12 }, (_, i) => `t${i}`);
      for (const k of keys) await a.getOrCompute(k, () => `old ${k}`, { ttl: 60_000, tags: ['org:3', `user:${k}`] });
      await a.set('other', 'o', { ttl: 60_000, tags: ['org:4'] });
      await a.set('plain', 'p', 60_000);
      expect(await b.getMany(keys)).toEqual(keys.map((k) => `old ${k}`)); // from Redis, each checked
      expect(await b.getMany(keys)).toEqual(keys.map((k) => `old ${k}`)); // b's L1
      // The entries are spread over several masters; every record of the cache is in one slot.
      const admin = clusterClient(true);
      const ranges = await admin.cluster('SLOTS');
      const owner = (slot: number) => ranges.find(([from, to]) => slot >= from && slot <= to)?.[2]?.[1];
      expect(new Set(keys.map((k) => owner(hashSlot(k)))).size).toBeGreaterThan(1);
      const records = ['org:3', 'org:4', ...keys.map((k) => `user:${k}`)].map((t) => tagRecordKey(`${family}-tg1`, '', t));
      expect(new Set(await Promise.all(records.map((r) => admin.cluster('KEYSLOT', r)))).size).toBe(1);
      expect(await admin.exists(...records)).toBe(records.length);

      await a.deleteByTag('org:3');

      expect(await b.getMany(keys)).toEqual(keys.map(() => undefined));
      expect(await a.get('t0')).toBeUndefined();
      expect(b.stats().tagInvalidations).toBe(keys.length);
      expect(await b.get('other')).toBe('o');
      expect(await b.get('plain')).toBe('p');
      let ran = 0;
      expect(await b.getOrCompute('t0', () => (ran++, 'new'), tagged)).toBe('new');
      expect(ran).toBe(1);
      expect(await a.get('t0')).toBe('new');
    });

    it('a loader paused past deleteByTag (granted before, writing after): no call that starts after it gets its value, in either cache', async () => {
      // Negative controls (SG_NEGATIVE_CONTROL), each must fail this test: tag-snapshot-at-write (the
      // entry carries the time of its write instead of its grant's), tag-read-unchecked (a tagged entry
      // read from Redis is served without the check of its records: on a Cluster the write lands, and
      // the read's check is what keeps it unserved).
      const control = process.env.SG_NEGATIVE_CONTROL;
      const unsafe = control === 'tag-snapshot-at-write' ? { tagSnapshotAtWrite: true } : control === 'tag-read-unchecked' ? { tagReadUnchecked: true } : undefined;
      const [a, b] = await pair('tg2', unsafe);
      const held = await heldRebuild<string>(a, 'k', tagged); // granted, then paused
      const before = b.getOrCompute('k', () => 'b-before', tagged); // waits on a's lock

      await b.deleteByTag('org:3');

      const afterA = a.getOrCompute('k', () => 'a-after', tagged); // joins a's load, runs again once it settles
      const afterB = b.getOrCompute('k', () => 'b-after', tagged); // waits on a's lock, re-reads at its write
      let rejected = 0;
      a.on('writeRejected', () => rejected++);
      held.open('paused-old');
      expect(await held.call).toBe('paused-old'); // its own caller started before the deleteByTag
      expect(await Promise.all([afterA, afterB])).not.toContain('paused-old');
      expect(rejected).toBe(1); // the records checked alongside the write found it invalid
      expect(await b.get('k')).not.toBe('paused-old');
      expect(await a.get('k')).not.toBe('paused-old');
      await before;
    });

    it('tags chosen by the loader (ctx.setOptions) count from the grant: a deleteByTag during the load leaves its value unserved; a call that declares no tags may not add any (ERR_INVALID_OPTION, nothing written)', async () => {
      const [a, b] = await pair('tg3');
      // Only a call that declares tags takes its grant time on the records' node: `tags: []` does.
      const declared = { ttl: 60_000, tags: [] };
      await expect(a.getOrCompute('lc', (ctx) => (ctx.setOptions({ tags: ['org:9'] }), 'undeclared'), 60_000)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'ctx.setOptions.tags' });
      expect(await b.get('lc')).toBeUndefined();
      // A tag without a record yet (its first use) is unknown at the grant: that first value is not
      // served from Redis (one more load, once); the next lands.
      expect(await a.getOrCompute('lc', (ctx) => (ctx.setOptions({ tags: ['org:9'] }), 'v-first'), declared)).toBe('v-first');
      expect(await b.get('lc')).toBeUndefined();
      expect(await a.getOrCompute('lc', (ctx) => (ctx.setOptions({ tags: ['org:9'] }), 'v0'), declared)).toBe('v0');
      expect(await b.get('lc')).toBe('v0');
      await a.deleteByTag('org:9');
      expect(await b.get('lc')).toBeUndefined();

      // A load granted before a deleteByTag, whose loader names the tag only afterwards.
      const gate = deferred<void>();
      const started = deferred<void>();
      const call = a.getOrCompute('lc', async (ctx) => (started.resolve(), await gate.promise, ctx.setOptions({ tags: ['org:9'] }), 'v-old'), declared);
      await started.promise;
      await b.deleteByTag('org:9');
      const rejected = nextEvent(a, 'writeRejected');
      gate.resolve();
      expect(await call).toBe('v-old');
      await rejected;
      expect(await b.get('lc')).toBeUndefined();
      expect(await a.get('lc')).toBeUndefined();
      expect(await b.getOrCompute('lc', (ctx) => (ctx.setOptions({ tags: ['org:9'] }), 'v1'), declared)).toBe('v1');
      expect(await a.get('lc')).toBe('v1');
    });

    it('expireByTag: no fresh answer after it resolves; the old value is served stale while one rebuild runs for both caches', async () => {
      const [a, b] = await pair('tg4');
      const stale = { ttl: 60_000, staleTtl: 30_000, tags: ['org:3'] };
      await a.getOrCompute('e', () => 'old', stale);
      await a.set('e4', 'other', { ...stale, tags: ['org:4'] });
      expect(await b.get('e')).toBe('old');
      expect(await b.get('e')).toBe('old'); // b's L1

      await a.expireByTag('org:3');

      expect(await b.get('e')).toBeUndefined(); // get() answers fresh values only
      const gate = deferred<void>();
      let runs = 0;
      const loader = async () => (runs++, await gate.promise, 'new');
      const written = new Promise<void>((resolve) => [a, b].forEach((c) => c.on('computed', (e) => e.key === 'e' && e.written && resolve())));
      expect(await Promise.all([b.getOrCompute('e', loader, stale), a.getOrCompute('e', loader, stale), b.getOrCompute('e', loader, stale)])).toEqual(['old', 'old', 'old']);
      gate.resolve();
      await written;
      expect(await b.get('e')).toBe('new');
      expect(await a.get('e')).toBe('new');
      expect(runs).toBe(1);
      expect(await b.get('e4')).toBe('other');
    });

    it("what a hit costs: untagged, one command on its entry's master; tagged from Redis, that and one script on the records' master (none while its tag states are kept); tagged from L1, none; an untagged miss sends nothing to the records' master", async () => {
      const prefix = `${family}-tg6`;
      const a = await cache('tg6', { local: false });
      const l1 = await cache('tg6', { local: { max: 100 } });
      expect(await a.ready()).toBe(true);
      const admin = clusterClient(true);
      await admin.ping();
      const masters = admin.nodes('master');
      const ranges = await admin.cluster('SLOTS');
      const masterOf = (slot: number) => String(ranges.find(([from, to]) => slot >= from && slot <= to)?.[2]?.[1]);
      const recordsMaster = masterOf(Number(await admin.cluster('KEYSLOT', tagRecordKey(prefix, '', 'x'))));
      // A tagged key whose entry is on another master than the records.
      const key = Array.from({ length: 50 }, (_, i) => `tagged${i}`).find((k) => masterOf(hashSlot(k)) !== recordsMaster) as string;
      // A second tagged key on the same master, whose tag this cache has not read yet.
      const fresh = Array.from({ length: 50 }, (_, i) => `other${i}`).find((k) => masterOf(hashSlot(k)) === masterOf(hashSlot(key))) as string;
      await a.set('plain', 'p', 60_000);
      await a.set(key, 't', { ttl: 60_000, tags: ['x'] });
      await a.set(fresh, 'f', { ttl: 60_000, tags: ['y'] });
      await a.get('plain'); // each node's clock sampled: hits are plain reads from now on
      await a.get(key);
      // The reads each master ran meanwhile (INFO commandstats): plain reads and scripts — the commands
      // a script runs are counted too, and nothing else the cache sends on a hit (heartbeats are PINGs).
      const READS = /^(getrange|evalsha|evalsha_ro|eval|eval_ro)$/;
      const stats = async () =>
        Object.fromEntries(
          await Promise.all(
            masters.map(async (n) => {
              const counts = new Map<string, number>();
              for (const m of (await n.info('commandstats')).matchAll(/cmdstat_([^:]+):calls=(\d+)/g)) if (READS.test(m[1] as string)) counts.set(m[1] as string, Number(m[2]));
              return [String(n.options.port), counts] as const;
            }),
          ),
        );
      /** What `read` of `entry` sent, as `command@node`: node 'entry' (its entry's master), 'records' (the records' master) or a port. */
      const sentBy = async (entry: string, read: () => Promise<unknown>): Promise<string[]> => {
        const before = await stats();
        await read();
        const after = await stats();
        const where = (port: string) => (port === masterOf(hashSlot(entry)) ? 'entry' : port === recordsMaster ? 'records' : port);
        const out: string[] = [];
        for (const [port, counts] of Object.entries(after)) for (const [cmd, n] of counts) for (let i = before[port]?.get(cmd) ?? 0; i < n; i++) out.push(`${cmd}@${where(port)}`);
        return out.sort();
      };
      expect(await sentBy('plain', async () => expect(await a.get('plain')).toBe('p'))).toEqual(['getrange@entry']);
      // Its tag's record read for the first time here: the records' script; then its state is kept.
      expect(await sentBy(fresh, async () => expect(await a.get(fresh)).toBe('f'))).toEqual(['evalsha@records', 'getrange@entry']);
      expect(await sentBy(fresh, async () => expect(await a.get(fresh)).toBe('f'))).toEqual(['getrange@entry']);
      expect(await sentBy(key, async () => expect(await a.get(key)).toBe('t'))).toEqual(['getrange@entry']);
      await l1.set(key, 't', { ttl: 60_000, tags: ['x'] });
      expect(await sentBy(key, async () => expect(await l1.get(key)).toBe('t'))).toEqual([]);
      // A miss of a call that declares no tags: its grant, load and write, none on the records' master.
      const miss = Array.from({ length: 50 }, (_, i) => `miss${i}`).find((k) => masterOf(hashSlot(k)) !== recordsMaster) as string;
      const sent = await sentBy(miss, async () => expect(await a.getOrCompute(miss, () => 'loaded', 60_000)).toBe('loaded'));
      expect(sent.length).toBeGreaterThan(0);
      expect(sent.filter((c) => c.endsWith('@records'))).toEqual([]);
    });

    it('getOrComputeMany with tags: its keys, on several masters, are gone for another cache once deleteByTag resolves; a batch that declares no tags may not tag keys from loadMany', async () => {
      const [a, b] = await pair('tg7');
      const keys = Array.from({ length: 8 }, (_, i) => `m${i}`);
      expect(await a.getOrComputeMany(keys, (missing) => new Map(missing.map((k) => [k, `old ${k}`])), tagged)).toEqual(keys.map((k) => `old ${k}`));
      expect(await b.getMany(keys)).toEqual(keys.map((k) => `old ${k}`));
      await a.deleteByTag('org:3');
      expect(await b.getMany(keys)).toEqual(keys.map(() => undefined));
      // Per-key tags from loadMany need the batch to declare tags (`tags: []`), as a single call's loader does.
      const undeclared = a.getOrComputeMany(['u1'], (missing, ctx) => (ctx.setOptions('u1', { tags: ['org:3'] }), new Map(missing.map((k) => [k, 'u']))), 60_000);
      await expect(undeclared).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'ctx.setOptions.tags' });
      expect(await a.getOrComputeMany(['u2'], (missing, ctx) => (ctx.setOptions('u2', { tags: ['org:3'] }), new Map(missing.map((k) => [k, 'u']))), { ttl: 60_000, tags: [] })).toEqual(['u']);
    });

    it("namespaces: ns.deleteByTag reaches only its entries (and its nested namespaces'); cache.deleteByTag reaches namespaced ones", async () => {
      const [a, b] = await pair('tg5');
      const users = a.namespace('users');
      await users.set('1', 'u1', tagged);
      await users.namespace('admins').set('1', 'a1', tagged);
      await a.namespace('orders').set('1', 'o1', tagged);
      await a.set('1', 'p1', tagged);
      expect(await b.namespace('users').get('1')).toBe('u1');

      await users.deleteByTag('org:3');
      expect(await b.namespace('users').get('1')).toBeUndefined();
      expect(await b.namespace('users').namespace('admins').get('1')).toBeUndefined();
      expect(await b.namespace('orders').get('1')).toBe('o1');
      expect(await b.get('1')).toBe('p1');

      await b.deleteByTag('org:3');
      expect(await a.namespace('orders').get('1')).toBeUndefined();
      expect(await a.get('1')).toBeUndefined();
    });
  });

  it('fencing: a set() during an in-flight rebuild wins', async () => {
    const c = await cache('cl5');
    const held = await heldRebuild<string>(c, '}f');
    await c.set('}f', 'newer', 60_000);
    held.open('older');
    await held.call;
    expect(await c.get('}f')).toBe('newer');
  });

  it('stale serving works on the cluster', async () => {
    const c = await cache('cl6');
    await c.getOrCompute('s{', () => 'old', { ttl: 50, staleTtl: 60_000 });
    await new Promise((r) => setTimeout(r, 120));
    const gate = deferred<string>();
    expect(await c.getOrCompute('s{', () => gate.promise, { ttl: 60_000, staleTtl: 60_000 })).toBe('old');
    const computed = nextEvent(c, 'computed');
    gate.resolve('new');
    await computed;
    expect(await c.get('s{')).toBe('new');
  });
});

// ---------------------------------------------------------------- node-redis: EVAL first, per node

/** NOSCRIPT replies a node has sent since its stats were reset (INFO errorstats). */
async function noscripts(node: Redis): Promise<number> {
  return Number(/errorstat_NOSCRIPT:count=(\d+)/.exec(await node.info('errorstats'))?.[1] ?? 0);
}

describe.each<'node-redis' | 'node-redis5'>(['node-redis', 'node-redis5'])('%s Cluster: scripts run with EVAL first on every node', (family) => {
  it('a script\'s first run on each master is EVAL, not EVALSHA then NOSCRIPT: no node replies NOSCRIPT', async () => {
    const nodes = cluster.nodes.map((n) => {
      const c = new Redis(n.adminUrl, { maxRetriesPerRequest: 1 });
      c.on('error', () => undefined);
      return c;
    });
    try {
      // No node has a script cached, and no NOSCRIPT counted so far.
      await Promise.all(nodes.map(async (n) => (await n.script('FLUSH'), await n.config('RESETSTAT'))));
      const client = await nodeRedisClusterClient(cluster, disposals, family === 'node-redis' ? 6 : 5);
      const port = portFor(client);
      const prefix = `${family}-evalfirst`;
      // One user key per master, in turn: the scripts' first runs on the second and third masters come after the first's.
      const byNode = new Map<string, string>();
      for (let i = 0; byNode.size < cluster.nodes.length; i++) {
        const owner = port.nodeOf(entryKeys(prefix, `e${i}`).value);
        if (!byNode.has(owner)) byNode.set(owner, `e${i}`);
      }
      const c = createCache({ redis: client, prefix });
      caches.push(c);
      for (const key of byNode.values()) {
        expect(await c.getOrCompute(key, () => `v:${key}`, 60_000)).toBe(`v:${key}`);
        expect(await c.get(key)).toBe(`v:${key}`);
      }
      expect(await Promise.all(nodes.map(noscripts))).toEqual(nodes.map(() => 0));
    } finally {
      for (const n of nodes) n.disconnect();
    }
  });
});

// ---------------------------------------------------------------- the batch API (issue #11)

const BATCH_KEYS = [...Array.from({ length: 60 }, (_, i) => `k${i}`), '}', 'a{b}c', '{}'];

describe.each<'ioredis' | 'ioredis6'>(['ioredis', 'ioredis6'])('%s Cluster with enableAutoPipelining and a keyPrefix', (family) => {
  it('stored values are hits from Redis: the read script (ioredis\'s own EVALSHA) keeps its name, keys, prefix and slot through the auto-pipeline', async () => {
    const options = { enableAutoPipelining: true, keyPrefix: 'ap:', redisOptions: { maxRetriesPerRequest: 1, ...(AS_ACL_USER ? ACL_USER : {}) } };
    const client = family === 'ioredis' ? new Cluster(cluster.startup, options) : new Cluster6(cluster.startup, options);
    client.on('error', () => undefined);
    disposals.push(() => client.disconnect());
    const cache = createCache({ redis: client, prefix: `${family}-autopipe` });
    caches.push(cache);
    const degraded: unknown[] = [];
    cache.on('degraded', (e) => degraded.push(e.error));
    const keys = Array.from({ length: 12 }, (_, i) => `k${i}`);
    await Promise.all(keys.map((k) => cache.set(k, `v-${k}`, 60_000)));
    let loads = 0;
    const values = await Promise.all(keys.map((k) => cache.getOrCompute(k, () => (loads++, 'loaded'), 60_000)));
    expect(values).toEqual(keys.map((k) => `v-${k}`));
    expect(loads).toBe(0);
    expect(degraded).toEqual([]);
    // Under the client's prefix (12 keys: their slots fall on more than one master, see 'the entry keys … spread').
    const admin = clusterClient(true);
    expect(await admin.exists(`ap:${entryKeys(`${family}-autopipe`, keys[0] as string).value}`)).toBe(1);
  });
});

describe('batch API on a Redis Cluster (3 masters)', () => {
  function cache(prefix: string): Cache {
    const c = createCache({ redis: clusterClient(), prefix });
    caches.push(c);
    return c;
  }

  it('hashSlot agrees with the cluster’s CLUSTER KEYSLOT for every entry key', async () => {
    const admin = clusterClient(true);
    for (const key of BATCH_KEYS) expect(await admin.cluster('KEYSLOT', entryKeys('cb', key).value)).toBe(hashSlot(key));
  });

  it('getMany and deleteMany over keys on every node: one pipeline per slot, no CROSSSLOT, values aligned', async () => {
    const client = clusterClient();
    const c = createCache({ redis: client, prefix: 'cb1' });
    caches.push(c);
    for (const key of BATCH_KEYS.slice(0, 40)) await c.set(key, `v:${key}`, 60_000);
    let pipelines = 0;
    const original = client.pipeline.bind(client);
    client.pipeline = (...args: Parameters<Cluster['pipeline']>) => (pipelines++, original(...args));
    const values = await c.getMany(BATCH_KEYS);
    expect(values).toEqual(BATCH_KEYS.map((k, i) => (i < 40 ? `v:${k}` : undefined)));
    expect(pipelines).toBe(new Set(BATCH_KEYS.map(hashSlot)).size);
    await c.deleteMany(BATCH_KEYS.slice(0, 20));
    expect(await c.getMany(BATCH_KEYS.slice(0, 40))).toEqual(BATCH_KEYS.slice(0, 40).map((k, i) => (i < 20 ? undefined : `v:${k}`)));
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
    const [va, vb] = await Promise.all([a.getOrComputeMany(BATCH_KEYS, loadMany, 60_000), b.getOrComputeMany([...BATCH_KEYS].reverse(), loadMany, 60_000)]);
    expect(va).toEqual(BATCH_KEYS.map((k) => `v:${k}`));
    expect(vb).toEqual([...BATCH_KEYS].reverse().map((k) => `v:${k}`));
    for (const k of BATCH_KEYS) expect(loads.get(k), k).toBe(1);
    expect(calls.length).toBeLessThanOrEqual(2);
  });

  it('namespace clear() on a Cluster: the old entries are gone for the clearing cache at once', async () => {
    const c = cache('cb3');
    await c.ready();
    const ns = c.namespace('users');
    for (const key of BATCH_KEYS.slice(0, 10)) await ns.set(key, 1, 60_000);
    await ns.clear();
    expect(await ns.getMany(BATCH_KEYS.slice(0, 10))).toEqual(BATCH_KEYS.slice(0, 10).map(() => undefined));
  });
});

describe('clear() acknowledgements on a Cluster with one node not answering', () => {
  it.each(['ioredis', 'node-redis'] as const)('%s: the subscribers of the nodes that answered are counted, not none', async (family) => {
    const a = createCache({ redis: await cacheClient(family), prefix: `cnum${family}`, redisTimeout: 300 });
    caches.push(a);
    expect(await subscribed(a)).toBe(true);
    const channel = ((a as unknown as { rt: unknown }).rt as { bus: { channel: string } }).bus.channel;
    // Which node holds a's subscription: count on each node as admin.
    const admins = cluster.nodes.map((n) => {
      const r = new Redis(n.adminUrl, { maxRetriesPerRequest: 1 });
      r.on('error', () => undefined);
      return r;
    });
    try {
      const counts = await Promise.all(admins.map(async (r) => Number(((await r.call('PUBSUB', 'NUMSUB', channel)) as [string, number])[1])));
      expect(counts.reduce((x, y) => x + y, 0)).toBe(1);
      const quiet = cluster.nodes[counts.findIndex((n) => n === 0)] as (typeof cluster.nodes)[number];
      const internals = (a as unknown as { rt: unknown }).rt as { port: Parameters<typeof clusterReceivers>[0]; io: Parameters<typeof clusterReceivers>[1] };
      quiet.pause();
      try {
        expect(await clusterReceivers(internals.port, internals.io, channel)).toBe(1);
      } finally {
        quiet.resume();
      }
    } finally {
      for (const r of admins) r.disconnect();
    }
  });
});
