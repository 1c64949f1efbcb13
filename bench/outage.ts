/**
 * `npm run bench:outage [-- --runs R] [--quick]`: Redis hangs, Redis refuses.
 *
 * 4 processes × 50 closed-loop callers per contender, on a redis-server of the bench's own (a free
 * port; never another server's data), loader 100 ms, ttl 60 s, every option at its default (the
 * client's too: `new Redis(url)`). Two shapes: 20 hot keys with an L1 (ours `local`, bentocache's L1
 * layer + bus; cachified has none), and 1 hot key without. After 2 s of normal traffic:
 * - "Redis hangs": the server is SIGSTOPped for 4 s, then SIGCONTinued;
 * - "Redis refuses": the server is SIGKILLed, and started again on the same port 4 s later (empty).
 * Figures per run: calls served during the fault (finished with a value inside it), p50/p99 latency of
 * the calls started during it, loader runs during it (and the most for one key in one process), calls
 * that failed, the p50 of the second before the fault (the baseline under this closed-loop load), and
 * the time to recover: from the heal to the first 100 ms window from which a whole second of windows
 * has a median latency under 5 ms. The tables print the median of R runs.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { startRedisServer, type RedisServer } from '../test/support/redis-server.js';
import type { OutageContender, OutageJob, OutageSamples } from './outage-worker.js';

const { values: args } = parseArgs({ options: { runs: { type: 'string' }, quick: { type: 'boolean', default: false } } });
const runs = args.runs === undefined ? 3 : Number(args.runs);
const quick = args.quick ?? false;
const PROCESSES = 4;
const CALLERS = quick ? 10 : 50;
const BEFORE_MS = 2000;
const FAULT_MS = 4000;
const AFTER_MS = 4000;
const WINDOW_MS = 100;
/** Recovered: the first window after the heal from which a whole second of windows has a median under 5 ms. */
const STEADY_WINDOWS = 10;
const RECOVERED_UNDER_MS = 5;
const WORKER = fileURLToPath(new URL('./outage-worker.ts', import.meta.url));
const CONTENDERS: OutageContender[] = ['ours', 'bentocache', 'cachified'];
type Fault = 'hangs' | 'refuses';

interface Figure {
  /** p50 of the calls started in the second before the fault: the baseline under this load. */
  before: number;
  served: number;
  p50: number;
  p99: number;
  max: number;
  loads: number;
  maxLoadsPerKeyPerProcess: number;
  failed: number;
  recoverMs: number;
}

const now = (): number => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
}

function spawnWorker(): Promise<ChildProcess> {
  const child = fork(WORKER, [], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'pipe', 'ipc'] });
  // bentocache's bus makes ioredis connections of its own without an error listener: drop their noise.
  child.stderr?.on('data', (chunk: Buffer) => {
    const text = chunk.toString().split('\n').filter((l) => l !== '' && !l.startsWith('[ioredis] Unhandled error event') && !l.trimStart().startsWith('at ')).join('\n');
    if (text) process.stderr.write(`${text}\n`);
  });
  return new Promise((resolve) => child.once('message', () => resolve(child)));
}

function next<T>(child: ChildProcess, ev: string): Promise<T> {
  return new Promise((resolve) => {
    const on = (m: { ev: string }) => {
      if (m.ev !== ev) return;
      child.off('message', on);
      resolve(m as T);
    };
    child.on('message', on);
  });
}

