import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { createCache, type Cache, type CacheOptions, type LockMode } from '../../src/index.js';
import { Io } from '../../src/io.js';
import { entryKeys } from '../../src/keys.js';
import { RedlockLock } from '../../src/lock/redlock.js';
import { portFor } from '../../src/client/detect.js';
import { defineScripts } from '../../src/lock/scripts.js';
import { StoreLock, type LockDeps } from '../../src/lock/single.js';
import { resolveCacheOptions, resolveCallOptions, systemClock, type ResolvedRedlock } from '../../src/options.js';
import { UNSAFE } from '../../src/unsafe.js';
import { Bus } from '../../src/wait.js';
import { broadcastNotes } from '../../src/wake.js';
import { familyClient, type ClientFamily } from '../support/clients.js';
import { deferred, nextEvent } from '../support/harness.js';
import { FENCED_WRITE, maxActiveKey, runsKey } from '../support/counting-loader.js';
import { startRedisServer, type RedisServer } from '../support/redis-server.js';
import { startWorkers, type Worker } from '../support/workers.js';

let store: RedisServer;
let nodes: RedisServer[];
const clients: Redis[] = [];
const disposals: (() => void)[] = [];
const caches: Cache[] = [];

beforeAll(async () => {
  const servers = await Promise.all(Array.from({ length: 6 }, () => startRedisServer()));
  store = servers[0] as RedisServer;
  nodes = servers.slice(1);
});
afterAll(async () => {
  await Promise.all(caches.map((c) => c.close()));
  for (const c of clients) c.disconnect();
  for (const dispose of disposals) dispose();
  await Promise.all([store, ...nodes].map((s) => s.stop()));
});
afterEach(async () => {
  // Every test leaves all nodes running and answering.
  for (const n of nodes) n.resume();
  for (const n of nodes) {
    if (n.pid === undefined || !(await ping(n))) await n.restart();
  }
});

async function ping(server: RedisServer): Promise<boolean> {
  const c = new Redis(server.url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 500 });
  c.on('error', () => undefined);
  try {
    await c.connect();
    return (await c.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    c.disconnect();
  }
}

function client(url: string): Redis {
  const c = new Redis(url, { maxRetriesPerRequest: 1 });
  c.on('error', () => undefined);
  clients.push(c);
  return c;
}

/** Node i's client family: all ioredis, or the families mixed (the store then on node-redis). */
type NodeFamilies = 'ioredis' | 'mixed';
const MIXED: readonly ClientFamily[] = ['node-redis', 'ioredis', 'node-redis5', 'ioredis6'];
let families: NodeFamilies = 'ioredis';
function clientOf(url: string, family: ClientFamily) {
  const { client: c, dispose } = familyClient(url, family);
  disposals.push(dispose);
  return c;
}

let prefixes = 0;
/**
 * A redlock cache over the first `count` nodes, once the store's and every node's client answered a
 * PING: a connection's set-up (node-redis: AUTH and CLIENT SETINFO before any command) must not eat
 * into the first vote's nodeTimeout (100 ms). Every node is up when a test starts (afterEach).
 */
async function cacheOn(count: 3 | 5, extra: Partial<CacheOptions> = {}, prefix = `rl${++prefixes}`): Promise<Cache> {
  const { redlock, ...rest } = extra;
  const mixed = families === 'mixed';
  const storeClient = mixed ? clientOf(store.url, 'node-redis') : client(store.url);
  const redlockNodes = nodes.slice(0, count).map((n, i) => (mixed ? clientOf(n.url, MIXED[i % MIXED.length] as ClientFamily) : client(n.url)));
  await Promise.all([storeClient, ...redlockNodes].map((c) => c.ping()));
  const cache = createCache({
    redis: storeClient,
    prefix,
    lock: 'redlock',
    redisTimeout: 300,
    redlock: {
      nodeTimeout: 100,
      retryDelay: 50,
      retryJitter: 50,
      ...redlock,
      nodes: redlockNodes,
    },
    ...rest,
  });
  caches.push(cache);
  return cache;
}

function lockOf(cache: Cache, key: string): Promise<LockMode | 'degraded'> {
  return new Promise((resolve) => cache.on('computed', (e) => e.key === key && resolve(e.lock)));
}

