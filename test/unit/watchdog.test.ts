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
});
