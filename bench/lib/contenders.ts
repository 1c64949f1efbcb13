/**
 * Every contender behind one shape, configured as its own documentation says, on the same Redis and
 * with the same loader. Each worker process builds its own instances (its own connections), like
 * separate app servers.
 */
import { cachified, totalTtl, type Cache as CachifiedCache, type CacheEntry } from '@epic-web/cachified';
import KeyvRedis from '@keyv/redis';
import { BentoCache, bentostore } from 'bentocache';
import { redisDriver } from 'bentocache/drivers/redis';
import { createCache as createCacheManager } from 'cache-manager';
import { Redis } from 'ioredis';
import { Keyv } from 'keyv';
import { createClient } from 'redis';
import { createCache, type Cache, type CallOptions, type LockMode, type RedisClient } from '../../src/index.js';
import { baseLibrary } from './library.js';

/**
 * `single-base`'s library: SG_BENCH_BASE names another build's entry point — its dist/index.js, or
 * its src/index.ts (the workers run under tsx, as `src/` here does: compare like with like).
 */
const base = process.env.SG_BENCH_BASE ? await baseLibrary() : undefined;

export const OURS = ['none', 'local', 'single', 'redlock'] as const;
export const PEERS = ['bentocache', 'bentocache-grace', 'cachified', 'cachified-swr'] as const;
/**
 * Variants of `single` that only some scenarios run (a scenario's `contenders` names them):
 * `-l1` adds the in-process L1; `-ra` uses `refreshAhead: RA_FRACTION` with no stale window;
 * `-jitter` uses `ttlJitter: JITTER`; `-node-redis` is `single` on node-redis clients (package `redis`);
 * `-sharded` uses `notes: 'sharded'` (a key's notes on its own channel, heard only while waiting on it);
 * `-base` is `single` from another build of the library (SG_BENCH_BASE), for an A/B of a change in one run.
 */
export const VARIANTS = ['single-l1', 'single-ra', 'single-ra-l1', 'single-jitter', 'single-node-redis', 'single-sharded', 'single-base'] as const;
/** cache-manager 7 on Redis through Keyv, with `refreshThreshold` (refresh ahead, per process). */
export const LATE_PEERS = ['cache-manager'] as const;
/** The lock many tutorials still teach (issue 12 §3): SETNX, then EXPIRE, then DEL without a token. */
export const NAIVE = ['naive-lock'] as const;
/** Hand-rolled cache-aside with no coordination at all: the bare client's cost (the fleet scenario's reference). */
export const BARE = ['cache-aside'] as const;
export type ContenderName = (typeof OURS)[number] | (typeof PEERS)[number] | (typeof VARIANTS)[number] | (typeof LATE_PEERS)[number] | (typeof NAIVE)[number] | (typeof BARE)[number];
/** What a scenario without its own `contenders` list runs. */
export const ALL_CONTENDERS: ContenderName[] = [...OURS, ...PEERS];

/** The refresh point of the refresh-ahead contenders, as a fraction of ttl (the 0.8). */
export const RA_FRACTION = 0.8;
/**
 * The fraction of ttl at which a contender refreshes an entry ahead of its expiry, if it does (ours
 * with refreshAhead, cache-manager with refreshThreshold); the bench judges its loader runs against
 * one refresh per entry (idealRefreshes) rather than one rebuild per expiry.
 */
export function refreshPoint(name: ContenderName): number | undefined {
  return name === 'single-ra' || name === 'single-ra-l1' || name === 'cache-manager' ? RA_FRACTION : undefined;
}
/** The ttl jitter of `single-jitter` (the 0.2). */
export const JITTER = 0.2;
/** L1 size for the `-l1` variants: larger than any scenario's key count, so nothing is evicted. */
const L1_MAX = 10_000;

/** The refresh-ahead options (issue 10) a variant sets. */
type RefreshOptions = Pick<CallOptions, 'refreshAhead' | 'ttlJitter'>;

/** Whether a contender serves stale values while one caller refreshes (the stale-window scenario). */
export function servesStale(name: ContenderName): boolean {
  return name !== 'bentocache' && name !== 'cachified';
}

export interface Contender {
  /** `staleMs` > 0 asks for a stale window where the contender has one (refresh-ahead contenders ignore it). */
  get(key: string, loader: () => Promise<unknown>, ttl: number, staleMs: number): Promise<unknown>;
  /** Resolves once the contender is ready to serve as configured (e.g. its L1 subscription holds). */
  ready?(): Promise<unknown>;
  /**
   * Takes the key's lock the way this contender does and dies at its worst instant: no release, and
   * no expiry beyond what its acquisition itself set (the crashed-holder scenario).
   */
  crashWhileHolding?(key: string): Promise<void>;
  close(): Promise<void>;
}

export interface ContenderEnv {
  url: string;
  redlockUrls: string[];
  prefix: string;
  /** The scenario's lock lease, where it sets one (ours: `lockTtl`; the naive lock: its EXPIRE). */
  lockTtlMs?: number;
}

