/**
 * `npm run bench [-- --quick] [--processes P] [--callers C] [--runs R] [--duration-ms D] [--loader-ms L]
 *   [--ttl-ms T] [--rate N] [--open-duration-ms D] [--only scenario,…] [--contenders a,b,…] [--no-http]
 *   [--no-micro] [--no-heap] [--no-failover] [--no-hit] [--no-fleet] [--heap-runs N] [--trace DIR] [--cpu-prof DIR] [--out DIR]`
 *
 * `--out DIR`: write the results there instead (e.g. a run of a few scenarios that must not replace
 * the full run's bench/results/latest.md).
 *
 * `--trace DIR`: every worker writes each counted call (key, scheduled/started/answered instants, age
 * of the value) and its loader runs to DIR, and each run prints Redis's command counts; read them with
 * `node --import tsx bench/trace-summary.ts DIR`. `--cpu-prof DIR`: workers run with `--cpu-prof`.
 *
 * Multi-process stampede scenarios (every contender in the same run, same processes, same loader),
 * closed loop (C callers per process) or open loop (N arrivals per second per process, latency from
 * each scheduled arrival),
 * an HTTP scenario driven by autocannon, fresh-hit overhead, the hit's client CPU against a bare GET
 * on K distinct keys and the fleet scenario (P processes; bench/lib/hit-cost.ts, bench/lib/fleet.ts),
 * lock cost, and retained heap over many
 * loader runs (1,000,000; 100,000 with --quick; see bench/lib/heap.ts). Every figure is the median
 * of R runs, except the heap's: one run of N loader runs per variant unless --heap-runs says more. Writes bench/results/<stamp>.json, bench/results/latest.md and SVG charts.
 */
import { fork, spawnSync, type ChildProcess } from 'node:child_process';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { hasRedisBinary, startRedisServer, type RedisServer } from '../test/support/redis-server.js';
import { redisToFlush } from './lib/server.js';
import { ALL_CONTENDERS, makeContender, refreshPoint, servesStale, type ContenderName } from './lib/contenders.js';
import { httpRun, type HttpFigure } from './lib/http.js';
import { DEFAULT_IN_FLIGHT, heapGrowth, heapNote, type HeapFigure } from './lib/heap.js';
import { lockCost, overhead, tracingCost, type LatencyFigure } from './lib/micro.js';
import { failoverMarkdown, writeReport, type FailoverFigures, type ScenarioRow } from './lib/report.js';
import { replicaAckCost, stallRatio, type StallSizes } from './lib/failover.js';
import { fleetBench, type FleetFigure, type FleetSizes } from './lib/fleet.js';
import { hitCost, type HitFigure, type HitSizes } from './lib/hit-cost.js';
import { idealRebuilds, idealRefreshes, lease, maxConcurrentOverall, maxConcurrentPerKey, median, percentile, runsPerKeyPerTtl, scenarios, type ScenarioSpec } from './lib/scenarios.js';
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
    rate: { type: 'string' },
    'open-duration-ms': { type: 'string' },
    trace: { type: 'string' },
    'cpu-prof': { type: 'string' },
    out: { type: 'string' },
    only: { type: 'string' },
    contenders: { type: 'string' },
    'no-http': { type: 'boolean', default: false },
    'no-micro': { type: 'boolean', default: false },
    'no-heap': { type: 'boolean', default: false },
    'no-failover': { type: 'boolean', default: false },
    'no-hit': { type: 'boolean', default: false },
    'no-fleet': { type: 'boolean', default: false },
    'heap-runs': { type: 'string' },
    /** Allow FLUSHALL on the server of REDIS_URL (refused without it: see lib/server.ts). */
    flush: { type: 'boolean', default: false },
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
  // Well under what 4 processes on 2 shared cores answer in closed loop (~25,000 calls/s): an open
  // loop past capacity would measure its own queue, not the cache.
  openPerSecond: num(args.rate, quick ? 500 : 1000),
  openDurationMs: num(args['open-duration-ms'], quick ? 2500 : 5000),
  openWarmupMs: 500,
};
const command = `npm run bench -- ${process.argv.slice(2).join(' ')}`.trim();
const WORKER = fileURLToPath(new URL('./worker.ts', import.meta.url));
const now = (): number => performance.timeOrigin + performance.now();

// ------------------------------------------------------------------ servers and workers

