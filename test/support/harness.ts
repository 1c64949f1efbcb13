/** Per-file Redis and clients for integration tests; everything started here is stopped in afterAll. */
import { once } from 'node:events';
import { createCluster } from 'redis';
import { createCluster as createCluster5 } from 'redis5';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import { afterAll, beforeAll } from 'vitest';
import { createCache, type Cache, type CacheEvents, type CacheOptions, type CallOptions, type RedisClient } from '../../src/index.js';
import { entryKeys, type EntryKeys } from '../../src/keys.js';
import { familyClient, type TestClient } from './clients.js';
import { ACL_USER, AS_ACL_USER, NODE_REDIS_CLUSTER_ACL_USER, provideRedis, type ProvidedRedis, type RedisClusterHandle } from './redis-server.js';

export interface Harness {
  readonly url: string;
  /** A new ioredis client (disconnected in afterAll). */
  client(options?: RedisOptions): Redis;
  /** A new client of the family under test (SG_TEST_CLIENT, see clients.ts), for a cache (closed in afterAll). */
  cacheClient(): RedisClient & TestClient;
  /** A cache on a new client of the family under test with a prefix unique to this call, so tests never share keys. */
  cache(options?: Partial<CacheOptions>): Cache;
  /** The admin client (for raw reads/writes), always the default (all-powerful) user. */
  readonly admin: Redis;
  /** A new client as the default user, for fault injection (CONFIG, DEBUG, SCRIPT FLUSH). */
  adminClient(): Redis;
}



let prefixCounter = 0;

export function useRedis(): Harness {
  let provided: ProvidedRedis | undefined;
  const clients: Redis[] = [];
  const disposals: (() => void)[] = [];
  const caches: Cache[] = [];
  let admin: Redis | undefined;
  const noperm: string[] = [];
  const h: Harness = {
    get url() {
      return (provided as ProvidedRedis).url;
    },
    client(options: RedisOptions = {}) {
      // In ACL mode (SG_TEST_ACL=1) the url carries the least-privilege user's credentials.
      const c = new Redis(h.url, { maxRetriesPerRequest: 1, ...options });
      c.on('error', () => undefined);
      clients.push(c);
      return c;
    },
    cacheClient() {
      const { client, dispose } = familyClient(h.url);
      disposals.push(dispose);
      return client;
    },
    cache(options: Partial<CacheOptions> = {}) {
      const c = createCache({ redis: h.cacheClient(), prefix: `t${process.pid}x${++prefixCounter}`, ...options });
      // In the ACL run a missing permission would only show as a degraded call: collect and fail on it.
      c.on('degraded', (e) => {
        if ((e.error as { code?: string }).code === 'ERR_REDIS_NOPERM') noperm.push(e.operation);
      });
      caches.push(c);
      return c;
    },
    get admin() {
      return (admin ??= h.adminClient());
    },
    adminClient() {
      const c = new Redis((provided as ProvidedRedis).adminUrl, { maxRetriesPerRequest: 1 });
      c.on('error', () => undefined);
      clients.push(c);
      return c;
    },
  };
  beforeAll(async () => {
    provided = await provideRedis();
  });
  afterAll(async () => {
    if (noperm.length > 0) throw new Error(`Redis refused (NOPERM) operations the README's ACL should allow: ${noperm.join(', ')}`);
    await Promise.all(caches.map((c) => c.close()));
    for (const c of clients) c.disconnect();
    for (const dispose of disposals) dispose();
    await provided?.stop();
  });
  return h;
}

/** Wraps a real client's sendCommand to count what it sends (the server is still real). */
export function countCommands(client: Pick<TestClient, 'sendCommand'>): { readonly count: number; reset(): void } {
  let count = 0;
  const original = client.sendCommand.bind(client);
  client.sendCommand = ((...args: never[]) => {
    count++;
    return original(...args);
  });
  return {
    get count() {
      return count;
    },
    reset() {
      count = 0;
    },
  };
}

