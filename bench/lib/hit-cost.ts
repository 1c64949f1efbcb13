/**
 * The cost of a hit, as CPU the client process spends per request (issue 12 §1): P processes, each
 * running L concurrent loops over K warm keys drawn uniformly, side by side with what a hand-rolled
 * client does for the same answer:
 * - `bare`: the client's own plain `GET` of the very bytes the cache stored (a Buffer), decoded with msgpackr;
 * - `ours`: `getOrCompute` fresh hit, no L1 (one Redis round trip);
 * - `lru`: a bare lru-cache `get`;
 * - `ours-l1`: `getOrCompute` answered by L1.
 * CPU is `process.cpuUsage()` (user + system) over the timed window, divided by the requests answered
 * in it; the window follows a warm-up (JIT, connections) that is not counted. The warm-up must be long:
 * with 4 processes sharing 2 cores, a 300 ms one left our (larger) code path still unoptimized in the
 * window, and measured it at 3.4–5.3× the bare GET; after 6 s, 1.2× (bench/results/issue12.md). Redis's own CPU is not
 * in the client figure: it is measured apart, from INFO cpu over the same window, and per command from
 * INFO commandstats (the server's `usec_per_call` of each command the variant sent).
 * Each Redis variant runs on a client family (`HitSizes.clients`): ioredis (`new Redis(url)`) or
 * node-redis (`createClient({ url })` from `redis`, connected); the library detects the family from
 * the client it is given. `lru` uses no client: it runs once per (P, K), under family `none`.
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createCache } from '../../src/index.js';
import { Redis } from 'ioredis';
import { exited, median } from './scenarios.js';

/** The Redis client families a variant can run on (`--clients`). */
export const HIT_CLIENTS = ['ioredis', 'node-redis'] as const;
export type HitClient = (typeof HIT_CLIENTS)[number];
/** The library's default `maxValueBytes`: the cap the read scripts and `bare-getrange` read up to. */
export const HIT_MAX_VALUE_BYTES = 1_048_576;

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
 * `bare-autopipeline` is `bare` on an ioredis client made with `enableAutoPipelining: true` (on node-redis,
 * which pipelines a tick's commands by itself, the same as `bare`). `bare-tuned` is `bare` given the client-level
 * savings the cache makes on its own commands: on ioredis one socket write per tick (src/client/tick-writes.ts),
 * on node-redis no per-command timer (`timeout: undefined`, src/client/node-redis.ts); `ours ÷ bare-tuned` is
 * the library's own work.
 * `bare-getrange` is the client's own `GETRANGE key 0 maxValueBytes` (a Buffer) and the decode: the bare
 * cost of a read without Lua, beside `bare`'s GET.
 * Every variant runs on either family but `script` (ioredis's defineCommand: ioredis only) and `lru`
 * (no client).
 */
export const EXTRA_HIT_VARIANTS = ['bare-autopipeline', 'bare-tuned', 'bare-getrange', 'script', 'evalsha', 'getrange-pttl', 'ours-base', 'ours-options', 'ours-options-signal', 'ours-options-base'] as const;
export type HitVariant = (typeof HIT_VARIANTS)[number] | (typeof EXTRA_HIT_VARIANTS)[number];

/** The family a variant runs on for `client`: `none` for `lru`, undefined where it cannot run (`script` on node-redis). */
export function familyOf(variant: HitVariant, client: HitClient): HitClient | 'none' | undefined {
  if (variant === 'lru') return 'none';
  if (variant === 'script' && client !== 'ioredis') return undefined;
  return client;
}

export interface HitRequest {
  variant: HitVariant;
  /** The client the variant runs on (`none`: lru, no client). */
  client: HitClient | 'none';
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

/** One command the variant sent in the window, from INFO commandstats. */
export interface HitCommand {
  /** As Redis names it in commandstats (`evalsha`, `get`, `getrange`, …; commands run inside a script are counted too). */
  name: string;
  /** Calls per answered request (median of runs): under 1 where concurrent calls for one key coalesce. */
  callsPerRequest: number;
  /** Redis's `usec_per_call` over the window: µs inside Redis per call (median of runs). */
  usecPerCall: number;
}

export interface HitFigure {
  variant: HitVariant;
  client: HitClient | 'none';
  processes: number;
  keys: number;
  /** Client CPU per answered request, µs (median of runs). */
  cpuUsPerRequest: number;
  /** Requests per second over all processes (median of runs). */
  throughput: number;
  /** Redis's own CPU (INFO used_cpu_user + used_cpu_sys) per answered request, µs (median of runs). */
  redisCpuUsPerRequest: number;
  /** The commands sent in the window (at least one per 100 requests), most called first. */
  commands: HitCommand[];
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

/** Calls and µs per command so far, from INFO commandstats (`cmdstat_<name>:calls=…,usec=…`). */
async function commandStats(redis: Redis): Promise<Map<string, { calls: number; usec: number }>> {
  const info = await redis.info('commandstats');
  const stats = new Map<string, { calls: number; usec: number }>();
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) stats.set(m[1] as string, { calls: Number(m[2]), usec: Number(m[3]) });
  return stats;
}

/** Per command, what the window added: those called at least once per 100 requests (not the admin's INFO), most called first. */
function commandsIn(before: Map<string, { calls: number; usec: number }>, after: Map<string, { calls: number; usec: number }>, requests: number): HitCommand[] {
  const out: HitCommand[] = [];
  for (const [name, a] of after) {
    const b = before.get(name) ?? { calls: 0, usec: 0 };
    const calls = a.calls - b.calls;
    if (name === 'info' || calls <= 0 || calls < requests / 100) continue;
    out.push({ name, callsPerRequest: calls / Math.max(1, requests), usecPerCall: (a.usec - b.usec) / calls });
  }
  return out.sort(byCalls);
}

/** Most called first; among equals, the dearest first (a script before the commands it runs). */
const byCalls = (x: HitCommand, y: HitCommand): number => y.callsPerRequest - x.callsPerRequest || y.usecPerCall - x.usecPerCall;

/** The name of a variant's run in profile directories and logs: ioredis's unsuffixed, as before the families. */
function label(variant: HitVariant, client: HitClient | 'none'): string {
  return client === 'node-redis' ? `${variant}-node-redis` : variant;
}

async function oneRun(req: HitRequest, processes: number, cpuProfDir?: string): Promise<{ cpuUsPerRequest: number; throughput: number; redisCpuUsPerRequest: number; commands: HitCommand[]; detail: string }> {
  const prof = cpuProfDir ? ['--cpu-prof', `--cpu-prof-dir=${cpuProfDir}/${label(req.variant, req.client)}-P${processes}-K${req.keys}`] : [];
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
    // Per command too (INFO commandstats, read just after INFO cpu).
    const admin = new Redis(req.url);
    const read = async () => ({ cpu: await redisCpuUs(admin), commands: await commandStats(admin) });
    const before = new Promise<Awaited<ReturnType<typeof read>>>((resolve, reject) => setTimeout(() => void read().then(resolve, reject), Math.max(0, startAt - now())));
    const all = await Promise.all(reports);
    const after = await read();
    const redisUs = after.cpu - (await before).cpu;
    admin.disconnect();
    const requests = all.reduce((s, r) => s + r.requests, 0);
    const cpu = all.reduce((s, r) => s + r.cpuUs, 0);
    const wall = Math.max(...all.map((r) => r.wallMs));
    const per = (f: (r: HitReport) => number) => all.reduce((s, r) => s + f(r), 0) / Math.max(1, requests);
    const detail = `user ${per((r) => r.userUs).toFixed(2)} + system ${per((r) => r.systemUs).toFixed(2)} µs/request, context switches per request ${per((r) => r.voluntarySwitches).toFixed(3)} voluntary, ${per((r) => r.involuntarySwitches).toFixed(3)} involuntary`;
    return { cpuUsPerRequest: cpu / Math.max(1, requests), throughput: requests / (wall / 1000), redisCpuUsPerRequest: redisUs / Math.max(1, requests), commands: commandsIn((await before).commands, after.commands, requests), detail };
  } finally {
    await exited(children); // each child exits after its report
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
  /** Only these variants (default: HIT_VARIANTS). */
  variants?: readonly HitVariant[];
  /** The client families each variant runs on, in this order (default: ioredis alone). */
  clients?: readonly HitClient[];
  /** The command line that ran the bench, printed above the table. */
  command?: string;
}

/**
 * Every (P, K) configuration, every variant on every client family in each run (`lru` once), variants
 * and families interleaved run by run; medians of `runs`.
 */
export async function hitCost(url: string, sizes: HitSizes, log: (line: string) => void = () => undefined): Promise<HitFigure[]> {
  const figures: HitFigure[] = [];
  // Each (variant, family) once, in run order: family by family, variants in the order given.
  const runs: { variant: HitVariant; client: HitClient | 'none' }[] = [];
  for (const c of sizes.clients ?? ['ioredis']) {
    for (const variant of sizes.variants ?? HIT_VARIANTS) {
      const client = familyOf(variant, c);
      if (client === undefined) log(`hit cost · ${variant} runs on ioredis only: skipped on ${c}`);
      else if (!runs.some((r) => r.variant === variant && r.client === client)) runs.push({ variant, client });
    }
  }
  for (const keys of sizes.keys) {
    const prefix = `hit${keys}`;
    await warm(url, prefix, keys);
    for (const processes of sizes.processes) {
      const samples = runs.map(() => ({ cpu: [] as number[], tput: [] as number[], redis: [] as number[], commands: new Map<string, { calls: number[]; usec: number[] }>() }));
      for (let r = 0; r < sizes.runs; r++) {
        for (const [i, { variant, client }] of runs.entries()) {
          const name = label(variant, client);
          const windowProf = sizes.windowProfDir ? { windowProfDir: `${sizes.windowProfDir}/${name}-P${processes}-K${keys}` } : {};
          const res = await oneRun({ variant, client, url, prefix, keys, loops: sizes.loops, warmupMs: sizes.warmupMs, durationMs: sizes.durationMs, rate: sizes.rate, ...windowProf }, processes, sizes.cpuProfDir);
          const s = samples[i] as (typeof samples)[number];
          s.cpu.push(res.cpuUsPerRequest);
          s.tput.push(res.throughput);
          s.redis.push(res.redisCpuUsPerRequest);
          for (const c of res.commands) {
            const cs = s.commands.get(c.name) ?? { calls: [], usec: [] };
            cs.calls.push(c.callsPerRequest);
            cs.usec.push(c.usecPerCall);
            s.commands.set(c.name, cs);
          }
          const commands = res.commands.map((c) => `${c.name} ${c.usecPerCall.toFixed(2)} µs/call`).join(', ');
          log(`hit cost · ${variant} · ${client} · P=${processes} K=${keys} · run ${r + 1}/${sizes.runs}: ${res.cpuUsPerRequest.toFixed(2)} µs CPU/request, ${res.throughput.toFixed(0)} req/s, Redis ${res.redisCpuUsPerRequest.toFixed(2)} µs CPU/request${commands ? ` (${commands})` : ''} (client: ${res.detail})`);
        }
      }
      for (const [i, { variant, client }] of runs.entries()) {
        const s = samples[i] as (typeof samples)[number];
        const commands = [...s.commands].map(([name, c]) => ({ name, callsPerRequest: median(c.calls), usecPerCall: median(c.usec) })).sort(byCalls);
        figures.push({ variant, client, processes, keys, cpuUsPerRequest: median(s.cpu), throughput: median(s.tput), redisCpuUsPerRequest: median(s.redis), commands });
      }
    }
  }
  return figures;
}

/**
 * The markdown: the command that ran, then one row per (P, K, family, variant), each against the bare
 * GET + decode of its own family (CPU and throughput; an L1 hit against the bare lru-cache get), then
 * ours ÷ bare per family side by side.
 */
export function hitMarkdown(written: readonly (Omit<HitFigure, 'client' | 'commands'> & Partial<Pick<HitFigure, 'client' | 'commands'>>)[], sizes: HitSizes): string[] {
  if (written.length === 0) return [];
  // A results file written before the client families (bench/redraw.ts) has neither: its figures are ioredis's.
  const figures: HitFigure[] = written.map((f) => ({ ...f, client: f.client ?? (f.variant === 'lru' ? 'none' : 'ioredis'), commands: f.commands ?? [] }));
  const f2 = (x: number | undefined) => (x === undefined || !Number.isFinite(x) ? '–' : x.toFixed(2));
  const find = (p: HitFigure, variant: HitVariant, client: HitClient | 'none') => figures.find((f) => f.processes === p.processes && f.keys === p.keys && f.variant === variant && f.client === client);
  const families = [...new Set(figures.map((f) => f.client).filter((c) => c !== 'none'))];
  const out = [''];
  if (sizes.command !== undefined) out.push('```sh', sizes.command, '```', '');
  out.push(
    `**Hit cost** (client CPU per request, ${sizes.loops} concurrent loops per process over K warm keys drawn uniformly, ${sizes.rate > 0 ? `paced at ${sizes.rate} requests/s per process` : 'unpaced'}, ${sizes.durationMs} ms timed after ${sizes.warmupMs} ms warm-up; medians of ${sizes.runs} runs, variants and client families (${families.join(', ')}) interleaved; ` +
      "÷ bare: against the same family's bare GET + msgpackr decode of the same bytes (an L1 hit against a bare lru-cache get, marked lru); " +
      "Redis's own CPU per request from INFO cpu, and per command sent in the window its usec_per_call (and calls per request) from INFO commandstats, where the commands a script runs are listed too, their µs also inside the script's; " +
      "÷ ours: against ours on the same client (an options variant against the bare-ttl call of its own build)):",
    '',
    '| P | K | client | variant | client CPU µs/req | ÷ bare (CPU) | req/s | ÷ bare (req/s) | Redis CPU µs/req | Redis usec_per_call (calls/req) | ÷ ours (CPU) |',
    '|---:|---:|---|---|---:|---:|---:|---:|---:|---|---:|',
  );
  for (const f of figures) {
    const l1 = f.variant === 'lru' || f.variant === 'ours-l1';
    const ref = l1 ? find(f, 'lru', 'none') : find(f, 'bare', f.client);
    const mark = l1 && ref ? ' (lru)' : '';
    const cpuRatio = ref ? `${f2(f.cpuUsPerRequest / ref.cpuUsPerRequest)}${mark}` : '–';
    const tputRatio = ref ? `${f2(f.throughput / ref.throughput)}${mark}` : '–';
    const oursOf = f.variant === 'ours-options-base' ? 'ours-base' : f.variant.startsWith('ours-') && f.variant !== 'ours-l1' ? 'ours' : undefined;
    const ours = oursOf ? find(f, oursOf, f.client) : undefined;
    const commands = f.commands.map((c) => `${c.name} ${f2(c.usecPerCall)} (${f2(c.callsPerRequest)})`).join(', ') || '–';
    out.push(`| ${f.processes} | ${f.keys} | ${f.client === 'none' ? '–' : f.client} | ${f.variant} | ${f2(f.cpuUsPerRequest)} | ${cpuRatio} | ${f.throughput.toFixed(0)} | ${tputRatio} | ${f2(f.redisCpuUsPerRequest)} | ${commands} | ${ours ? f2(f.cpuUsPerRequest / ours.cpuUsPerRequest) : '–'} |`);
  }
  // The headline, side by side: ours ÷ bare per family (and ours-base ÷ bare where it ran).
  const cells = figures.filter((f) => f.variant === 'bare');
  const withBase = figures.some((f) => f.variant === 'ours-base');
  if (cells.length > 0 && figures.some((f) => f.variant === 'ours')) {
    const cols = families.flatMap((c) => [`${c} ours ÷ bare (CPU)`, `${c} ours ÷ bare (req/s)`, ...(withBase ? [`${c} ours-base ÷ bare (CPU)`, `${c} ours-base ÷ bare (req/s)`] : [])]);
    out.push('', `| P | K | ${cols.join(' | ')} |`, `|---:|---:|${cols.map(() => '---:|').join('')}`);
    const seen = new Set<string>();
    for (const b of cells) {
      if (seen.has(`${b.processes}/${b.keys}`)) continue;
      seen.add(`${b.processes}/${b.keys}`);
      const row = families.flatMap((c) => {
        const bare = find(b, 'bare', c);
        const ratios = (v: HitVariant) => {
          const o = find(b, v, c);
          return [f2((o?.cpuUsPerRequest ?? NaN) / (bare?.cpuUsPerRequest ?? NaN)), f2((o?.throughput ?? NaN) / (bare?.throughput ?? NaN))];
        };
        return [...ratios('ours'), ...(withBase ? ratios('ours-base') : [])];
      });
      out.push(`| ${b.processes} | ${b.keys} | ${row.join(' | ')} |`);
    }
  }
  return out;
}
