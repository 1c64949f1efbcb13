/**
 * In-process micro-benchmarks, each side by side in one run:
 * - overhead: a fresh hit through getOrCompute vs a bare ioredis GET + msgpackr decode of the same
 *   value; an L1 hit vs a bare lru-cache get; then the same fresh hit and bare GET on node-redis;
 * - lock cost: acquire + release for `single` and for Redlock over 3 and over 5 nodes.
 * Operations run sequentially (one at a time), so a figure is a latency, not a throughput.
 */
import { Redis } from 'ioredis';
import { LRUCache } from 'lru-cache';
import { createClient, RESP_TYPES } from 'redis';
import { Packr } from 'msgpackr';
import { createCache, type Cache } from '../../src/index.js';
import { Io } from '../../src/io.js';
import { entryKeys } from '../../src/keys.js';
import { RedlockLock } from '../../src/lock/redlock.js';
import { portFor } from '../../src/client/detect.js';
import { defineScripts } from '../../src/lock/scripts.js';
import { StoreLock, type LockDeps } from '../../src/lock/single.js';
import { resolveCallOptions, resolveCacheOptions, systemClock } from '../../src/options.js';
import { getOrComputeChannel, type GetOrComputeContext } from '../../src/telemetry.js';
import { Bus } from '../../src/wait.js';
import { broadcastNotes } from '../../src/wake.js';
import { median, percentile } from './scenarios.js';

export interface LatencyFigure {
  name: string;
  p50us: number;
  p99us: number;
}

/** `batch` > 1 times that many operations per sample (each sample is their mean): for sub-microsecond operations the clock's own cost would otherwise dominate. */
export async function measure(name: string, ops: number, op: () => unknown, batch = 1): Promise<LatencyFigure> {
  const samples: number[] = [];
  for (let i = 0; i < Math.min(200, ops); i++) await op(); // warm-up
  for (let i = 0; i < ops; i += batch) {
    const t0 = performance.now();
    for (let j = 0; j < batch; j++) await op();
    samples.push(((performance.now() - t0) * 1000) / batch);
  }
  samples.sort((a, b) => a - b);
  return { name, p50us: percentile(samples, 50), p99us: percentile(samples, 99) };
}

/** Median over `runs` of each figure's p50 and p99. */
export function medianOf(runs: LatencyFigure[][]): LatencyFigure[] {
  return (runs[0] ?? []).map((f, i) => ({
    name: f.name,
    p50us: median(runs.map((r) => (r[i] as LatencyFigure).p50us)),
    p99us: median(runs.map((r) => (r[i] as LatencyFigure).p99us)),
  }));
}

const VALUE = { id: 42, name: 'Ada Lovelace', roles: ['admin', 'author'], profile: { city: 'London', since: 1843 } };

export async function overhead(url: string, ops: number, runs: number): Promise<LatencyFigure[]> {
  const redis = new Redis(url);
  const bare = new Redis(url);
  const cache = createCache({ redis, prefix: 'ovh' });
  const l1redis = new Redis(url);
  const l1cache = createCache({ redis: l1redis, prefix: 'ovh', local: { max: 1000 } });
  await cache.set('user', VALUE, 3_600_000);
  const packr = new Packr({ useRecords: true, moreTypes: true, structuredClone: false, mapsAsObjects: false });
  await bare.set('bare:user', packr.pack(VALUE));
  const lru = new LRUCache<string, object>({ max: 1000 });
  lru.set('user', VALUE);
  await l1cache.getOrCompute('user', () => VALUE, 3_600_000);
  // node-redis, connected as a caller would; its bare GET asks for a Buffer like the store's read does.
  const nodeRedis = createClient({ url });
  nodeRedis.on('error', () => undefined);
  await nodeRedis.connect();
  const nodeBare = nodeRedis.withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer });
  const nrCache = createCache({ redis: nodeRedis, prefix: 'ovh' });
  const loader = () => VALUE;
  const all: LatencyFigure[][] = [];
  for (let r = 0; r < runs; r++) {
    all.push([
      await measure('bare GET + msgpackr decode', ops, async () => packr.unpack((await bare.getBuffer('bare:user')) as Buffer)),
      await measure('getOrCompute fresh hit (Redis)', ops, () => cache.getOrCompute('user', loader, 3_600_000)),
      await measure('bare lru-cache get', ops * 10, () => lru.get('user')),
      await measure('getOrCompute L1 hit', ops * 10, () => l1cache.getOrCompute('user', loader, 3_600_000)),
      await measure('bare GET + msgpackr decode (node-redis)', ops, async () => packr.unpack((await nodeBare.get('bare:user')) as Buffer)),
      await measure('getOrCompute fresh hit (Redis, node-redis)', ops, () => nrCache.getOrCompute('user', loader, 3_600_000)),
    ]);
  }
  await cache.close();
  await l1cache.close();
  await nrCache.close();
  nodeRedis.destroy();
  for (const c of [redis, bare, l1redis]) c.disconnect();
  return medianOf(all);
}

/**
 * The tracing channel's cost on the fresh-hit paths (Redis and L1): each path measured with nobody
 * subscribed, with a subscriber on every sub-channel (it reads the outcome, as an APM would), and with the
 * channel bypassed (the baseline); figures are medians over `runs`. L1 samples are means of 100 calls
 * (p99 is then of those means). Without a subscriber the channel costs one `hasSubscribers` check per call.
 */
