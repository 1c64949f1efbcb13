/**
 * One process of `npm run bench:outage` (bench/outage.ts): one contender instance on its own ioredis
 * client (every option at its default), `callers` closed-loop callers, a loader of `loaderMs` that
 * counts its runs. Times are epoch ms (performance.timeOrigin + performance.now()), so the parent's
 * fault instants and every process's calls share one axis.
 */
import { cachified } from '@epic-web/cachified';
import { BentoCache, bentostore } from 'bentocache';
import { memoryDriver } from 'bentocache/drivers/memory';
import { redisBusDriver, redisDriver } from 'bentocache/drivers/redis';
import { Redis } from 'ioredis';
import { createCache } from '../src/index.js';
import { cachifiedRedisAdapter } from './lib/contenders.js';

export type OutageContender = 'ours' | 'bentocache' | 'cachified';

export interface OutageJob {
  readonly contender: OutageContender;
  /** With an in-process L1 where the contender has one (ours: `local`; bentocache: its L1 layer). */
  readonly l1: boolean;
  readonly url: string;
  readonly prefix: string;
  readonly callers: number;
  readonly keys: number;
  readonly ttlMs: number;
  readonly loaderMs: number;
}

/** What one process saw: every call (start, latency, ok) from `from` on, and its loader runs. */
export interface OutageSamples {
  readonly starts: number[];
  readonly latencies: number[];
  readonly ok: number[];
  /** Each loader run: [epoch ms, key index]. */
  readonly loads: [number, number][];
  /** Calls made in all (before `from` too). */
  readonly calls: number;
}

const now = (): number => performance.timeOrigin + performance.now();

interface Instance {
  get(key: string, loader: () => Promise<unknown>): Promise<unknown>;
  close(): Promise<void>;
}

function build(job: OutageJob): Instance {
  const redis = new Redis(job.url); // the client's defaults, as a new user has them
  redis.on('error', () => undefined);
  const closeRedis = (): void => redis.disconnect();
  if (job.contender === 'ours') {
    const cache = createCache({ redis, prefix: job.prefix, ...(job.l1 ? { local: { max: 1000 } } : {}) });
    return {
      get: (key, loader) => cache.getOrCompute(key, loader, job.ttlMs),
      close: async () => {
        await cache.close();
        closeRedis();
      },
    };
  }
  if (job.contender === 'bentocache') {
    const { hostname, port } = new URL(job.url);
    const store = job.l1
      ? bentostore()
          .useL1Layer(memoryDriver({ maxItems: 1000 }))
          .useL2Layer(redisDriver({ connection: redis }))
          .useBus(redisBusDriver({ connection: { host: hostname, port: Number(port) } }))
      : bentostore().useL2Layer(redisDriver({ connection: redis }));
    const cache = new BentoCache({ default: 'cache', prefix: job.prefix, stores: { cache: store } });
    return {
      get: (key, loader) => cache.getOrSet({ key, factory: loader, ttl: job.ttlMs }),
      close: async () => {
        await cache.disconnectAll().catch(() => undefined);
        closeRedis();
      },
    };
  }
  // cachified has no L1 of its own on Redis: the same adapter with and without `l1`.
  const adapter = cachifiedRedisAdapter(redis, job.prefix);
  return {
    get: (key, loader) => cachified({ cache: adapter, key, ttl: job.ttlMs, getFreshValue: loader }),
    close: async () => closeRedis(),
  };
}

process.on('unhandledRejection', () => undefined);

let job: OutageJob | undefined;
let instance: Instance | undefined;
let running = false;
const starts: number[] = [];
const latencies: number[] = [];
const ok: number[] = [];
const loads: [number, number][] = [];
let calls = 0;

function loaderFor(index: number): () => Promise<unknown> {
  return async () => {
    loads.push([now(), index]);
    await new Promise((r) => setTimeout(r, (job as OutageJob).loaderMs));
    return { index, at: Date.now() };
  };
}

async function caller(n: number): Promise<void> {
  const j = job as OutageJob;
  let i = n % j.keys;
  while (running) {
    i = (i + 1) % j.keys;
    const start = now();
    let good = 1;
    try {
      await (instance as Instance).get(`k${i}`, loaderFor(i));
    } catch {
      good = 0;
    }
    calls++;
    starts.push(start);
    latencies.push(now() - start);
    ok.push(good);
    // Yield to I/O between calls (a closed loop of L1 hits would otherwise starve the event loop).
    await new Promise((r) => setImmediate(r));
  }
}

let callers: Promise<void>[] = [];

process.on('message', (m: { ev: 'job'; job: OutageJob } | { ev: 'go' } | { ev: 'stop'; from: number }) => {
  void (async () => {
    if (m.ev === 'job') {
      job = m.job;
      instance = build(job);
      // Warm every key (one process loads it, the others read it), then wait to be started.
      for (let k = 0; k < job.keys; k++) await instance.get(`k${k}`, loaderFor(k)).catch(() => undefined);
      loads.length = 0;
      process.send?.({ ev: 'ready' });
    } else if (m.ev === 'go') {
      running = true;
      callers = Array.from({ length: (job as OutageJob).callers }, (_, n) => caller(n));
    } else {
      running = false;
      // Calls still hanging (a contender without a timeout) are counted as they are: not finished.
      await Promise.race([Promise.all(callers), new Promise((r) => setTimeout(r, 3000))]);
      const keep = starts.map((s, i) => (s >= m.from ? i : -1)).filter((i) => i >= 0);
      // Stride-sample very long runs (L1 hits): percentiles stay, the IPC message stays small.
      const stride = Math.max(1, Math.ceil(keep.length / 300_000));
      const picked = keep.filter((_, n) => n % stride === 0);
      const samples: OutageSamples = {
        starts: picked.map((i) => starts[i] as number),
        latencies: picked.map((i) => latencies[i] as number),
        ok: picked.map((i) => (ok[i] as number) * stride),
        loads,
        calls,
      };
      process.send?.({ ev: 'done', samples }, () => {
        void (instance as Instance).close().finally(() => process.exit(0));
      });
    }
  })();
});
process.send?.({ ev: 'up' });
