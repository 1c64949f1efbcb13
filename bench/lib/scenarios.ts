/** Benchmark scenarios and the pure figures computed from a run (ideal rebuilds, ratios, percentiles). */
import type { ChildProcess } from 'node:child_process';
import { ALL_CONTENDERS, type ContenderName } from './contenders.js';

export interface ScenarioSpec {
  name: string;
  /**
   * `cold`: every caller asks for one key at once. `loop`: closed loop, C callers each waiting for
   * their answer (and thinkMs) before the next call. `open`: open loop, `perSecond` arrivals per
   * process on a fixed schedule whatever the answers do; latency is timed from each SCHEDULED
   * arrival, so a stall delays (and is charged to) every arrival it holds up — coordinated omission
   * cannot hide it.
   */
  kind: 'cold' | 'loop' | 'open';
  /** Open loop only: arrivals per second in each process. */
  perSecond?: number;
  /**
   * Open loop only: the same arrivals run this long before the measured window (answers and loader
   * runs not counted), so the window starts with JIT-compiled code and open connections, not with
   * a cold process.
   */
  warmupMs?: number;
  /** Only these contenders run it (default: every contender in ALL_CONTENDERS). */
  contenders?: readonly ContenderName[];
  /**
   * Before the timed phase, write every key in one burst (the parent, through the contender under
   * test, with an instant loader), so they all share one write instant and one ttl.
   */
  burstFill?: boolean;
  /** Keys in play and how they are drawn. */
  keys: number;
  distribution: 'uniform' | 'zipf';
  ttlMs: number;
  staleMs: number;
  loaderMs: number;
  durationMs: number;
  thinkMs: number;
  /** Fractions of the duration during which the origin fails, e.g. [0.33, 0.66]. */
  failWindow?: [number, number];
  /** The lock lease the contenders use, where the scenario is about it (ours: `lockTtl`; naive: its EXPIRE). */
  lockTtlMs?: number;
  /** Before the timed phase, a holder of `k0` dies right after taking its lock (`crashWhileHolding`). */
  crashedHolder?: boolean;
}

export interface Sizes {
  loaderMs: number;
  ttlMs: number;
  durationMs: number;
  zipfKeys: number;
  /** Open-loop scenarios: arrivals per second per process, and how long they run (ms). */
  openPerSecond: number;
  openDurationMs: number;
  openWarmupMs: number;
}

/** The contender environment's lock lease for a scenario that sets one. */
export function lease(spec: ScenarioSpec): { lockTtlMs?: number } {
  return spec.lockTtlMs === undefined ? {} : { lockTtlMs: spec.lockTtlMs };
}

