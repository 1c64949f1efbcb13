/**
 * L1 kept by notes against L1 kept by the server (`local.invalidation: 'tracking'`, docs/tracking.md),
 * on P separate reader processes and one writer process, each its own ioredis client and cache
 * (bench/tracking-worker.ts), every mode in each run, modes interleaved run by run; medians of runs:
 * - per write: Redis commands (INFO commandstats: every command the server ran, those inside scripts
 *   too), the bytes Redis sent (INFO stats: replies, notes, invalidations: the fan-out) and client CPU
 *   (process.cpuUsage, every process summed), for `set()`s of keys every reader holds in L1 and of
 *   keys no reader holds. A phase's last write is of a key every reader holds (the sentinel): the phase
 *   ends when every reader dropped it, so what the writes sent the readers is in the window;
 * - per L1 hit: commands and client CPU per `get()` answered from L1, every reader looping over keys
 *   it holds;
 * - the staleness window of a remote delete: from `delete()` resolving in the writer to the last
 *   moment a reader's L1 still answered the old value (each reader polls its L1 every event-loop turn
 *   and stamps each sighting with performance.timeOrigin + performance.now(), one clock across
 *   processes), p50 and p99 over every (key, reader) of a run.
 * Nothing here is asserted: it is measured.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import type { CacheOptions } from '../../src/index.js';
import { median, percentile } from './scenarios.js';

/** The modes side by side: the default, tracking, and tracking with sharded notes (the fleet-scale combination). */
export const TRACKING_MODES = {
  notes: { local: { max: 10_000 } },
  tracking: { local: { max: 10_000, invalidation: 'tracking' } },
  'tracking+sharded': { notes: 'sharded', local: { max: 10_000, invalidation: 'tracking' } },
} as const satisfies Record<string, Partial<CacheOptions>>;
export type TrackingMode = keyof typeof TRACKING_MODES;

/** A request to a worker (bench/tracking-worker.ts); each is answered once, by its id. */
export type TrackingOp =
  | { op: 'open'; url: string; prefix: string; mode: TrackingMode }
  /** Write each key (setup: 50 at a time). */
  | { op: 'set'; keys: string[]; value: string }
  /** Read each key until this process's L1 holds it. */
  | { op: 'hold'; keys: string[] }
  /** Open the CPU window. */
  | { op: 'cpuStart' }
  /** The writer: `set()` each key in turn, one at a time. */
  | { op: 'write'; keys: string[]; value: string }
  /** Close the CPU window, once `until` (if given) is out of this process's L1. Answers the window's CPU, µs. */
  | { op: 'cpuEnd'; until?: string }
  /** `get()` the keys round and round from `startAt` to `until` (ms, timeOrigin-based), after unmeasured loops before `startAt`; the writer idles. */
  | { op: 'hits'; keys: string[]; startAt: number; until: number; loop: boolean }
  /** A reader: poll its L1 for the keys every event-loop turn until none is left. */
  | { op: 'staleStart'; keys: string[] }
  /** A reader: when each key was last seen in L1 (ms, timeOrigin-based; -Infinity: never seen once polling began). */
  | { op: 'staleEnd' }
  /** The writer: `delete()` each key in turn, `gapMs` apart; answers when each resolved. */
  | { op: 'delete'; keys: string[]; gapMs: number }
  /** Close the cache and its client; answers the `degraded` events it emitted. */
  | { op: 'close' };

export interface HitsReport {
  hits: number;
  cpuUs: number;
}

const WORKER = fileURLToPath(new URL('../tracking-worker.ts', import.meta.url));
const now = (): number => performance.timeOrigin + performance.now();

/** A worker process and its answers, matched to requests by id. */
class Worker {
  private next = 0;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();

  private constructor(readonly child: ChildProcess) {
    child.on('message', (m: { id: number; result?: unknown; error?: string }) => {
      const p = this.pending.get(m.id);
      this.pending.delete(m.id);
      if (m.error !== undefined) p?.reject(new Error(m.error));
      else p?.resolve(m.result);
    });
    child.once('exit', (code, signal) => {
      for (const p of this.pending.values()) p.reject(new Error(`tracking worker ${child.pid} exited (${code ?? signal})`));
      this.pending.clear();
    });
  }

  static async start(): Promise<Worker> {
    // SG_BENCH_NODE_FLAGS: extra node/V8 flags for the workers, as in bench:hit and bench:fleet.
    const flags = (process.env.SG_BENCH_NODE_FLAGS ?? '').split(' ').filter((f) => f !== '');
    const child = fork(WORKER, [], { execArgv: ['--import', 'tsx', ...flags], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    await new Promise((resolve, reject) => {
      child.once('message', resolve);
      child.once('exit', (code) => reject(new Error(`tracking worker exited (${code}) before it was ready`)));
    });
    return new Worker(child);
  }

  call<T = void>(op: TrackingOp): Promise<T> {
    const id = this.next++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.child.send({ id, ...op });
    });
  }

