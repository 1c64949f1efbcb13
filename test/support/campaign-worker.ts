/**
 * A fault-campaign worker: C callers loop over K keys until told time, recording every settle. Each
 * step is a getOrCompute, or (with SG_MIX) a get, set or delete, a deleteByTag, or a getOrCompute whose caller
 * aborts (an already-aborted signal, or one that fires at a random moment). With SG_MIX's `tagged`,
 * that share of sets and getOrComputes tag their value with the key's tag (`t<i mod 2>` for key
 * `k<i>`), recorded with the value; a deleteByTag invalidates the tag of the step's key. Every value carries its
 * identity `<proc>.<seq>`, so the checker can tell which write a read returned. Loader starts/ends go
 * to the parent live over IPC (so it can pause a holder); the history streams in batches, the rest
 * at the end, after close(), with the handles still open and any unhandled rejection.
 */
import { createCache, type CacheOptions, type CallOptions } from '../../src/index.js';
import { portFor } from '../../src/client/detect.js';
import { UNSAFE, type UnsafeSwitches } from '../../src/unsafe.js';
import { familyClient } from './family.js';

const env = process.env;
const proc = Number(env.SG_PROC);
const callers = Number(env.SG_CALLERS);
const keys = Number(env.SG_KEYS);
const loaderMs = Number(env.SG_LOADER_MS);
const thinkMs = Number(env.SG_THINK_MS);
const options = JSON.parse(env.SG_CALL_OPTIONS as string) as CallOptions;
/** Shares of each step; the rest are plain getOrCompute calls. */
const mix = JSON.parse(env.SG_MIX ?? '{}') as { get?: number; set?: number; delete?: number; deleteByTag?: number; abort?: number; tagged?: number };
/** The one tag of key `k<i>`: keys share tags, so a deleteByTag reaches several. */
const tagOf = (key: string): string => `t${Number(key.slice(1)) % 2}`;
/** The key's tag for a `tagged` share of the writes; undefined for the others. */
const someTags = (key: string): string[] | undefined => (Math.random() < (mix.tagged ?? 0) ? [tagOf(key)] : undefined);
const unsafe = JSON.parse(env.SG_UNSAFE ?? '{}') as UnsafeSwitches;

const unhandled: string[] = [];
process.on('unhandledRejection', (e) => unhandled.push(e instanceof Error && e.stack ? e.stack.split('\n').slice(0, 10).join(' | ') : String(e)));

// The cache's client is of the family under test (SG_TEST_CLIENT, inherited from the parent's env).
const { client: redis, dispose: disposeRedis } = familyClient(env.SG_REDIS_URL as string);
const cache = createCache({
  redis,
  prefix: env.SG_PREFIX,
  redisTimeout: Number(env.SG_REDIS_TIMEOUT),
  // SG_L1: '0' off, '1' on (notes drop other processes' changes), 'tracking' (the server's invalidations do).
  local: env.SG_L1 === '1' ? { max: 1000 } : env.SG_L1 === 'tracking' ? { max: 1000, invalidation: 'tracking' } : false,
  // Further createCache options of one campaign (JSON: e.g. degradedMemo).
  ...(JSON.parse(env.SG_CACHE_OPTIONS ?? '{}') as Partial<CacheOptions>),
  [UNSAFE]: unsafe,
} as CacheOptions);

const now = (): number => performance.timeOrigin + performance.now();
/**
 * [up, when] each time the cache's subscription came up (true) or went down (false), as its Bus reports
 * them to the cache (onUp: L1 and the degraded memo start over; onDown: L1 stops). Down from creation
 * until the first. The checker needs them for the one exception README states to "no superseded read"
 * (a degraded value kept while the subscription is down: see checker.ts, DegradedAllowance).
 */
