/**
 * The offline checker of the fault campaign: properties computed from a recorded history.
 * Pure (no I/O), so it is unit-tested with hand-made histories, including ones that must fail.
 */

/** One settled getOrCompute call, as a worker recorded it (times: performance.timeOrigin-based ms). */
export interface Settle {
  proc: number;
  key: string;
  start: number;
  end: number;
  ok: boolean;
  code?: string;
  /** The fencing token of the value returned; undefined for a value computed degraded (not from the store). */
  fence?: number;
}

/** A loader run: proc, key, start, end, its grant's fence. */
export interface LoaderRun {
  proc: number;
  key: string;
  start: number;
  end: number;
  fence: number | undefined;
}

export interface Interval {
  proc: number;
  from: number;
  to: number;
}

export interface Violation {
  property: string;
  detail: string;
}

/**
 * No stale overwrite, seen by readers: within one process, a call that starts after another call on
 * the same key has returned never gets a value with an older fencing token. If a late, stale rebuilder
 * overwrote a newer value, the next readers would see the token go backwards.
 */
export function monotonicReads(settles: Settle[]): { checked: number; violations: Violation[] } {
  const violations: Violation[] = [];
  let checked = 0;
  const groups = new Map<string, Settle[]>();
  for (const s of settles) {
    if (!s.ok || s.fence === undefined) continue;
    const id = `${s.proc}\u0000${s.key}`;
    let g = groups.get(id);
    if (!g) groups.set(id, (g = []));
    g.push(s);
  }
  for (const g of groups.values()) {
    const byEnd = [...g].sort((a, b) => a.end - b.end);
    const byStart = [...g].sort((a, b) => a.start - b.start);
    // Sweep: for each call, the highest fence among calls that ended before it started.
    let i = 0;
    let highest = -Infinity;
    let highestFrom: Settle | undefined;
    for (const s of byStart) {
      while (i < byEnd.length && (byEnd[i] as Settle).end < s.start) {
        const done = byEnd[i] as Settle;
        if ((done.fence as number) > highest) {
          highest = done.fence as number;
          highestFrom = done;
        }
        i++;
      }
      if (highestFrom === undefined) continue;
      checked++;
      if ((s.fence as number) < highest) {
        violations.push({
          property: 'no stale overwrite',
          detail: `proc ${s.proc} key ${s.key}: read fence ${s.fence} at ${s.start.toFixed(0)} after reading ${highest} (returned at ${highestFrom.end.toFixed(0)})`,
        });
      }
    }
  }
  return { checked, violations };
}

/**
 * Every call settles within `bound` ms, except calls whose own process was frozen (SIGSTOP) while
 * they ran: a frozen process is not the library's doing.
 */
export function boundedSettles(settles: Settle[], bound: number, pauses: Interval[]): { checked: number; violations: Violation[]; latencies: number[] } {
  const violations: Violation[] = [];
  const latencies: number[] = [];
  let checked = 0;
  for (const s of settles) {
    if (pauses.some((p) => p.proc === s.proc && p.from < s.end && p.to > s.start)) continue;
    checked++;
    const ms = s.end - s.start;
    latencies.push(ms);
    if (ms > bound) violations.push({ property: 'bounded settle', detail: `proc ${s.proc} key ${s.key}: ${ms.toFixed(0)} ms > ${bound} ms` });
  }
  return { checked, violations, latencies };
}

/** Loader runs per key per expiry window of `windowMs` (the efficiency metric): a distribution, not a pass/fail. */
export function loadersPerWindow(runs: LoaderRun[], windowMs: number): number[] {
  const counts = new Map<string, number>();
  for (const r of runs) {
    const id = `${r.key}\u0000${Math.floor(r.start / windowMs)}`;
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return [...counts.values()];
}

/** Time from each heal to the first call that returned a store-fenced value, started after it. */
export function recoveryTimes(settles: Settle[], heals: number[]): number[] {
  return heals.map((h) => {
    const first = settles.filter((s) => s.ok && s.fence !== undefined && s.start >= h).reduce((m, s) => Math.min(m, s.end), Infinity);
    return first - h;
  });
}

export function quantiles(xs: number[]): { n: number; p50: number; p99: number; max: number } {
  const s = [...xs].sort((a, b) => a - b);
  const at = (p: number) => (s.length === 0 ? Number.NaN : (s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))] as number));
  return { n: s.length, p50: at(0.5), p99: at(0.99), max: s.length === 0 ? Number.NaN : (s[s.length - 1] as number) };
}
