import { describe, expect, it } from 'vitest';
import { CLOCK_DRIFT, NodeClocks, RESAMPLE_AFTER_MS } from '../../src/node-clock.js';

/** A monotonic and a wall clock the test moves (together, unless it says otherwise). */
function clocks(skewMs = 0) {
  const t = { mono: 1_000, wall: 1_700_000_000_000 };
  const c = new NodeClocks({ now: () => t.mono }, () => 'n', skewMs, () => t.wall);
  const pass = (ms: number) => {
    t.mono += ms;
    t.wall += ms;
  };
  return { t, c, pass };
}

describe('NodeClocks', () => {
  it('brackets the server time a read ran at between its send and reply, shifted by the sample\'s offset', () => {
    const { c, pass } = clocks();
    // A script sent at 1000, answered at 1002, ran at server time 5000: offset ∈ [3998, 4000].
    pass(2);
    c.sample('n', 1_000, 1_002, 5_000);
    pass(1);
    const w = c.timeWindow('n', 1_002, 1_003) as readonly [number, number];
    // Each end widened by the drift over the 1 ms since the sample.
    expect(w[0]).toBeCloseTo(1_002 + 3_998 - CLOCK_DRIFT, 6);
    expect(w[1]).toBeCloseTo(1_003 + 4_000 + CLOCK_DRIFT, 6);
  });

  it('has no window for a node never sampled; a far node\'s wide sample still gives one (judged at both ends)', () => {
    const { c, t, pass } = clocks();
    expect(c.timeWindow('n', t.mono, t.mono)).toBeUndefined();
    pass(400); // a 400 ms round trip
    c.sample('n', t.mono - 400, t.mono, 5_000);
    pass(400);
    const w = c.timeWindow('n', t.mono - 400, t.mono) as readonly [number, number];
    expect(w[1] - w[0]).toBeCloseTo(800, 0);
    expect(c.plainReadable('n')).toBe(true); // its own width is no reason to re-sample
  });

  it('widens by any disagreement of the monotonic and wall clocks since the sample (a suspended VM, a stepped clock)', () => {
    const { c, t } = clocks();
    c.sample('n', t.mono, t.mono, 5_000);
    t.wall += 30; // the wall clock moved 30 ms, the monotonic clock did not
    const w = c.timeWindow('n', t.mono, t.mono) as readonly [number, number];
    expect(w[1] - w[0]).toBeCloseTo(60, 6);
    expect(c.plainReadable('n')).toBe(false); // widened past RESAMPLE_AFTER_MS: this read re-samples
  });

  it('replaces a sample that a new one contradicts, however wide the new one (the server\'s clock stepped)', () => {
    const { c, t, pass } = clocks();
    pass(1);
    c.sample('n', t.mono - 1, t.mono, 5_000); // offset ∈ [3999, 4000]
    pass(100);
    c.sample('n', t.mono - 50, t.mono, 15_101); // a 10 s step, read over 50 ms: offset ∈ [14000, 14051]
    const w = c.timeWindow('n', t.mono, t.mono) as readonly [number, number];
    expect(w[0]).toBeGreaterThan(t.mono + 13_000);
  });

  it('sends one script read per node to re-take a sample that aged, while the others stay plain', () => {
    const { c, t, pass } = clocks();
    expect(c.plainReadable('n')).toBe(false); // no sample: this read samples
    expect(c.plainReadable('n')).toBe(false); // still none: every read is the script until one lands
    c.sample('n', t.mono, t.mono + 1, 5_000);
    expect(c.plainReadable('n')).toBe(true);
    pass(1.01 * RESAMPLE_AFTER_MS / CLOCK_DRIFT); // widened by RESAMPLE_AFTER_MS
    expect(c.plainReadable('n')).toBe(false); // this one re-samples
    expect(c.plainReadable('n')).toBe(true); // the others still read plainly on the old sample
    c.unclaim('n'); // the re-sample failed
    expect(c.plainReadable('n')).toBe(false); // the next read tries again
  });

  it('keeps the tighter of two samples, and forgets all on a reconnection', () => {
    const { c, t, pass } = clocks();
    pass(4);
    c.sample('n', t.mono - 4, t.mono, 5_000);
    pass(40);
    c.sample('n', t.mono - 40, t.mono, 5_040); // a slower reply: looser, not kept
    const w = c.timeWindow('n', t.mono, t.mono) as readonly [number, number];
    expect(w[1] - w[0]).toBeLessThan(5);
    c.forget();
    expect(c.timeWindow('n', t.mono, t.mono)).toBeUndefined();
  });

  it('never reads plainly, samples or judges a node a Cluster port cannot name yet (\'unknown\')', () => {
    const { c, t } = clocks();
    c.sample('unknown', t.mono, t.mono, 5_000);
    expect(c.timeWindow('unknown', t.mono, t.mono)).toBeUndefined();
    expect(c.plainReadable('unknown')).toBe(false);
  });

  it('shifts every sample by the negative control\'s skew', () => {
    const { c, t } = clocks(-10_000);
    c.sample('n', t.mono, t.mono, 5_000);
    expect((c.timeWindow('n', t.mono, t.mono) as readonly [number, number])[0]).toBeCloseTo(5_000 - 10_000, 6);
  });
});
