/**
 * `npm run bench:batch [-- --processes P] [--callers C] [--runs R] [--duration-ms D] [--loader-ms L] [--clear-keys N] [--clear-only] [--batch-only]`
 *
 * Two scenarios, on a local redis-server:
 * 1. batch: P processes × C callers, each asking in a loop for 100 of 10,000 zipf-distributed keys
 *    (ttl 1 s), done three ways — `getOrComputeMany`, the same 100 keys as 100 parallel `getOrCompute`
 *    calls, and cachified's `createBatch`. Reported: origin key loads per expiry (ideal 1: a load of a
 *    key within one ttl of another load of it anywhere in the fleet is a duplicate), loader calls,
 *    p50 and p99 per call, Redis commands per call (server-side total_commands_processed; pipelined commands
 *    count one each, so this is an upper bound on round trips, not round trips).
 * 2. clear: a namespace of N keys (default 100,000), then a whole cache of N keys, is cleared while
 *    another cache reads: time to resolve, Redis CPU while it runs, p99 and max of the other traffic
 *    during it. `--clear-only` skips scenario 1.
 * Each process forks this file again with `--role worker`.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { cachified, createBatch, totalTtl, type Cache as CachifiedCache, type CacheEntry } from '@epic-web/cachified';
import { Redis } from 'ioredis';
import { createCache } from '../src/index.js';
import { redisToFlush } from './lib/server.js';

const { values: args } = parseArgs({
  options: {
    role: { type: 'string', default: 'parent' },
    processes: { type: 'string', default: '4' },
    callers: { type: 'string', default: '20' },
    'duration-ms': { type: 'string', default: '6000' },
    'loader-ms': { type: 'string', default: '20' },
    runs: { type: 'string', default: '6' },
    'clear-keys': { type: 'string', default: '100000' },
    'clear-only': { type: 'boolean', default: false },
    'batch-only': { type: 'boolean', default: false },
    /** Allow FLUSHALL on the server of REDIS_URL (refused without it: see lib/server.ts). */
    flush: { type: 'boolean', default: false },
  },
});

const KEYS = 10_000;
const PER_CALL = 100;
const TTL_MS = 1000;
const VARIANTS = ['getOrComputeMany', '100× getOrCompute', 'cachified createBatch'] as const;
type Variant = (typeof VARIANTS)[number];

interface WorkerReport {
  loads: [string, number][]; // (key, epoch ms) of every origin load
  loaderCalls: number;
  latencies: number[];
  errors: number;
}

