/**
 * `npm run bench [-- --quick] [--processes P] [--callers C] [--runs R] [--duration-ms D] [--loader-ms L]
 *   [--ttl-ms T] [--only scenario,…] [--contenders a,b,…] [--no-http] [--no-micro] [--no-heap] [--heap-runs N]`
 *
 * Multi-process stampede scenarios (every contender in the same run, same processes, same loader),
 * an HTTP scenario driven by autocannon, fresh-hit overhead, lock cost, and retained heap over many
 * loader runs (1,000,000; 100,000 with --quick; see bench/lib/heap.ts). Every figure is the median
 * of R runs, except the heap's: one run of N loader runs per variant unless --heap-runs says more. Writes bench/results/<stamp>.json, bench/results/latest.md and SVG charts.
 */
import { fork, spawnSync, type ChildProcess } from 'node:child_process';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { hasRedisBinary, provideRedis, startRedisServer, type RedisServer } from '../test/support/redis-server.js';
import { ALL_CONTENDERS, servesStale, type ContenderName } from './lib/contenders.js';
import { httpRun, type HttpFigure } from './lib/http.js';
import { DEFAULT_IN_FLIGHT, heapGrowth, heapNote, type HeapFigure } from './lib/heap.js';
import { lockCost, overhead, tracingCost, type LatencyFigure } from './lib/micro.js';
import { writeReport, type ScenarioRow } from './lib/report.js';
import { idealRebuilds, maxConcurrentPerKey, median, percentile, scenarios, type ScenarioSpec } from './lib/scenarios.js';
import type { RunReport, RunRequest } from './worker.js';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    processes: { type: 'string' },
    callers: { type: 'string' },
    runs: { type: 'string' },
    'duration-ms': { type: 'string' },
    'loader-ms': { type: 'string' },
    'ttl-ms': { type: 'string' },
    only: { type: 'string' },
    contenders: { type: 'string' },
    'no-http': { type: 'boolean', default: false },
    'no-micro': { type: 'boolean', default: false },
    'no-heap': { type: 'boolean', default: false },
    'heap-runs': { type: 'string' },
  },
});
const quick = args.quick ?? false;
const num = (v: string | undefined, d: number) => (v === undefined ? d : Number(v));
const P = num(args.processes, 4);
const C = num(args.callers, quick ? 25 : 50);
const RUNS = num(args.runs, 3);
const sizes = {
  loaderMs: num(args['loader-ms'], quick ? 50 : 100),
  ttlMs: num(args['ttl-ms'], quick ? 300 : 500),
  durationMs: num(args['duration-ms'], quick ? 600 : 3000),
  zipfKeys: quick ? 500 : 2000,
};
const command = `npm run bench -- ${process.argv.slice(2).join(' ')}`.trim();
const WORKER = fileURLToPath(new URL('./worker.ts', import.meta.url));
const now = (): number => performance.timeOrigin + performance.now();

// ------------------------------------------------------------------ servers and workers

const store = await provideRedis();
const nodes: RedisServer[] = [];
let redlockNote = '';
if (hasRedisBinary()) nodes.push(...(await Promise.all(Array.from({ length: 5 }, () => startRedisServer()))));
else redlockNote = 'redlock: no local redis-server binary to start 3–5 independent nodes';
const redlock3 = nodes.slice(0, 3).map((n) => n.url);
const redlock5 = nodes.map((n) => n.url);
const flushers = [store.url, ...redlock5].map((u) => new Redis(u));
const redisVersion = ((await (flushers[0] as Redis).info('server')).match(/redis_version:(\S+)/) ?? [])[1] ?? '?';

