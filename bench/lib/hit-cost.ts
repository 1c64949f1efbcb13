/**
 * The cost of a hit, as CPU the client process spends per request (issue 12 §1): P processes, each
 * running L concurrent loops over K warm keys drawn uniformly, side by side with what a hand-rolled
 * client does for the same answer:
 * - `bare`: ioredis `GET` of the very bytes the cache stored, decoded with msgpackr;
 * - `ours`: `getOrCompute` fresh hit, no L1 (one Redis round trip);
 * - `lru`: a bare lru-cache `get`;
 * - `ours-l1`: `getOrCompute` answered by L1.
 * CPU is `process.cpuUsage()` (user + system) over the timed window, divided by the requests answered
 * in it; the window follows a warm-up (JIT, connections) that is not counted. The warm-up must be long:
 * with 4 processes sharing 2 cores, a 300 ms one left our (larger) code path still unoptimized in the
 * window, and measured it at 3.4–5.3× the bare GET; after 6 s, 1.2× (bench/results/issue12.md). Redis's own CPU is not
 * in the figure: it is the same GET-sized work for `bare` and `ours` (ours runs a short read script).
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createCache } from '../../src/index.js';
import { Redis } from 'ioredis';
import { median } from './scenarios.js';

export const HIT_VARIANTS = ['bare', 'ours', 'lru', 'ours-l1'] as const;
/**
 * Run only when named (`--variants`): `script` is the bare client calling our read script (EVALSHA:
 * bytes and PTTL in one round trip, the size cap inside Redis) and decoding the bytes, without the
 * library around it. It splits ours ÷ bare into what the Redis command costs and what our code does.
 * `evalsha` is the same script sent as a plain command (no defineCommand wrapper), `getrange-pttl` a
 * read without Lua (GETRANGE up to the cap, PTTL, sent together). `ours-base` is ours from another
 * build (SG_BENCH_BASE: its dist/index.js), for an A/B of a change in one run.
 * `ours-options` is ours with the options as a new object literal per call (`{ ttl, lock: 'single' }`,
 * the README's second form) instead of a bare ttl number; `ours-options-signal` adds a `signal` (one
 * never-aborted signal, so the figure is the library's cost of a signal, not AbortController's);
 * `ours-options-base` is `ours-options` from the SG_BENCH_BASE build.
 */
export const EXTRA_HIT_VARIANTS = ['script', 'evalsha', 'getrange-pttl', 'ours-base', 'ours-options', 'ours-options-signal', 'ours-options-base'] as const;
export type HitVariant = (typeof HIT_VARIANTS)[number] | (typeof EXTRA_HIT_VARIANTS)[number];

export interface HitRequest {
  variant: HitVariant;
  url: string;
  prefix: string;
  keys: number;
  loops: number;
  warmupMs: number;
  durationMs: number;
  /** Requests per second per process, paced over its loops; 0: as fast as the loops go (the default). */
  rate: number;
  /** `--window-prof`: each process writes a CPU profile of its timed window alone into this directory. */
  windowProfDir?: string;
}

export interface HitReport {
  requests: number;
  cpuUs: number;
  /** The split of cpuUs (process.cpuUsage), and the context switches over the window (process.resourceUsage). */
  userUs: number;
  systemUs: number;
  voluntarySwitches: number;
  involuntarySwitches: number;
  wallMs: number;
}

export interface HitFigure {
  variant: HitVariant;
  processes: number;
  keys: number;
  /** Client CPU per answered request, µs (median of runs). */
  cpuUsPerRequest: number;
  /** Requests per second over all processes (median of runs). */
  throughput: number;
  /** Redis's own CPU (INFO used_cpu_user + used_cpu_sys) per answered request, µs (median of runs). */
  redisCpuUsPerRequest: number;
}

/** The value every key holds: a small JSON-like record, as in the overhead figures. */
export const HIT_VALUE = { id: 42, name: 'Ada Lovelace', roles: ['admin', 'author'], profile: { city: 'London', since: 1843 } };
export const HIT_TTL = 3_600_000;
const WORKER = fileURLToPath(new URL('../hit-worker.ts', import.meta.url));
const now = (): number => performance.timeOrigin + performance.now();

/** Writes K warm keys through the cache (so `bare` reads the bytes the cache stored). */
async function warm(url: string, prefix: string, keys: number): Promise<void> {
  const redis = new Redis(url);
  const cache = createCache({ redis, prefix });
  try {
    for (let i = 0; i < keys; i += 200) {
      await Promise.all(Array.from({ length: Math.min(200, keys - i) }, (_, j) => cache.set(`k${i + j}`, HIT_VALUE, HIT_TTL)));
    }
  } finally {
    await cache.close();
    redis.disconnect();
  }
}

/** Redis's CPU so far (user + system), µs, from INFO cpu. */
async function redisCpuUs(redis: Redis): Promise<number> {
  const info = await redis.info('cpu');
  const field = (name: string) => Number(new RegExp(`^${name}:([0-9.]+)`, 'm').exec(info)?.[1] ?? NaN);
  return (field('used_cpu_user') + field('used_cpu_sys')) * 1e6;
}

