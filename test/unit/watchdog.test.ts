import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { LockLostError } from '../../src/errors.js';
import { Watchdog, type Extension } from '../../src/lock/watchdog.js';

const clock = { now: () => Date.now() }; // faked by vi.useFakeTimers()

function dog(outcomes: Extension[], ttl = 300) {
  const lost: LockLostError[] = [];
  let round = 0;
  const w = new Watchdog('k', clock, ttl, clock.now() + ttl, async () => outcomes[Math.min(round++, outcomes.length - 1)] as Extension, ttl, (_k, e) => lost.push(e));
  return { w, lost, rounds: () => round };
}

function dogWith(outcomes: Extension[], ttl: number, validFor: number, proves: number) {
  let round = 0;
  const w = new Watchdog('k', clock, ttl, clock.now() + validFor, async () => outcomes[Math.min(round++, outcomes.length - 1)] as Extension, proves, () => undefined);
  return { w };
}

describe('Watchdog', () => {
  beforeEach(() => void vi.useFakeTimers());
  afterEach(() => void vi.useRealTimers());

  it('extends every lockTtl/3 and never aborts while every round is kept', async () => {
    const { w, lost, rounds } = dog(['kept']);
    await vi.advanceTimersByTimeAsync(3000);
    expect(rounds()).toBe(30);
    expect(w.signal.aborted).toBe(false);
    expect(lost).toEqual([]);
    w.stop();
  });

  it('a refused round aborts the signal with ERR_LOCK_LOST and reports it once', async () => {
    const { w, lost } = dog(['kept', 'lost']);
    await vi.advanceTimersByTimeAsync(1000);
    expect(w.signal.aborted).toBe(true);
    expect(w.signal.reason).toMatchObject({ code: 'ERR_LOCK_LOST', key: 'k' });
    expect(lost).toHaveLength(1);
  });

  it('unanswered rounds keep the grant only until its last known validity runs out', async () => {
    const { w } = dog(['kept', 'unknown']);
    await vi.advanceTimersByTimeAsync(200); // 2 rounds: kept at 100 (valid until 400), unknown at 200
    expect(w.signal.aborted).toBe(false);
    await vi.advanceTimersByTimeAsync(200); // the round at 400 finds the validity spent
    expect(w.signal.aborted).toBe(true);
  });

  it('stop() ends the rounds: no abort afterwards', async () => {
    const { w, rounds } = dog(['lost']);
    w.stop();
    await vi.advanceTimersByTimeAsync(1000);
    expect(rounds()).toBe(0);
    expect(w.signal.aborted).toBe(false);
  });

  it('at most one extension round is in flight when a round outlasts the interval (redisTimeout > lockTtl/3)', async () => {
    let inFlight = 0;
    let most = 0;
    let rounds = 0;
    // Each round takes 250 ms; the interval is 100 ms. validFor is long, so only overlap is under test.
    const slowRound = async (): Promise<Extension> => {
      rounds++;
      most = Math.max(most, ++inFlight);
      await new Promise((r) => setTimeout(r, 250));
      inFlight--;
      return 'kept';
    };
    const w = new Watchdog('k', clock, 300, clock.now() + 1000, slowRound, 1000, () => undefined);
    await vi.advanceTimersByTimeAsync(2000);
    expect(most).toBe(1);
    expect(rounds).toBeGreaterThanOrEqual(5); // rounds go on, one after another
    expect(w.signal.aborted).toBe(false);
    w.stop();
  });

  it('a round that never answers cannot hold the grant past its last known validity', async () => {
    let round = 0;
    const hangsAfterFirst = (): Promise<Extension> => (round++ === 0 ? Promise.resolve('kept') : new Promise<Extension>(() => undefined));
    const w = new Watchdog('k', clock, 300, clock.now() + 300, hangsAfterFirst, 300, () => undefined);
    await vi.advanceTimersByTimeAsync(350); // kept at 100 (valid until 400); the round at 200 hangs
    expect(w.signal.aborted).toBe(false);
    await vi.advanceTimersByTimeAsync(100); // the tick at 400 finds the validity spent, round still hanging
    expect(w.signal.aborted).toBe(true);
    expect(round).toBe(2); // skipped ticks sent nothing
  });

  it('a kept round never shortens the known validity (validUntil only moves forward)', async () => {
    // Acquired with 1000 ms of validity; each kept round proves only 300 ms from its own start.
    const { w } = dogWith(['kept', 'unknown'], 300, 1000, 300);
    await vi.advanceTimersByTimeAsync(950); // kept at 100 proves until 400 < 1000: still valid until 1000
    expect(w.signal.aborted).toBe(false);
    await vi.advanceTimersByTimeAsync(100);
    expect(w.signal.aborted).toBe(true);
  });
});