  /** Asks the worker to exit; kills it if it has not within 5 s. */
  stop(): Promise<void> {
    const c = this.child;
    if (c.exitCode !== null || c.signalCode !== null) return Promise.resolve();
    return new Promise((resolve) => {
      c.once('exit', () => resolve());
      c.send({ id: -1, op: 'exit' });
      setTimeout(() => c.kill('SIGKILL'), 5000).unref();
    });
  }
}

/** The server's counters: every command it ran (but our own INFO) and every byte it sent. */
interface Counters {
  commands: number;
  bytesOut: number;
  /** The bytes of this INFO's own reply: counted in the next reading's bytesOut, not the workload's. */
  replyBytes: number;
}

async function counters(admin: Redis): Promise<Counters> {
  const info = (await admin.call('INFO', 'stats', 'commandstats')) as string;
  let commands = 0;
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) if (m[1] !== 'info') commands += Number(m[2]);
  const length = Buffer.byteLength(info);
  return { commands, bytesOut: Number(/^total_net_output_bytes:(\d+)/m.exec(info)?.[1]), replyBytes: length + `$${length}\r\n\r\n`.length };
}

export interface WriteFigures {
  commands: number;
  bytesOut: number;
  cpuUs: number;
}

export interface TrackingRun {
  held: WriteFigures;
  cold: WriteFigures;
  hitCommands: number;
  hitCpuUs: number;
  hitsPerSec: number;
  staleP50: number;
  staleP99: number;
  /** Share of (key, reader) pairs whose L1 still answered the old value after delete() resolved. */
  staleShare: number;
  /** (key, reader) pairs already out of L1 when polling began (a flush): not staleness samples; a run with any is suspect. */
  unseen: number;
  /** `degraded` events over the run, every process: a run with any is suspect (Redis timed out on a busy machine). */
  degraded: number;
}

export interface TrackingSizes {
  /** Reader processes P (one writer process besides). */
  readonly processes: readonly number[];
  readonly modes: readonly TrackingMode[];
  readonly runs: number;
  /** Unmeasured runs of every mode on fresh processes, before the measured ones. */
  readonly warmupRuns: number;
  /** Writes per phase (the sentinel included). */
  readonly writes: number;
  /** Keys each reader holds and gets round and round in the hit phase. */
  readonly hitKeys: number;
  readonly hitWarmupMs: number;
  readonly hitMs: number;
  readonly deletes: number;
  /** Between two deletes: each delete's staleness measured apart from the next. */
  readonly deleteGapMs: number;
  /** The command line that ran the bench, printed above the table. */
  readonly command: string;
}

export interface TrackingFigure extends TrackingRun {
  P: number;
  mode: TrackingMode;
}

const names = (tag: string, n: number) => Array.from({ length: n }, (_, i) => `${tag}${i}`);

/** One run of one mode on the started workers: caches opened, the three phases, caches closed. */
async function oneRun(url: string, admin: Redis, workers: readonly Worker[], mode: TrackingMode, prefix: string, s: TrackingSizes): Promise<TrackingRun> {
  await Promise.all(workers.map((w) => w.call({ op: 'open', url, prefix, mode })));
  let figures: Omit<TrackingRun, 'degraded'>;
  let degraded: number[];
  try {
    figures = await phases(admin, workers, s);
  } finally {
    degraded = await Promise.all(workers.map((w) => w.call<number>({ op: 'close' })));
  }
  return { ...figures, degraded: degraded.reduce((a, b) => a + b, 0) };
}