const store = await redisToFlush('npm run bench', args.flush);
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
    const child = fork(WORKER, [], { execArgv: ['--import', 'tsx', ...(args['cpu-prof'] ? ['--cpu-prof', `--cpu-prof-dir=${args['cpu-prof']}`] : [])], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    return new Promise<ChildProcess>((resolve) => child.once('message', () => resolve(child)));
  }),
);

function report(child: ChildProcess): Promise<RunReport> {
  return new Promise((resolve, reject) => {
    child.once('message', (m: RunReport | { ev: 'failed'; message: string }) => (m.ev === 'report' ? resolve(m) : reject(new Error(m.message))));
  });
}

/** Writes every key of the scenario in one burst, through the contender under test, with an instant loader; resolves how long the burst took (ms). */
async function burstFill(contender: ContenderName, scenario: ScenarioSpec, prefix: string): Promise<number> {
  const filler = makeContender(contender, { url: store.url, redlockUrls: [], prefix });
  try {
    await filler.ready?.();
    const keys = Array.from({ length: scenario.keys }, (_, i) => `k${i}`);
    const t0 = now();
    await Promise.all(keys.map((key) => filler.get(key, async () => ({ key, created: now(), filled: true }), scenario.ttlMs, scenario.staleMs)));
    return now() - t0;
  } finally {
    await filler.close();
  }
}

/** The crashed-holder scenario's setup: a holder of `k0` takes its lock and dies (in this process, before the workers start). */
async function crashHolder(contender: ContenderName, scenario: ScenarioSpec, prefix: string): Promise<void> {
  const holder = makeContender(contender, { url: store.url, redlockUrls: [], prefix, ...lease(scenario) });
  if (!holder.crashWhileHolding) throw new Error(`${contender} cannot play a crashed holder`);
  await holder.ready?.();
  await holder.crashWhileHolding('k0');
}

async function oneRun(contender: ContenderName, scenario: ScenarioSpec, run: number) {
  await Promise.all(flushers.map((f) => f.flushall()));
  const fillMs = scenario.burstFill ? await burstFill(contender, scenario, `b${run}`) : Number.NaN;
  if (scenario.crashedHolder) await crashHolder(contender, scenario, `b${run}`);
  const startAt = now() + 150 + (scenario.warmupMs ?? 0);
  const req = (): RunRequest => ({
    op: 'run', contender, scenario, callers: C, startAt, url: store.url,
    redlockUrls: contender === 'redlock' ? redlock3 : [], prefix: `b${run}`, ...(args.trace ? { traceDir: args.trace } : {}),
  });
  if (args.trace) await (flushers[0] as Redis).config('RESETSTAT');
  const pending = workers.map((w) => report(w));
  for (const w of workers) w.send(req());
  const reports = await Promise.all(pending);
  const wall = (now() - startAt) / 1000;
  if (args.trace) console.log(`redis commands: ${((await (flushers[0] as Redis).info('commandstats')).match(/cmdstat_[a-z]+:calls=\d+/g) ?? []).join(' ')}`);
  const firstError = reports.find((r) => r.firstError)?.firstError;
  if (firstError && reports.every((r) => r.errors === r.calls)) throw new Error(`every call failed: ${firstError}`);
  const runs = reports.flatMap((r) => r.runs);
  const latencies = reports.flatMap((r) => r.latencies).sort((a, b) => a - b);
  const startLags = reports.flatMap((r) => r.startLags).sort((a, b) => a - b);
  const calls = latencies.length;
  const point = refreshPoint(contender);
  const ideal = scenario.kind === 'cold' ? 1 : point === undefined ? idealRebuilds(runs, scenario.ttlMs) : idealRefreshes(runs, point * scenario.ttlMs);
  const failFrom = startAt + scenario.durationMs * (scenario.failWindow?.[0] ?? 2);
  const failTo = startAt + scenario.durationMs * (scenario.failWindow?.[1] ?? 2);
  return {
    loaderRuns: runs.length,
    ideal,
    maxConcurrent: maxConcurrentPerKey(runs),
    peakLoaders: maxConcurrentOverall(runs),
    runsPerKeyPerTtl: scenario.kind === 'cold' ? Number.NaN : runsPerKeyPerTtl(runs.length, scenario.keys, scenario.durationMs, scenario.ttlMs),
    startLagP99: percentile(startLags, 99),
    fillMs,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    max: latencies[latencies.length - 1] ?? Number.NaN,
    throughput: calls / Math.max(wall, 0.001),
    staleShare: reports.reduce((s, r) => s + r.staleAnswers, 0) / Math.max(1, calls),
    staleFromFill: reports.reduce((s, r) => s + r.staleFromFill, 0) / Math.max(1, calls),
    /** CPU (user + system) of the worker processes from the warm-up to the end of the run, per counted call: the calls and the background work beside them. */
    cpuUsPerCall: reports.reduce((s, r) => s + r.cpuUs, 0) / Math.max(1, calls),
    errors: reports.reduce((s, r) => s + r.errors, 0),
    unsettled: reports.reduce((s, r) => s + r.unsettled, 0),
    calls,
    originCallsWhileFailing: runs.filter(([, start]) => start >= failFrom && start < failTo).length,
    latencies,
  };
}