async function oneRun(req: HitRequest, processes: number, cpuProfDir?: string): Promise<{ cpuUsPerRequest: number; throughput: number; redisCpuUsPerRequest: number; detail: string }> {
  const prof = cpuProfDir ? ['--cpu-prof', `--cpu-prof-dir=${cpuProfDir}/${req.variant}-P${processes}-K${req.keys}`] : [];
  // SG_BENCH_NODE_FLAGS: extra node/V8 flags for the workers (an experiment's, e.g. --single-threaded-gc).
  const flags = (process.env.SG_BENCH_NODE_FLAGS ?? '').split(' ').filter((f) => f !== '');
  const children = Array.from({ length: processes }, () => fork(WORKER, [], { execArgv: ['--import', 'tsx', ...prof, ...flags], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }));
  try {
    await Promise.all(children.map((c) => new Promise((r) => c.once('message', r))));
    const reports = children.map(
      (c) =>
        new Promise<HitReport>((resolve, reject) => {
          c.on('message', (m: HitReport | { failed: string } | { warm: true }) => {
            if ('warm' in m) return;
            if ('failed' in m) reject(new Error(m.failed));
            else resolve(m);
          });
        }),
    );
    const warmed = children.map((c) => new Promise((r) => c.once('message', r)));
    for (const c of children) c.send(req satisfies HitRequest);
    await Promise.all(warmed);
    // The window opens at one instant in every process, after the warm-up that is not counted.
    const startAt = now() + 50 + req.warmupMs;
    for (const c of children) c.send({ startAt });
    // Redis's CPU over the same window: read when it opens and when the last report is in.
    const admin = new Redis(req.url);
    const before = new Promise<number>((resolve) => setTimeout(() => resolve(redisCpuUs(admin)), Math.max(0, startAt - now())));
    const all = await Promise.all(reports);
    const redisUs = (await redisCpuUs(admin)) - (await before);
    admin.disconnect();
    const requests = all.reduce((s, r) => s + r.requests, 0);
    const cpu = all.reduce((s, r) => s + r.cpuUs, 0);
    const wall = Math.max(...all.map((r) => r.wallMs));
    const per = (f: (r: HitReport) => number) => all.reduce((s, r) => s + f(r), 0) / Math.max(1, requests);
    const detail = `user ${per((r) => r.userUs).toFixed(2)} + system ${per((r) => r.systemUs).toFixed(2)} µs/request, context switches per request ${per((r) => r.voluntarySwitches).toFixed(3)} voluntary, ${per((r) => r.involuntarySwitches).toFixed(3)} involuntary`;
    return { cpuUsPerRequest: cpu / Math.max(1, requests), throughput: requests / (wall / 1000), redisCpuUsPerRequest: redisUs / Math.max(1, requests), detail };
  } finally {
    // Each child exits after its report; one that does not within 5 s is killed.
    await Promise.all(
      children.map((c) =>
        c.exitCode !== null || c.signalCode !== null
          ? Promise.resolve()
          : new Promise((resolve) => {
              c.once('exit', resolve);
              setTimeout(() => c.kill(), 5000).unref();
            }),
      ),
    );
  }
}

export interface HitSizes {
  processes: readonly number[];
  keys: readonly number[];
  loops: number;
  warmupMs: number;
  durationMs: number;
  runs: number;
  /** Requests per second per process (paced); 0: unpaced. */
  rate: number;
  /** Workers run with `--cpu-prof` into this directory (written when each exits). */
  cpuProfDir?: string;
  /**
   * Each worker profiles its timed window only (node:inspector, 100 µs sampling) into DIR/<variant>-P<P>-K<K>/:
   * unlike `cpuProfDir`, no start-up, module loading or warm-up in it. The profiler's own cost is in
   * that run's CPU figures: read the shares, not the µs.
   */
  windowProfDir?: string;
  /** Only these variants (default: all). */
  variants?: readonly HitVariant[];
}