async function phases(admin: Redis, workers: readonly Worker[], s: TrackingSizes): Promise<Omit<TrackingRun, 'degraded'>> {
  const [writer, ...readers] = workers as [Worker, ...Worker[]];
  const held = names('w', s.writes - 1);
  const cold = names('c', s.writes - 1);
  const hot = names('h', s.hitKeys);
  const gone = names('d', s.deletes);
  const sentinels = ['sw', 'sc'] as const;
  await writer.call({ op: 'set', keys: [...held, ...cold, ...hot, ...gone, ...sentinels], value: 'v0' });
  await Promise.all(readers.map((r) => r.call({ op: 'hold', keys: [...held, ...hot, ...gone, ...sentinels] })));

  const writes = async (keys: string[], sentinel: string): Promise<WriteFigures> => {
    const c0 = await counters(admin);
    await Promise.all(workers.map((w) => w.call({ op: 'cpuStart' })));
    await writer.call({ op: 'write', keys: [...keys, sentinel], value: 'v1' });
    const cpu = await Promise.all([writer.call<number>({ op: 'cpuEnd' }), ...readers.map((r) => r.call<number>({ op: 'cpuEnd', until: sentinel }))]);
    const c1 = await counters(admin);
    const n = keys.length + 1;
    return { commands: (c1.commands - c0.commands) / n, bytesOut: (c1.bytesOut - c0.bytesOut - c0.replyBytes) / n, cpuUs: cpu.reduce((a, b) => a + b, 0) / n };
  };
  const heldFigures = await writes(held, sentinels[0]);
  const coldFigures = await writes(cold, sentinels[1]);

  // L1 hits: every reader over the keys it holds, from one instant, after an unmeasured warm-up.
  const startAt = now() + 100 + s.hitWarmupMs;
  const until = startAt + s.hitMs;
  const before = new Promise<Counters>((resolve, reject) => setTimeout(() => void counters(admin).then(resolve, reject), Math.max(0, startAt - now())));
  const hits = await Promise.all(workers.map((w, i) => w.call<HitsReport>({ op: 'hits', keys: hot, startAt, until, loop: i > 0 })));
  const after = await counters(admin);
  const total = hits.reduce((a, h) => a + h.hits, 0);
  const hitCommands = (after.commands - (await before).commands) / Math.max(1, total);
  const hitCpuUs = hits.reduce((a, h) => a + h.cpuUs, 0) / Math.max(1, total);

  // Staleness of a remote delete: the readers poll, the writer deletes, each (key, reader) a sample.
  await Promise.all(readers.map((r) => r.call({ op: 'staleStart', keys: gone })));
  const resolvedAt = await writer.call<number[]>({ op: 'delete', keys: gone, gapMs: s.deleteGapMs });
  const seen = await Promise.all(readers.map((r) => r.call<number[]>({ op: 'staleEnd' })));
  const sightings = seen.flatMap((last) => last.map((t, j) => ({ t, resolved: resolvedAt[j] as number })));
  const windows = sightings.filter((x) => x.t > Number.NEGATIVE_INFINITY).map((x) => x.t - x.resolved).sort((a, b) => a - b);
  const clamp = (ms: number) => Math.max(0, ms);
  return {
    held: heldFigures,
    cold: coldFigures,
    hitCommands,
    hitCpuUs,
    hitsPerSec: total / (s.hitMs / 1000),
    staleP50: clamp(percentile(windows, 50)),
    staleP99: clamp(percentile(windows, 99)),
    staleShare: windows.filter((w) => w > 0).length / Math.max(1, windows.length),
    unseen: sightings.length - windows.length,
  };
}

/** Every P, every mode in each run (the order rotated run by run); medians of `runs`. */
export async function trackingBench(url: string, adminUrl: string, s: TrackingSizes, log: (line: string) => void): Promise<TrackingFigure[]> {
  const admin = new Redis(adminUrl);
  const figures: TrackingFigure[] = [];
  try {
    for (const P of s.processes) {
      const workers = await Promise.all(Array.from({ length: P + 1 }, () => Worker.start()));
      try {
        // Fresh processes run cold code (JIT): every mode once, unmeasured, before the measured runs.
        for (let w = 0; w < s.warmupRuns; w++) for (const mode of s.modes) await oneRun(url, admin, workers, mode, `tb${P}warm${w}${mode}`, s);
        if (s.warmupRuns > 0) log(`tracking · P=${P} · warm-up done (${s.warmupRuns} unmeasured run${s.warmupRuns > 1 ? 's' : ''} of every mode)`);
        const samples = new Map<TrackingMode, TrackingRun[]>(s.modes.map((m) => [m, []]));
        for (let r = 0; r < s.runs; r++) {
          for (let i = 0; i < s.modes.length; i++) {
            const mode = s.modes[(i + r) % s.modes.length] as TrackingMode;
            const run = await oneRun(url, admin, workers, mode, `tb${P}r${r}${mode}`, s);
            samples.get(mode)?.push(run);
            log(`tracking · P=${P} · ${mode} · run ${r + 1}/${s.runs}: held write ${run.held.commands.toFixed(2)} commands, ${run.held.bytesOut.toFixed(0)} B out, ${run.held.cpuUs.toFixed(0)} µs CPU; cold write ${run.cold.commands.toFixed(2)} commands, ${run.cold.bytesOut.toFixed(0)} B out, ${run.cold.cpuUs.toFixed(0)} µs CPU; L1 hit ${run.hitCommands.toFixed(4)} commands, ${run.hitCpuUs.toFixed(3)} µs CPU, ${run.hitsPerSec.toFixed(0)} hits/s; stale p50 ${run.staleP50.toFixed(3)} ms, p99 ${run.staleP99.toFixed(3)} ms, ${(run.staleShare * 100).toFixed(1)}% > 0${run.unseen > 0 ? `; ${run.unseen} (key, reader) pairs out of L1 before the delete` : ''}${run.degraded > 0 ? `; ${run.degraded} degraded events` : ''}`);
          }
        }
        for (const mode of s.modes) {
          const xs = samples.get(mode) ?? [];
          const m = (f: (x: TrackingRun) => number) => median(xs.map(f));
          const w = (f: (x: TrackingRun) => WriteFigures) => ({ commands: m((x) => f(x).commands), bytesOut: m((x) => f(x).bytesOut), cpuUs: m((x) => f(x).cpuUs) });
          figures.push({ P, mode, held: w((x) => x.held), cold: w((x) => x.cold), hitCommands: m((x) => x.hitCommands), hitCpuUs: m((x) => x.hitCpuUs), hitsPerSec: m((x) => x.hitsPerSec), staleP50: m((x) => x.staleP50), staleP99: m((x) => x.staleP99), staleShare: m((x) => x.staleShare), unseen: xs.reduce((a, x) => a + x.unseen, 0), degraded: xs.reduce((a, x) => a + x.degraded, 0) });
        }
      } finally {
        await Promise.all(workers.map((w) => w.stop()));
      }
    }
  } finally {
    admin.disconnect();
  }
  return figures;
}