const subscription: [boolean, number][] = [[false, now()]];
{
  const handlers = ((cache as unknown as { rt: unknown }).rt as { bus: { handlers: { onUp: () => void; onDown: () => void } } }).bus.handlers;
  const { onUp, onDown } = handlers;
  handlers.onUp = () => (subscription.push([true, now()]), onUp());
  handlers.onDown = () => (subscription.push([false, now()]), onDown());
}
/** Every live timer and where it was set, to name the ones left after close() (diagnostics only). */
const liveTimers = new Map<unknown, string>();
{
  const g = globalThis as unknown as Record<string, (...a: unknown[]) => unknown>;
  const [st, si, ct, ci] = [g.setTimeout, g.setInterval, g.clearTimeout, g.clearInterval] as ((...a: unknown[]) => unknown)[];
  const where = () => (new Error().stack ?? '').split('\n').slice(2, 7).join(' | ');
  g.setTimeout = (fn: unknown, ...rest: unknown[]) => {
    const t: unknown = st?.((...a: unknown[]) => (liveTimers.delete(t), (fn as (...x: unknown[]) => unknown)(...a)), ...rest);
    liveTimers.set(t, where());
    return t;
  };
  g.setInterval = (...a: unknown[]) => {
    const t = si?.(...a);
    liveTimers.set(t, where());
    return t;
  };
  g.clearTimeout = (t: unknown) => (liveTimers.delete(t), ct?.(t));
  g.clearInterval = (t: unknown) => (liveTimers.delete(t), ci?.(t));
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** A sleep that honours the loader's signal, as a well-behaved loader does. */
const cancellableSleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason as Error);
    const timer = setTimeout(() => (signal.removeEventListener('abort', onAbort), resolve()), ms);
    const onAbort = () => (clearTimeout(timer), reject(signal.reason as Error));
    signal.addEventListener('abort', onAbort, { once: true });
  });

interface Value {
  /** `<proc>.<seq>`: unique across the campaign. */
  id: string;
  fence: number | undefined;
}
let seq = 0;
const nextId = (): string => `${proc}.${++seq}`;

/** [key, start, end, ok, fence | -1, code, value id | '', had a signal] — compact, a soak records tens of thousands. */
type SettleRow = [string, number, number, boolean, number, string, string, boolean];
/** [kind, key ('' for deleteByTag), start, end, ok, value id | '', error code | '', tags (a set's, or those deleteByTag invalidated) joined by ','] */
type WriteRow = ['set' | 'delete' | 'deleteByTag', string, number, number, boolean, string, string, string];
/** [key, start, end, fence | -1, value id, its call's tags joined by ','] */
type RunRow = [string, number, number, number, string, string];
const settles: SettleRow[] = [];
const writes: WriteRow[] = [];
const runs: RunRow[] = [];
/**
 * [key, fence, when] of every rebuild write the fence refused: that value went to the callers of its
 * flight and never reached the store, so their answers say nothing about what the store holds.
 */
const refused: [string, number, number][] = [];
cache.on('writeRejected', (e) => {
  if (e.fence !== undefined) refused.push([e.key, e.fence, now()]);
});

const codeOf = (err: unknown): string => String((err as { code?: string }).code ?? (err as Error).message);

/** A get, recorded as a settle (nothing returned: no value identity). */
async function read(key: string): Promise<void> {
  const start = now();
  try {
    const v = await cache.get<Value>(key);
    settles.push([key, start, now(), true, v?.fence ?? -1, '', v?.id ?? '', false]);
  } catch (err) {
    settles.push([key, start, now(), false, -1, codeOf(err), '', false]);
  }
}

/** A set (tagged or not), delete or deleteByTag (of the key's tag), recorded with its identity and tags. */
async function write(kind: 'set' | 'delete' | 'deleteByTag', key: string): Promise<void> {
  const start = now();
  const id = kind === 'set' ? nextId() : '';
  const tags = kind === 'deleteByTag' ? [tagOf(key)] : kind === 'set' ? someTags(key) : undefined;
  let code = '';
  const sent = kind === 'set' ? cache.set<Value>(key, { id, fence: undefined }, tags ? { ...options, tags } : options) : kind === 'delete' ? cache.delete(key) : cache.deleteByTag(tags as string[]);
  await sent.catch((err: unknown) => (code = codeOf(err)));
  writes.push([kind, kind === 'deleteByTag' ? '' : key, start, now(), code === '', id, code, tags?.join(',') ?? '']);
}

