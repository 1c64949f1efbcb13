import { describe, expect, it } from 'vitest';
import { abortsHarmless, boundedSettles, loadersPerWindow, monotonicReads, noSupersededReads, producedAt, quantiles, recoveryTimes, tagsOfValues, type Settle, type Write } from '../support/checker.js';

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

describe('campaign checker: no superseded read', () => {
  const read = (proc: number, start: number, value: string | undefined, key = 'k'): Settle => ({ proc, key, start, end: start + 1, ok: true, value });
  const del = (proc: number, start: number, end: number, ok = true): Write => ({ proc, key: 'k', kind: 'delete', start, end, ok });
  const set = (proc: number, start: number, end: number, value: string): Write => ({ proc, key: 'k', kind: 'set', start, end, ok: true, value });
  const made = new Map([['1.1', 100], ['2.1', 400]]);

  it('flags a value made before a delete that completed, read after the bound by any process', () => {
    const r = noSupersededReads([read(2, 1000, '1.1')], [del(3, 200, 300)], made, 500, []);
    expect(r.checked).toBe(1);
    expect(r.violations).toHaveLength(1);
    expect(r.violations[0]?.property).toBe('no superseded read');
  });

  it('flags a value made before a set that completed (the set superseded it)', () => {
    const r = noSupersededReads([read(1, 1000, '1.1')], [set(2, 200, 300, '2.9')], made, 500, []);
    expect(r.violations).toHaveLength(1);
  });

  it('does not flag: within the bound, a value made after the write started, a failed delete, another key, a frozen reader, nothing returned', () => {
    const r = noSupersededReads(
      [
        read(2, 700, '1.1'), // 300 + 500 >= 700: still within the propagation bound
        read(2, 1000, '2.1'), // made at 400, after the delete started at 200
        read(2, 5000, undefined), // a miss
        read(2, 5000, '1.1', 'other'), // no write on that key
        read(4, 1000, '1.1'), // proc 4 was frozen after the delete ended
        read(2, 1000, '9.9'), // origin unknown (lost with a killed worker)
      ],
      [del(3, 200, 300), del(3, 50, 2000, false)],
      made,
      500,
      [{ proc: 4, from: 250, to: 900 }],
    );
    expect(r.violations).toEqual([]);
    expect(r.checked).toBe(1); // only the read of 2.1 was judged (against the delete)
  });

  it("degraded values (no token): only the README's exception passes — subscription down by the write (plus lag) until the read, within the value's ttl", () => {
    const degradedRead = (proc: number, start: number, fence?: number): Settle => ({ ...read(proc, start, '5.1'), fence });
    const at = new Map([['5.1', 100]]);
    const allowance = (from: number, to: number, keptUntil = 3000) => ({ unsubscribed: [{ proc: 2, from, to }], lag: 200, keptUntil: new Map([['5.1', keptUntil]]) });
    const judge = (r: Settle, a?: ReturnType<typeof allowance>) => noSupersededReads([r], [del(3, 200, 300)], at, 500, [], a).violations.length;
    expect(judge(degradedRead(2, 1000), allowance(50, 2000))).toBe(0); // down across the delete and the read: allowed
    expect(noSupersededReads([degradedRead(2, 1000)], [del(3, 200, 300)], at, 500, [], allowance(50, 2000)).allowedDegraded).toBe(1); // and counted
    expect(judge(degradedRead(2, 1000), allowance(450, 2000))).toBe(0); // went down within the lag after the delete: its note may be lost
    expect(judge(degradedRead(2, 1000), allowance(600, 2000))).toBe(1); // went down later: the note had reached it
    expect(judge(degradedRead(2, 1000), allowance(50, 900))).toBe(1); // subscribed again before the read: the memo was dropped
    expect(judge(degradedRead(2, 3500), allowance(50, 4000))).toBe(1); // past the value's ttl
    expect(judge(degradedRead(1, 1000), allowance(50, 2000))).toBe(1); // another process's subscription was down, not the reader's
    expect(judge(degradedRead(2, 1000, 7), allowance(50, 2000))).toBe(1); // a value with a token (store, L1): no exception
    expect(judge(degradedRead(2, 1000))).toBe(1); // no allowance given: judged as any other
  });

  it('deleteByTag: flags a value carrying one of its tags, of any key, made before it started and read after it (plus the bound); not an untagged or otherwise tagged one, nor one made after it started', () => {
    const byTag = (start: number, end: number, tags: string[], ok = true): Write => ({ proc: 0, key: '', kind: 'deleteByTag', start, end, ok, tags });
    const tagsOf = new Map([['1.1', ['t1']], ['2.1', ['t1']], ['3.1', ['t2']]]);
    const at = new Map([['1.1', 100], ['2.1', 400], ['3.1', 100], ['4.1', 100]]);
    const judged = (reads: Settle[], writes: Write[]) => noSupersededReads(reads, writes, at, 500, [], undefined, tagsOf);
    // Made at 100, before deleteByTag(t1) started at 200; read at 1000 > 300 + 500: flagged, whatever its key.
    for (const key of ['k', 'other']) {
      const r = judged([read(2, 1000, '1.1', key)], [byTag(200, 300, ['t1'])]);
      expect(r.violations.map((v) => v.property)).toEqual(['no read after deleteByTag']);
    }
    expect(judged([read(2, 1000, '1.1')], [byTag(200, 300, ['t2', 't1'])]).violations).toHaveLength(1);
    const passes = judged(
      [
        read(2, 700, '1.1'), // within the bound
        read(2, 1000, '2.1'), // made at 400, after it started
        read(2, 1000, '3.1'), // tagged t2 only
        read(2, 1000, '4.1'), // untagged
      ],
      [byTag(200, 300, ['t1']), byTag(50, 60, ['t2'], false)],
    );
    expect(passes.violations).toEqual([]);
    expect(passes.checked).toBe(1); // only 2.1 was judged against it
    // tagsOfValues: a loader's call's tags, a set's tags.
    const tags = tagsOfValues([{ proc: 1, key: 'k', start: 1, end: 2, fence: 1, value: '1.1', tags: ['t1'] }, { proc: 1, key: 'k', start: 1, end: 2, fence: 2, value: '1.2' }], [{ ...set(2, 60, 70, '2.1'), tags: ['t2'] }]);
    expect([...tags]).toEqual([['1.1', ['t1']], ['2.1', ['t2']]]);
  });

  it('producedAt: a loader value when its loader started (it read the origin then), a set value when the set settled', () => {
    const at = producedAt([{ proc: 1, key: 'k', start: 10, end: 50, fence: 1, value: '1.1' }], [set(2, 60, 70, '2.1'), del(2, 80, 90)]);
    expect([...at]).toEqual([['1.1', 10], ['2.1', 70]]);
  });
});

