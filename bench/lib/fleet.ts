/**
 * The fleet scenario (issue 12 §2): the same hot-key load on fleets of P processes. Per (P, K), ours
 * (`single`, no L1) beside hand-rolled cache-aside (GET; on a miss the loader and SET PX — no
 * coordination), in one run: rebuild ratio (loader runs ÷ one per key per expiry), most loaders at once
 * on one key, client CPU per request (process.cpuUsage over the timed window, every process summed),
 * p99, and the pub/sub notes each process receives per second (every process subscribes to the one
 * channel, so each receives every note: counted here by one more subscriber). `single-sharded`
 * (`notes: 'sharded'`) sends a key's notes only to the processes waiting on or rebuilding it, which no
 * outside subscriber can count: its column is '–'. Medians of R runs.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { eventsChannel } from '../../src/keys.js';
import type { ContenderName } from './contenders.js';
import { idealRebuilds, maxConcurrentPerKey, median, percentile, type ScenarioSpec } from './scenarios.js';
import type { RunReport, RunRequest } from '../worker.js';

export const ALL_FLEET_CONTENDERS: readonly ContenderName[] = ['single', 'single-sharded', 'cache-aside'];
const WORKER = fileURLToPath(new URL('../worker.ts', import.meta.url));
const now = (): number => performance.timeOrigin + performance.now();

export interface FleetSizes {
  /** Fleet sizes P (processes on this machine). */
  readonly processes: readonly number[];
  /** Hot keys K. */
  readonly keys: readonly number[];
  /** Callers per process: small, so 32 processes still fit 2 cores without measuring only the queue. */
  readonly callers: number;
  readonly durationMs: number;
  readonly runs: number;
  /**
   * Before a fleet's first measured run, each contender runs this long unmeasured on the same
   * workers (JIT warm-up: the hit-cost bench found 3 s too short at P = 4). 0: none.
   */
  readonly warmupMs: number;
  /** Workers run with `--cpu-prof` into this directory (profiles are written when they exit). */
  readonly cpuProfDir?: string;
  /**
   * Fleet-wide arrivals per second, open loop, split evenly over the P processes (each fires rate ÷ P
   * per second on a fixed schedule, whatever the answers do). Unset: the closed loop of `callers`.
   * The closed loop gives each fleet as much load as it can take, so a contender that costs more CPU
   * per call saturates the 2 cores at a smaller P and its CPU per call then grows from contention
   * alone; at one fixed rate every P and every contender does the same work per second, below
   * saturation, and each run also measures the fleet idle (connected, no calls) to split a
   * process's fixed background cost from the cost of its calls.
   */
  readonly rate?: number;
}

export interface FleetFigure {
  P: number;
  K: number;
  contender: ContenderName;
  ratio: number;
  maxAtOnce: number;
  cpuUsPerCall: number;
  /** Of which kernel (system) time. */
  systemUsPerCall: number;
  /** Voluntary context switches (a process put to sleep, then woken) per call, every process summed. */
  wakeupsPerCall: number;
  /** Commands Redis processed (INFO total_commands_processed) per call, over the run. */
  redisCommandsPerCall: number;
  p99: number;
  callsPerSec: number;
  notesPerProcessPerSec: number;
  /** Open loop (`rate`) only: CPU a process spends per second with the contender connected and no calls, µs. */
  idleUsPerProcessPerSec?: number;
}

/** Open-loop arrivals before a measured window (JIT, connections); counted neither in answers nor in CPU. */
const OPEN_WARMUP_MS = 1000;

/** Closed loop by default; with a fleet-wide `perSecond` (0: the idle run), open loop at perSecond ÷ P per process. */
export const fleetSpec = (keys: number, durationMs: number, open?: { perSecond: number; P: number }): ScenarioSpec => ({
  name: `fleet-${keys}`, distribution: 'uniform', keys, ttlMs: 1000, staleMs: 0, loaderMs: 100, durationMs,
  ...(open ? { kind: 'open' as const, perSecond: open.perSecond / open.P, warmupMs: open.perSecond > 0 ? OPEN_WARMUP_MS : 0, thinkMs: 0 } : { kind: 'loop' as const, thinkMs: 5 }),
});

