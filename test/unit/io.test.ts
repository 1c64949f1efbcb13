import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Io } from '../../src/io.js';

/** Io with a fake clock driven by vitest's fake timers (Date.now is faked too). */
function io(timeoutMs = 100): Io {
  return new Io(timeoutMs, 5, 1000, { now: () => Date.now() });
}

const inFlight = (x: Io): unknown => (x as unknown as { inFlight: { first: unknown } }).inFlight.first;

describe('Io: every operation bounded by redisTimeout, settled exactly once', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('answered operations leave nothing in flight; an unanswered one rejects with failure timeout and its late reply is compensated', async () => {
    const x = io(100);
    await expect(Promise.all([1, 2, 3].map((i) => x.run('read', () => Promise.resolve(i), 'k')))).resolves.toEqual([1, 2, 3]);
    expect(inFlight(x)).toBeUndefined();
    let reply!: (v: string) => void;
    const compensate = vi.fn();
    const hanging = x.run('acquire', () => new Promise<string>((r) => (reply = r)), 'k', compensate);
    const outcome = hanging.catch((e: unknown) => e);
    expect(inFlight(x)).toBeDefined();
    await vi.advanceTimersByTimeAsync(150);
    expect(await outcome).toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE', operation: 'acquire', failure: 'timeout' });
    expect(compensate).toHaveBeenCalledTimes(1);
    expect(inFlight(x)).toBeUndefined();
    reply('late'); // applied after all: undone again
    await vi.advanceTimersByTimeAsync(0);
    expect(compensate).toHaveBeenCalledTimes(2);
    x.close();
  });

  it('answering operations in any order keeps the others in flight until their own reply or deadline', async () => {
    const x = io(100);
    const replies: ((v: number) => void)[] = [];
    const ops = [0, 1, 2, 3].map((i) => x.run('read', () => new Promise<number>((r) => (replies[i] = r)), `k${i}`).catch((e: unknown) => e));
    replies[2]!(2); // the middle of the list
    replies[0]!(0); // its head
    await vi.advanceTimersByTimeAsync(0);
    replies[3]!(3); // its tail
    await vi.advanceTimersByTimeAsync(150);
    const settled = await Promise.all(ops);
    expect(settled[0]).toBe(0);
    expect(settled[2]).toBe(2);
    expect(settled[3]).toBe(3);
    expect(settled[1]).toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE', failure: 'timeout', key: 'k1' });
    expect(inFlight(x)).toBeUndefined();
    x.close();
  });

  it('close() settles every operation still in flight with CacheClosedError, once, and later ones at once', async () => {
    const x = io(10_000);
    const compensate = vi.fn();
    const a = x.run('read', () => new Promise(() => undefined), 'a', compensate).catch((e: unknown) => e);
    const b = x.run('read', () => new Promise(() => undefined), 'b').catch((e: unknown) => e);
    x.close();
    expect(await a).toMatchObject({ code: 'ERR_CLOSED', key: 'a' });
    expect(await b).toMatchObject({ code: 'ERR_CLOSED', key: 'b' });
    expect(compensate).toHaveBeenCalledTimes(1);
    expect(inFlight(x)).toBeUndefined();
    await expect(x.run('read', () => Promise.resolve(1), 'c')).rejects.toMatchObject({ code: 'ERR_CLOSED' });
  });
});
