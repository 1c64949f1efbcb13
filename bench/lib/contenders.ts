/**
 * Every contender behind one shape, configured as its own documentation says, on the same Redis and
 * with the same loader. Each worker process builds its own instances (its own connections), like
 * separate app servers.
 */
import { cachified, totalTtl, type Cache as CachifiedCache, type CacheEntry } from '@epic-web/cachified';
import { BentoCache, bentostore } from 'bentocache';
import { redisDriver } from 'bentocache/drivers/redis';
import { Redis } from 'ioredis';
import { createCache, type Cache, type LockMode } from '../../src/index.js';

export const OURS = ['none', 'local', 'single', 'redlock'] as const;
export const PEERS = ['bentocache', 'bentocache-grace', 'cachified', 'cachified-swr'] as const;
export type ContenderName = (typeof OURS)[number] | (typeof PEERS)[number];
export const ALL_CONTENDERS: ContenderName[] = [...OURS, ...PEERS];

/** Whether a contender serves stale values while one caller refreshes (the stale-window scenario). */
export function servesStale(name: ContenderName): boolean {
  return name !== 'bentocache' && name !== 'cachified';
}

export interface Contender {
  /** `staleMs` > 0 asks for a stale window where the contender has one. */
  get(key: string, loader: () => Promise<unknown>, ttl: number, staleMs: number): Promise<unknown>;
  close(): Promise<void>;
}

export interface ContenderEnv {
  url: string;
  redlockUrls: string[];
  prefix: string;
}

export function makeContender(name: ContenderName, env: ContenderEnv): Contender {
  if ((OURS as readonly string[]).includes(name)) return ours(name as LockMode, env);
  if (name.startsWith('bentocache')) return bento(env, name === 'bentocache-grace');
  return cachifiedOnRedis(env, name === 'cachified-swr');
}

function client(url: string): Redis {
  const c = new Redis(url, { maxRetriesPerRequest: 1 });
  c.on('error', () => undefined);
  return c;
}

function ours(mode: LockMode, env: ContenderEnv): Contender {
  const redis = client(env.url);
  const nodes = env.redlockUrls.map(client);
  const cache: Cache = createCache({
    redis,
    prefix: env.prefix,
    lock: mode,
    ...(nodes.length >= 3 ? { redlock: { nodes } } : {}),
  });
  return {
    get: (key, loader, ttl, staleMs) => cache.getOrCompute(key, loader, { ttl, staleTtl: staleMs, waitTimeout: 10_000 }),
    async close() {
      await cache.close();
      for (const c of [redis, ...nodes]) c.disconnect();
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