async function step(key: string, r: number): Promise<void> {
  let cut = mix.get ?? 0;
  if (r < cut) return read(key);
  // Every write races a read of the same key in the same process (started together), as a request
  // reading while another invalidates would: the read's reply must not bring the old value back.
  if (r < (cut += mix.set ?? 0)) return void (await Promise.all([read(key), write('set', key)]));
  if (r < (cut += mix.delete ?? 0)) return void (await Promise.all([read(key), write('delete', key)]));
  if (r < (cut += mix.deleteByTag ?? 0)) return void (await Promise.all([read(key), write('deleteByTag', key)]));
  const start = now();
  const tags = someTags(key);
  let signal: AbortSignal | undefined;
  if (r < (cut += mix.abort ?? 0)) signal = Math.random() < 0.3 ? AbortSignal.abort() : AbortSignal.timeout(Math.floor(Math.random() * 2 * loaderMs));
  try {
    const v = await cache.getOrCompute<Value>(
      key,
      async (ctx) => {
        const t0 = now();
        process.send?.({ ev: 'loader-start', proc, key, tags });
        try {
          await cancellableSleep(loaderMs, ctx.signal);
        } finally {
          process.send?.({ ev: 'loader-end', proc, key });
        }
        const id = nextId();
        runs.push([key, t0, now(), ctx.fencingToken ?? -1, id, tags?.join(',') ?? '']);
        return { id, fence: ctx.fencingToken };
      },
      { ...options, ...(signal ? { signal } : {}), ...(tags ? { tags } : {}) },
    );
    settles.push([key, start, now(), true, v.fence ?? -1, '', v.id, signal !== undefined]);
  } catch (err) {
    settles.push([key, start, now(), false, -1, codeOf(err), '', signal !== undefined]);
  }
}

async function loop(until: number): Promise<void> {
  while (now() < until) {
    await step(`k${Math.floor(Math.random() * keys)}`, Math.random());
    await sleep(thinkMs * (0.5 + Math.random()));
  }
}

/** Streams the history in batches, so a worker killed by the campaign loses at most the last 250 ms. */
function flush(): void {
  if (settles.length === 0 && runs.length === 0 && writes.length === 0 && refused.length === 0 && subscription.length === 0) return;
  process.send?.({ ev: 'batch', settles: settles.splice(0), writes: writes.splice(0), runs: runs.splice(0), refused: refused.splice(0), unhandled: unhandled.splice(0), subscription: subscription.splice(0) });
}

process.on('message', (m: { op: 'start'; until: number } | { op: 'exit' }) => {
  if (m.op === 'exit') process.exit(0);
  const streaming = setInterval(flush, 250);
  void (async () => {
    await Promise.all(Array.from({ length: callers }, () => loop(m.until)));
    clearInterval(streaming);
    await cache.close();
    disposeRedis();
    // Let the sockets finish closing, any late rejection surface, and the callers' own AbortSignal.timeout
    // timers (up to 2 × loaderMs, started by the last calls) lapse: those are the caller's handles, not the cache's.
    await sleep(2 * loaderMs + 50);
    // Then up to 2.5 s more for the process to go quiet, for a timer of the client library's own that
    // outlives its disconnect: ioredis ends a connection whose ready check failed (Redis paused or
    // restarting) with its `disconnectTimeout` timer (2 s by default) that lives until the socket
    // closes — seen here, set in ioredis' AbstractConnector.disconnect. node-redis (v5, v6) waits
    // between reconnection attempts on a node:timers/promises setTimeout that destroy() does not
    // cancel (its default backoff: at most 2 s + 200 ms jitter); the loop sees that the client was
    // closed only when the wait ends. (Not in liveTimers: the promise timer bypasses the global.) A
    // leaked interval, or a timer of the cache that outlives close() by more, still shows.
    const open = () => process.getActiveResourcesInfo().filter((r) => r !== 'PipeWrap' && r !== 'TTYWrap');
    for (let waited = 0; open().length > 0 && waited < 2500; waited += 50) await sleep(50);
    const resources = open();
    // Which timers, when some are left: where they were set.
    if (resources.includes('Timeout')) for (const stack of liveTimers.values()) console.error(`campaign-worker ${proc}: timer left after close(), set at ${stack}`);
    process.send?.({ ev: 'history', proc, settles, writes, runs, refused, unhandled, resources, subscription }, () => process.exit(0));
  })();
});
// The adapter the cache picked, so the campaign can check it runs on the family under test.
process.send?.({ ev: 'ready', proc, family: portFor(redis).family });