async function oneRun(fault: Fault, contender: OutageContender, l1: boolean, run: number): Promise<Figure> {
  const server: RedisServer = await startRedisServer();
  const workers = await Promise.all(Array.from({ length: PROCESSES }, spawnWorker));
  const job: OutageJob = { contender, l1, url: server.url, prefix: `out${run}`, callers: CALLERS, keys: l1 ? 20 : 1, ttlMs: 60_000, loaderMs: 100 };
  const ready = workers.map((w) => next(w, 'ready'));
  for (const w of workers) w.send({ ev: 'job', job });
  await Promise.all(ready);
  for (const w of workers) w.send({ ev: 'go' });
  await sleep(BEFORE_MS);
  const faultAt = now();
  if (fault === 'hangs') server.pause();
  else await server.kill();
  let healAt: number;
  try {
    await sleep(FAULT_MS);
  } finally {
    healAt = now();
    if (fault === 'hangs') server.resume();
    else await server.restart();
  }
  await sleep(AFTER_MS);
  const done = workers.map((w) => next<{ samples: OutageSamples }>(w, 'done'));
  for (const w of workers) w.send({ ev: 'stop', from: faultAt - 1000 });
  const all = (await Promise.all(done)).map((d) => d.samples);
  await Promise.all(workers.map((w) => new Promise((r) => (w.exitCode === null ? w.once('exit', r) : r(undefined)))));
  await server.stop();

  let served = 0;
  let failed = 0;
  const during: number[] = [];
  const before: number[] = [];
  const windows = new Map<number, number[]>();
  let loads = 0;
  let maxPerKey = 0;
  for (const s of all) {
    for (let i = 0; i < s.starts.length; i++) {
      const start = s.starts[i] as number;
      const latency = s.latencies[i] as number;
      const end = start + latency;
      const weight = s.ok[i] as number;
      if (end >= faultAt && end < healAt) served += weight;
      if (start < faultAt && end < faultAt) before.push(latency);
      if (start >= faultAt && start < healAt) {
        during.push(latency);
        if (weight === 0) failed++;
      }
      if (start >= healAt) {
        const w = Math.floor((start - healAt) / WINDOW_MS);
        let list = windows.get(w);
        if (!list) windows.set(w, (list = []));
        list.push(latency);
      }
    }
    const perKey = new Map<number, number>();
    for (const [t, key] of s.loads) {
      if (t < faultAt || t >= healAt) continue;
      loads++;
      perKey.set(key, (perKey.get(key) ?? 0) + 1);
    }
    maxPerKey = Math.max(maxPerKey, ...perKey.values(), 0);
  }
  during.sort((a, b) => a - b);
  before.sort((a, b) => a - b);
  // Recovered at the first window from which STEADY_WINDOWS windows in a row (a window without calls
  // counts as slow: its callers are all still waiting) have a median under 5 ms.
  const fast = (w: number): boolean => {
    const list = windows.get(w)?.sort((a, b) => a - b);
    return list !== undefined && quantile(list, 0.5) < RECOVERED_UNDER_MS;
  };
  const last = Math.floor(AFTER_MS / WINDOW_MS) - STEADY_WINDOWS;
  let recoverMs = Number.POSITIVE_INFINITY;
  for (let w = 0; w <= last; w++) {
    if (Array.from({ length: STEADY_WINDOWS }, (_, k) => fast(w + k)).every(Boolean)) {
      recoverMs = w * WINDOW_MS;
      break;
    }
  }
  return { before: quantile(before, 0.5), served, p50: quantile(during, 0.5), p99: quantile(during, 0.99), max: during.at(-1) ?? Number.NaN, loads, maxLoadsPerKeyPerProcess: maxPerKey, failed, recoverMs };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return quantile(sorted, 0.5);
}

const fmt = (ms: number): string => (Number.isFinite(ms) ? (ms < 10 ? ms.toFixed(2) : ms.toFixed(0)) : `> ${AFTER_MS}`);

const command = `npm run bench:outage --${process.argv.slice(2).length ? ` ${process.argv.slice(2).join(' ')}` : ''}`;
const results = new Map<string, Figure[]>();
for (let run = 0; run < runs; run++) {
  for (const fault of ['hangs', 'refuses'] as Fault[]) {
    for (const l1 of [true, false]) {
      for (const contender of CONTENDERS) {
        const id = `${fault}|${l1 ? 'with L1 (20 hot keys)' : 'without L1 (1 hot key)'}|${contender}`;
        const figure = await oneRun(fault, contender, l1, run);
        const list = results.get(id) ?? [];
        list.push(figure);
        results.set(id, list);
        console.error(`run ${run + 1}/${runs} ${id}: ${JSON.stringify({ ...figure, before: fmt(figure.before), p50: fmt(figure.p50), p99: fmt(figure.p99), max: fmt(figure.max), recoverMs: fmt(figure.recoverMs) })}`);
      }
    }
  }
}

console.log(`\n\`${command}\` — medians of ${runs} run(s); ${PROCESSES} processes × ${CALLERS} callers, loader 100 ms, ttl 60 s, defaults (ioredis \`new Redis(url)\`), fault ${FAULT_MS / 1000} s; node ${process.version}\n`);
for (const fault of ['hangs', 'refuses'] as Fault[]) {
  console.log(`### Redis ${fault === 'hangs' ? 'hangs (SIGSTOP 4 s, then SIGCONT)' : 'refuses (SIGKILL, restarted empty after 4 s)'}\n`);
  console.log('| shape | contender | p50 before (ms) | calls served during | p50 during (ms) | p99 during (ms) | max during (ms) | failed calls during | origin calls during (max per key per process) | back under 5 ms after heal (ms) |');
  console.log('|---|---|---|---|---|---|---|---|---|---|');
  for (const [id, figures] of results) {
    const [f, shape, contender] = id.split('|');
    if (f !== fault) continue;
    const m = (pick: (x: Figure) => number) => median(figures.map(pick));
    console.log(`| ${shape} | ${contender} | ${fmt(m((x) => x.before))} | ${Math.round(m((x) => x.served))} | ${fmt(m((x) => x.p50))} | ${fmt(m((x) => x.p99))} | ${fmt(m((x) => x.max))} | ${Math.round(m((x) => x.failed))} | ${Math.round(m((x) => x.loads))} (${Math.round(m((x) => x.maxLoadsPerKeyPerProcess))}) | ${fmt(m((x) => x.recoverMs))} |`);
  }
  console.log('');
}
const recoveries = [...results].filter(([id]) => id.startsWith('hangs|') && id.endsWith('|ours')).flatMap(([, f]) => f.map((x) => x.recoverMs));
console.log(`ours, Redis hangs: back under 5 ms within 2 s of SIGCONT in ${recoveries.filter((r) => r <= 2000).length} of ${recoveries.length} runs (both shapes).`);