export function scenarios(s: Sizes): ScenarioSpec[] {
  const loop = { kind: 'loop' as const, ttlMs: s.ttlMs, staleMs: 0, loaderMs: s.loaderMs, durationMs: s.durationMs, thinkMs: 5 };
  // Open-loop scenarios start from a burst fill: "after the first fill" no caller should wait.
  const open = { kind: 'open' as const, perSecond: s.openPerSecond, durationMs: s.openDurationMs, warmupMs: s.openWarmupMs, thinkMs: 0, burstFill: true };
  return [
    // Also on node-redis clients (single-node-redis), side by side with the same lock on ioredis.
    { name: 'cold-stampede', kind: 'cold', keys: 1, distribution: 'uniform', ttlMs: 60_000, staleMs: 0, loaderMs: s.loaderMs, durationMs: 0, thinkMs: 0, contenders: [...ALL_CONTENDERS, 'single-node-redis'] },
    { name: 'hot-1-key', ...loop, keys: 1, distribution: 'uniform' },
    { name: 'hot-20-keys', ...loop, keys: 20, distribution: 'uniform' },
    { name: 'zipf-keys', ...loop, keys: s.zipfKeys, distribution: 'zipf' },
    { name: 'stale-window', ...loop, keys: 20, distribution: 'uniform', staleMs: s.ttlMs * 10 },
    // The reference for the stale window's latency: the same load, but values never expire during the run.
    { name: 'fresh-hits', ...loop, keys: 20, distribution: 'uniform', ttlMs: 600_000 },
    { name: 'failing-origin', ...loop, keys: 5, distribution: 'uniform', staleMs: s.ttlMs * 10, failWindow: [0.33, 0.66] },
    // Issue 12 §3, where the naive lock (SETNX, EXPIRE, DEL without a token) fails beside ours: a loader
    // slower than the lease (300 ms against 100 ms: each DEL frees the next holder's lock), and a holder
    // that dies right after taking the lock (the naive one between SETNX and EXPIRE: locked for good).
    { name: 'slow-loader', ...loop, keys: 5, distribution: 'uniform', loaderMs: 300, lockTtlMs: 100, contenders: NAIVE_VERSUS },
    { name: 'crashed-holder', ...loop, keys: 1, distribution: 'uniform', lockTtlMs: 1000, crashedHolder: true, contenders: NAIVE_VERSUS },
    // Issue 10's sizes, fixed whatever --ttl-ms / --loader-ms say: 20 hot keys, ttl 1 s, loader 100 ms.
    // The stale window (for the staleTtl and grace contenders) is long enough never to run out.
    { name: 'refresh-ahead', ...open, keys: 20, distribution: 'uniform', ...REFRESH_AHEAD_SIZES, staleMs: 10_000, contenders: REFRESH_AHEAD },
    // The open-loop reference: the same arrivals on values that never expire during the run.
    { name: 'open-fresh-hits', ...open, keys: 20, distribution: 'uniform', ttlMs: 600_000, staleMs: 0, loaderMs: 100, contenders: ['single', 'single-l1'] },
    // 2,000 keys written in one burst (burstFill), then read uniformly across their common expiry.
    // ttl 5 s: the jitter's spread (0.2 × 5 s = 1 s) is then wider than the burst itself (2,000 keys
    // from one process take 0.2–0.8 s here) and than the time the reads take to find an expired key
    // (each key is read every 0.5–1 s); the window ends 1 s after the expiry.
    {
      name: 'mass-expiry', ...open, keys: 2000, distribution: 'uniform', ttlMs: 5000, staleMs: 0, loaderMs: 100,
      durationMs: 5000 + 1000, contenders: ['single', 'single-jitter'],
    },
  ];
}

/** The naive lock's scenarios: ours (single) beside it. */
const NAIVE_VERSUS: readonly ContenderName[] = ['single', 'naive-lock'];

/** Issue 10's fixed sizes for the refresh-ahead scenario. */
export const REFRESH_AHEAD_SIZES = { ttlMs: 1000, loaderMs: 100 } as const;

/** The refresh-ahead scenario's contenders, side by side (issue 10, "Performance"). */
export const REFRESH_AHEAD: readonly ContenderName[] = ['single-ra', 'single-ra-l1', 'single', 'single-l1', 'bentocache-grace', 'cache-manager'];

/** Draws keys: uniform, or Zipf-like with exponent 1 (rank r has weight 1/r). */
export function keyPicker(spec: ScenarioSpec, rand: () => number): () => string {
  if (spec.distribution === 'uniform') return () => `k${Math.floor(rand() * spec.keys)}`;
  const cdf: number[] = [];
  let sum = 0;
  for (let r = 1; r <= spec.keys; r++) cdf.push((sum += 1 / r));
  return () => {
    const x = rand() * sum;
    let lo = 0;
    let hi = cdf.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((cdf[mid] as number) < x) lo = mid + 1;
      else hi = mid;
    }
    return `k${lo}`;
  };
}

/** Each key's [start, end] runs, by start. */
function runsByKey(runs: [string, number, number, boolean][]): [number, number][][] {
  const byKey = new Map<string, [number, number][]>();
  for (const [key, start, end] of runs) {
    let list = byKey.get(key);
    if (!list) byKey.set(key, (list = []));
    list.push([start, end]);
  }
  return [...byKey.values()].map((list) => list.sort((a, b) => a[0] - b[0]));
}

/**
 * The rebuilds an ideal coordinator would have done, from the recorded loader runs: per key, a run is
 * needed when it starts at least ttl after the last needed run started (the earliest any contender
 * could consider that value expired); the first run
 * of a key is always needed. Runs that start earlier (concurrent with, or right after, a needed run)
 * are duplicates. Failed runs count like any other: a perfect coordinator still runs one per window.
 */
