/** Benchmark scenarios and the pure figures computed from a run (ideal rebuilds, ratios, percentiles). */

export interface ScenarioSpec {
  name: string;
  kind: 'cold' | 'loop';
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
}

export interface Sizes {
  loaderMs: number;
  ttlMs: number;
  durationMs: number;
  zipfKeys: number;
}

export function scenarios(s: Sizes): ScenarioSpec[] {
  const loop = { kind: 'loop' as const, ttlMs: s.ttlMs, staleMs: 0, loaderMs: s.loaderMs, durationMs: s.durationMs, thinkMs: 5 };
  return [
    { name: 'cold-stampede', kind: 'cold', keys: 1, distribution: 'uniform', ttlMs: 60_000, staleMs: 0, loaderMs: s.loaderMs, durationMs: 0, thinkMs: 0 },
    { name: 'hot-1-key', ...loop, keys: 1, distribution: 'uniform' },
    { name: 'hot-20-keys', ...loop, keys: 20, distribution: 'uniform' },
    { name: 'zipf-keys', ...loop, keys: s.zipfKeys, distribution: 'zipf' },
    { name: 'stale-window', ...loop, keys: 20, distribution: 'uniform', staleMs: s.ttlMs * 10 },
    // The reference for the stale window's latency: the same load, but values never expire during the run.
    { name: 'fresh-hits', ...loop, keys: 20, distribution: 'uniform', ttlMs: 600_000 },
    { name: 'failing-origin', ...loop, keys: 5, distribution: 'uniform', staleMs: s.ttlMs * 10, failWindow: [0.33, 0.66] },
  ];
}

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

/**
 * The rebuilds an ideal coordinator would have done, from the recorded loader runs: per key, a run is
 * needed when it starts at least ttl after the last needed run started (the earliest any contender
 * could consider that value expired); the first run
 * of a key is always needed. Runs that start earlier (concurrent with, or right after, a needed run)
 * are duplicates. Failed runs count like any other: a perfect coordinator still runs one per window.
 */
export function idealRebuilds(runs: [string, number, number, boolean][], ttlMs: number): number {
  const byKey = new Map<string, [number, number][]>();
  for (const [key, start, end] of runs) {
    let list = byKey.get(key);
    if (!list) byKey.set(key, (list = []));
    list.push([start, end]);
  }
  let ideal = 0;
  for (const list of byKey.values()) {
    list.sort((a, b) => a[0] - b[0]);
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
