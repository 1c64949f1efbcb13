import { describe, expect, it } from 'vitest';
import { grantsNeverRepeat, healthyShardsNeverDegrade, type DegradedEvent, type Outage, type Served } from '../support/cluster-checker.js';

describe('grantsNeverRepeat', () => {
  it('passes increasing, distinct tokens per key (interleaved across processes and keys)', () => {
    const r = grantsNeverRepeat([
      { proc: 1, key: 'a', fence: 10, at: 1 },
      { proc: 2, key: 'a', fence: 11, at: 2 },
      { proc: 1, key: 'b', fence: 10, at: 3 },
      { proc: 1, key: 'a', fence: 12, at: 4 },
    ]);
    expect(r).toEqual({ checked: 4, repeats: [], backwards: [] });
  });

  it('flags a token handed twice for one key, in any processes', () => {
    const r = grantsNeverRepeat([
      { proc: 1, key: 'a', fence: 10, at: 1 },
      { proc: 2, key: 'a', fence: 10, at: 5 },
    ]);
    expect(r.repeats).toHaveLength(1);
    expect(r.backwards).toEqual([]);
  });

  it('flags a process handed a smaller token after a larger one (a failover to a replica that lacks grants)', () => {
    const r = grantsNeverRepeat([
      { proc: 1, key: 'a', fence: 12, at: 1 },
      { proc: 1, key: 'a', fence: 11, at: 5 },
      { proc: 2, key: 'a', fence: 9, at: 6 }, // another process: judged on its own
    ]);
    expect(r.repeats).toEqual([]);
    expect(r.backwards).toHaveLength(1);
    expect(r.backwards[0]?.detail).toContain('token 11');
  });
});

describe('healthyShardsNeverDegrade', () => {
  const owner = (key: string) => (key.startsWith('x') ? 7001 : 7002);
  const outage: Outage[] = [{ node: 7001, from: 100, restarted: 200 }];
  const served: Served[] = [
    { proc: 1, key: 'x1', start: 150, end: 160, fence: 5 }, // during the outage: not a recovery
    { proc: 1, key: 'x1', start: 210, end: 230, fence: undefined }, // degraded: not a recovery
    { proc: 1, key: 'x2', start: 240, end: 250, fence: 6 }, // proc 1 recovered at 250
  ];
  const ev = (proc: number, key: string, at: number): DegradedEvent => ({ proc, key, at, what: 'computed degraded' });

  it('allows degraded calls on the dead shard from the kill until the process served a fenced value from it again', () => {
    const r = healthyShardsNeverDegrade([ev(1, 'x1', 100), ev(1, 'x1', 199), ev(1, 'x2', 250)], owner, outage, served);
    expect(r).toEqual({ checked: 3, exempt: 3, violations: [] });
  });

  it('flags a degraded call on a live shard during the outage, one before the kill, and one after the process recovered', () => {
    const r = healthyShardsNeverDegrade([ev(1, 'y1', 150), ev(1, 'x1', 99), ev(1, 'x1', 251)], owner, outage, served);
    expect(r.violations).toHaveLength(3);
    expect(r.exempt).toBe(0);
  });

  it('a process that never served the shard again stays exempt to the end; another process is judged on its own', () => {
    const r = healthyShardsNeverDegrade([ev(2, 'x1', 900), ev(2, 'y1', 900)], owner, outage, served);
    expect(r.exempt).toBe(1);
    expect(r.violations.map((v) => v.detail)).toEqual([expect.stringContaining('key y1')]);
  });
});
