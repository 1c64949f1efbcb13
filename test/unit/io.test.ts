import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { HealthChange } from '../../src/health.js';
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

  it('time this process was stalled is not counted against redisTimeout: an operation answered after a stall past its deadline succeeds, the breaker counts nothing, and an unanswered one still times out', async () => {
    let stalled = 0; // how far the clock jumped while no timer could run (a blocked event loop)
    const x = new Io(100, 1, 60_000, { now: () => Date.now() + stalled });
    let reply!: (v: string) => void;
    const answered = x.run('read', () => new Promise<string>((r) => (reply = r)), 'k').catch((e: unknown) => e);
    const unanswered = x.run('read', () => new Promise<string>(() => undefined), 'k').catch((e: unknown) => e);
    stalled = 150;
    await vi.advanceTimersByTimeAsync(25); // the first sweep, 150 ms late (within the 2 × 100 ms credit)
    await vi.advanceTimersByTimeAsync(1); // and its check phase (a fake immediate runs on the next tick), before any reply
    reply('v'); // written and answered after the stall (as node-redis writes: on setImmediate)
    expect(await answered).toBe('v');
    // breakerThreshold 1: had the stall counted as a timeout, the breaker would refuse this one.
    expect(await x.run('read', () => Promise.resolve('admitted'), 'k')).toBe('admitted');
    await vi.advanceTimersByTimeAsync(150); // 100 ms of running time later
    expect(await unanswered).toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE', failure: 'timeout' });
    x.close();
  });

  it('an operation sent after a stall gets no credit for it (another one in flight keeps the sweeper running)', async () => {
    let stalled = 0;
    const x = new Io(100, 5, 60_000, { now: () => Date.now() + stalled });
    const before = x.run('read', () => new Promise<string>(() => undefined), 'a').catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(10);
    stalled = 150; // synchronous work just ended; only then is the next call made
    const after = x.run('read', () => new Promise<string>(() => undefined), 'b').catch((e: unknown) => e);
    // The first sweep (15 ms later) is 150 ms late: 'before' is credited 150 ms, 'after' only the 15 ms since it was sent.
    await vi.advanceTimersByTimeAsync(140); // 'after' is 140 ms old: past 100 + 15, short of 100 + 150
    expect(await after).toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE', failure: 'timeout', key: 'b' });
    expect(await before).toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE', failure: 'timeout', key: 'a' });
    x.close();
  });

  it('no operation is credited more than 2 × redisTimeout of stall: after a 1 s stall an unanswered 100 ms operation times out at the first sweep', async () => {
    let stalled = 0;
    const x = new Io(100, 5, 60_000, { now: () => Date.now() + stalled });
    let settled = false;
    const op = x.run('read', () => new Promise<string>(() => undefined), 'c').catch((e: unknown) => ((settled = true), e));
    stalled = 1000;
    await vi.advanceTimersByTimeAsync(26); // the first sweep (1 s late) and its check phase
    expect(settled).toBe(true);
    expect(await op).toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE', failure: 'timeout', key: 'c' });
    x.close();
  });

  it('a reply that lands between a sweep that found its operation late and that sweep\'s verdict is kept', async () => {
    const x = new Io(100, 1, 60_000, { now: () => Date.now() });
    let reply!: (v: string) => void;
    const op = x.run('read', () => new Promise<string>((r) => (reply = r)), 'k').catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(99);
    // The sweep at 100 ms finds it due; the reply lands between that sweep and its check phase.
    vi.advanceTimersToNextTimer(); // runs the sweep only (the verdict is the next timer: setImmediate)
    reply('v');
    await vi.advanceTimersByTimeAsync(0);
    expect(await op).toBe('v');
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

describe('Io: a hung node is found by time (suspicion), one slow reply is not', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  /** An Io with suspicion on (a probe that never answers unless `answer` is called) and its health events. */
  function suspecting(timeoutMs = 100, threshold = 5) {
    const changes: HealthChange[] = [];
    let answer: (() => void) | undefined;
    let probes = 0;
    const x = new Io(timeoutMs, threshold, 60_000, { now: () => Date.now() }, () => undefined, () => 'n1', () => 'n1', (c) => changes.push(c), () => {
      probes++;
      return new Promise((r) => (answer = () => r(0)));
    });
    return { x, changes, probes: () => probes, answerProbe: () => answer?.() };
  }

  it('one operation unanswered past redisTimeout while its node answers others times out alone: no suspicion, the next operation is sent', async () => {
    const { x, changes, probes } = suspecting(100);
    const slow = x.run('read', () => new Promise(() => undefined), 'a').catch((e: unknown) => e);
    // The node keeps answering other operations meanwhile.
    for (let t = 0; t < 6; t++) {
      await x.run('read', () => Promise.resolve(t), 'b');
      await vi.advanceTimersByTimeAsync(25);
    }
    expect(await slow).toMatchObject({ failure: 'timeout' });
    expect(x.health().nodes).toEqual([{ node: 'n1', state: 'healthy', forMs: 0, cause: undefined }]);
    expect(changes).toEqual([]);
    expect(probes()).toBe(0);
    await expect(x.run('read', () => Promise.resolve('sent'), 'c')).resolves.toBe('sent');
    x.close();
  });

  it('a slow reply within redisTimeout changes nothing', async () => {
    const { x, changes } = suspecting(100);
    const op = x.run('read', () => new Promise((r) => setTimeout(() => r('late but in time'), 90)), 'a');
    await vi.advanceTimersByTimeAsync(150);
    await expect(op).resolves.toBe('late but in time');
    expect(changes).toEqual([]);
    x.close();
  });

  it('ops in flight to a silent node all fail at its suspicion as ONE breaker failure; later ones fail at once (not sent); a probe answer recovers it', async () => {
    const { x, changes, probes, answerProbe } = suspecting(100, 2);
    const ops = Array.from({ length: 10 }, (_, i) => x.run('read', () => new Promise(() => undefined), `k${i}`).catch((e: unknown) => e));
    await vi.advanceTimersByTimeAsync(130);
    const errors = await Promise.all(ops);
    expect(errors.every((e) => (e as { failure?: string }).failure === 'timeout')).toBe(true);
    expect(x.health().nodes.map((n) => n.state)).toEqual(['suspect']); // threshold 2, yet closed: one failure
    let sent = 0;
    const refused = await x.run('read', () => Promise.resolve(sent++), 'k').catch((e: unknown) => e);
    expect(sent).toBe(0);
    expect((refused as { cause?: Error }).cause?.name).toBe('NodeSuspect');
    expect(probes()).toBe(1);
    answerProbe();
    await vi.advanceTimersByTimeAsync(0);
    expect(changes.map((c) => c.state)).toEqual(['suspect', 'recovered']);
    await expect(x.run('read', () => Promise.resolve('again'), 'k')).resolves.toBe('again');
    x.close();
  });
});
