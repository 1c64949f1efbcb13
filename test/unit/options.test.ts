import { describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../../src/errors.js';
import {
  DEFAULTS,
  loaderTimeout,
  lockModeFor,
  physicalTtl,
  pollDelay,
  resolveCacheOptions,
  resolveCallOptions,
  watchdogInterval,
  type CacheOptions,
} from '../../src/options.js';

/** A structural stand-in: option validation only checks the shape, and never sends a command. */
const fakeClient = { defineCommand: () => undefined, duplicate: () => undefined } as unknown as CacheOptions['redis'];

describe('effective values (pure)', () => {
  it.each([
    [1000, 0, 0, 1000],
    [1000, 500, 0, 1500],
    [1000, 500, 2000, 3000],
    [1000, 5000, 2000, 6000],
    [1, 2 ** 30, 0, 1 + 2 ** 30],
  ])('physicalTtl(ttl %i, staleTtl %i, failSafeTtl %i) is ttl + max(staleTtl, failSafeTtl) = %i', (ttl, stale, failSafe, expected) => {
    expect(physicalTtl(ttl, stale, failSafe)).toBe(expected);
  });

  it.each([
    // hasFallback, soft, hard → which timeout the caller waits for
    [true, 100, 0, 'soft', 100],
    [true, 100, 1000, 'soft', 100],
    [true, 1000, 100, 'hard', 100], // a soft timeout past the hard one never applies
    [true, 0, 1000, 'hard', 1000],
    [false, 100, 1000, 'hard', 1000], // no fallback value: a soft timeout has nothing to serve
    [false, 100, 0, 'none', 0],
    [true, 0, 0, 'none', 0],
  ] as const)('loaderTimeout(fallback %s, soft %i, hard %i) → %s %i', (fallback, soft, hard, kind, ms) => {
    expect(loaderTimeout(fallback, soft, hard)).toEqual({ kind, ms });
  });

  it.each([
    [10_000, 3333],
    [3, 1],
    [1, 1],
    [2, 1],
  ])('watchdogInterval(%i) extends at a third of the lock ttl, at least 1 ms: %i', (ttl, expected) => {
    expect(watchdogInterval(ttl)).toBe(expected);
  });

  it.each([
    [250, 10_000, 0, 125],
    [250, 10_000, 0.999, 375],
    [250, 100, 0.5, 100],
    [250, 0, 0.5, 0],
    [250, -5, 0.5, 0],
  ])('pollDelay(%i, remaining %i, rand %f) is jittered to [0.5,1.5) and capped by the deadline: %i', (interval, remaining, rand, expected) => {
    expect(pollDelay(interval, remaining, rand)).toBe(expected);
  });

  it.each([
    ['single', 'a', 'single'],
    ['none', 'a', 'none'],
  ] as const)('lockModeFor(%s) is the mode itself', (policy, key, expected) => {
    expect(lockModeFor(policy, key)).toBe(expected);
  });

  it('lockModeFor evaluates a policy function on the key', () => {
    const policy = (k: string) => (k.startsWith('billing:') ? 'redlock' : 'local');
    expect(lockModeFor(policy, 'billing:1')).toBe('redlock');
    expect(lockModeFor(policy, 'user:1')).toBe('local');
  });

  it('lockModeFor rejects a policy function returning an unknown mode with a typed error', () => {
    expect(() => lockModeFor(() => 'bogus' as never, 'k')).toThrow(InvalidOptionError);
  });
});

describe('resolveCallOptions', () => {
  const defaults = resolveCacheOptions({ redis: fakeClient }).defaults;

  it('a bare number is the ttl and every other option takes its DEFAULTS value', () => {
    const r = resolveCallOptions(defaults, 5000, 'k');
    expect(r).toEqual({
      ttl: 5000,
      staleTtl: DEFAULTS.staleTtl,
      lock: DEFAULTS.lock,
      lockTtl: DEFAULTS.lockTtl,
      waitTimeout: DEFAULTS.waitTimeout,
      onWaitTimeout: DEFAULTS.onWaitTimeout,
      pollInterval: DEFAULTS.pollInterval,
      signal: undefined,
      failSafeTtl: DEFAULTS.failSafeTtl,
      failBackoff: DEFAULTS.failBackoff,
      softTimeout: DEFAULTS.softTimeout,
      hardTimeout: DEFAULTS.hardTimeout,
    });
    expect(Object.isFrozen(r)).toBe(true);
  });

  it('per-call options win over cache defaults, which win over DEFAULTS', () => {
    const d = resolveCacheOptions({ redis: fakeClient, defaults: { ttl: 100, lockTtl: 3000, lock: 'local' } }).defaults;
    const r = resolveCallOptions(d, { lockTtl: 2000 }, 'k');
    expect([r.ttl, r.lockTtl, r.lock, r.waitTimeout]).toEqual([100, 2000, 'local', DEFAULTS.waitTimeout]);
  });

  it('a missing ttl (neither per call nor in defaults) is a typed error naming "ttl"', () => {
    expect(() => resolveCallOptions(defaults, {}, 'k')).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'ttl' }));
  });

  const bad: [string, unknown][] = [
    ['ttl', 0], ['ttl', -1], ['ttl', 1.5], ['ttl', Number.NaN], ['ttl', Number.POSITIVE_INFINITY], ['ttl', '100'], ['ttl', 2 ** 31],
    ['staleTtl', -1], ['staleTtl', 0.5], ['lockTtl', 0], ['waitTimeout', -5], ['pollInterval', 0],
    ['lock', 'mutex'], ['lock', 7], ['onWaitTimeout', 'wait'], ['signal', {}], ['bogus', 1],
  ];
  it.each(bad)('option %s = %o is rejected with ERR_INVALID_OPTION naming the option and the value', (option, value) => {
    const input = { ttl: 1000, [option]: value };
    let caught: unknown;
    try {
      resolveCallOptions(defaults, input, 'k');
    } catch (e) {
      caught = e;
    }
    expect(caught).toBeInstanceOf(InvalidOptionError);
    const err = caught as InvalidOptionError;
    expect(err.code).toBe('ERR_INVALID_OPTION');
    expect(err.option).toBe(option);
    expect(err.message).toContain(option);
    expect(err.key).toBe('k');
  });
});