export function makeContender(name: ContenderName, env: ContenderEnv): Contender {
  if ((OURS as readonly string[]).includes(name)) return ours(name as LockMode, env);
  switch (name) {
    case 'single-l1':
      return ours('single', env, { l1: true });
    case 'single-ra':
      return ours('single', env, { refresh: { refreshAhead: RA_FRACTION } });
    case 'single-ra-l1':
      return ours('single', env, { l1: true, refresh: { refreshAhead: RA_FRACTION } });
    case 'single-jitter':
      return ours('single', env, { refresh: { ttlJitter: JITTER } });
    case 'single-node-redis':
      return ours('single', env, { nodeRedis: true });
    case 'single-sharded':
      return ours('single', env, { sharded: true });
    case 'single-base':
      if (!base) throw new Error('single-base needs SG_BENCH_BASE (another build of the library)');
      return ours('single', env, {}, base.createCache);
    case 'cache-manager':
      return cacheManager(env);
    case 'naive-lock':
      return naiveLock(env);
    case 'cache-aside':
      return cacheAside(env);
    default:
      if (name.startsWith('bentocache')) return bento(env, name === 'bentocache-grace');
      return cachifiedOnRedis(env, name === 'cachified-swr');
  }
}

function client(url: string): Redis {
  const c = new Redis(url, { maxRetriesPerRequest: 1 });
  c.on('error', () => undefined);
  return c;
}

/** `refresh` set: refresh-ahead options, and no stale window (the "with refreshAhead and no stale window"). */
/** A node-redis client, connecting (commands wait in its offline queue until it is ready), and its disposal. */
function nodeRedisClient(url: string): { redis: RedisClient; dispose: () => void } {
  const c = createClient({ url });
  c.on('error', () => undefined);
  c.connect().catch(() => undefined);
  return { redis: c, dispose: () => c.destroy() };
}

function ours(mode: LockMode, env: ContenderEnv, variant: { l1?: boolean; refresh?: RefreshOptions; nodeRedis?: boolean; sharded?: boolean } = {}, make: typeof createCache = createCache): Contender {
  const made = [env.url, ...env.redlockUrls].map((url) => {
    if (variant.nodeRedis) return nodeRedisClient(url);
    const c = client(url);
    return { redis: c, dispose: () => c.disconnect() };
  });
  const [{ redis }, ...rest] = made as [(typeof made)[number], ...typeof made];
  const nodes = rest.map((m) => m.redis);
  const cache: Cache = make({
    redis,
    prefix: env.prefix,
    lock: mode,
    ...(variant.l1 ? { local: { max: L1_MAX } } : {}),
    ...(variant.sharded ? { notes: 'sharded' as const } : {}),
    ...(nodes.length >= 3 ? { redlock: { nodes } } : {}),
  });
  const { refresh } = variant;
  const lease = env.lockTtlMs === undefined ? {} : { lockTtl: env.lockTtlMs };
  const options = (ttl: number, staleMs: number): CallOptions =>
    refresh ? { ttl, waitTimeout: 10_000, ...lease, ...refresh } : { ttl, staleTtl: staleMs, waitTimeout: 10_000, ...lease };
  return {
    get: (key, loader, ttl, staleMs) => cache.getOrCompute(key, loader, options(ttl, staleMs)),
    ready: () => cache.ready(),
    async crashWhileHolding(key) {
      // The loader starts only once the lock is ours (one script: SET NX PX with the fence bump, so
      // there is no instant at which the lock exists without its lease). Then the process "dies":
      // the connection goes, so neither the watchdog's extensions nor a release reach Redis.
      let holding!: () => void;
      const held = new Promise<void>((resolve) => (holding = resolve));
      void cache.getOrCompute(key, () => { holding(); return new Promise<never>(() => undefined); }, { ttl: 60_000, ...lease }).catch(() => undefined);
      await held;
      for (const m of made) m.dispose();
      await cache.close();
    },
    async close() {
      await cache.close();
      for (const m of made) m.dispose();
    },
  };
}

/** bentocache with Redis as its (only) L2 layer; `grace` turns on its stale-serving grace period. */
function bento(env: ContenderEnv, grace: boolean): Contender {
  const redis = client(env.url);
  const cache = new BentoCache({
    default: 'redis',
    prefix: env.prefix,
    stores: { redis: bentostore().useL2Layer(redisDriver({ connection: redis })) },
  });
  return {
    get: (key, loader, ttl, staleMs) =>
      cache.getOrSet({ key, factory: loader, ttl, ...(grace && staleMs > 0 ? { grace: staleMs } : { grace: false }) }),
    async close() {
      await cache.disconnectAll();
      redis.disconnect();
    },
  };
}

