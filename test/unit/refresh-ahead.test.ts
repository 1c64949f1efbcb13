import { describe, expect, it } from 'vitest';
import { jitteredTtl, pastRefreshPoint, refreshDue, xfetchDue, type EntryFacts } from '../../src/entry.js';
import { describe as describeValue, InvalidOptionError } from '../../src/errors.js';
import { resolveCacheOptions, resolveCallOptions, writeTtl, type CacheOptions } from '../../src/options.js';
import { HoldOffs } from '../../src/protocol/refresh.js';

describe('the refresh point: is the entry older than refreshAhead × its ttl?', () => {
  it.each([
    // ttl, fresh time left, refreshAhead, past the point
    [1000, 1000, 0.8, false], // just written
    [1000, 201, 0.8, false], // age 799 < 800
    [1000, 200, 0.8, true], // age 800: the point itself
    [1000, 1, 0.8, true],
    [1000, 500, 0.5, true],
    [1000, 501, 0.5, false],
    [1000, 1, 0, false], // 0 = off, even right before expiry
    [1000, Number.POSITIVE_INFINITY, 0.8, false], // no expiry (PTTL -1)
    [60_000, 6_000, 0.9, true],
    [60_000, 6_001, 0.9, false],
  ] as const)('ttl %i, %i ms left, refreshAhead %d → %s', (ttl, left, r, due) => {
    expect(pastRefreshPoint(ttl, left, r)).toBe(due);
  });
});

describe('XFetch: −loadMs × beta × ln(rand) ≥ fresh time left', () => {
  it.each([
    // loadMs, beta, fresh left, rand, refresh
    [100, 1, 100, Math.exp(-1), true], // −100 × ln(e^−1) = 100 ≥ 100
    [100, 1, 101, Math.exp(-1), false],
    [100, 2, 200, Math.exp(-1), true], // beta scales the lead
    [100, 2, 201, Math.exp(-1), false],
    [100, 1, 1, 1, false], // rand 1: ln 1 = 0, never early
    [100, 1, 10_000, 1e-300, true], // rand near 0: almost surely past any remainder
    [0, 1, 1, 1e-9, false], // a 0 ms loader is never refreshed early
    [50, 1, 0, 0.5, true], // nothing left: due (a caller only asks on a fresh hit)
  ] as const)('loadMs %i, beta %d, %i ms left, rand %d → %s', (loadMs, beta, left, rand, due) => {
    expect(xfetchDue(loadMs, beta, left, rand)).toBe(due);
  });

  it('refreshes with probability exp(−left / (loadMs × beta)) over uniform rand', () => {
    // P(−L·β·ln U ≥ x) = P(U ≤ e^(−x/(Lβ))): over an even grid of U the share due is that probability.
    const n = 100_000;
    let due = 0;
    for (let i = 1; i <= n; i++) if (xfetchDue(100, 1, 100, i / n)) due++;
    expect(due / n).toBeCloseTo(Math.exp(-1), 3);
  });
});

describe('refreshDue: which rule a hit applies', () => {
  const facts = (ttlMs: number | undefined, loadMs = 100): EntryFacts => ({ fence: 1, ttlMs, loadMs });
  const never = () => {
    throw new Error('the deterministic form draws no random number');
  };
  it.each([
    // policy, entry ttl, caller ttl, fresh left, rand, due
    [0.8, 1000, 5000, 300, never, false], // the entry's own ttl (point at 200 left), not the caller's (1000 left)
    [0.8, 1000, 5000, 200, never, true],
    [0.8, undefined, 5000, 300, never, true], // a v1/v2 entry: the caller's ttl stands in
    [0.8, undefined, 5000, 1001, never, false],
    [0.8, 1000, 1000, 0, never, false], // not fresh: not a hit
    [{ beta: 1 }, 1000, 1000, 100, () => Math.exp(-1), true],
    [{ beta: 1 }, 1000, 1000, 101, () => Math.exp(-1), false],
  ] as const)('%o, entry ttl %s, caller ttl %i, %i ms left → due %s', (policy, ttlMs, callerTtl, left, rand, due) => {
    expect(refreshDue(policy, facts(ttlMs), callerTtl, left, rand)).toBe(due);
  });
});

describe('ttlJitter: each write draws its ttl from ttl × (1 − jitter … 1)', () => {
  it.each([
    // ttl, jitter, rand, ttl written
    [1000, 0, 0.999, 1000],
    [1000, 0.2, 0, 1000],
    [1000, 0.2, 0.5, 900],
    [1000, 0.2, 0.999_999, 800],
    [1000, 0.5, 0.25, 875],
    [1, 0.9, 0.999, 1], // never below 1 ms
    [3, 0.5, 0.5, 2], // rounded to whole ms
  ] as const)('ttl %i, jitter %d, rand %d → %i', (ttl, jitter, rand, written) => {
    expect(jitteredTtl(ttl, jitter, rand)).toBe(written);
  });

  it('writeTtl draws nothing without jitter, and stays within [ttl × (1 − jitter), ttl] with it', () => {
    expect(writeTtl({ ttl: 700, ttlJitter: 0 }, () => {
      throw new Error('no draw');
    })).toBe(700);
    for (let i = 0; i < 1000; i++) {
      const t = writeTtl({ ttl: 1000, ttlJitter: 0.3 });
      expect(t).toBeGreaterThanOrEqual(700);
      expect(t).toBeLessThanOrEqual(1000);
    }
  });
});