export async function tracingCost(url: string, ops: number, runs: number): Promise<LatencyFigure[]> {
  const redis = new Redis(url);
  const cache = createCache({ redis, prefix: 'trc' });
  const l1redis = new Redis(url);
  const l1cache = createCache({ redis: l1redis, prefix: 'trc', local: { max: 1000 } });
  await cache.set('user', VALUE, 3_600_000);
  await l1cache.ready();
  await l1cache.getOrCompute('user', () => VALUE, 3_600_000);
  const loader = () => VALUE;
  const bypass = (c: Cache): unknown => (c as unknown as { compute: (...args: unknown[]) => Promise<unknown> }).compute('user', loader, 3_600_000, undefined);
  let outcomes = 0;
  const read = (ctx: GetOrComputeContext): void => {
    if (ctx.outcome !== undefined) outcomes++;
  };
  const subscriber = { start: read, end: read, asyncStart: read, asyncEnd: read, error: read };
  const subscribed = async <T>(work: () => Promise<T>): Promise<T> => {
    getOrComputeChannel.subscribe(subscriber);
    try {
      return await work();
    } finally {
      getOrComputeChannel.unsubscribe(subscriber);
    }
  };
  // Three variants of one path, in an order that alternates between runs (so warm-up and drift favour none).
  const variants = async (name: string, n: number, batch: number, op: () => unknown, bypass: () => unknown, reverse: boolean): Promise<LatencyFigure[]> => {
    const steps = [
      // The baseline: the same call without the channel at all (the private body getOrCompute calls).
      () => measure(`${name}, channel bypassed (baseline)`, n, bypass, batch),
      () => measure(`${name}, no subscriber`, n, op, batch),
      () => subscribed(() => measure(`${name}, 1 subscriber`, n, op, batch)),
    ];
    const figures: LatencyFigure[] = [];
    for (const i of reverse ? [2, 1, 0] : [0, 1, 2]) figures[i] = await (steps[i] as () => Promise<LatencyFigure>)();
    return figures;
  };
  const all: LatencyFigure[][] = [];
  for (let r = 0; r < runs; r++) {
    all.push([
      ...(await variants('getOrCompute fresh hit (Redis)', ops, 1, () => cache.getOrCompute('user', loader, 3_600_000), () => bypass(cache), r % 2 === 1)),
      ...(await variants('getOrCompute L1 hit', ops * 10, 100, () => l1cache.getOrCompute('user', loader, 3_600_000), () => bypass(l1cache), r % 2 === 1)),
    ]);
  }
  if (outcomes === 0) throw new Error('the subscriber saw no outcome: the figures would not measure tracing');
  await cache.close();
  await l1cache.close();
  for (const c of [redis, l1redis]) c.disconnect();
  return medianOf(all);
}

/** `pause` / `resume` freeze one Redlock node (SIGSTOP) for the last figure; omitted, that figure is skipped. */
export async function lockCost(
  url: string,
  redlock3: string[],
  redlock5: string[],
  ops: number,
  runs: number,
  frozen?: { pause: () => void; resume: () => void },
): Promise<LatencyFigure[]> {
  const store = new Redis(url);
  const clients = [...redlock5].map((u) => new Redis(u));
  const bus = new Bus('lockbench');
  const deps: LockDeps = {
    io: new Io(1000, 5, 2000, systemClock),
    scripts: defineScripts(portFor(store)),
    notes: broadcastNotes(bus),
    clock: systemClock,
    onLost: () => undefined,
  };
  const resolved = resolveCacheOptions({ redis: store });
  const call = resolveCallOptions(resolved.defaults, { ttl: 1000, lockTtl: 10_000 }, 'k');
  const single = new StoreLock(deps, 'single', true);
  const rl = (nodes: Redis[]) =>
    new RedlockLock(deps, { nodes, driftFactor: 0.01, retryCount: 0, retryDelay: 0, retryJitter: 0, nodeTimeout: 100, onNoQuorum: 'throw' }, undefined, { threshold: 5, cooldown: 2000, prefix: 'bench', onHealth: () => undefined });
  const three = rl(clients.slice(0, redlock3.length));
  const five = rl(clients);
  let i = 0;
  const cycle = (lock: StoreLock | RedlockLock) => async () => {
    const key = `k${i++}`;
    const grant = await lock.acquire(key, entryKeys('lockbench', key), call);
    if (!grant) throw new Error('lock not granted in an uncontended benchmark');
    await grant.release('empty');
  };
  const all: LatencyFigure[][] = [];
  for (let r = 0; r < runs; r++) {
    const figures = [
      await measure('single: acquire + release', ops, cycle(single)),
      await measure(`redlock over ${redlock3.length} nodes: acquire + release`, ops, cycle(three)),
      await measure(`redlock over ${redlock5.length} nodes: acquire + release`, ops, cycle(five)),
    ];
    if (frozen) {
      frozen.pause();
      try {
        figures.push(await measure(`redlock over ${redlock5.length} nodes, 1 frozen (SIGSTOP): acquire + release`, ops, cycle(five)));
      } finally {
        frozen.resume();
      }
    }
    all.push(figures);
  }
  store.disconnect();
  for (const c of clients) c.disconnect();
  return medianOf(all);
}