/** The next emission of a cache event, with its payload. */
export async function nextEvent<E extends keyof CacheEvents>(cache: Cache, name: E): Promise<CacheEvents[E][0]> {
  const [payload] = (await once(cache as never, name)) as CacheEvents[E];
  return payload;
}

export function deferred<T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

/**
 * Starts a call whose loader blocks until `open(value)` or `fail(error)`; resolves once that loader
 * runs, i.e. once `cache` holds the rebuild (its lock and fence). `onLoad` runs when the loader starts.
 */
export async function heldRebuild<T>(cache: Cache, key: string, options: number | CallOptions = 60_000, onLoad: () => void = () => undefined) {
  const gate = deferred<T>();
  const started = deferred<void>();
  const call = cache.getOrCompute<T>(key, () => (onLoad(), started.resolve(), gate.promise), options);
  await started.promise;
  return { call, open: gate.resolve, fail: gate.reject };
}

/** Starts a call and resolves once it found no value and went to the lock (it then waits, or rebuilds). */
export async function missedCall<T>(cache: Cache, key: string, loader: () => T | Promise<T>, options: number | CallOptions = 60_000) {
  const missed = nextEvent(cache, 'miss');
  const call = cache.getOrCompute<T>(key, loader, options);
  await missed;
  return { call };
}

/**
 * Starts a call whose loader runs until its `ctx.signal` aborts, then has someone else take the
 * key's lock (`lockKey`, written through `admin`): the watchdog finds the lock lost and aborts the
 * loader. `call` rejects with ERR_LOCK_LOST.
 */
export async function lockTakenOver(cache: Cache, key: string, lockKey: string, admin: Redis, lockTtl = 300) {
  const started = deferred<void>();
  const call = cache.getOrCompute(
    key,
    (ctx) =>
      new Promise((_, reject) => {
        ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason as Error));
        started.resolve();
      }),
    { ttl: 60_000, lockTtl },
  );
  await started.promise;
  await admin.set(lockKey, 'someone-else', 'PX', 60_000);
  return { call };
}

/** The prefix a cache was created with (tests address its Redis keys directly). */
/**
 * True once the cache's pub/sub subscription holds (within `ms`), false after: what a test waits for
 * after a subscriber fault. `ready()` also needs every master to answer the cache's own client, which
 * a test holding or killing that traffic (or a node) does not give.
 */
export const subscribed = (cache: Cache, ms = 1000): Promise<boolean> => ((cache as unknown as { rt: unknown }).rt as { bus: { ready(ms: number): Promise<boolean> } }).bus.ready(ms);

export const prefixOf = (cache: Cache): string => ((cache as unknown as { rt: unknown }).rt as { options: { prefix: string } }).options.prefix;

/** The Redis keys of one entry of `cache`. */
export const keysOf = (cache: Cache, key: string): EntryKeys => entryKeys(prefixOf(cache), key);

/** Resolves once Redis (asked through `admin`) reports at most `ms` of physical TTL left on the entry (-2: gone). */
export async function untilPttlAtMost(admin: Redis, cache: Cache, key: string, ms: number): Promise<void> {
  for (;;) {
    const pttl = await admin.pttl(keysOf(cache, key).value);
    if (pttl <= ms) return;
    await new Promise((r) => setTimeout(r, Math.max(1, Math.min(20, pttl - ms))));
  }
}

/** Counts, from now on, each time a cache's bus reports its subscription down (read `.count`). */
export function subscriptionDowns(cache: Cache): { readonly count: number } {
  const handlers = ((cache as unknown as { rt: unknown }).rt as { bus: { handlers: { onDown: () => void } } }).bus.handlers;
  const downs = { count: 0 };
  const onDown = handlers.onDown;
  handlers.onDown = () => {
    downs.count++;
    onDown();
  };
  return downs;
}

/** Every `refresh` outcome a cache reports from now on, in order. */
export function refreshOutcomes(cache: Cache): CacheEvents['refresh'][0]['outcome'][] {
  const seen: CacheEvents['refresh'][0]['outcome'][] = [];
  cache.on('refresh', (e) => seen.push(e.outcome));
  return seen;
}

