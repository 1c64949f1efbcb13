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

export const OURS = ['none', 'local', 'single', 'redlock'] as const;
export const PEERS = ['bentocache', 'bentocache-grace', 'cachified', 'cachified-swr'] as const;
/**
 * Variants of `single` that only some scenarios run (a scenario's `contenders` names them):
 * `-l1` adds the in-process L1; `-ra` uses `refreshAhead: RA_FRACTION` with no stale window;
 * `-jitter` uses `ttlJitter: JITTER`; `-node-redis` is `single` on node-redis clients (package `redis`).
 */
export const VARIANTS = ['single-l1', 'single-ra', 'single-ra-l1', 'single-jitter', 'single-node-redis'] as const;
/** cache-manager 7 on Redis through Keyv, with `refreshThreshold` (refresh ahead, per process). */
export const LATE_PEERS = ['cache-manager'] as const;
export type ContenderName = (typeof OURS)[number] | (typeof PEERS)[number] | (typeof VARIANTS)[number] | (typeof LATE_PEERS)[number];
/** What a scenario without its own `contenders` list runs. */
export const ALL_CONTENDERS: ContenderName[] = [...OURS, ...PEERS];

/** The refresh point of the refresh-ahead contenders, as a fraction of ttl (the 0.8). */
export const RA_FRACTION = 0.8;
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
  close(): Promise<void>;
}

export interface ContenderEnv {
  url: string;
  redlockUrls: string[];
  prefix: string;
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
    case 'cache-manager':
      return cacheManager(env);
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

function ours(mode: LockMode, env: ContenderEnv, variant: { l1?: boolean; refresh?: RefreshOptions; nodeRedis?: boolean } = {}): Contender {
  const made = [env.url, ...env.redlockUrls].map((url) => {
    if (variant.nodeRedis) return nodeRedisClient(url);
    const c = client(url);
    return { redis: c, dispose: () => c.disconnect() };
  });
  const [{ redis }, ...rest] = made as [(typeof made)[number], ...typeof made];
  const nodes = rest.map((m) => m.redis);
  const cache: Cache = createCache({
    redis,
    prefix: env.prefix,
    lock: mode,
    ...(variant.l1 ? { local: { max: L1_MAX } } : {}),
    ...(nodes.length >= 3 ? { redlock: { nodes } } : {}),
  });
  const { refresh } = variant;
  const options = (ttl: number, staleMs: number): CallOptions =>
    refresh ? { ttl, waitTimeout: 10_000, ...refresh } : { ttl, staleTtl: staleMs, waitTimeout: 10_000 };
  return {
    get: (key, loader, ttl, staleMs) => cache.getOrCompute(key, loader, options(ttl, staleMs)),
    ready: () => cache.ready(),
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

/** cachified with a small ioredis adapter (its docs list a node-redis adapter only). */
function cachifiedOnRedis(env: ContenderEnv, swr: boolean): Contender {
  const redis = client(env.url);
  const adapter: CachifiedCache = {
    async get(key) {
      const raw = await redis.get(`${env.prefix}:${key}`);
      return raw === null ? null : (JSON.parse(raw) as CacheEntry);
    },
    async set(key, entry) {
      const ttl = totalTtl(entry.metadata);
      const k = `${env.prefix}:${key}`;
      const raw = JSON.stringify(entry);
      if (ttl === Infinity) await redis.set(k, raw);
      else await redis.set(k, raw, 'PX', Math.max(1, Math.ceil(ttl)));
    },
    async delete(key) {
      await redis.del(`${env.prefix}:${key}`);
    },
  };
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