/** Zipf(s = 1) over 0..n-1 by inverse CDF on precomputed cumulative weights. */
function zipf(n: number): () => number {
  const cdf = new Float64Array(n);
  let sum = 0;
  for (let i = 0; i < n; i++) cdf[i] = sum += 1 / (i + 1);
  return () => {
    const u = Math.random() * sum;
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((cdf[mid] as number) < u) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
}

function pick100(draw: () => number): string[] {
  const keys = new Set<string>();
  while (keys.size < PER_CALL) keys.add(`k${draw()}`);
  return [...keys];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ------------------------------------------------------------------ worker

async function worker(): Promise<void> {
  const { url, prefix, variant, callers, durationMs, loaderMs, startAt } = JSON.parse(process.env.SG_BATCH as string) as {
    url: string; prefix: string; variant: Variant; callers: number; durationMs: number; loaderMs: number; startAt: number;
  };
  const report: WorkerReport = { loads: [], loaderCalls: 0, latencies: [], errors: 0 };
  const origin = async (keys: string[]) => {
    report.loaderCalls++;
    const at = Date.now();
    for (const k of keys) report.loads.push([k, at]);
    await sleep(loaderMs);
    return keys.map((k) => ({ k, at }));
  };
  const redis = new Redis(url, { maxRetriesPerRequest: 1 });
  const cache = createCache({ redis, prefix });
  await cache.ready();
  let ask: (keys: string[]) => Promise<unknown>;
  if (variant === 'getOrComputeMany') {
    ask = (keys) => cache.getOrComputeMany(keys, async (missing) => {
      const values = await origin(missing);
      return new Map(values.map((v) => [v.k, v]));
    }, TTL_MS);
  } else if (variant === '100× getOrCompute') {
    ask = (keys) => Promise.all(keys.map((k) => cache.getOrCompute(k, async () => (await origin([k]))[0], TTL_MS)));
  } else {
    const adapter: CachifiedCache = {
      async get(key) {
        const raw = await redis.get(`${prefix}:${key}`);
        return raw === null ? null : (JSON.parse(raw) as CacheEntry);
      },
      async set(key, entry) {
        const ttl = totalTtl(entry.metadata);
        await redis.set(`${prefix}:${key}`, JSON.stringify(entry), 'PX', Math.max(1, Math.ceil(ttl)));
      },
      async delete(key) {
        await redis.del(`${prefix}:${key}`);
      },
    };
    ask = (keys) => {
      const batch = createBatch((params: string[]) => origin(params));
      return Promise.all(keys.map((k) => cachified({ cache: adapter, key: k, ttl: TTL_MS, getFreshValue: batch.add(k) })));
    };
  }
  const draw = zipf(KEYS);
  await sleep(Math.max(0, startAt - Date.now()));
  const until = performance.now() + durationMs;
  await Promise.all(
    Array.from({ length: callers }, async () => {
      while (performance.now() < until) {
        const t0 = performance.now();
        try {
          await ask(pick100(draw));
        } catch {
          report.errors++;
        }
        report.latencies.push(performance.now() - t0);
      }
    }),
  );
  await cache.close();
  redis.disconnect();
  process.send?.(report);
}

// ------------------------------------------------------------------ parent

function percentile(sorted: number[], p: number): number {
  return sorted.length === 0 ? Number.NaN : (sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] as number);
}

/** Loads per expiry: every load divided by the loads that were not within TTL_MS of an earlier load of the same key. */
function loadsPerExpiry(loads: [string, number][]): { total: number; needed: number } {
  const byKey = new Map<string, number[]>();
  for (const [k, t] of loads) (byKey.get(k) ?? byKey.set(k, []).get(k))?.push(t);
  let needed = 0;
  for (const times of byKey.values()) {
    times.sort((a, b) => a - b);
    let last = Number.NEGATIVE_INFINITY;
    for (const t of times) {
      if (t - last >= TTL_MS) {
        needed++;
        last = t;
      }
    }
  }
  return { total: loads.length, needed };
}

async function commandsProcessed(admin: Redis): Promise<number> {
  return Number(/total_commands_processed:(\d+)/.exec(await admin.info('stats'))?.[1] ?? 0);
}

async function cpuUsed(admin: Redis): Promise<number> {
  const info = await admin.info('cpu');
  return Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1] ?? 0) + Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1] ?? 0);
}

interface BatchFigures {
  calls: number;
  loads: number;
  perExpiry: number;
  loaderCalls: number;
  p50: number;
  p99: number;
  commandsPerCall: number;
  errors: number;
}

