import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { formatNote, parseNote, subscribeRetryDelay, Waiters } from '../../src/wait.js';

describe('notes on the shared channel', () => {
  it.each(['k', 'a|b|c', '', '😀', 'x\ny'])('round-trips key %j', (key) => {
    expect(parseNote(formatNote('w', 'origin1', key))).toEqual({ kind: 'w', origin: 'origin1', key });
  });

  it.each(['w', 's', 'd', 'e', 'r', 'u'] as const)('parses kind %s', (kind) => {
    expect(parseNote(formatNote(kind, 'o', 'k'))?.kind).toBe(kind);
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
    waiters.wake('k', 'w');
    await expect(w.next(1000, undefined)).resolves.toBe('w');
    w.dispose();
    expect(waiters.size).toBe(0);
  });

  it('next() resolves on a wake before its poll delay', async () => {
    const waiters = new Waiters();
    const w = waiters.register('k');
    const p = w.next(1000, undefined);
    waiters.wake('k', 'd');
    await expect(p).resolves.toBe('d');
    w.dispose();
  });

  it('next() resolves with the kind of the note that woke it, "u" included', async () => {
    const waiters = new Waiters();
    const w = waiters.register('k');
    const p = w.next(1000, undefined);
    waiters.wake('k', 'u');
    await expect(p).resolves.toBe('u');
    w.dispose();
  });

  it('of two wakes before next(), the latest is remembered', async () => {
    const waiters = new Waiters();
    const w = waiters.register('k');
    waiters.wake('k', 'e');
    waiters.wake('k', 'w');
    await expect(w.next(1000, undefined)).resolves.toBe('w');
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
    waiters.wake('other', 'w');
    await vi.advanceTimersByTimeAsync(999);
    waiters.wake('k', 's');
    await expect(p).resolves.toBe('s');
    w.dispose();
  });

  it('an abort ends the wait at once', async () => {
    const waiters = new Waiters();
    const w = waiters.register('k');
    const ac = new AbortController();
    const p = w.next(10_000, ac.signal);
    ac.abort();
    await expect(p).resolves.toBe('aborted');
    w.dispose();
  });

  it('an already-aborted signal returns at once, without starting a timer', async () => {
    const waiters = new Waiters();
    const w = waiters.register('k');
    await expect(w.next(10_000, AbortSignal.abort())).resolves.toBe('aborted');
    expect(vi.getTimerCount()).toBe(0);
    w.dispose();
  });

  it('wakeAll (close) ends every wait as "aborted"', async () => {
    const waiters = new Waiters();
    const a = waiters.register('a');
    const b = waiters.register('b');
    const pa = a.next(10_000, undefined);
    waiters.wakeAll();
    await expect(pa).resolves.toBe('aborted');
    await expect(b.next(10_000, undefined)).resolves.toBe('aborted');
    a.dispose();
    b.dispose();
  });
});

describe('SUBSCRIBE retry delay', () => {
  it('grows exponentially from 50 ms, is capped at 2 s, and is jittered to [50 %, 100 %] of its ceiling', () => {
    expect(subscribeRetryDelay(0, 0)).toBe(25);
    expect(subscribeRetryDelay(0, 0.999999)).toBe(50);
    expect(subscribeRetryDelay(3, 0.999999)).toBe(400);
    expect(subscribeRetryDelay(10, 0)).toBe(1000);
    expect(subscribeRetryDelay(10, 0.999999)).toBe(2000);
    expect(subscribeRetryDelay(10_000, 0.5)).toBe(1500);
  });
});

describe('close()', () => {
  it('after wakeAll(), every wait ends at once: waiters already registered and ones registered later (an hour-long wait would otherwise hang the test)', async () => {
    const waiters = new Waiters();
    const before = waiters.register('k');
    waiters.wakeAll();
    const after = waiters.register('k');
    expect(await before.next(3_600_000, undefined)).toBe('aborted');
    expect(await before.next(3_600_000, undefined)).toBe('aborted');
    expect(await after.next(3_600_000, undefined)).toBe('aborted');
    before.dispose();
    after.dispose();
  });
});