describe.each<NodeFamilies>(['ioredis', 'mixed'])('redlock over 5 nodes (%s client families)', (nodeFamilies) => {
  beforeAll(() => {
    families = nodeFamilies;
  });
  afterAll(() => {
    families = 'ioredis';
  });

  it('with 2 nodes killed it is still granted (3 of 5 is a quorum)', async () => {
    const cache = await cacheOn(5);
    await Promise.all([nodes[0]?.kill(), nodes[1]?.kill()]);
    const ran = lockOf(cache, 'k');
    expect(await cache.getOrCompute('k', () => 'v', 60_000)).toBe('v');
    expect(await ran).toBe('redlock');
  });

  it("with 3 nodes killed: onNoQuorum 'throw' rejects with ERR_NO_QUORUM", async () => {
    const cache = await cacheOn(5, { redlock: { nodes: [], onNoQuorum: 'throw', retryCount: 1 } });
    await Promise.all(nodes.slice(0, 3).map((n) => n.kill()));
    await expect(cache.getOrCompute('k', () => 'v', 60_000)).rejects.toMatchObject({ code: 'ERR_NO_QUORUM', key: 'k' });
  });

  it.each(['single', 'local'] as const)("with 3 nodes killed: onNoQuorum '%s' rebuilds under that lock and reports it", async (mode) => {
    const cache = await cacheOn(5, { redlock: { nodes: [], onNoQuorum: mode } });
    await Promise.all(nodes.slice(0, 3).map((n) => n.kill()));
    const ran = lockOf(cache, 'k');
    expect(await cache.getOrCompute('k', () => 'v', 60_000)).toBe('v');
    expect(await ran).toBe(mode);
  });

  it('with 1 node paused (SIGSTOP) it is still granted: the hanging node costs one nodeTimeout, not the acquisition', async () => {
    const cache = await cacheOn(5);
    nodes[0]?.pause();
    const ran = lockOf(cache, 'p');
    expect(await cache.getOrCompute('p', () => 'v', 60_000)).toBe('v');
    expect(await ran).toBe('redlock');
  });

  it('quorum lost mid-loader: ctx.signal aborts with ERR_LOCK_LOST and the late write is rejected after a newer grant wrote', async () => {
    // Set SG_TEST_UNFENCED_A=1 to run the negative control: a's write skips the fence, and this test must fail.
    const unfenced = process.env.SG_TEST_UNFENCED_A === '1';
    const a = await cacheOn(5, { defaults: { lockTtl: 600 }, [UNSAFE]: { unfencedWrites: unfenced } } as Partial<CacheOptions>, `lost-${nodeFamilies}`);
    const b = await cacheOn(5, { defaults: { lockTtl: 600 } }, `lost-${nodeFamilies}`);
    const started = deferred<void>();
    const finish = deferred<string>();
    let aborted: unknown;
    const aCall = a.getOrCompute('q', async (ctx) => {
      started.resolve();
      ctx.signal.addEventListener('abort', () => {
        aborted = ctx.signal.reason;
      });
      return finish.promise; // a loader that ignores its signal and finishes late
    }, 60_000);
    await started.promise;
    await Promise.all(nodes.slice(0, 3).map((n) => n.kill()));
    await nextEvent(a, 'lockLost');
    expect(aborted).toMatchObject({ code: 'ERR_LOCK_LOST' });
    // The nodes come back empty; b takes a newer grant and writes. Nothing else touches the key (no
    // delete, no set): the only thing that can refuse a's late write is b's accepted write.
    await Promise.all(nodes.slice(0, 3).map((n) => n.restart()));
    const bComputed = nextEvent(b, 'computed');
    expect(await b.getOrCompute('q', () => 'newer', 60_000)).toBe('newer');
    expect(await bComputed).toMatchObject({ written: true }); // under redlock, or onNoQuorum's 'local' while the nodes reconnect
    let rejected = false;
    a.on('writeRejected', () => (rejected = true));
    const aComputed = nextEvent(a, 'computed');
    finish.resolve('stale');
    expect(await aCall).toBe('stale');
    expect(await aComputed).toMatchObject({ written: false });
    expect(rejected).toBe(true);
    expect(await b.get('q')).toBe('newer'); // b has no L1: this reads the store
  });

  it('two contenders started together never hold a Redlock grant at the same time', async () => {
    const a = await cacheOn(5, {}, `pair-${nodeFamilies}`);
    const b = await cacheOn(5, {}, `pair-${nodeFamilies}`);
    const intervals: [number, number][] = [];
    let holding = 0;
    let overlaps = 0;
    // undefined = "do not cache", so every call needs a grant of its own.
    const loader = async () => {
      if (++holding > 1) overlaps++;
      const start = performance.now();
      await new Promise((r) => setTimeout(r, 20));
      intervals.push([start, performance.now()]);
      holding--;
      return undefined;
    };
    const calls = [];
    for (let i = 0; i < 10; i++) {
      calls.push(a.getOrCompute('pair', loader, { ttl: 1000, waitTimeout: 30_000, pollInterval: 20 }));
      calls.push(b.getOrCompute('pair', loader, { ttl: 1000, waitTimeout: 30_000, pollInterval: 20 }));
    }
    await Promise.all(calls);
    expect(intervals.length).toBeGreaterThanOrEqual(2);
    expect(overlaps).toBe(0);
    intervals.sort((x, y) => x[0] - y[0]);
    for (let i = 1; i < intervals.length; i++) expect((intervals[i] as [number, number])[0]).toBeGreaterThanOrEqual((intervals[i - 1] as [number, number])[1]);
  });
});