async function batchRun(url: string, admin: Redis, variant: Variant, prefix: string): Promise<BatchFigures> {
  const P = Number(args.processes);
  await admin.flushall();
  const before = await commandsProcessed(admin);
  const startAt = Date.now() + 1500;
  const children: ChildProcess[] = Array.from({ length: P }, () =>
    fork(fileURLToPath(import.meta.url), ['--role', 'worker'], {
      execArgv: ['--import', 'tsx'],
      env: { ...process.env, SG_BATCH: JSON.stringify({ url, prefix, variant, callers: Number(args.callers), durationMs: Number(args['duration-ms']), loaderMs: Number(args['loader-ms']), startAt }) },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    }),
  );
  const reports = await Promise.all(children.map((c) => new Promise<WorkerReport>((resolve) => c.once('message', (m: WorkerReport) => resolve(m)))));
  const commands = (await commandsProcessed(admin)) - before;
  const latencies = reports.flatMap((r) => r.latencies).sort((a, b) => a - b);
  const { total, needed } = loadsPerExpiry(reports.flatMap((r) => r.loads));
  return {
    calls: latencies.length,
    loads: total,
    perExpiry: total / needed,
    loaderCalls: reports.reduce((s, r) => s + r.loaderCalls, 0),
    p50: percentile(latencies, 0.5),
    p99: percentile(latencies, 0.99),
    commandsPerCall: commands / latencies.length,
    errors: reports.reduce((s, r) => s + r.errors, 0),
  };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

function row(variant: string, f: BatchFigures): string {
  return `| ${variant} | ${f.calls} | ${f.loads} | ${f.perExpiry.toFixed(3)} | ${f.loaderCalls} | ${f.p50.toFixed(1)} | ${f.p99.toFixed(1)} | ${f.commandsPerCall.toFixed(1)} | ${f.errors} |`;
}

/** Every variant in each run, interleaved run by run; one line per run, then the medians of every column. */
async function batchScenario(url: string, admin: Redis): Promise<void> {
  const runs = Number(args.runs);
  console.log(`batch: ${args.processes} processes × ${args.callers} callers × 100 of ${KEYS} zipf keys, ttl ${TTL_MS} ms, loader ${args['loader-ms']} ms, ${args['duration-ms']} ms per variant, ${runs} runs interleaved`);
  const header = ['| variant | calls | origin key loads | loads per expiry (ideal 1) | loader calls | p50 ms | p99 ms | Redis commands per call | errors |', '|---|---|---|---|---|---|---|---|---|'];
  console.log(header.join('\n'));
  const figures = new Map<Variant, BatchFigures[]>(VARIANTS.map((v) => [v, []]));
  for (let run = 0; run < runs; run++) {
    for (const [i, variant] of VARIANTS.entries()) {
      const f = await batchRun(url, admin, variant, `bb${run}v${i}`);
      figures.get(variant)?.push(f);
      console.log(row(`${variant} (run ${run + 1})`, f));
    }
  }
  console.log(`\nMedians of ${runs} runs:`);
  console.log(header.join('\n'));
  for (const [variant, list] of figures) {
    const m = (pick: (f: BatchFigures) => number) => median(list.map(pick));
    console.log(row(variant, { calls: m((f) => f.calls), loads: m((f) => f.loads), perExpiry: m((f) => f.perExpiry), loaderCalls: m((f) => f.loaderCalls), p50: m((f) => f.p50), p99: m((f) => f.p99), commandsPerCall: m((f) => f.commandsPerCall), errors: m((f) => f.errors) }));
  }
}

/**
 * One clear of N entries while another cache (its own prefix) reads a key in a loop: the namespace's
 * clear() (O(1): a generation bump) or the cache's own clear() (a SCAN walk, O(1) per entry).
 */
async function clearScenario(url: string, admin: Redis, variant: 'namespace' | 'cache'): Promise<void> {
  const N = Number(args['clear-keys']);
  await admin.flushall();
  const client = new Redis(url, { maxRetriesPerRequest: 1 });
  const cache = createCache({ redis: client, prefix: 'bc' });
  const others = createCache({ redis: client, prefix: 'bo' });
  await cache.ready();
  const target = variant === 'namespace' ? cache.namespace('big') : cache;
  for (let i = 0; i < N; i += 1000) {
    const keys = Array.from({ length: Math.min(1000, N - i) }, (_, j) => `k${i + j}`);
    await target.getOrComputeMany(keys, async (missing) => new Map(missing.map((k) => [k, { k }])), 600_000);
  }
  const dbsize = await admin.dbsize();
  // Other traffic: a reader of another prefix's key, its latencies sampled during the clear only.
  await others.set('other', 1, 600_000);
  const during: number[] = [];
  let clearing = true;
  const reader = (async () => {
    while (clearing) {
      const t0 = performance.now();
      await others.get('other');
      during.push(performance.now() - t0);
    }
  })();
  await sleep(20);
  const cpu0 = await cpuUsed(admin);
  const t0 = performance.now();
  await target.clear();
  const clearMs = performance.now() - t0;
  const cpu1 = await cpuUsed(admin);
  clearing = false;
  await reader;
  const gone = (await target.getMany(['k0', `k${N - 1}`])).every((v) => v === undefined);
  during.sort((a, b) => a - b);
  const what = variant === 'namespace' ? `namespace.clear(): a namespace of ${N} keys` : `cache.clear(): a cache of ${N} keys`;
  console.log(`\n${what} (${dbsize} Redis keys before)`);
  console.log('| clear() resolved in | Redis CPU during it (user+sys, incl. the INFO calls) | reads of other keys during it | their p99 | their max | old entries unreachable after | Redis keys after |');
  console.log('|---|---|---|---|---|---|---|');
  console.log(`| ${clearMs.toFixed(2)} ms | ${((cpu1 - cpu0) * 1000).toFixed(1)} ms | ${during.length} | ${percentile(during, 0.99).toFixed(2)} ms | ${(during.at(-1) ?? 0).toFixed(2)} ms | ${gone} | ${await admin.dbsize()} |`);
  await others.close();
  await cache.close();
  client.disconnect();
}

if (args.role === 'worker') {
  await worker();
} else {
  const store = await redisToFlush('npm run bench:batch', args.flush);
  const admin = new Redis(store.adminUrl);
  if (!args['clear-only']) await batchScenario(store.url, admin);
  if (!args['batch-only']) {
    await clearScenario(store.url, admin, 'namespace');
    await clearScenario(store.url, admin, 'cache');
  }
  console.log(`\ncommand: npm run bench:batch -- ${process.argv.slice(2).join(' ')}`);
  admin.disconnect();
  await store.stop();
}