describe('campaign checker: aborts harmless', () => {
  const settle = (code: string | undefined, signal: boolean): Settle => ({ proc: 1, key: 'k', start: 0, end: 1, ok: code === undefined, code, signal });

  it('flags an unhandled rejection, an ERR_BACKOFF (of a call or of a set), and ERR_ABORTED for a call without a signal', () => {
    const refusedSet: Write = { proc: 1, key: 'k', kind: 'set', start: 0, end: 1, ok: false, code: 'ERR_BACKOFF' };
    const failedSet: Write = { ...refusedSet, code: 'ERR_REDIS_UNAVAILABLE' };
    const r = abortsHarmless([settle('ERR_BACKOFF', false), settle('ERR_ABORTED', false), settle('ERR_ABORTED', true)], ['AbortedError: x'], [refusedSet, failedSet]);
    expect(r.violations.map((v) => v.property).sort()).toEqual(['abort only the caller who aborted', 'no backoff from aborts', 'no backoff from aborts', 'no unhandled rejection']);
    expect(r.checked).toBe(1);
  });

  it('passes aborted calls that had a signal, and other settles', () => {
    expect(abortsHarmless([settle('ERR_ABORTED', true), settle(undefined, true), settle('ERR_WAIT_TIMEOUT', false)], []).violations).toEqual([]);
  });
});