describe('redlock over 3 nodes', () => {
  it("a split vote never falls back to onNoQuorum: the second caller waits while the valid holder holds", async () => {
    const opts = { defaults: { lockTtl: 6000, failBackoff: 0 }, redlock: { nodes: [], onNoQuorum: 'local' as const } };
    const a = await cacheOn(3, opts, 'split');
    const b = await cacheOn(3, opts, 'split');
    const log: string[] = [];
    // A holds nodes 0 and 1 only: node 2 carries a foreign token while A votes.
    const node2 = client((nodes[2] as RedisServer).adminUrl);
    const lockKey = entryKeys('split', 's').lock;
    await node2.set(lockKey, 'foreign', 'PX', 60_000);
    const started = deferred<void>();
    const aCall = a.getOrCompute('s', (ctx) => {
      log.push('a-start');
      started.resolve();
      return new Promise<string>((_, reject) => ctx.signal.addEventListener('abort', () => {
        log.push('a-lost');
        reject(ctx.signal.reason as Error);
      }));
    }, 60_000);
    aCall.catch(() => undefined);
    await started.promise;
    await node2.del(lockKey);
    await nodes[0]?.kill(); // A keeps a valid grant until its watchdog finds too few nodes (lockTtl/3)
    const bMode = lockOf(b, 's');
    // B's votes: node 0 down, node 1 A's, node 2 B's — a split vote, not a missing quorum.
    const bValue = await b.getOrCompute('s', () => {
      log.push('b-start');
      return 'b';
    }, { ttl: 60_000, waitTimeout: 30_000 });
    expect(bValue).toBe('b');
    await expect(aCall).rejects.toMatchObject({ code: 'ERR_LOCK_LOST' });
    expect(log).toEqual(['a-start', 'a-lost', 'b-start']);
    expect(await bMode).toBe('redlock');
  });
});

describe('close() during a redlock retry', () => {
  /** Scripts a node has run so far (votes and releases are scripts). */
  async function scriptCalls(admin: Redis): Promise<number> {
    const info = await admin.info('commandstats');
    return [...info.matchAll(/cmdstat_(?:eval|evalsha):calls=(\d+)/g)].reduce((sum, m) => sum + Number(m[1]), 0);
  }

  it('a call sleeping between split-vote retries rejects with ERR_CLOSED as soon as the cache closes', async () => {
    const cache = await cacheOn(3, { redlock: { nodes: [], retryCount: 2, retryDelay: 600_000, retryJitter: 0 } }, 'closing');
    const node2 = client((nodes[2] as RedisServer).adminUrl);
    await client((nodes[1] as RedisServer).adminUrl).set(entryKeys('closing', 'c').lock, 'foreign', 'PX', 60_000);
    await nodes[0]?.kill(); // votes: down, foreign, ours — a split vote, then a 10-minute retry sleep
    const before = await scriptCalls(node2);
    const call = cache.getOrCompute('c', () => 'never', { ttl: 60_000, waitTimeout: 600_000 });
    call.catch(() => undefined);
    // Node 2 ran our vote and its release: the first round is over, the retry sleep has begun.
    await vi.waitFor(async () => expect(await scriptCalls(node2)).toBeGreaterThanOrEqual(before + 2), { timeout: 4000, interval: 10 });
    await cache.close();
    await expect(call).rejects.toMatchObject({ code: 'ERR_CLOSED' });
  });
});

