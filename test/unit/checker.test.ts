import { describe, expect, it } from 'vitest';
import { boundedSettles, loadersPerWindow, monotonicReads, quantiles, recoveryTimes, type Settle } from '../support/checker.js';

const s = (proc: number, start: number, end: number, fence: number | undefined, key = 'k'): Settle => ({ proc, key, start, end, ok: true, fence });

describe('campaign checker', () => {
  it('monotonic reads: a history where a later read in the same process sees an older fence is flagged', () => {
    const r = monotonicReads([s(1, 0, 10, 5), s(1, 20, 30, 7), s(1, 40, 50, 6)]);
    expect(r.violations).toHaveLength(1);
    expect(r.violations[0]?.property).toBe('no stale overwrite');
  });

  it('monotonic reads: overlapping calls, other processes, other keys and degraded values are not compared', () => {
    const r = monotonicReads([
      s(1, 0, 30, 7),
      s(1, 10, 40, 5), // overlaps the first: no order between them
      s(2, 50, 60, 1), // another process
      s(1, 50, 60, 1, 'other'), // another key
      s(1, 70, 80, undefined), // degraded value
      s(1, 90, 100, 7),
    ]);
    expect(r.violations).toEqual([]);
    expect(r.checked).toBe(1);
  });

  it('bounded settles: flags a slow call, but not one whose own process was paused', () => {
    const settles = [s(1, 0, 5000, 1), s(2, 0, 5000, 1), s(3, 0, 100, 1)];
    const r = boundedSettles(settles, 1000, [{ proc: 2, from: 10, to: 4000 }]);
    expect(r.checked).toBe(2);
    expect(r.violations.map((v) => v.detail)).toEqual(['proc 1 key k: 5000 ms > 1000 ms']);
  });

  it('loaders per window counts runs per key per window', () => {
    const runs = [0, 10, 20, 120].map((start) => ({ proc: 1, key: 'k', start, end: start + 5, fence: 1 }));
    expect(loadersPerWindow(runs, 100).sort()).toEqual([1, 3]);
  });

  it('recovery time is from the heal to the first fenced value returned after it', () => {
    expect(recoveryTimes([s(1, 5, 50, undefined), s(1, 12, 30, 9), s(1, 20, 25, 10)], [10])).toEqual([15]);
  });

  it('quantiles', () => {
    expect(quantiles([3, 1, 2, 4])).toEqual({ n: 4, p50: 2, p99: 4, max: 4 });
  });
});