/**
 * An ioredis Cluster client as the cache's user (in ACL mode the least-privilege user, which on a
 * Cluster's nodes also holds ioredis' Cluster extras), or as admin; its
 * connection errors are swallowed (the caller's to log). Pushed onto `clients` for afterAll.
 */
export function clusterClient(cluster: RedisClusterHandle, clients: Cluster[], admin = false): Cluster {
  const auth = AS_ACL_USER && !admin ? ACL_USER : {};
  const c = new Cluster(cluster.startup, { redisOptions: { maxRetriesPerRequest: 1, ...auth } });
  c.on('error', () => undefined);
  clients.push(c);
  return c;
}

/** createCluster() options a test may set (v6 only; node-redis 5 has no such option). */
export interface NodeRedisClusterExtras {
  /** When the Cluster re-reads its slot map while a node's connection keeps failing (default: 5 s after the first failed reconnect). */
  topologyRefreshOnReconnectionAttemptStrategy?: false | number | ((firstReconnectionAt: number) => false | number | undefined);
}

/**
 * A node-redis `createCluster()` (v6, or v5 with `version: 5`) connected as a caller would, as the
 * cache's user (in ACL mode the least-privilege user with node-redis' Cluster extras,
 * NODE_REDIS_CLUSTER_ACL_USER) or as admin; its destroy is pushed onto `disposals`.
 */
export async function nodeRedisClusterClient(
  cluster: RedisClusterHandle,
  disposals: (() => void)[],
  version: 5 | 6 = 6,
  admin = false,
  extras: NodeRedisClusterExtras = {},
): Promise<RedisClient> {
  if (version === 5 && Object.keys(extras).length > 0) throw new Error('node-redis 5 takes none of these options');
  const options = {
    rootNodes: cluster.startup.map((n) => ({ url: `redis://${n.host}:${n.port}` })),
    defaults: AS_ACL_USER && !admin ? { ...NODE_REDIS_CLUSTER_ACL_USER } : {},
    ...extras,
  };
  const c = version === 6 ? createCluster(options) : createCluster5(options);
  c.on('error', () => undefined);
  await c.connect();
  disposals.push(() => c.destroy());
  return c;
}

/**
 * Ages a stored entry without waiting: from now on it has `freshLeftMs` of its fresh time left, as if
 * written `ttl − freshLeftMs` ago. Readers judge freshness by the `freshUntil` the entry carries (in the
 * server's clock) or, for entries without it, by its PTTL: both are moved (the entry's last 8 bytes,
 * a float64, and its expiry = fresh time left + its grace). Runs on `admin`, a client of the test's own server.
 */
export async function ageEntry(admin: Redis, valueKey: string, freshLeftMs: number): Promise<void> {
  const { decodeEntry } = await import('../../src/codec.js');
  const bytes = await admin.getBuffer(valueKey);
  if (!bytes) throw new Error(`ageEntry: no entry at ${valueKey}`);
  const { graceMs } = decodeEntry(bytes);
  const [s, us] = await admin.time();
  bytes.writeDoubleBE(Number(s) * 1000 + Number(us) / 1000 + freshLeftMs, bytes.length - 8);
  await admin.set(valueKey, bytes, 'PX', freshLeftMs + graceMs);
}

/**
 * Calls per command (and rejected calls) since the last CONFIG RESETSTAT, from `admin`'s INFO
 * commandstats (a client of the test's own server). A command never sent reads as 0.
 */
export async function commandCalls(admin: Redis): Promise<{ calls: (command: string) => number; rejected: (command: string) => number; scripts: number }> {
  const info = await admin.info('commandstats');
  const calls: Record<string, number> = {};
  const rejected: Record<string, number> = {};
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)(?:[^\n]*?rejected_calls=(\d+))?/gm)) {
    calls[m[1] as string] = Number(m[2]);
    rejected[m[1] as string] = Number(m[3] ?? 0);
  }
  const of = (t: Record<string, number>) => (command: string) => t[command] ?? 0;
  return { calls: of(calls), rejected: of(rejected), scripts: (calls.evalsha ?? 0) + (calls.eval ?? 0) };
}
