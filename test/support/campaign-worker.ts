/**
 * A fault-campaign worker: C callers loop getOrCompute over K keys until told time, recording every
 * settle. Loader starts/ends go to the parent live over IPC (so it can pause a holder); the full
 * history goes at the end, after close(), with the handles still open and any unhandled rejection.
 */
import { Redis } from 'ioredis';
import { createCache, type CacheOptions, type CallOptions } from '../../src/index.js';
import { UNSAFE } from '../../src/unsafe.js';

const env = process.env;
const proc = Number(env.SG_PROC);
const callers = Number(env.SG_CALLERS);
const keys = Number(env.SG_KEYS);
const loaderMs = Number(env.SG_LOADER_MS);
const thinkMs = Number(env.SG_THINK_MS);
const options = JSON.parse(env.SG_CALL_OPTIONS as string) as CallOptions;

const unhandled: string[] = [];
process.on('unhandledRejection', (e) => unhandled.push(String(e)));

const redis = new Redis(env.SG_REDIS_URL as string, { maxRetriesPerRequest: 1 });
redis.on('error', () => undefined);
const cache = createCache({
  redis,
  prefix: env.SG_PREFIX,
  redisTimeout: Number(env.SG_REDIS_TIMEOUT),
  [UNSAFE]: { unfencedWrites: env.SG_UNFENCED === '1' },
} as CacheOptions);

const now = (): number => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** [key, start, end, ok, fence | -1, code] — compact, a soak records tens of thousands. */
const settles: [string, number, number, boolean, number, string][] = [];
const runs: [string, number, number, number][] = [];

async function loop(until: number): Promise<void> {
  while (now() < until) {
    const key = `k${Math.floor(Math.random() * keys)}`;
    const start = now();
    try {
      const v = await cache.getOrCompute<{ fence: number | undefined }>(
        key,
        async (ctx) => {
          const t0 = now();
          process.send?.({ ev: 'loader-start', proc, key });
          await sleep(loaderMs);
          runs.push([key, t0, now(), ctx.fencingToken ?? -1]);
          process.send?.({ ev: 'loader-end', proc, key });
          return { fence: ctx.fencingToken };
        },
        options,
      );
      settles.push([key, start, now(), true, v.fence ?? -1, '']);
    } catch (err) {
      settles.push([key, start, now(), false, -1, String((err as { code?: string }).code ?? (err as Error).message)]);
    }
    await sleep(thinkMs * (0.5 + Math.random()));
  }
}

/** Streams the history in batches, so a worker killed by the campaign loses at most the last 250 ms. */
function flush(): void {
  if (settles.length === 0 && runs.length === 0) return;
  process.send?.({ ev: 'batch', settles: settles.splice(0), runs: runs.splice(0), unhandled: unhandled.splice(0) });
}

process.on('message', (m: { op: 'start'; until: number } | { op: 'exit' }) => {
  if (m.op === 'exit') process.exit(0);
  const streaming = setInterval(flush, 250);
  void (async () => {
    await Promise.all(Array.from({ length: callers }, () => loop(m.until)));
    clearInterval(streaming);
    await cache.close();
    redis.disconnect();
    await sleep(50); // let the sockets finish closing
    const resources = process.getActiveResourcesInfo().filter((r) => r !== 'PipeWrap' && r !== 'TTYWrap');
    process.send?.({ ev: 'history', proc, settles, runs, unhandled, resources }, () => process.exit(0));
  })();
});
process.send?.({ ev: 'ready', proc });
