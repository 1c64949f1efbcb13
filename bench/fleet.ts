/**
 * `npm run bench:fleet [-- --quick] [--runs R] [--processes 1,4,16,32] [--keys 20,2000] [--callers C]`:
 * the same hot-key load on fleets of P processes (issue 12 §2). Per (P, K), ours (`single`, no L1)
 * beside hand-rolled cache-aside (GET; on a miss the loader and SET PX — no coordination), in one run:
 * rebuild ratio (loader runs ÷ one per key per expiry), most loaders at once on one key, client CPU per
 * request (process.cpuUsage over the timed window, every process summed), p99, and the pub/sub notes
 * each process receives per second (every process subscribes to the one channel, so each receives
 * every note: counted here by one more subscriber). Medians of R runs (3).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { eventsChannel } from '../src/keys.js';
import { provideRedis } from '../test/support/redis-server.js';
import type { ContenderName } from './lib/contenders.js';
import { idealRebuilds, maxConcurrentPerKey, median, percentile, type ScenarioSpec } from './lib/scenarios.js';
import type { RunReport, RunRequest } from './worker.js';

const { values: args } = parseArgs({
  options: { quick: { type: 'boolean' }, runs: { type: 'string' }, processes: { type: 'string' }, keys: { type: 'string' }, callers: { type: 'string' } },
});
const quick = args.quick ?? false;
const RUNS = args.runs === undefined ? 3 : Number(args.runs);
const FLEETS = (args.processes ?? (quick ? '1,4,16' : '1,4,16,32')).split(',').map(Number);
const KEYS = (args.keys ?? '20,2000').split(',').map(Number);
/** Callers per process: small, so 32 processes still fit 2 cores without measuring only the queue. */
const C = args.callers === undefined ? 4 : Number(args.callers);
const CONTENDERS: ContenderName[] = ['single', 'cache-aside'];
const WORKER = fileURLToPath(new URL('./worker.ts', import.meta.url));
const now = (): number => performance.timeOrigin + performance.now();

const spec = (keys: number): ScenarioSpec => ({
  name: `fleet-${keys}`, kind: 'loop', keys, distribution: 'uniform', ttlMs: 1000, staleMs: 0, loaderMs: 100, durationMs: quick ? 1500 : 4000, thinkMs: 5,
});

interface Figure { P: number; K: number; contender: ContenderName; ratio: number; maxAtOnce: number; cpuUsPerCall: number; p99: number; callsPerSec: number; notesPerProcessPerSec: number }

async function fleet(P: number): Promise<ChildProcess[]> {
  return Promise.all(
    Array.from({ length: P }, () => {
      const child = fork(WORKER, [], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      return new Promise<ChildProcess>((resolve) => child.once('message', () => resolve(child)));
    }),
  );
}

async function oneRun(url: string, workers: ChildProcess[], contender: ContenderName, scenario: ScenarioSpec, prefix: string) {
  const listener = new Redis(url);
  let notes = 0;
  await listener.subscribe(eventsChannel(prefix));
  listener.on('message', () => notes++);
  const startAt = now() + 500 + workers.length * 20;
  const req: RunRequest = { op: 'run', contender, scenario, callers: C, startAt, url, redlockUrls: [], prefix };
  const reports = await Promise.all(
    workers.map(
      (w) =>
        new Promise<RunReport>((resolve, reject) => {
          w.once('message', (m: RunReport | { ev: 'failed'; message: string }) => (m.ev === 'report' ? resolve(m) : reject(new Error(m.message))));
          w.send(req);
        }),
    ),
  );
  const seconds = (now() - startAt) / 1000;
  listener.disconnect();
  const runs = reports.flatMap((r) => r.runs);
  const latencies = reports.flatMap((r) => r.latencies).sort((a, b) => a - b);
  const calls = latencies.length;
  return {
    ratio: runs.length / Math.max(1, idealRebuilds(runs, scenario.ttlMs)),
    maxAtOnce: maxConcurrentPerKey(runs),
    cpuUsPerCall: reports.reduce((s, r) => s + r.cpuUs, 0) / Math.max(1, calls),
    p99: percentile(latencies, 99),
    callsPerSec: calls / seconds,
    notesPerProcessPerSec: notes / seconds,
  };
}

const store = await provideRedis();
const flusher = new Redis(store.url);
const figures: Figure[] = [];
try {
  for (const P of FLEETS) {
    const workers = await fleet(P);
    for (const K of KEYS) {
      const samples = new Map<ContenderName, Awaited<ReturnType<typeof oneRun>>[]>();
      for (let r = 0; r < RUNS; r++) {
        for (const contender of CONTENDERS) {
          await flusher.flushall();
          const res = await oneRun(store.url, workers, contender, spec(K), `f${P}k${K}r${r}${contender}`);
          (samples.get(contender) ?? samples.set(contender, []).get(contender))?.push(res);
          console.log(`fleet · P=${P} K=${K} · ${contender} · run ${r + 1}/${RUNS}: ratio ${res.ratio.toFixed(2)}, ${res.maxAtOnce} at once, ${res.cpuUsPerCall.toFixed(1)} µs CPU/call, p99 ${res.p99.toFixed(1)} ms, ${res.callsPerSec.toFixed(0)} calls/s, ${res.notesPerProcessPerSec.toFixed(1)} notes/s per process`);
        }
      }
      for (const [contender, xs] of samples) {
        const m = (f: (x: (typeof xs)[number]) => number) => median(xs.map(f));
        figures.push({ P, K, contender, ratio: m((x) => x.ratio), maxAtOnce: Math.max(...xs.map((x) => x.maxAtOnce)), cpuUsPerCall: m((x) => x.cpuUsPerCall), p99: m((x) => x.p99), callsPerSec: m((x) => x.callsPerSec), notesPerProcessPerSec: m((x) => x.notesPerProcessPerSec) });
      }
    }
    for (const w of workers) w.send({ op: 'exit' });
  }
} finally {
  flusher.disconnect();
  await store.stop();
}

console.log(`\nnpm run bench:fleet -- ${process.argv.slice(2).join(' ')}`.trim());
console.log(`(${C} callers per process, closed loop with 5 ms think time, ttl 1000 ms, loader 100 ms, ${quick ? 1500 : 4000} ms per run; medians of ${RUNS})\n`);
console.log('| P | K | contender | rebuild ratio | max at once | CPU µs/call | CPU vs cache-aside | p99 ms | calls/s | notes/s per process |');
console.log('|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|');
for (const f of figures) {
  const bare = figures.find((b) => b.P === f.P && b.K === f.K && b.contender === 'cache-aside');
  console.log(`| ${f.P} | ${f.K} | ${f.contender} | ${f.ratio.toFixed(2)} | ${f.maxAtOnce} | ${f.cpuUsPerCall.toFixed(1)} | ${bare ? (f.cpuUsPerCall / bare.cpuUsPerCall).toFixed(2) : '–'} | ${f.p99.toFixed(1)} | ${f.callsPerSec.toFixed(0)} | ${f.notesPerProcessPerSec.toFixed(1)} |`);
}