async function startFleet(P: number, cpuProfDir: string | undefined): Promise<ChildProcess[]> {
  const prof = cpuProfDir ? ['--cpu-prof', `--cpu-prof-dir=${cpuProfDir}`] : [];
  // SG_BENCH_NODE_FLAGS: extra node/V8 flags for the workers, as in bench:hit (an experiment's, e.g. a JIT flag).
  const flags = (process.env.SG_BENCH_NODE_FLAGS ?? '').split(' ').filter((f) => f !== '');
  return Promise.all(
    Array.from({ length: P }, () => {
      const child = fork(WORKER, [], { execArgv: ['--import', 'tsx', ...prof, ...flags], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      return new Promise<ChildProcess>((resolve) => child.once('message', () => resolve(child)));
    }),
  );
}

async function oneRun(url: string, workers: ChildProcess[], contender: ContenderName, scenario: ScenarioSpec, callers: number, prefix: string) {
  const listener = new Redis(url);
  const commands = async (): Promise<number> => Number(/total_commands_processed:(\d+)/.exec(await listener.info('stats'))?.[1] ?? 0);
  const commands0 = await commands();
  let notes = 0;
  await listener.subscribe(eventsChannel(prefix));
  listener.on('message', () => notes++);
  const startAt = now() + 500 + workers.length * 20 + (scenario.warmupMs ?? 0);
  const req: RunRequest = { op: 'run', contender, scenario, callers, startAt, url, redlockUrls: [], prefix };
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
  const cpuUs = reports.reduce((s, r) => s + r.cpuUs, 0);
  const listenerPeer = new Redis(url);
  const commands1 = Number(/total_commands_processed:(\d+)/.exec(await listenerPeer.info('stats'))?.[1] ?? 0);
  listenerPeer.disconnect();
  listener.disconnect();
  const runs = reports.flatMap((r) => r.runs);
  const latencies = reports.flatMap((r) => r.latencies).sort((a, b) => a - b);
  const calls = latencies.length;
  return {
    ratio: runs.length / Math.max(1, idealRebuilds(runs, scenario.ttlMs)),
    maxAtOnce: maxConcurrentPerKey(runs),
    cpuUsPerCall: cpuUs / Math.max(1, calls),
    cpuUsPerProcessPerSec: cpuUs / workers.length / seconds,
    systemUsPerCall: reports.reduce((s, r) => s + r.systemUs, 0) / Math.max(1, calls),
    wakeupsPerCall: reports.reduce((s, r) => s + r.wakeups, 0) / Math.max(1, calls),
    // Every command Redis processed during the run, the workers' setup and close included (a few per process).
    redisCommandsPerCall: (commands1 - commands0) / Math.max(1, calls),
    p99: percentile(latencies, 99),
    callsPerSec: calls / seconds,
    // Sharded notes go to per-key channels held only by the processes that wait on the key: not countable here.
    notesPerProcessPerSec: contender === 'single-sharded' ? Number.NaN : notes / seconds,
  };
}

/** Every (P, K), both contenders in each run, interleaved run by run; medians of `runs` (max at once: the most seen). */
export async function fleetBench(url: string, sizes: FleetSizes, log: (line: string) => void = () => undefined, contenders: readonly ContenderName[] = ALL_FLEET_CONTENDERS): Promise<FleetFigure[]> {
  const flusher = new Redis(url);
  const figures: FleetFigure[] = [];
  try {
    for (const P of sizes.processes) {
      const workers = await startFleet(P, sizes.cpuProfDir);
      try {
        const open = (perSecond: number) => (sizes.rate === undefined ? undefined : { perSecond, P });
        if (sizes.warmupMs > 0) {
          for (const contender of contenders) {
            await flusher.flushall();
            // Closed loop whatever `rate` says: as many calls as each process can make, so the measured
            // window runs JIT-compiled code even where rate ÷ P is a few calls per second.
            await oneRun(url, workers, contender, fleetSpec(Math.max(...sizes.keys), sizes.warmupMs), sizes.callers, `f${P}warm${contender}`);
          }
          log(`fleet · P=${P} · warm-up done (${sizes.warmupMs} ms per contender, unmeasured)`);
        }
        for (const K of sizes.keys) {
          const samples = new Map<ContenderName, Awaited<ReturnType<typeof oneRun>>[]>();
          const idle = new Map<ContenderName, number[]>();
          for (let r = 0; r < sizes.runs; r++) {
            for (const contender of contenders) {
              await flusher.flushall();
              const res = await oneRun(url, workers, contender, fleetSpec(K, sizes.durationMs, open(sizes.rate ?? 0)), sizes.callers, `f${P}k${K}r${r}${contender}`);
              (samples.get(contender) ?? samples.set(contender, []).get(contender))?.push(res);
              if (sizes.rate !== undefined) {
                // The same processes and contender, connected, with no calls: its background cost alone.
                const still = await oneRun(url, workers, contender, fleetSpec(K, sizes.durationMs, open(0)), sizes.callers, `f${P}k${K}r${r}${contender}idle`);
                (idle.get(contender) ?? idle.set(contender, []).get(contender))?.push(still.cpuUsPerProcessPerSec);
                log(`fleet · P=${P} K=${K} · ${contender} · run ${r + 1}/${sizes.runs} idle: ${still.cpuUsPerProcessPerSec.toFixed(0)} µs CPU/s per process`);
              }
              log(`fleet · P=${P} K=${K} · ${contender} · run ${r + 1}/${sizes.runs}: ratio ${res.ratio.toFixed(2)}, ${res.maxAtOnce} at once, ${res.cpuUsPerCall.toFixed(1)} µs CPU/call (system ${res.systemUsPerCall.toFixed(1)}), ${res.wakeupsPerCall.toFixed(2)} wake-ups/call, ${res.redisCommandsPerCall.toFixed(2)} Redis commands/call, p99 ${res.p99.toFixed(1)} ms, ${res.callsPerSec.toFixed(0)} calls/s, ${res.notesPerProcessPerSec.toFixed(1)} notes/s per process`);
            }
          }
          for (const [contender, xs] of samples) {
            const m = (f: (x: (typeof xs)[number]) => number) => median(xs.map(f));
            const still = idle.get(contender);
            figures.push({ P, K, contender, ratio: m((x) => x.ratio), maxAtOnce: Math.max(...xs.map((x) => x.maxAtOnce)), cpuUsPerCall: m((x) => x.cpuUsPerCall), systemUsPerCall: m((x) => x.systemUsPerCall), wakeupsPerCall: m((x) => x.wakeupsPerCall), redisCommandsPerCall: m((x) => x.redisCommandsPerCall), p99: m((x) => x.p99), callsPerSec: m((x) => x.callsPerSec), notesPerProcessPerSec: m((x) => x.notesPerProcessPerSec), ...(still ? { idleUsPerProcessPerSec: median(still) } : {}) });
          }
        }
      } finally {
        // Each worker exits on its own (a profile is written on exit).
        await Promise.all(workers.map((w) => new Promise((r) => (w.exitCode !== null ? r(undefined) : (w.once('exit', r), w.send({ op: 'exit' }))))));
      }
    }
  } finally {
    flusher.disconnect();
  }
  return figures;
}

/** The fleet table: one row per (P, K, contender), ours' CPU beside cache-aside's in the same run. */
export function fleetMarkdown(figures: readonly FleetFigure[], sizes: FleetSizes): string[] {
  if (figures.length === 0) return [];
  const rate = sizes.rate;
  const load =
    rate === undefined
      ? `${sizes.callers} callers per process, closed loop with 5 ms think time`
      : `open loop: ${rate} arrivals/s over the whole fleet, ${rate} ÷ P per process on a fixed schedule, ${OPEN_WARMUP_MS} ms of unmeasured arrivals before each window; each run followed by an idle run of the same length (connected, no calls)`;
  const out = [
    `**Fleet** (${load}, K hot keys drawn uniformly, ttl 1000 ms, loader 100 ms, ${sizes.durationMs} ms per run after ${sizes.warmupMs} ms of unmeasured warm-up per contender and fleet; medians of ${sizes.runs}; cache-aside: GET, and on a miss the loader and SET PX, no coordination):`,
    '',
    `| P | K | contender | rebuild ratio | max at once | CPU µs/call | CPU vs cache-aside | of which system µs | wake-ups/call | Redis commands/call | p99 ms | calls/s | notes/s per process |${rate === undefined ? '' : ' idle CPU µs/s per process | of CPU/call, idle share µs | CPU µs/call less idle | less idle, vs cache-aside |'}`,
    `|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|${rate === undefined ? '' : '---:|---:|---:|---:|'}`,
  ];
  // A process's idle cost spread over the calls it serves: idle µs/s × P processes ÷ the fleet's rate.
  const idleShare = (f: FleetFigure): number => ((f.idleUsPerProcessPerSec ?? 0) * f.P) / (rate ?? 1);
  for (const f of figures) {
    const bare = figures.find((b) => b.P === f.P && b.K === f.K && b.contender === 'cache-aside');
    const idleCols = rate === undefined ? '' : ` ${(f.idleUsPerProcessPerSec ?? 0).toFixed(0)} | ${idleShare(f).toFixed(1)} | ${(f.cpuUsPerCall - idleShare(f)).toFixed(1)} | ${bare ? ((f.cpuUsPerCall - idleShare(f)) / (bare.cpuUsPerCall - idleShare(bare))).toFixed(2) : '–'} |`;
    out.push(`| ${f.P} | ${f.K} | ${f.contender} | ${f.ratio.toFixed(2)} | ${f.maxAtOnce} | ${f.cpuUsPerCall.toFixed(1)} | ${bare ? (f.cpuUsPerCall / bare.cpuUsPerCall).toFixed(2) : '–'} | ${f.systemUsPerCall.toFixed(1)} | ${f.wakeupsPerCall.toFixed(2)} | ${f.redisCommandsPerCall.toFixed(2)} | ${f.p99.toFixed(1)} | ${f.callsPerSec.toFixed(0)} | ${Number.isNaN(f.notesPerProcessPerSec) ? '–' : f.notesPerProcessPerSec.toFixed(1)} |${idleCols}`);
  }
  return out;
}