describe('options refreshAhead and ttlJitter', () => {
  const fakeClient = { defineCommand: () => undefined, duplicate: () => undefined } as unknown as CacheOptions['redis'];
  const defaults = resolveCacheOptions({ redis: fakeClient }).defaults;

  it('default to 0 (off) and resolve both forms', () => {
    const off = resolveCallOptions(defaults, 1000, 'k');
    expect([off.refreshAhead, off.ttlJitter]).toEqual([0, 0]);
    expect(resolveCallOptions(defaults, { ttl: 1, refreshAhead: 0.8, ttlJitter: 0.2 }, 'k')).toMatchObject({ refreshAhead: 0.8, ttlJitter: 0.2 });
    const x = resolveCallOptions(defaults, { ttl: 1, refreshAhead: { beta: 1.5 } }, 'k').refreshAhead;
    expect(x).toEqual({ beta: 1.5 });
    expect(Object.isFrozen(x)).toBe(true);
    const d = resolveCacheOptions({ redis: fakeClient, defaults: { refreshAhead: 0.5, ttlJitter: 0.1 } }).defaults;
    expect(resolveCallOptions(d, 1000, 'k')).toMatchObject({ refreshAhead: 0.5, ttlJitter: 0.1 });
  });

  const bad: [string, unknown, string, unknown][] = [
    // given, value, option named, value named
    ['refreshAhead', 1, 'refreshAhead', 1],
    ['refreshAhead', -0.1, 'refreshAhead', -0.1],
    ['refreshAhead', Number.NaN, 'refreshAhead', Number.NaN],
    ['refreshAhead', '0.8', 'refreshAhead', '0.8'],
    ['refreshAhead', true, 'refreshAhead', true],
    ['refreshAhead', null, 'refreshAhead', null],
    ['refreshAhead', [0.5], 'refreshAhead', [0.5]],
    ['refreshAhead', {}, 'refreshAhead.beta', undefined],
    ['refreshAhead', { beta: 0 }, 'refreshAhead.beta', 0],
    ['refreshAhead', { beta: -1 }, 'refreshAhead.beta', -1],
    ['refreshAhead', { beta: Number.POSITIVE_INFINITY }, 'refreshAhead.beta', Number.POSITIVE_INFINITY],
    ['refreshAhead', { beta: '1' }, 'refreshAhead.beta', '1'],
    ['refreshAhead', { beta: 1, delta: 2 }, 'refreshAhead.delta', 2],
    ['ttlJitter', 1, 'ttlJitter', 1],
    ['ttlJitter', -0.01, 'ttlJitter', -0.01],
    ['ttlJitter', '0.2', 'ttlJitter', '0.2'],
    ['ttlJitter', Number.NaN, 'ttlJitter', Number.NaN],
  ];
  it.each(bad)('%s = %o is an InvalidOptionError naming %s, the value and its type', (given, value, option, named) => {
    for (const resolve of [
      () => resolveCallOptions(defaults, { ttl: 1000, [given]: value }, 'k'),
      () => resolveCacheOptions({ redis: fakeClient, defaults: { [given]: value } }),
    ]) {
      let err: unknown;
      try {
        resolve();
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(InvalidOptionError);
      const e = err as InvalidOptionError;
      expect(e.code).toBe('ERR_INVALID_OPTION');
      expect(e.option).toBe(option);
      expect(e.message).toContain(`"${option}"`);
      expect(e.message).toContain(describeValue(named));
    }
  });
});

describe('refresh hold-offs (how often an entry is tried)', () => {
  it('holds off only the entry tried (its fence) and only until the time given', () => {
    const b = new HoldOffs();
    b.holdOff('early', 'k', 7, 100);
    expect(b.heldOff('early', 'k', 7, 99)).toBe(true);
    expect(b.heldOff('early', 'other', 7, 99)).toBe(false);
    expect(b.heldOff('early', 'k', 7, 100)).toBe(false); // time passed: forgotten
    expect(b.heldOff('early', 'k', 7, 50)).toBe(false);
    b.holdOff('early', 'k', 7, 100);
    expect(b.heldOff('early', 'k', 8, 50)).toBe(false); // a newer entry is a new candidate
    expect(b.heldOff('early', 'k', 7, 50)).toBe(false); // and the old record is gone
  });

  it('an early refresh tried for good does not hold off the stale window\'s refresh of the same entry, nor the reverse', () => {
    const b = new HoldOffs();
    b.holdOff('early', 'k', 7, Number.POSITIVE_INFINITY);
    expect(b.heldOff('early', 'k', 7, 1e12)).toBe(true);
    expect(b.heldOff('stale', 'k', 7, 1e12)).toBe(false);
    b.holdOff('stale', 'j', 3, 100);
    expect(b.heldOff('stale', 'j', 3, 50)).toBe(true);
    expect(b.heldOff('early', 'j', 3, 50)).toBe(false);
  });

  it('stays bounded: the oldest record goes first', () => {
    const b = new HoldOffs();
    for (let i = 0; i <= 10_000; i++) b.holdOff('early', `k${i}`, 1, 100);
    expect(b.heldOff('early', 'k0', 1, 0)).toBe(false);
    expect(b.heldOff('early', 'k1', 1, 0)).toBe(true);
    expect(b.heldOff('early', 'k10000', 1, 0)).toBe(true);
});
});
