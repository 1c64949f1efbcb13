import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { formatNote, parseNote, Waiters } from '../../src/wait.js';

describe('notes on the shared channel', () => {
  it.each(['k', 'a|b|c', '', '😀', 'x\ny'])('round-trips key %j', (key) => {
    expect(parseNote(formatNote('w', 'origin1', key))).toEqual({ kind: 'w', origin: 'origin1', key });
  });

  it.each(['', 'w', 'w|', 'x|o|k', 'ww|o|k', '|o|k'])('ignores malformed message %j', (m) => {
    expect(parseNote(m)).toBeUndefined();
  });
});

describe('Waiters', () => {
  beforeEach(() => void vi.useFakeTimers());
  afterEach(() => void vi.useRealTimers());

  it('a notification before next() is remembered, not missed', async () => {
    const waiters = new Waiters();
    const w = waiters.register('k');
    waiters.wake('k');
    await expect(w.next(1000, undefined)).resolves.toBe('notified');
    w.dispose();
    expect(waiters.size).toBe(0);
  });

  it('next() resolves on a wake before its poll delay', async () => {
    const waiters = new Waiters();
    const w = waiters.register('k');
    const p = w.next(1000, undefined);
    waiters.wake('k');
    await expect(p).resolves.toBe('notified');
    w.dispose();
  });

  it('next() resolves "timeout" after the poll delay when nobody wakes it', async () => {
    const waiters = new Waiters();
    const w = waiters.register('k');
    const p = w.next(1000, undefined);
    await vi.advanceTimersByTimeAsync(1000);
    await expect(p).resolves.toBe('timeout');
    w.dispose();
  });

  it('a wake on another key does not wake this waiter', async () => {
    const waiters = new Waiters();
    const w = waiters.register('k');
    const p = w.next(1000, undefined);
    waiters.wake('other');
    await vi.advanceTimersByTimeAsync(999);
    waiters.wake('k');
    await expect(p).resolves.toBe('notified');
    w.dispose();
  });

  it('an abort ends the wait at once', async () => {
    const waiters = new Waiters();
    const w = waiters.register('k');
    const ac = new AbortController();
    const p = w.next(10_000, ac.signal);
    ac.abort();
    await expect(p).resolves.toBe('timeout');
    w.dispose();
  });
});
