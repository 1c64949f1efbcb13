/**
 * A Cluster fault-campaign worker (test/integration/cluster-campaign.test.ts): one ioredis Cluster
 * client and one cache; C callers loop over the hot keys with getOrCompute until told to stop. The
 * loader returns the fencing token it was handed, so every served value names its token (undefined:
 * computed degraded). Recorded: every settle, every loader start (its token), every loader run, every
 * `computed` and `degraded` event, unhandled rejections. The history streams in batches; the rest
 * comes after close(). On `refresh` the client re-reads the slot map (ioredis otherwise learns a new
 * slot owner on a MOVED), as cluster-failover.test.ts does after a failover.
 */
import { Cluster } from 'ioredis';
import { createCache, type CacheOptions, type CallOptions } from '../../src/index.js';
import { UNSAFE, type UnsafeSwitches } from '../../src/unsafe.js';
import { ACL_USER, AS_ACL_USER } from './redis-server.js';

const env = process.env;
const proc = Number(env.SG_PROC);
const callers = Number(env.SG_CALLERS);
const keys = JSON.parse(env.SG_KEYS as string) as string[];
const loaderMs = Number(env.SG_LOADER_MS);
const thinkMs = Number(env.SG_THINK_MS);
const options = JSON.parse(env.SG_CALL_OPTIONS as string) as CallOptions;
const unsafe = JSON.parse(env.SG_UNSAFE ?? '{}') as UnsafeSwitches;

const unhandled: string[] = [];
process.on('unhandledRejection', (e) => unhandled.push(e instanceof Error && e.stack ? e.stack.split('\n').slice(0, 10).join(' | ') : String(e)));

const client = new Cluster(JSON.parse(env.SG_STARTUP as string) as { host: string; port: number }[], {
  redisOptions: { maxRetriesPerRequest: 1, ...(AS_ACL_USER ? ACL_USER : {}) },
});
client.on('error', () => undefined);
const cache = createCache({
  redis: client,
  prefix: env.SG_PREFIX,
  ...(JSON.parse(env.SG_CACHE_OPTIONS ?? '{}') as Partial<CacheOptions>),
  [UNSAFE]: unsafe,
} as CacheOptions);

const now = (): number => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** [key, start, end, ok, fence | -1, code] */
const settles: [string, number, number, boolean, number, string][] = [];
/** [key, fence, at]: a token handed to a loader (at its start). */
const grants: [string, number, number][] = [];
/** [key, start, end, fence | -1] */
const runs: [string, number, number, number][] = [];
/** [key, what, at]: a `degraded` event (what = operation and failure) or a loader run without a token (at its start). */
const degraded: [string, string, number][] = [];
/** [key, fence, at]: rebuild writes the fence refused (their value reached only their flight's callers). */
const refused: [string, number, number][] = [];
let computed = 0;
let unkeyedDegraded = 0;

cache.on('computed', () => {
  computed++;
});
cache.on('degraded', (e) => {
  const failure = (e.error as { failure?: string; code?: string }).failure ?? (e.error as { code?: string }).code ?? '?';
  if (e.key === undefined) unkeyedDegraded++;
  else degraded.push([e.key, `degraded ${e.operation} (${failure})`, now()]);
});
cache.on('writeRejected', (e) => {
  if (e.fence !== undefined) refused.push([e.key, e.fence, now()]);
});

const codeOf = (err: unknown): string => String((err as { code?: string }).code ?? (err as Error).message);

async function step(key: string): Promise<void> {
  const start = now();
  try {
    const token = await cache.getOrCompute<number | null>(
      key,
      async (ctx) => {
        const t0 = now();
        if (ctx.fencingToken !== undefined) grants.push([key, ctx.fencingToken, t0]);
        // A loader without a token runs degraded (the `computed` event says lock 'degraded' when it
        // ends): recorded at its start, when the call decided Redis was unavailable for the key.
        else degraded.push([key, 'loader run degraded', t0]);
        await sleep(loaderMs);
        runs.push([key, t0, now(), ctx.fencingToken ?? -1]);
        return ctx.fencingToken ?? null; // null: computed degraded (undefined would not be cached)
      },
      options,
    );
    settles.push([key, start, now(), true, token ?? -1, '']);
  } catch (err) {
    settles.push([key, start, now(), false, -1, codeOf(err)]);
  }
}

let stopped = false;
async function loop(): Promise<void> {
  while (!stopped) {
    await step(keys[Math.floor(Math.random() * keys.length)] as string);
    await sleep(thinkMs * (0.5 + Math.random()));
  }
}

function flush(): void {
  process.send?.({ ev: 'batch', settles: settles.splice(0), grants: grants.splice(0), runs: runs.splice(0), degraded: degraded.splice(0), refused: refused.splice(0), unhandled: unhandled.splice(0) });
}

process.on('message', (m: { op: 'start' | 'stop' | 'refresh'; id?: number }) => {
  if (m.op === 'refresh') {
    client.refreshSlotsCache(() => process.send?.({ ev: 'refreshed', id: m.id }));
    return;
  }
  if (m.op === 'stop') {
    stopped = true;
    return;
  }
  const streaming = setInterval(flush, 250);
  void (async () => {
    await Promise.all(Array.from({ length: callers }, () => loop()));
    clearInterval(streaming);
    await cache.close();
    client.disconnect();
    await sleep(100);
    process.send?.({ ev: 'history', settles, grants, runs, degraded, refused, unhandled, computed, unkeyedDegraded }, () => process.exit(0));
  })();
});
process.send?.({ ev: 'ready', proc });
