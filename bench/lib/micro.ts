/**
 * In-process micro-benchmarks, each side by side in one run:
 * - overhead: a fresh hit through getOrCompute vs a bare ioredis GET + msgpackr decode of the same
 *   value; an L1 hit vs a bare lru-cache get;
 * - lock cost: acquire + release for `single` and for Redlock over 3 and over 5 nodes.
 * Operations run sequentially (one at a time), so a figure is a latency, not a throughput.
 */
import { Redis } from 'ioredis';
import { LRUCache } from 'lru-cache';
import { Packr } from 'msgpackr';
import { createCache } from '../../src/index.js';
import { Io } from '../../src/io.js';
import { entryKeys } from '../../src/keys.js';
import { RedlockLock } from '../../src/lock/redlock.js';
import { defineScripts } from '../../src/lock/scripts.js';
import { StoreLock, type LockDeps } from '../../src/lock/single.js';
import { resolveCallOptions, resolveCacheOptions, systemClock } from '../../src/options.js';
import { Bus } from '../../src/wait.js';
import { median, percentile } from './scenarios.js';

export interface LatencyFigure {
  name: string;
  p50us: number;
  p99us: number;
}

async function measure(name: string, ops: number, op: () => unknown): Promise<LatencyFigure> {
  const samples: number[] = [];
  for (let i = 0; i < Math.min(200, ops); i++) await op(); // warm-up
  for (let i = 0; i < ops; i++) {
    const t0 = performance.now();
    await op();
    samples.push((performance.now() - t0) * 1000);
  }
  samples.sort((a, b) => a - b);
  return { name, p50us: percentile(samples, 50), p99us: percentile(samples, 99) };
}

/** Median over `runs` of each figure's p50 and p99. */
function medianOf(runs: LatencyFigure[][]): LatencyFigure[] {
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
  const loader = () => VALUE;
  const all: LatencyFigure[][] = [];
  for (let r = 0; r < runs; r++) {
    all.push([
      await measure('bare GET + msgpackr decode', ops, async () => packr.unpack((await bare.getBuffer('bare:user')) as Buffer)),
      await measure('getOrCompute fresh hit (Redis)', ops, () => cache.getOrCompute('user', loader, 3_600_000)),
      await measure('bare lru-cache get', ops * 10, () => lru.get('user')),
      await measure('getOrCompute L1 hit', ops * 10, () => l1cache.getOrCompute('user', loader, 3_600_000)),
    ]);
  }
  await cache.close();
  await l1cache.close();
  for (const c of [redis, bare, l1redis]) c.disconnect();
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
    scripts: defineScripts(store),
    bus,
    clock: systemClock,
    onLost: () => undefined,
  };
  const resolved = resolveCacheOptions({ redis: store });
  const call = resolveCallOptions(resolved.defaults, { ttl: 1000, lockTtl: 10_000 }, 'k');
  const single = new StoreLock(deps, 'single', true);
  const rl = (nodes: Redis[]) =>
    new RedlockLock(deps, { nodes, driftFactor: 0.01, retryCount: 0, retryDelay: 0, retryJitter: 0, nodeTimeout: 100, onNoQuorum: 'throw' }, undefined, { threshold: 5, cooldown: 2000 });
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