describe('RedlockLock', () => {
  /** A node that fails every command at once (nothing listens, no offline queue). */
  function deadNode(): Redis {
    const c = new Redis({ port: 1, lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null });
    c.on('error', () => undefined);
    clients.push(c);
    return c;
  }

  /** A RedlockLock over `redlockNodes`, its store's client connected first (the fence has a 300 ms redisTimeout). */
  async function lockOver(redlockNodes: Redis[], tuning: Partial<ResolvedRedlock>): Promise<{ lock: RedlockLock; call: ReturnType<typeof resolveCallOptions> }> {
    const storeClient = client(store.url);
    await storeClient.ping();
    const deps: LockDeps = { io: new Io(300, 5, 1000, systemClock), scripts: defineScripts(portFor(storeClient)), notes: broadcastNotes(new Bus('rlretry')), clock: systemClock, onLost: () => undefined };
    const config: ResolvedRedlock = { nodes: redlockNodes, driftFactor: 0.01, retryCount: 1, retryDelay: 10, retryJitter: 0, nodeTimeout: 100, onNoQuorum: 'local', ...tuning };
    const lock = new RedlockLock(deps, config, new StoreLock(deps, 'local', false), { threshold: 5, cooldown: 1000, prefix: 'rlretry', onHealth: () => undefined });
    const call = resolveCallOptions(resolveCacheOptions({ redis: storeClient }).defaults, { ttl: 1000, lockTtl: 10_000, failBackoff: 5_000 }, 'k');
    return { lock, call };
  }

  /** Clients of `servers`, each once it answered a PING (its set-up must not eat into a vote's nodeTimeout, 100 ms). */
  async function liveClients(servers: RedisServer[]): Promise<Redis[]> {
    const live = servers.map((n) => client(n.url));
    await Promise.all(live.map((c) => c.ping()));
    return live;
  }

  /** Node 0 down, node 1 held by another token, node 2 free: every round is a split vote (1 ours, 1 theirs). */
  async function splitVote(key: string): Promise<{ nodesUsed: Redis[]; keys: ReturnType<typeof entryKeys> }> {
    const keys = entryKeys('rlretry', key);
    await client((nodes[1] as RedisServer).adminUrl).set(keys.lock, 'foreign', 'PX', 60_000);
    return { nodesUsed: [deadNode(), ...(await liveClients(nodes.slice(1, 3)))], keys };
  }

  it('exhausted split-vote retries resolve null (wait for the holder), never the onNoQuorum fallback', async () => {
    const { nodesUsed, keys } = await splitVote('split-null');
    const { lock, call } = await lockOver(nodesUsed, { retryCount: 2 });
    expect(await lock.acquire('split-null', keys, call)).toBeNull();
    lock.close();
  });

  it('fewer than a quorum answering is what falls back to onNoQuorum', async () => {
    const { lock, call } = await lockOver([deadNode(), deadNode(), client((nodes[2] as RedisServer).url)], {});
    const grant = await lock.acquire('unreachable', entryKeys('rlretry', 'unreachable'), call);
    expect(grant?.mode).toBe('local');
    await grant?.release('empty');
    lock.close();
  });

  it("a grant frees its nodes for every outcome; only a non-written outcome is announced in the store, and only 'failed' sets the backoff", async () => {
    const live = await liveClients(nodes.slice(0, 3));
    const admins = nodes.slice(0, 3).map((n) => client(n.adminUrl));
    const storeAdmin = client(store.adminUrl);
    const notes: string[] = [];
    const sub = client(store.adminUrl);
    sub.on('message', (_c: string, m: string) => notes.push(`${m[0]}:${m.slice(m.lastIndexOf('|') + 1)}`));
    await sub.subscribe('rlretry:events');
    const { lock, call } = await lockOver(live, {});
    for (const outcome of ['written', 'failed', 'cancelled'] as const) {
      const key = `rel-${outcome}`;
      const keys = entryKeys('rlretry', key);
      const grant = await lock.acquire(key, keys, call);
      expect(grant?.mode).toBe('redlock');
      expect(await grant?.release(outcome)).toBe('released');
      expect(await grant?.release('empty')).toBe('released'); // idempotent: sends nothing
      await vi.waitFor(async () => expect(await Promise.all(admins.map((a) => a.exists(keys.lock)))).toEqual([0, 0, 0]), { timeout: 4000, interval: 10 });
      expect(await storeAdmin.exists(keys.backoff)).toBe(outcome === 'failed' ? 1 : 0);
    }
    await storeAdmin.publish('rlretry:events', 'x|sentinel|end');
    await vi.waitFor(() => expect(notes).toContain('x:end'), { timeout: 4000, interval: 10 });
    expect(notes).toEqual(['e:rel-failed', 'r:rel-cancelled', 'x:end']);
    lock.close();
  });

  it('close() ends a pending retry sleep at once: acquire rejects with ERR_CLOSED and no retry timer is left', async () => {
    const { nodesUsed, keys } = await splitVote('split-close');
    const { lock, call } = await lockOver(nodesUsed, { retryCount: 3, retryDelay: 600_000 }); // a sleep that would outlive the test
    const acquiring = lock.acquire('split-close', keys, call);
    acquiring.catch(() => undefined);
    await vi.waitFor(() => expect(lock.retrying).toBe(1), { timeout: 4000, interval: 10 });
    lock.close();
    expect(lock.retrying).toBe(0);
    await expect(acquiring).rejects.toMatchObject({ code: 'ERR_CLOSED', key: 'split-close' });
    await expect(lock.acquire('split-close', keys, call)).rejects.toMatchObject({ code: 'ERR_CLOSED' });
  });
});