/** The table: the command, what was run, one row per (P, mode), each mode's write CPU against notes' in the same P. */
export function trackingMarkdown(figures: readonly TrackingFigure[], s: TrackingSizes): string[] {
  const f1 = (x: number) => x.toFixed(1);
  const f2 = (x: number) => x.toFixed(2);
  const out = [
    '```sh',
    s.command,
    '```',
    '',
    `**L1 kept by notes vs by the server** (P reader processes and 1 writer process, each its own ioredis client and cache; ` +
      `per write: ${s.writes} \`set()\`s of keys every reader holds in L1 ("held"), then ${s.writes} of keys no reader holds ("cold", the last one held by all: its drop ends the window), ` +
      `commands and bytes Redis sent from INFO (the bench's own INFO left out), client CPU every process summed until every reader dropped the last key; ` +
      `per L1 hit: every reader \`get()\`s ${s.hitKeys} keys it holds round and round for ${s.hitMs} ms after ${s.hitWarmupMs} ms unmeasured; ` +
      `staleness: ${s.deletes} \`delete()\`s ${s.deleteGapMs} ms apart, each reader polling its L1 every event-loop turn, from \`delete()\` resolving to the reader's last sighting of the old value (0 if none after it), over every (key, reader); ` +
      `medians of ${s.runs} runs after ${s.warmupRuns} unmeasured, modes interleaved; CPU ÷ notes: against notes at the same P):`,
    '',
    '| P | mode | held write: commands | B out | CPU µs | ÷ notes | cold write: commands | B out | CPU µs | ÷ notes | L1 hit: commands | CPU µs | delete staleness p50 ms | p99 ms | stale after resolve |',
    '|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const f of figures) {
    const notes = figures.find((n) => n.P === f.P && n.mode === 'notes');
    const vs = (x: number, ref: number | undefined) => (ref === undefined ? '–' : f2(x / ref));
    const warn = [f.degraded > 0 ? `${f.degraded} degraded events` : '', f.unseen > 0 ? `${f.unseen} copies lost before a delete` : ''].filter((w) => w !== '').join(', ');
    out.push(
      `| ${f.P} | ${f.mode}${warn ? ` (${warn})` : ''} | ${f2(f.held.commands)} | ${f.held.bytesOut.toFixed(0)} | ${f.held.cpuUs.toFixed(0)} | ${vs(f.held.cpuUs, notes?.held.cpuUs)} | ${f2(f.cold.commands)} | ${f.cold.bytesOut.toFixed(0)} | ${f.cold.cpuUs.toFixed(0)} | ${vs(f.cold.cpuUs, notes?.cold.cpuUs)} | ${f.hitCommands.toFixed(4)} | ${f2(f.hitCpuUs)} | ${f2(f.staleP50)} | ${f2(f.staleP99)} | ${f1(f.staleShare * 100)}% |`,
    );
  }
  return out;
}
