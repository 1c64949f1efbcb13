/**
 * `npm run bench:tags` (bench/tags.ts): the contenders with tags behind one shape, and the race
 * counter. Each contender is configured as its documentation says: ours with and without its L1
 * (`local`), bentocache as it is normally run (memory L1 + Redis L2 + Redis bus) and with Redis as its
 * only layer (no L1, no bus). The same Redis, the same loader, the same tags.
 */
import { BentoCache, bentostore } from 'bentocache';
import { memoryDriver } from 'bentocache/drivers/memory';
import { redisBusDriver, redisDriver } from 'bentocache/drivers/redis';
import { Redis } from 'ioredis';
import { library } from './library.js';

export const TAG_VARIANTS = ['ours', 'ours-l1', 'bentocache', 'bentocache-l2'] as const;
export type TagVariant = (typeof TAG_VARIANTS)[number];

/** What each variant is, for the tables. */
export const TAG_VARIANT_NOTES: Record<TagVariant, string> = {
  ours: 'ours, no L1 (every hit from Redis)',
  'ours-l1': 'ours with `local` (L1)',
  bentocache: 'bentocache: memory L1 + Redis L2 + Redis bus',
  'bentocache-l2': 'bentocache: Redis L2 only',
};

/** L1 size for the L1 variants: more than the 10,000-entry tag and the other keys together. */
export const TAG_L1_MAX = 20_000;

export interface TagContender {
  /** `tags` undefined: an untagged call (no `tags` option at all). */
  get(key: string, loader: () => unknown, ttl: number, tags: string[] | undefined): Promise<unknown>;
  set(key: string, value: unknown, ttl: number, tags: string[] | undefined): Promise<void>;
  deleteByTag(tags: string[]): Promise<void>;
  /** Resolves once the contender serves as configured (ours: its subscription holds; bentocache: its bus had time to subscribe). */
  ready(): Promise<void>;
  close(): Promise<void>;
}

/** How long bentocache's bus is given to subscribe (it has no ready signal). */
const BUS_SETTLE_MS = 300;

export async function makeTagContender(variant: TagVariant, url: string, prefix: string): Promise<TagContender> {
  const redis = new Redis(url);
  redis.on('error', () => undefined);
  if (variant === 'ours' || variant === 'ours-l1') {
    const { createCache } = (await library()).lib;
    const cache = createCache({ redis, prefix, ...(variant === 'ours-l1' ? { local: { max: TAG_L1_MAX } } : {}) });
    return {
      get: (key, loader, ttl, tags) => cache.getOrCompute(key, loader, tags === undefined ? { ttl } : { ttl, tags }),
      set: (key, value, ttl, tags) => cache.set(key, value, tags === undefined ? { ttl } : { ttl, tags }),
      deleteByTag: (tags) => cache.deleteByTag(tags),
      ready: async () => void (await cache.ready()),
      async close() {
        await cache.close();
        redis.disconnect();
      },
    };
  }
  const { hostname, port } = new URL(url);
  const store =
    variant === 'bentocache'
      ? bentostore()
          .useL1Layer(memoryDriver({ maxItems: TAG_L1_MAX }))
          .useL2Layer(redisDriver({ connection: redis }))
          .useBus(redisBusDriver({ connection: { host: hostname, port: Number(port) } }))
      : bentostore().useL2Layer(redisDriver({ connection: redis }));
  const cache = new BentoCache({ default: 'cache', prefix, stores: { cache: store } });
  return {
    get: (key, loader, ttl, tags) => cache.getOrSet({ key, factory: loader, ttl, ...(tags === undefined ? {} : { tags }) }),
    set: async (key, value, ttl, tags) => void (await cache.set({ key, value, ttl, ...(tags === undefined ? {} : { tags }) })),
    deleteByTag: async (tags) => void (await cache.deleteByTag({ tags })),
    ready: () => (variant === 'bentocache' ? new Promise((r) => setTimeout(r, BUS_SETTLE_MS)) : Promise.resolve()),
    async close() {
      await cache.disconnectAll().catch(() => undefined);
      redis.disconnect();
    },
  };
}

/** One `deleteByTag` of the race: when it was called and when it resolved (epoch ms, performance.timeOrigin + performance.now()). */
export interface RaceDelete {
  calledAt: number;
  resolvedAt: number;
}

/** One answer of the race: when its call started, and when the load that produced its value started (the loader's stamp). */
export interface RaceAnswer {
  key: string;
  calledAt: number;
  loadStartedAt: number;
}

/** How the race counter classes an answer, against D = the latest deleteByTag (by call time) that had resolved when the call started. */
export interface RaceCounts {
  /** Answers whose call started after at least one deleteByTag had resolved. */
  judged: number;
  /** Their load began before D was called: granted before D, so served against the guarantee. */
  loadedBeforeCall: number;
  /** Their load began after D was called but before it resolved: allowed (the grant may follow D's write in Redis). */
  loadedWhileRunning: number;
  /** Up to 5 answers of `loadedBeforeCall`, with D. */
  examples: { answer: RaceAnswer; latest: RaceDelete }[];
}

/**
 * Counts the answers served against the guarantee. `deletes` in any order. An answer is judged
 * against every deleteByTag that resolved before its call started; of those, D is the one called last.
 */
export function countRace(deletes: readonly RaceDelete[], answers: readonly RaceAnswer[]): RaceCounts {
  const byResolve = [...deletes].sort((a, b) => a.resolvedAt - b.resolvedAt);
  // latest[i]: of byResolve[0..i], the delete called last.
  const latest: RaceDelete[] = [];
  for (const d of byResolve) {
    const prev = latest.at(-1);
    latest.push(prev === undefined || d.calledAt > prev.calledAt ? d : prev);
  }
  const counts: RaceCounts = { judged: 0, loadedBeforeCall: 0, loadedWhileRunning: 0, examples: [] };
  for (const a of answers) {
    const i = lastAtOrBefore(byResolve, a.calledAt);
    if (i < 0) continue;
    const d = latest[i] as RaceDelete;
    counts.judged++;
    if (a.loadStartedAt < d.calledAt) {
      counts.loadedBeforeCall++;
      if (counts.examples.length < 5) counts.examples.push({ answer: a, latest: d });
    } else if (a.loadStartedAt < d.resolvedAt) counts.loadedWhileRunning++;
  }
  return counts;
}

/** The index of the last delete resolved at or before `t` (sorted by resolvedAt), or -1. */
function lastAtOrBefore(byResolve: readonly RaceDelete[], t: number): number {
  let lo = 0;
  let hi = byResolve.length - 1;
  let found = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if ((byResolve[mid] as RaceDelete).resolvedAt <= t) {
      found = mid;
      lo = mid + 1;
    } else hi = mid - 1;
  }
  return found;
}