/** cachified's cache on Redis: a small ioredis adapter (its docs list a node-redis adapter only). */
export function cachifiedRedisAdapter(redis: Redis, prefix: string): CachifiedCache {
  return {
    async get(key) {
      const raw = await redis.get(`${prefix}:${key}`);
      return raw === null ? null : (JSON.parse(raw) as CacheEntry);
    },
    async set(key, entry) {
      const ttl = totalTtl(entry.metadata);
      const k = `${prefix}:${key}`;
      const raw = JSON.stringify(entry);
      if (ttl === Infinity) await redis.set(k, raw);
      else await redis.set(k, raw, 'PX', Math.max(1, Math.ceil(ttl)));
    },
    async delete(key) {
      await redis.del(`${prefix}:${key}`);
    },
  };
}

/** cachified with the ioredis adapter above. */
function cachifiedOnRedis(env: ContenderEnv, swr: boolean): Contender {
  const redis = client(env.url);
  const adapter = cachifiedRedisAdapter(redis, env.prefix);
  return {
    get: (key, loader, ttl, staleMs) =>
      cachified({ cache: adapter, key, ttl, getFreshValue: loader, ...(swr && staleMs > 0 ? { staleWhileRevalidate: staleMs } : {}) }),
    async close() {
      redis.disconnect();
    },
  };
}

/**
 * cache-manager 7 with one Keyv store on Redis (@keyv/redis, its documented Redis store). `wrap` with
 * `refreshThreshold` = (1 − RA_FRACTION) × ttl: a hit with less than that left returns the cached
 * value and refreshes in the background — coalesced per process only (cache-manager has no lock).
 */
function cacheManager(env: ContenderEnv): Contender {
  const store = new KeyvRedis(env.url);
  const keyv = new Keyv({ store, namespace: env.prefix });
  keyv.on('error', () => undefined);
  const cache = createCacheManager({ stores: [keyv] });
  return {
    get: (key, loader, ttl) => cache.wrap(key, loader, ttl, Math.round((1 - RA_FRACTION) * ttl)),
    ready: () => store.getClient(),
    async close() {
      await cache.disconnect();
    },
  };
}

/** How long a naive-lock caller keeps retrying before it loads anyway (our default waitTimeout). */
const NAIVE_WAIT_MS = 5_000;
const NAIVE_POLL_MS = 50;
/** The naive lock's EXPIRE when the scenario sets no lease (as long as ours by default). */
const NAIVE_LOCK_MS = 10_000;

/**
 * The lock many tutorials still teach, as they teach it: `SETNX` then `EXPIRE` as two commands, the
 * loader, then `DEL` without checking whose lock it is. A miss that finds the lock taken sleeps
 * NAIVE_POLL_MS and starts over (read, then the lock again); after NAIVE_WAIT_MS it loads anyway. No
 * fencing: the last writer wins.
 */
function naiveLock(env: ContenderEnv): Contender {
  const redis = client(env.url);
  const lockMs = env.lockTtlMs ?? NAIVE_LOCK_MS;
  const valueKey = (key: string) => `${env.prefix}:${key}`;
  const lockKey = (key: string) => `${env.prefix}:${key}:lock`;
  const read = async (key: string): Promise<unknown> => {
    const raw = await redis.get(valueKey(key));
    return raw === null ? undefined : JSON.parse(raw);
  };
  const load = async (key: string, loader: () => Promise<unknown>, ttl: number): Promise<unknown> => {
    const value = await loader();
    await redis.set(valueKey(key), JSON.stringify(value), 'PX', ttl);
    return value;
  };
  return {
    async get(key, loader, ttl) {
      // The usual shape: read; on a miss try the lock; if taken, sleep and start over.
      for (const until = Date.now() + NAIVE_WAIT_MS; Date.now() < until; ) {
        const hit = await read(key);
        if (hit !== undefined) return hit;
        if ((await redis.setnx(lockKey(key), '1')) === 1) {
          await redis.pexpire(lockKey(key), lockMs); // a crash before this line leaves the lock forever
          try {
            return await load(key, loader, ttl);
          } finally {
            await redis.del(lockKey(key)); // no token: frees whoever holds it now
          }
        }
        await new Promise((r) => setTimeout(r, NAIVE_POLL_MS));
      }
      return load(key, loader, ttl); // waited long enough: load without the lock
    },
    async crashWhileHolding(key) {
      await redis.setnx(lockKey(key), '1'); // ... and the process dies before its EXPIRE
      redis.disconnect();
    },
    async close() {
      redis.disconnect();
    },
  };
}

/** GET; on a miss, the loader and SET PX. What an application without this library does: nothing shared, nothing coordinated. */
function cacheAside(env: ContenderEnv): Contender {
  const redis = client(env.url);
  return {
    async get(key, loader, ttl) {
      const raw = await redis.get(`${env.prefix}:${key}`);
      if (raw !== null) return JSON.parse(raw) as unknown;
      const value = await loader();
      await redis.set(`${env.prefix}:${key}`, JSON.stringify(value), 'PX', ttl);
      return value;
    },
    async close() {
      redis.disconnect();
    },
  };
}