const workers: ChildProcess[] = await Promise.all(
  Array.from({ length: P }, () => {
    const child = fork(WORKER, [], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    return new Promise<ChildProcess>((resolve) => child.once('message', () => resolve(child)));
  }),
);

function report(child: ChildProcess): Promise<RunReport> {
  return new Promise((resolve, reject) => {
    child.once('message', (m: RunReport | { ev: 'failed'; message: string }) => (m.ev === 'report' ? resolve(m) : reject(new Error(m.message))));
  });
}

async function oneRun(contender: ContenderName, scenario: ScenarioSpec, run: number) {
  await Promise.all(flushers.map((f) => f.flushall()));
  const startAt = now() + 150;
  const req = (): RunRequest => ({
    op: 'run', contender, scenario, callers: C, startAt, url: store.url,
    redlockUrls: contender === 'redlock' ? redlock3 : [], prefix: `b${run}`,
  });
  const pending = workers.map((w) => report(w));
  for (const w of workers) w.send(req());
  const reports = await Promise.all(pending);
  const wall = (now() - startAt) / 1000;
  const runs = reports.flatMap((r) => r.runs);
  const latencies = reports.flatMap((r) => r.latencies).sort((a, b) => a - b);
  const calls = latencies.length;
  const ideal = scenario.kind === 'cold' ? 1 : idealRebuilds(runs, scenario.ttlMs);
  const failFrom = startAt + scenario.durationMs * (scenario.failWindow?.[0] ?? 2);
  const failTo = startAt + scenario.durationMs * (scenario.failWindow?.[1] ?? 2);
  return {
    loaderRuns: runs.length,
    ideal,
    maxConcurrent: maxConcurrentPerKey(runs),
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    max: latencies[latencies.length - 1] ?? Number.NaN,
    throughput: calls / Math.max(wall, 0.001),
    staleShare: reports.reduce((s, r) => s + r.staleAnswers, 0) / Math.max(1, calls),
    errors: reports.reduce((s, r) => s + r.errors, 0),
    unsettled: reports.reduce((s, r) => s + r.unsettled, 0),
    calls,
    originCallsWhileFailing: runs.filter(([, start]) => start >= failFrom && start < failTo).length,
    latencies,
  };
}

// ------------------------------------------------------------------ scenarios

// --quick keeps the four scenarios the targets are about, so it fits in under 2 minutes.
const only = args.only?.split(',') ?? (quick ? ['cold-stampede', 'hot-20-keys', 'stale-window', 'failing-origin'] : undefined);
const chosen = (args.contenders?.split(',') as ContenderName[] | undefined) ?? ALL_CONTENDERS;
const rows: ScenarioRow[] = [];
const latencySamples: Record<string, Record<string, number[]>> = {};
const started = Date.now();
for (const scenario of scenarios(sizes).filter((s) => !only || only.includes(s.name))) {
  for (const contender of chosen) {
    if (scenario.name === 'stale-window' && !servesStale(contender) && contender !== 'none') continue;
    if (contender === 'redlock' && redlock3.length < 3) {
      rows.push({ scenario: scenario.name, contender, skipped: redlockNote });
      continue;
    }
    const results: Awaited<ReturnType<typeof oneRun>>[] = [];
    for (let r = 0; r < RUNS; r++) {
      try {
        const res = await oneRun(contender, scenario, r);
        results.push(res);
        console.log(
          `[${((Date.now() - started) / 1000).toFixed(0)}s] ${scenario.name} · ${contender} · run ${r + 1}/${RUNS}: ` +
            `${res.loaderRuns} loader runs (ideal ${res.ideal}), max ${res.maxConcurrent} at once, p50 ${res.p50.toFixed(1)} ms, p99 ${res.p99.toFixed(1)} ms, ${res.errors} errors` +
            (res.unsettled > 0 ? ` (${res.unsettled} calls never settled within 10 s)` : ''),
        );
      } catch (err) {
        console.log(`${scenario.name} · ${contender} · run ${r + 1}: could not run (${String(err)})`);
      }
    }
    if (results.length === 0) {
      rows.push({ scenario: scenario.name, contender, skipped: 'every run failed' });
      continue;
    }
    const m = (f: (x: (typeof results)[number]) => number) => median(results.map(f));
    rows.push({
      scenario: scenario.name,
      contender,
      loaderRuns: m((x) => x.loaderRuns),
      ideal: m((x) => x.ideal),
      ratio: m((x) => x.loaderRuns / Math.max(1, x.ideal)),
      maxConcurrent: Math.max(...results.map((x) => x.maxConcurrent)),
      p50: m((x) => x.p50),
      p99: m((x) => x.p99),
      max: m((x) => x.max),
      throughput: m((x) => x.throughput),
      staleShare: m((x) => x.staleShare),
      errors: m((x) => x.errors),
      unsettled: m((x) => x.unsettled),
      calls: m((x) => x.calls),
      originCallsWhileFailing: scenario.failWindow ? m((x) => x.originCallsWhileFailing) : undefined,
    });
    (latencySamples[scenario.name] ??= {})[contender] = (results[Math.floor(results.length / 2)] as (typeof results)[number]).latencies;
  }
}
for (const w of workers) w.send({ op: 'exit' });

// ------------------------------------------------------------------ HTTP, overhead, lock cost

let http: HttpFigure[] = [];
if (!args['no-http']) {
  const modes = (['none', 'local', 'single', 'redlock'] as const).filter((m) => m !== 'redlock' || redlock3.length >= 3);
  const byMode: Record<string, HttpFigure[]> = {};
  for (let r = 0; r < RUNS; r++) {
    for (const mode of modes) {
      await Promise.all(flushers.map((f) => f.flushall()));
      const fig = await httpRun({
        url: store.url, redlockUrls: redlock3, mode, workers: P, connections: quick ? 40 : 100,
        durationSec: quick ? 1 : 5, keys: 20, originMs: sizes.loaderMs, ttlMs: sizes.ttlMs,
      });
      (byMode[mode] ??= []).push(fig);
      console.log(`http · ${mode} · run ${r + 1}/${RUNS}: ${fig.requestsPerSec.toFixed(0)} req/s, p50 ${fig.p50ms} ms, p99 ${fig.p99ms} ms, ${fig.originCalls} origin calls`);
    }
  }
  http = Object.entries(byMode).map(([mode, figs]) => ({
    mode: mode as HttpFigure['mode'],
    requestsPerSec: median(figs.map((f) => f.requestsPerSec)),
    p50ms: median(figs.map((f) => f.p50ms)),
    p99ms: median(figs.map((f) => f.p99ms)),
    originCalls: median(figs.map((f) => f.originCalls)),
    originCallsPerExpiry: median(figs.map((f) => f.originCallsPerExpiry)),
    errors: median(figs.map((f) => f.errors)),
  }));
}

let overheadFigures: LatencyFigure[] = [];
let lockFigures: LatencyFigure[] = [];
let tracingFigures: LatencyFigure[] = [];
if (!args['no-micro']) {
  await Promise.all(flushers.map((f) => f.flushall()));
  overheadFigures = await overhead(store.url, quick ? 1000 : 10_000, RUNS);
  console.log('overhead', overheadFigures);
  tracingFigures = await tracingCost(store.url, quick ? 1000 : 10_000, RUNS);
  console.log('tracing channel', tracingFigures);
  if (redlock5.length === 5) {
    const last = nodes[nodes.length - 1] as RedisServer;
    lockFigures = await lockCost(store.url, redlock3, redlock5, quick ? 300 : 5000, RUNS, { pause: () => last.pause(), resume: () => last.resume() });
    console.log('lock cost', lockFigures);
  }
}

// A million loader runs take about two minutes per variant here (measured: ~9,000 runs/s with 32 in
// flight on 2 shared cores); --quick keeps a tenth, enough to show a per-run leak as a slope.
let heap: HeapFigure[] = [];
const heapTotal = quick ? 100_000 : 1_000_000;
const heapRuns = num(args['heap-runs'], 1);
if (!args['no-heap']) {
  await Promise.all(flushers.map((f) => f.flushall()));
  heap = await heapGrowth(store.url, { total: heapTotal, runs: heapRuns, log: (l) => console.log(l) });
}

// ------------------------------------------------------------------ output

const env = {
  date: new Date().toISOString(),
  command,
  node: process.version,
  redis: redisVersion,
  redisSource: store.source,
  cpus: `${os.cpus().length} × ${os.cpus()[0]?.model ?? '?'}`,
  os: `${os.type()} ${os.release()}`,
  ioredis: (spawnSync(process.execPath, ['-p', "require('ioredis/package.json').version"], { encoding: 'utf8' }).stdout || '?').trim(),
  processes: P,
  callers: C,
  runs: RUNS,
  sizes,
  ...(heap.length > 0 ? { heapNote: heapNote(heapTotal, heapRuns, DEFAULT_IN_FLIGHT) } : {}),
};
const files = writeReport({ env, rows, http, overhead: overheadFigures, tracing: tracingFigures, lockCost: lockFigures, heap, latencySamples }, quick ? 'bench/results/quick' : 'bench/results');
console.log(`\nwrote ${files.join(', ')}`);
for (const f of flushers) f.disconnect();
await Promise.all(nodes.map((n) => n.stop()));
await store.stop();