export function idealRebuilds(runs: [string, number, number, boolean][], ttlMs: number): number {
  let ideal = 0;
  for (const list of runsByKey(runs)) {
    let freshUntil = -Infinity;
    for (const [start] of list) {
      if (start >= freshUntil) {
        ideal++;
        freshUntil = start + ttlMs;
      }
    }
  }
  return ideal;
}

/** The most loader runs of one key that were in progress at the same instant. */
export function maxConcurrentPerKey(runs: [string, number, number, boolean][]): number {
  const byKey = new Map<string, [number, number][]>();
  for (const [key, start, end] of runs) {
    let list = byKey.get(key);
    if (!list) byKey.set(key, (list = []));
    list.push([start, 1], [end, -1]);
  }
  let max = 0;
  for (const events of byKey.values()) {
    events.sort((a, b) => a[0] - b[0] || a[1] - b[1]); // ends before starts at the same instant
    let open = 0;
    for (const [, d] of events) max = Math.max(max, (open += d));
  }
  return max;
}

/** The most loader runs in progress at the same instant, over every key and process together. */
export function maxConcurrentOverall(runs: [string, number, number, boolean][]): number {
  const events: [number, number][] = [];
  for (const [, start, end] of runs) events.push([start, 1], [end, -1]);
  events.sort((a, b) => a[0] - b[0] || a[1] - b[1]); // ends before starts at the same instant
  let open = 0;
  let max = 0;
  for (const [, d] of events) max = Math.max(max, (open += d));
  return max;
}

/**
 * Loader runs per key per ttl: runs ÷ (keys × duration ÷ ttl). Plain cache-aside with one rebuild per
 * expiry makes about 1 / (1 + loader/ttl) of them (plus each key's first fill); refresh ahead at a
 * fraction f about 1 / (f + loader/ttl), since a refresh starts once a value is f × ttl old.
 */
/**
 * The rebuilds an ideal refresh-ahead coordinator would have done: one per entry whose readers reach
 * its refresh point. An entry is written when its loader run ends and reaches the point
 * `refreshAfterMs` later, so per key a run is needed when it starts at least `refreshAfterMs` after the
 * last needed run ended (the first run is always needed). Runs that start earlier — beside a needed
 * run, or before its entry's refresh point — are duplicates. `slackMs` absorbs the ms rounding of
 * Redis's PTTL and the processes' clocks; a real duplicate (a second process refreshing the same
 * entry) starts while the needed run is still running, far inside it.
 */
export function idealRefreshes(runs: [string, number, number, boolean][], refreshAfterMs: number, slackMs = 5): number {
  let ideal = 0;
  for (const list of runsByKey(runs)) {
    let dueAt = -Infinity;
    for (const [start, end] of list) {
      if (start >= dueAt - slackMs) {
        ideal++;
        dueAt = end + refreshAfterMs;
      }
    }
  }
  return ideal;
}

/**
 * The fewest loader runs per key per ttl that refreshing at `fraction × ttl` allows while no answer is
 * older than ttl: each entry lives `fraction × ttl` plus one loader time before the next replaces it,
 * so the floor is ttl ÷ (fraction × ttl + loaderMs) — above 1 for any fraction < 1 − loaderMs ÷ ttl.
 */
export function refreshFloor(ttlMs: number, fraction: number, loaderMs: number): number {
  return ttlMs / (fraction * ttlMs + loaderMs);
}

export function runsPerKeyPerTtl(runs: number, keys: number, durationMs: number, ttlMs: number): number {
  return runs / Math.max(1, keys * (durationMs / ttlMs));
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] as number;
}

export function median(xs: number[]): number {
  const s = xs.filter((x) => !Number.isNaN(x)).sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  const m = s.length >> 1;
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
}

/** Resolves once every child has exited; one still running after `killAfterMs` is killed. */
export function exited(children: readonly ChildProcess[], killAfterMs = 5000): Promise<unknown> {
  return Promise.all(
    children.map((c) =>
      c.exitCode !== null || c.signalCode !== null
        ? Promise.resolve()
        : new Promise((resolve) => {
            c.once('exit', resolve);
            setTimeout(() => c.kill(), killAfterMs).unref();
          }),
    ),
  );
}