describe('resolveCacheOptions', () => {
  it('is frozen and fills DEFAULTS', () => {
    const r = resolveCacheOptions({ redis: fakeClient });
    expect(Object.isFrozen(r)).toBe(true);
    expect(r.prefix).toBe(DEFAULTS.prefix);
    expect(r.redisTimeout).toBe(DEFAULTS.redisTimeout);
    expect(r.local).toBe(false);
  });

  const bad: [string, Record<string, unknown>][] = [
    ['redis', { redis: undefined }],
    ['redis', { redis: {} }],
    ['prefix', { prefix: 'a{b' }],
    ['prefix', { prefix: '' }],
    ['prefix', { prefix: 42 }],
    ['local.max', { local: { max: 0 } }],
    ['local', { local: 'yes' }],
    ['redisTimeout', { redisTimeout: 0 }],
    ['maxValueBytes', { maxValueBytes: -1 }],
    ['defaults.bogus', { defaults: { bogus: 1 } }],
    ['defaults.signal', { defaults: { signal: new AbortController().signal } }],
    ['lockTtl', { defaults: { lockTtl: 'long' } }],
    ['typo', { typo: true }],
    ['clock', { clock: { now: 5 } }],
  ];
  it.each(bad)('rejects a bad %s with ERR_INVALID_OPTION', (option, extra) => {
    expect(() => resolveCacheOptions({ redis: fakeClient, ...extra })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION', option }),
    );
  });
});
