import { describe, expect, it } from 'vitest';
import { quorum, validity, voteOutcome } from '../../src/lock/redlock.js';

describe('redlock rules', () => {
  it.each([
    [3, 2],
    [4, 3],
    [5, 3],
    [7, 4],
  ])('quorum of %i nodes is %i', (n, q) => {
    expect(quorum(n)).toBe(q);
  });

  it.each([
    [10_000, 0, 0.01, 9_898],
    [10_000, 500, 0.01, 9_398],
    [1_000, 990, 0.01, -2],
    [1_000, 0, 0, 998],
  ])('validity(ttl %i, elapsed %i, drift %f) = ttl − elapsed − (ttl×drift + 2) = %i', (ttl, elapsed, drift, expected) => {
    expect(validity(ttl, elapsed, drift)).toBeCloseTo(expected, 6);
  });

  it.each([
    // n, ours, theirs, validity, outcome
    [5, 3, 0, 100, 'granted'],
    [5, 5, 0, 100, 'granted'],
    [5, 3, 0, 0, 'retry'], // quorum, but no validity left: never hand out an expired lock
    [5, 3, 0, -1, 'retry'],
    [5, 0, 3, 100, 'contended'],
    [5, 2, 3, 100, 'contended'],
    [5, 2, 2, 100, 'retry'], // split vote with one node down
    [5, 2, 0, 100, 'unreachable'], // 3 of 5 down
    [5, 0, 0, 100, 'unreachable'],
    [5, 1, 1, 100, 'unreachable'],
    [3, 2, 0, 100, 'granted'],
    [3, 1, 1, 100, 'retry'],
    [3, 0, 2, 100, 'contended'],
    [3, 1, 0, 100, 'unreachable'],
  ] as const)('n=%i ours=%i theirs=%i validity=%i → %s', (n, ours, theirs, v, outcome) => {
    expect(voteOutcome(n, ours, theirs, v)).toBe(outcome);
  });
});