// ------------------------------------------------------------------ scenarios

// --quick keeps the scenarios the targets are about.
const only =
  args.only?.split(',') ??
  (quick ? ['cold-stampede', 'hot-20-keys', 'stale-window', 'failing-origin', 'refresh-ahead', 'open-fresh-hits', 'mass-expiry', 'slow-loader', 'crashed-holder'] : undefined);
const chosen = args.contenders?.split(',') as ContenderName[] | undefined;
const rows: ScenarioRow[] = [];
const latencySamples: Record<string, Record<string, number[]>> = {};
const started = Date.now();
type RunResult = Awaited<ReturnType<typeof oneRun>>;
type Cell = { scenario: ScenarioSpec; contender: ContenderName; results: RunResult[]; failure: string };
const cells: Cell[] = [];
for (const scenario of scenarios(sizes).filter((s) => !only || only.includes(s.name))) {
  for (const contender of (scenario.contenders ?? ALL_CONTENDERS).filter((c) => !chosen || chosen.includes(c))) {
    if (scenario.name === 'stale-window' && !servesStale(contender) && contender !== 'none') continue;
    if (contender === 'redlock' && redlock3.length < 3) {
      rows.push({ scenario: scenario.name, contender, skipped: redlockNote });
      continue;
    }
    cells.push({ scenario, contender, results: [], failure: '' });
  }
}
// Runs are interleaved: run r of every scenario and contender before run r + 1 of any, so a change in
// the shared machine's load over the minutes of a bench falls on every contender alike, and figures
// compared side by side (a contender against another, refresh ahead against fresh hits) were measured
// over the same stretch of time.
for (let r = 0; r < RUNS; r++) {
  for (const cell of cells) {
    const { scenario, contender } = cell;
    const open = scenario.kind === 'open';
    try {
      const res = await oneRun(contender, scenario, r);
      cell.results.push(res);
      console.log(
        `[${((Date.now() - started) / 1000).toFixed(0)}s] ${scenario.name} · ${contender} · run ${r + 1}/${RUNS}: ` +
          `${res.loaderRuns} loader runs (ideal ${res.ideal}), max ${res.maxConcurrent} at once` +
          (open ? ` (${res.peakLoaders} over all keys), ${res.runsPerKeyPerTtl.toFixed(2)} per key per ttl, ${(100 * res.staleShare).toFixed(2)}% older than ttl (${(100 * res.staleFromFill).toFixed(2)}% of the burst fill's values)` : '') +
          `, p50 ${res.p50.toFixed(1)} ms, p99 ${res.p99.toFixed(1)} ms` +
          (open ? ` (start lag p99 ${res.startLagP99.toFixed(1)} ms; burst fill ${res.fillMs.toFixed(0)} ms)` : '') +
          `, ${res.cpuUsPerCall.toFixed(1)} µs CPU per call, ${res.errors} errors` +
          (res.unsettled > 0 ? ` (${res.unsettled} calls never settled within 10 s)` : ''),
      );
    } catch (err) {
      cell.failure = String(err);
      console.log(`${scenario.name} · ${contender} · run ${r + 1}: could not run (${cell.failure})`);
    }
  }
}
for (const { scenario, contender, results, failure } of cells) {
  const open = scenario.kind === 'open';
  if (results.length === 0) {
    rows.push({ scenario: scenario.name, contender, skipped: `every run failed (${failure.slice(0, 200)})` });
    continue;
  }
  const m = (f: (x: RunResult) => number) => median(results.map(f));
  rows.push({
    scenario: scenario.name,
    contender,
    loaderRuns: m((x) => x.loaderRuns),
    ideal: m((x) => x.ideal),
    ratio: m((x) => x.loaderRuns / Math.max(1, x.ideal)),
    maxConcurrent: Math.max(...results.map((x) => x.maxConcurrent)),
    peakLoaders: m((x) => x.peakLoaders),
    runsPerKeyPerTtl: m((x) => x.runsPerKeyPerTtl),
    ...(open ? { open: true, startLagP99: m((x) => x.startLagP99), fillMs: m((x) => x.fillMs) } : {}),
    p50: m((x) => x.p50),
    p99: m((x) => x.p99),
    max: m((x) => x.max),
    throughput: m((x) => x.throughput),
    staleShare: m((x) => x.staleShare),
    // In every run, every answer older than ttl carried a burst-fill value (none from the run's own loads).
    staleAllFromFill: results.every((x) => x.staleShare > 0 && x.staleShare === x.staleFromFill),
    p99Runs: results.map((x) => x.p99),
    cpuUsPerCall: m((x) => x.cpuUsPerCall),
    errors: m((x) => x.errors),
    unsettled: m((x) => x.unsettled),
    calls: m((x) => x.calls),
    originCallsWhileFailing: scenario.failWindow ? m((x) => x.originCallsWhileFailing) : undefined,
  });
  // The chart plots one run: the one with the median p99.
  const byP99 = [...results].sort((x, y) => x.p99 - y.p99);
  (latencySamples[scenario.name] ??= {})[contender] = (byP99[Math.floor(byP99.length / 2)] as RunResult).latencies;
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

// Issue #13: the degraded-mode loader ratio under periodic stalls (memo on and off) and replicaAck's
// cost, each on servers of their own (the stall must not slow the other scenarios).
let failover: FailoverFigures | undefined;
if (!args['no-failover']) {
  const stallSizes: StallSizes = { processes: 4, callers: quick ? 25 : 50, keys: 20, durationMs: quick ? 7000 : 15_000, ttlMs: 1000, loaderMs: 100 };
  const stall = [];
  for (let r = 0; r < RUNS; r++) for (const memo of [true, false]) stall.push(await stallRatio(stallSizes, memo));
  failover = { sizes: stallSizes, stall, replicaAck: await replicaAckCost(quick ? 300 : 2000, RUNS) };
  console.log(failoverMarkdown(failover).join('\n'));
}

// Issue #12: the fresh hit's client CPU against a bare GET (K distinct warm keys, P = 1 and 4), and
// the fleet scenario (P processes, ours beside cache-aside), each on the shared store, flushed first.
let hit: { sizes: HitSizes; figures: HitFigure[] } | undefined;
if (!args['no-hit']) {
  await Promise.all(flushers.map((f) => f.flushall()));
  const hitSizes: HitSizes = { processes: [1, 4], keys: [20, 2000], loops: 10, warmupMs: quick ? 3000 : 6000, durationMs: quick ? 1000 : 3000, runs: RUNS, rate: 0 };
  hit = { sizes: hitSizes, figures: await hitCost(store.url, hitSizes, (l) => console.log(l)) };
}
let fleet: { sizes: FleetSizes; figures: FleetFigure[] } | undefined;
if (!args['no-fleet']) {
  await Promise.all(flushers.map((f) => f.flushall()));
  const fleetSizes: FleetSizes = { processes: quick ? [1, 4, 16] : [1, 4, 16, 32], keys: [20, 2000], callers: 4, durationMs: quick ? 1500 : 4000, runs: RUNS, warmupMs: quick ? 3000 : 6000 };
  fleet = { sizes: fleetSizes, figures: await fleetBench(store.url, fleetSizes, (l) => console.log(l)) };
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
  nodeRedis: (spawnSync(process.execPath, ['-p', "require('redis/package.json').version"], { encoding: 'utf8' }).stdout || '?').trim(),
  processes: P,
  callers: C,
  runs: RUNS,
  sizes,
  ...(heap.length > 0 ? { heapNote: heapNote(heapTotal, heapRuns, DEFAULT_IN_FLIGHT) } : {}),
};
const files = writeReport({ env, rows, http, overhead: overheadFigures, tracing: tracingFigures, lockCost: lockFigures, heap, failover, hit, fleet, latencySamples }, args.out ?? (quick ? 'bench/results/quick' : 'bench/results'));
console.log(`\nwrote ${files.join(', ')}`);
for (const f of flushers) f.disconnect();
await Promise.all(nodes.map((n) => n.stop()));
await store.stop();

