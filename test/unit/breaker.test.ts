import { describe, expect, it } from 'vitest';
import { Breaker } from '../../src/breaker.js';
import { BREAKER_MAX_GROWTH, breakerCooldown, breakerJudgementWindow, breakerOpenings } from '../../src/options.js';

describe('breakerCooldown(base, openings, rand): base doubled per repeated opening, capped at 8 × base, jittered to [0.5, 1.5)×', () => {
  const table: [number, number, number, number][] = [
    // base, openings, rand, cooldown
    [2000, 1, 0.5, 2000],
    [2000, 1, 0, 1000],
    [2000, 1, 0.999, 2998],
    [2000, 2, 0.5, 4000],
    [2000, 3, 0.5, 8000],
    [2000, 4, 0.5, 16_000],
    [2000, 5, 0.5, 16_000], // capped at BREAKER_MAX_GROWTH × base
    [2000, 50, 0, 8000],
    [1, 1, 0, 1], // never 0
    [300, 0, 0.5, 300], // 0 openings reads as the first
  ];
  it.each(table)('base %d, opening %d, rand %d → %d ms', (base, openings, rand, cooldown) => {
    expect(breakerCooldown(base, openings, rand)).toBe(cooldown);
  });
  it('the cap is 8 × base', () => expect(BREAKER_MAX_GROWTH).toBe(8));
});

describe('breakerOpenings(previous, closedForMs, base): grows within the judgement window (4 × base), else starts at 1', () => {
  const table: [number, number, number, number][] = [
    [0, Number.POSITIVE_INFINITY, 2000, 1],
    [3, 7999, 2000, 4],
    [3, 8000, 2000, 1],
    [1, 0, 2000, 2],
  ];
  it.each(table)('previous %d, closed for %d ms, base %d → %d', (previous, closedFor, base, openings) => {
    expect(breakerOpenings(previous, closedFor, base)).toBe(openings);
  });
  it('the window is 4 × base', () => expect(breakerJudgementWindow(2000)).toBe(8000));
});

/** A breaker of threshold 2, base cooldown 1000, rand fixed at 0.5 (no jitter) unless given. */
function breaker(rand = () => 0.5) {
  return new Breaker(2, 1000, rand);
}

/** Two failures at `at`: the threshold, so the breaker opens (or opens again). */
function open(b: Breaker, at: number): void {
  b.failed('x', at);
  b.failed('x', at);
}

describe('Breaker', () => {
  it('opens after threshold consecutive failures and refuses until the cooldown passed', () => {
    const b = breaker();
    b.failed('x', 0);
    expect(b.admit(0)).toBe(true);
    b.failed('x', 0);
    expect(b.admit(999)).toBe(false);
    expect(b.admit(1000)).toBe(true); // the half-open probe
    expect(b.admit(1000)).toBe(false); // only one at a time
  });

  it('a success closes it and says the node recovered', () => {
    const b = breaker();
    open(b, 0);
    expect(b.admit(1000)).toBe(true);
    expect(b.succeeded(1000)).toBe(true);
    expect(b.admit(1000)).toBe(true);
    expect(b.succeeded(1001)).toBe(false);
  });

  it('a success after failures below the threshold is no recovery (the breaker never opened)', () => {
    const b = breaker();
    b.failed('x', 0);
    expect(b.succeeded(1)).toBe(false);
  });

  it('a failed probe opens it again with a doubled cooldown', () => {
    const b = breaker();
    open(b, 0); // opening 1: 1000
    b.admit(1000);
    b.failed('x', 2000); // probe failed at 2000 (after its timeout): opening 2: 2000
    expect(b.admit(3999)).toBe(false);
    expect(b.admit(4000)).toBe(true);
  });

  it('an opening soon after a closing (within the judgement window) grows the cooldown; one after the window starts over', () => {
    const b = breaker();
    open(b, 0); // opening 1 until 1000
    b.admit(1000);
    b.succeeded(1000); // closed at 1000
    open(b, 2000); // 1000 ms after closing: opening 2, cooldown 2000
    expect(b.admit(3999)).toBe(false);
    expect(b.admit(4000)).toBe(true);
    b.succeeded(4000); // closed at 4000
    open(b, 8000); // 4000 ms after closing (window 4000): opening 1 again, cooldown 1000
    expect(b.admit(8999)).toBe(false);
    expect(b.admit(9000)).toBe(true);
  });

  it('stragglers failing while it is open neither prolong nor grow the cooldown', () => {
    const b = breaker();
    open(b, 0);
    for (let i = 0; i < 10; i++) b.failed('x', 500);
    expect(b.admit(1000)).toBe(true);
  });

  it('the cooldown is jittered by the injected draw', () => {
    const b = breaker(() => 0);
    open(b, 0);
    expect(b.admit(499)).toBe(false);
    expect(b.admit(500)).toBe(true);
  });

  it('reset() (the client reconnected) closes it and forgets the openings', () => {
    const b = breaker();
    open(b, 0);
    b.reset();
    expect(b.admit(0)).toBe(true);
    open(b, 1); // a first opening again: 1000
    expect(b.admit(1000)).toBe(false);
    expect(b.admit(1001)).toBe(true);
  });

  /**
   * The stall pattern of issue #13 §4 in pure time: Redis stalls for 1500 ms every 3000 ms, an
   * operation times out after 1000 ms, the base cooldown is 2000 ms. With a fixed cooldown every probe
   * lands in a stall (period = cooldown + timeout: seen once by making breakerCooldown return `base`,
   * which gives 0 closings here); the jittered, growing cooldown lets probes land in healthy gaps and
   * close the breaker. Seeded draws: the outcome is deterministic.
   */
  it('does not resonate with a periodic stall (cooldown + timeout = period): probes land in healthy gaps and close it', () => {
    const stalled = (t: number): boolean => t % 3000 < 1500;
    const simulate = (rand: () => number): number => {
      const b = new Breaker(1, 2000, rand);
      let closings = 0;
      let t = 0; // the first stall begins; an operation sent at 0 fails at 1000
      b.failed('timeout', 1000);
      t = 1000;
      while (t < 120_000) {
        t += 1;
        if (!b.admit(t)) continue;
        if (stalled(t)) b.failed('timeout', (t += 1000));
        else {
          b.succeeded(t);
          closings++;
          // The next stall opens it again: its first operation fails after its timeout.
          t = Math.ceil(t / 3000) * 3000;
          b.failed('timeout', (t += 1000));
        }
      }
      return closings;
    };
    let seed = 42;
    const seeded = (): number => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    // 120 s hold 40 stall periods: at least a tenth of them see the breaker closed again.
    expect(simulate(seeded)).toBeGreaterThanOrEqual(4);
    expect(simulate(() => 0.5)).toBeGreaterThanOrEqual(4);
  });
});
