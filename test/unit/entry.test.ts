import { describe, expect, it } from 'vitest';
import { entryState, freshRemaining, staleRemaining } from '../../src/entry.js';

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

describe('staleRemaining (bounds an L1 copy of a stale value)', () => {
  it.each([
    // pttl, graceMs, staleMs, expected
    [900, 1000, 1000, 900], // stale window only: what is left of it
    [900, 1000, 500, 400], // grace 1000 = stale 500 + kept 500: 400 ms of stale window left
    [400, 1000, 500, 0], // past the stale window: only kept for fail-safe
    [-1, 1000, 500, 0], // no expiry (hand-written key): never a stale copy
    [0, 0, 0, 0],
  ])('pttl %i, grace %i, stale %i → %i', (pttl, grace, stale, expected) => {
    expect(staleRemaining(pttl, grace, stale)).toBe(expected);
  });
});