/** Every (P, K) configuration, every variant in each run, variants interleaved run by run; medians of `runs`. */
export async function hitCost(url: string, sizes: HitSizes, log: (line: string) => void = () => undefined): Promise<HitFigure[]> {
  const figures: HitFigure[] = [];
  for (const keys of sizes.keys) {
    const prefix = `hit${keys}`;
    await warm(url, prefix, keys);
    for (const processes of sizes.processes) {
      const samples = new Map<HitVariant, { cpu: number[]; tput: number[]; redis: number[] }>((sizes.variants ?? HIT_VARIANTS).map((v) => [v, { cpu: [], tput: [], redis: [] }]));
      for (let r = 0; r < sizes.runs; r++) {
        for (const variant of sizes.variants ?? HIT_VARIANTS) {
          const windowProf = sizes.windowProfDir ? { windowProfDir: `${sizes.windowProfDir}/${variant}-P${processes}-K${keys}` } : {};
          const res = await oneRun({ variant, url, prefix, keys, loops: sizes.loops, warmupMs: sizes.warmupMs, durationMs: sizes.durationMs, rate: sizes.rate, ...windowProf }, processes, sizes.cpuProfDir);
          const s = samples.get(variant) as { cpu: number[]; tput: number[]; redis: number[] };
          s.cpu.push(res.cpuUsPerRequest);
          s.tput.push(res.throughput);
          s.redis.push(res.redisCpuUsPerRequest);
          log(`hit cost · ${variant} · P=${processes} K=${keys} · run ${r + 1}/${sizes.runs}: ${res.cpuUsPerRequest.toFixed(2)} µs CPU/request, ${res.throughput.toFixed(0)} req/s, Redis ${res.redisCpuUsPerRequest.toFixed(2)} µs CPU/request (client: ${res.detail})`);
        }
      }
      for (const [variant, s] of samples) figures.push({ variant, processes, keys, cpuUsPerRequest: median(s.cpu), throughput: median(s.tput), redisCpuUsPerRequest: median(s.redis) });
    }
  }
  return figures;
}

/** The markdown table: per (P, K), ours against its bare reference (Redis hit vs bare GET, L1 hit vs lru-cache). */
export function hitMarkdown(figures: HitFigure[], sizes: HitSizes): string[] {
  if (figures.length === 0) return [];
  const out = [
    '',
    `**Hit cost** (client CPU per request, ${sizes.loops} concurrent loops per process over K warm keys drawn uniformly, ${sizes.rate > 0 ? `paced at ${sizes.rate} requests/s per process` : 'unpaced'}, ${sizes.durationMs} ms timed after ${sizes.warmupMs} ms warm-up; medians of ${sizes.runs} runs; the reference is a bare ioredis GET + msgpackr decode of the same bytes, and a bare lru-cache get for L1; Redis's own CPU per request from INFO cpu):`,
    '',
    '| P | K | bare GET µs/req | ours µs/req | ours ÷ bare | bare req/s | ours req/s | Redis µs/req, bare | Redis µs/req, ours | lru-cache µs/req | ours L1 µs/req | L1 ÷ lru |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  const pairs = new Map<string, Partial<Record<HitVariant, HitFigure>>>();
  for (const f of figures) {
    const k = `${f.processes}/${f.keys}`;
    pairs.set(k, { ...pairs.get(k), [f.variant]: f });
  }
  const f2 = (x: number | undefined) => (x === undefined || Number.isNaN(x) ? '–' : x.toFixed(2));
  for (const [k, p] of pairs) {
    const [P, K] = k.split('/');
    out.push(
      `| ${P} | ${K} | ${f2(p.bare?.cpuUsPerRequest)} | ${f2(p.ours?.cpuUsPerRequest)} | ${f2((p.ours?.cpuUsPerRequest ?? NaN) / (p.bare?.cpuUsPerRequest ?? NaN))} | ${p.bare?.throughput.toFixed(0)} | ${p.ours?.throughput.toFixed(0)} | ${f2(p.bare?.redisCpuUsPerRequest)} | ${f2(p.ours?.redisCpuUsPerRequest)} | ${f2(p.lru?.cpuUsPerRequest)} | ${f2(p['ours-l1']?.cpuUsPerRequest)} | ${f2((p['ours-l1']?.cpuUsPerRequest ?? NaN) / (p.lru?.cpuUsPerRequest ?? NaN))} |`,
    );
  }
  // The experiments' variants (EXTRA_HIT_VARIANTS), each beside the bare client and ours of the same run.
  const extras = figures.filter((f) => (EXTRA_HIT_VARIANTS as readonly string[]).includes(f.variant));
  if (extras.length > 0) {
    // An options variant is judged against the bare-ttl call of its own build (ours, or ours-base).
    const bareTtlOf = (f: HitFigure, p: Partial<Record<HitVariant, HitFigure>>) => (f.variant === 'ours-options-base' ? p['ours-base'] : f.variant.startsWith('ours-options') ? p.ours : undefined);
    out.push('', '| P | K | variant | client µs/req | ÷ bare GET | ours ÷ variant | options ÷ bare ttl (same build) | req/s | Redis µs/req |', '|---:|---:|---|---:|---:|---:|---:|---:|---:|');
    for (const f of extras) {
      const p = pairs.get(`${f.processes}/${f.keys}`) ?? {};
      out.push(`| ${f.processes} | ${f.keys} | ${f.variant} | ${f2(f.cpuUsPerRequest)} | ${f2(f.cpuUsPerRequest / (p.bare?.cpuUsPerRequest ?? NaN))} | ${f2((p.ours?.cpuUsPerRequest ?? NaN) / f.cpuUsPerRequest)} | ${f2(f.cpuUsPerRequest / (bareTtlOf(f, p)?.cpuUsPerRequest ?? NaN))} | ${f.throughput.toFixed(0)} | ${f2(f.redisCpuUsPerRequest)} |`);
    }
  }
  return out;
}
