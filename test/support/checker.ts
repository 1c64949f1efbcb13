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
  /** The identity of the value returned (`<writer proc>.<seq>`); undefined when nothing was returned. */
  value?: string;
  /** The call passed an AbortSignal (already aborted, or one that fires at a random moment). */
  signal?: boolean;
}

/**
 * A completed-or-failed `set`, `delete` or `deleteByTag`, as a worker recorded it. `value` is the
 * identity the set wrote; a delete writes nothing. Only `ok` ones supersede anything: a failed one may
 * or may not have landed. A set's `tags` are those of the value it wrote; a deleteByTag's (key '')
 * those it invalidated: it supersedes every value carrying one of them, of every key.
 */
export interface Write {
  proc: number;
  key: string;
  kind: 'set' | 'delete' | 'deleteByTag';
  start: number;
  end: number;
  ok: boolean;
  value?: string;
  /** The error code of a failed one. */
  code?: string;
  tags?: string[];
}

/** A loader run: proc, key, start, end, its grant's fence. */
export interface LoaderRun {
  proc: number;
  key: string;
  start: number;
  end: number;
  fence: number | undefined;
  /** The identity of the value it returned. */
  value?: string;
  /** The tags of its call (the value carries them). */
  tags?: string[];
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

/**
 * When each value identity came into existence, for "superseded": a loader's value when its loader
 * *started* (that is when it read the origin: a loader that began before a delete computes pre-delete
 * data, and its grant's fence is older than the delete's); a set's value when the set() call settled
 * (ok or not: a failed set was still fenced before it was sent). A delete or set that starts later
 * supersedes it.
 */
export function producedAt(runs: LoaderRun[], writes: Write[]): Map<string, number> {
  const at = new Map<string, number>();
  for (const r of runs) if (r.value !== undefined) at.set(r.value, r.start);
  for (const w of writes) if (w.kind === 'set' && w.value !== undefined) at.set(w.value, w.end);
  return at;
}

/**
 * The one exception README "Guarantees" (Degraded values) states to "no superseded read": while a
 * process's subscription is down *and* Redis is unavailable to it, a value it computed degraded and
 * kept (the degraded memo) can be older than another process's write or delete made meanwhile, for at
 * most its ttl. Such a value carries no fencing token; the memo drops it on the next (re)subscription.
 */
export interface DegradedAllowance {
  /** When each process's subscription was down (from its cache's creation to its first subscription, then each drop to the next). */
  unsubscribed: Interval[];
  /** How long after a write the subscription may still count as up while its note was already lost: the heartbeat's detection (2 × redisTimeout) plus the note's own delay. */
  lag: number;
  /** Per degraded value (no token): until when the memo may serve it (its loader's end + ttl). */
  keptUntil: Map<string, number>;
}

/** The tags of every value identity: its loader's call's, or its set's. */
export function tagsOfValues(runs: LoaderRun[], writes: Write[]): Map<string, string[]> {
  const tags = new Map<string, string[]>();
  for (const r of runs) if (r.value !== undefined && r.tags && r.tags.length > 0) tags.set(r.value, r.tags);
  for (const w of writes) if (w.kind === 'set' && w.value !== undefined && w.tags && w.tags.length > 0) tags.set(w.value, w.tags);
  return tags;
}

/**
 * No read returns a superseded value: once a `delete` or `set` of a key has completed (call returned
 * ok at `W.end`), no call that starts more than `bound` ms later — in any process, L1 on or off —
 * returns a value that existed before `W` started (`produced < W.start`). The same for a
 * `deleteByTag` and every value carrying one of its tags (`tagsOf`), of any key: a value whose grant
 * came before it (a loader's value exists from its loader's start, after its grant; a set's from the
 * set's end, after its grant) is never read after it — property 'no read after deleteByTag'. `bound` is the propagation
 * allowance for other processes' L1 (the pub/sub note, or the flush after a resubscribe). A reader
 * that was frozen (SIGSTOP) after `W` ended is not judged against `W`: it could not hear the note.
 * Values whose origin the history lost (a killed worker's last batch) are not judged. With `degraded`,
 * a value without a token is not judged against `W` when its reader's subscription went down by
 * `W.end + lag` and stayed down until the read, and the read is within the value's ttl
 * (DegradedAllowance): a value with a token (the store's, or L1's) is judged as any other.
 */
export function noSupersededReads(
  settles: Settle[],
  writes: Write[],
  produced: Map<string, number>,
  bound: number,
  pauses: Interval[],
  degraded?: DegradedAllowance,
  tagsOf: Map<string, string[]> = new Map(),
): { checked: number; violations: Violation[]; allowedDegraded: number } {
  const violations: Violation[] = [];
  let checked = 0;
  /** Reads left unjudged against at least one superseding write under the DegradedAllowance. */
  let allowedDegraded = 0;
  const done = new Map<string, Write[]>();
  const byTag: Write[] = [];
  for (const w of writes) {
    if (!w.ok) continue;
    if (w.kind === 'deleteByTag') {
      byTag.push(w);
      continue;
    }
    let g = done.get(w.key);
    if (!g) done.set(w.key, (g = []));
    g.push(w);
  }
  for (const g of done.values()) g.sort((a, b) => a.end - b.end);
  /** What supersedes the value a read returned: its key's writes, and the deleteByTags of one of its tags (sorted by end). */
  const supersedersOf = (r: Settle & { value: string }): Write[] | undefined => {
    const tags = tagsOf.get(r.value);
    const g = done.get(r.key);
    if (tags === undefined || byTag.length === 0) return g;
    const reaching = byTag.filter((w) => w.tags?.some((t) => tags.includes(t)));
    return reaching.length === 0 ? g : [...(g ?? []), ...reaching].sort((a, b) => a.end - b.end);
  };
  for (const r of settles) {
    if (!r.ok || r.value === undefined) continue;
    const made = produced.get(r.value);
    const g = supersedersOf(r as Settle & { value: string });
    if (made === undefined || !g) continue;
    const frozen = pauses.filter((p) => p.proc === r.proc && p.from < r.start);
    const kept = r.fence === undefined && degraded ? degraded.keptUntil.get(r.value) : undefined;
    const unheard = kept !== undefined && r.start <= kept && degraded ? degraded.unsubscribed.filter((d) => d.proc === r.proc && d.to >= r.start) : [];
    let judged = false;
    let allowed = false;
    for (const w of g) {
      if (w.end + bound >= r.start) break; // sorted by end: every later one is too recent too
      if (frozen.some((p) => p.to > w.end)) continue;
      if (unheard.some((d) => d.from <= w.end + (degraded as DegradedAllowance).lag)) {
        if (w.start > made) allowed = true;
        continue;
      }
      judged = true;
      if (w.start > made) {
        violations.push({
          property: w.kind === 'deleteByTag' ? 'no read after deleteByTag' : 'no superseded read',
          detail: `proc ${r.proc} key ${r.key}: call at ${r.start.toFixed(0)} returned ${r.value} (made at ${made.toFixed(0)}${w.kind === 'deleteByTag' ? `, tagged ${tagsOf.get(r.value)?.join('+')}` : ''}), superseded by proc ${w.proc}'s ${w.kind}${w.kind === 'deleteByTag' ? `(${w.tags?.join('+')})` : ''} [${w.start.toFixed(0)}, ${w.end.toFixed(0)}]`,
        });
        break;
      }
    }
    if (judged) checked++;
    if (allowed) allowedDegraded++;
  }
  return { checked, violations, allowedDegraded };
}

/**
 * Aborting callers harms nobody: no unhandled rejection anywhere; no `ERR_BACKOFF` while no loader
 * failure was injected (a cancelled load is not an origin failure, so it must not set `failBackoff`);
 * (nor may an explicit set() or delete() be refused by one);
 * and `ERR_ABORTED` only for a call that passed a signal (never for one that shared a flight with
 * callers who aborted).
 */
export function abortsHarmless(settles: Settle[], unhandled: string[], writes: Write[] = []): { checked: number; violations: Violation[] } {
  const violations: Violation[] = unhandled.map((u) => ({ property: 'no unhandled rejection', detail: u }));
  for (const w of writes) {
    if (w.code === 'ERR_BACKOFF') violations.push({ property: 'no backoff from aborts', detail: `proc ${w.proc} key ${w.key}: ${w.kind}() rejected with ERR_BACKOFF at ${w.start.toFixed(0)}` });
  }
  let checked = 0;
  for (const s of settles) {
    if (s.signal) checked++;
    if (s.code === 'ERR_BACKOFF') violations.push({ property: 'no backoff from aborts', detail: `proc ${s.proc} key ${s.key}: ERR_BACKOFF at ${s.start.toFixed(0)} with no loader failure injected` });
    else if (s.code === 'ERR_ABORTED' && !s.signal) violations.push({ property: 'abort only the caller who aborted', detail: `proc ${s.proc} key ${s.key}: ERR_ABORTED at ${s.start.toFixed(0)} for a call without a signal` });
  }
  return { checked, violations };
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
