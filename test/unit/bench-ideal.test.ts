/** The bench's yardsticks are pure functions: a wrong ideal would flatter or wrong a contender. */
import { describe, expect, it } from 'vitest';
import { idealRebuilds, idealRefreshes, refreshFloor } from '../../bench/lib/scenarios.js';

type Run = [string, number, number, boolean];
const run = (key: string, start: number, end: number): Run => [key, start, end, true];

describe('idealRefreshes: one run per entry that reaches its refresh point', () => {
  it.each<[string, Run[], number]>([
    ['no runs', [], 0],
    ['a single fill', [run('a', 0, 100)], 1],
    ['a chain of refreshes, each 800 ms after the last entry was written', [run('a', 0, 100), run('a', 900, 1000), run('a', 1800, 1900)], 3],
    ['a second process refreshing the same entry beside the first: a duplicate', [run('a', 900, 1000), run('a', 910, 1010)], 1],
    ['a refresh before the entry reached its point: a duplicate', [run('a', 0, 100), run('a', 500, 600)], 1],
    ['within the 5 ms slack of the point (PTTL rounding): needed', [run('a', 0, 100), run('a', 897, 997)], 2],
    ['keys are judged apart', [run('a', 0, 100), run('b', 10, 110)], 2],
  ])('%s', (_name, runs, expected) => {
    expect(idealRefreshes(runs, 800)).toBe(expected);
  });

  it('counts as needed what idealRebuilds (one per expiry) calls duplicates, and nothing more', () => {
    const chain = [run('a', 0, 100), run('a', 900, 1000), run('a', 1800, 1900)];
    expect(idealRebuilds(chain, 1000)).toBe(2); // 900 < 0 + ttl: the per-expiry rule calls it a duplicate
    expect(idealRefreshes(chain, 800)).toBe(3);
  });
});

describe('refreshFloor: the fewest runs per key per ttl refreshing ahead allows', () => {
  it.each<[number, number, number, number]>([
    [1000, 0.8, 100, 1000 / 900],
    [1000, 0.9, 100, 1],
    [1000, 0.5, 0, 2],
  ])('ttl %d, fraction %d, loader %d ms → %d', (ttl, fraction, loader, expected) => {
    expect(refreshFloor(ttl, fraction, loader)).toBeCloseTo(expected, 10);
  });
});