describe('lock policy', () => {
  it('keys in different modes run side by side, and a policy change takes effect on the next call', async () => {
    let billingMode: LockMode = 'redlock';
    const cache = await cacheOn(3, { lock: (key) => (key.startsWith('billing:') ? billingMode : 'single') });
    const seen: string[] = [];
    cache.on('computed', (e) => seen.push(`${e.key}=${e.lock}`));
    await Promise.all([cache.getOrCompute('billing:1', () => 1, 60_000), cache.getOrCompute('user:1', () => 1, 60_000)]);
    billingMode = 'local';
    await cache.getOrCompute('billing:2', () => 2, 60_000);
    await cache.getOrCompute('user:2', () => 2, { ttl: 60_000, lock: 'redlock' }); // the call wins over the policy
    expect(seen.sort()).toEqual(['billing:1=redlock', 'billing:2=local', 'user:1=single', 'user:2=redlock']);
  });

  it("mode 'redlock' without redlock nodes is a typed error before any Redis traffic", async () => {
    const offline = new Redis({ port: 1, lazyConnect: true, enableOfflineQueue: false });
    const cache = createCache({ redis: offline });
    await expect(cache.getOrCompute('k', () => 1, { ttl: 1000, lock: 'redlock' })).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'lock' });
    expect(offline.status).toBe('wait');
    await cache.close();
  });
});

describe('multi-process stampede under redlock', () => {
  it.each([3, 5] as const)('4 processes × 50 callers on a cold key with redlock over %i nodes: exactly one loader run', async (count) => {
    const prefix = `mp${count}`;
    const workers: Worker[] = await startWorkers(4, { url: store.url, adminUrl: store.adminUrl, prefix, redlock: nodes.slice(0, count).map((n) => n.url) });
    try {
      const key = `cold:redlock:${count}`;
      const ids = workers.map((w) => w.call(key, 50, { ttl: 60_000, lock: 'redlock', waitTimeout: 30_000 }, { kind: 'sleep', ms: 300 }));
      const results = (await Promise.all(workers.map((w, i) => w.results(ids[i] as number)))).flat();
      const admin = client(store.adminUrl);
      expect(results.every((r) => r.ok)).toBe(true);
      expect(Number(await admin.get(runsKey(key)))).toBe(1);
      expect(Number(await admin.get(maxActiveKey(key)))).toBe(1);
    } finally {
      await Promise.all(workers.map((w) => w.stop()));
    }
  });
});

describe("fencing for the loader's own side effects", () => {
  it.each(['single', 'redlock'] as const)('%s: a paused holder (SIGSTOP) is fenced out of the resource after a newer holder wrote', async (mode) => {
    const prefix = `fence-${mode}`;
    const workers = await startWorkers(2, { url: store.url, adminUrl: store.adminUrl, prefix, redlock: nodes.slice(0, 3).map((n) => n.url) });
    const [a, b] = workers as [Worker, Worker];
    const admin = client(store.adminUrl);
    const resource = `resource:${mode}`;
    try {
      const key = 'account:7';
      const options = { ttl: 60_000, lock: mode, lockTtl: 500, waitTimeout: 30_000 };
      const aId = a.call(key, 1, options, { kind: 'fenced-resource', gate: 'a', resource });
      const aStart = await a.loaderStarted(aId);
      a.pause(); // past lockTtl: its lease lapses while it is frozen
      const bId = b.call(key, 1, options, { kind: 'fenced-resource', gate: 'b', resource });
      const bStart = await b.loaderStarted(bId);
      expect(bStart.fence as number).toBeGreaterThan(aStart.fence as number);
      b.open('b', 'from-b');
      expect((await b.results(bId))[0]?.value).toMatchObject({ accepted: true });
      a.resume();
      a.open('a', 'from-a');
      expect((await a.results(aId))[0]?.value).toMatchObject({ accepted: false });
      expect(await admin.hget(resource, 'value')).toBe('from-b');
      expect(await admin.eval(FENCED_WRITE, 1, resource, '1', 'ancient')).toBe(0);
    } finally {
      await Promise.all(workers.map((w) => w.stop()));
    }
  });
});
