import { describe, expect, it } from 'vitest';
import { entryState, freshRemaining } from '../../src/entry.js';

describe('fresh, stale or kept (fail-safe) from the PTTL Redis reports', () => {
  it.each([
    // pttl, staleMs, graceMs, state
    [3000, 500, 2000, 'fresh'],
    [2000, 500, 2000, 'stale'],
    [1501, 500, 2000, 'stale'],
    [1500, 500, 2000, 'kept'],
    [1, 500, 2000, 'kept'],
    [1, 0, 2000, 'kept'],
    [2500, 2000, 2000, 'fresh'],
  ] as const)('pttl %i, stale window %i, grace %i → %s', (pttl, stale, grace, state) => {
    expect(entryState(pttl, stale, grace)).toBe(state);
  });
});

describe('freshness from the PTTL Redis reports', () => {
  it.each([
    // pttl, staleMs, state, fresh remaining
    [1500, 500, 'fresh', 1000],
    [501, 500, 'fresh', 1],
    [500, 500, 'stale', 0],
    [1, 500, 'stale', 0],
    [1000, 0, 'fresh', 1000],
    [-1, 500, 'fresh', Number.POSITIVE_INFINITY],
  ] as const)('pttl %i with stale window %i is %s with %s ms fresh left', (pttl, stale, state, left) => {
    expect(entryState(pttl, stale)).toBe(state);
    expect(freshRemaining(pttl, stale)).toBe(left);
  });
});
