import { describe, expect, it } from 'vitest';
import { describe as describeValue, InvalidOptionError } from '../../src/errors.js';
import {
  DEFAULTS,
  graceWindow,
  loaderTimeout,
  lockModeFor,
  mayWaitOnOthers,
  physicalTtl,
  pollDelay,
  resolveCacheOptions,
  resolveCallOptions,
  watchdogInterval,
  type CacheOptions,
} from '../../src/options.js';
import { CACHE_FIELDS, CALL_FIELDS } from '../../src/options/schema.js';
import { UNSAFE } from '../../src/unsafe.js';
import { refusal as invalid } from '../support/refusal.js';

/** A structural stand-in: option validation only checks the shape, and never sends a command. */
const fakeClient = { defineCommand: () => undefined, duplicate: () => undefined } as unknown as CacheOptions['redis'];


/** The message names the option, the value and its type (describe() prints `5 (number)`). */
function expectNamed(err: InvalidOptionError, option: string, value: unknown): void {
  expect(err.code).toBe('ERR_INVALID_OPTION');
  expect(err.option).toBe(option);
  expect(err.message).toContain(`"${option}"`);
  expect(err.message).toContain(describeValue(value));
}

describe('effective values (pure)', () => {
  it.each([
    [0, 0, 0],
    [500, 0, 500],
    [0, 2000, 2000],
    [5000, 2000, 5000],
  ])('graceWindow(staleTtl %i, failSafeTtl %i) is the longer of the two: %i', (stale, failSafe, expected) => {
    expect(graceWindow(stale, failSafe)).toBe(expected);
  });

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

  it.each([
    ['none', false],
    ['local', false],
    ['single', true],
    ['redlock', true],
  ] as const)('mayWaitOnOthers(%s) is %s: only an exclusive lock is ever refused', (mode, expected) => {
    expect(mayWaitOnOthers(mode)).toBe(expected);
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
      refreshAhead: DEFAULTS.refreshAhead,
      ttlJitter: DEFAULTS.ttlJitter,
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
  it.each(bad)('option %s = %o is rejected with ERR_INVALID_OPTION naming the option, the value and its type', (option, value) => {
    const err = invalid(() => resolveCallOptions(defaults, { ttl: 1000, [option]: value }, 'k'));
    expectNamed(err, option, value);
    expect(err.key).toBe('k');
  });

  it('an unknown call option lists exactly the schema names', () => {
    const err = invalid(() => resolveCallOptions(defaults, { ttl: 1, stalTtl: 2 } as never, 'k'));
    expect(err.message).toContain(`known: ${Object.keys(CALL_FIELDS).join(', ')}.`);
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
    ['local.bogus', { local: { max: 10, bogus: 1 } }],
    ['local.invalidation', { local: { max: 10, invalidation: 'server' } }],
    ['local.max', { local: { invalidation: 'tracking' } }],
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

  const badValues: [string, unknown][] = [
    ['prefix', 42], ['redisTimeout', 1.5], ['maxKeyLength', 0], ['maxValueBytes', '1mb'], ['breakerThreshold', -1],
    ['breakerCooldown', 2 ** 31], ['maxWaitersPerKey', null], ['degradedMemo', -1], ['degradedMemo', 1.5], ['allowInsecureTls', 'yes'], ['lock', 'mutex'], ['defaults', 5], ['notes', 'shard'], ['notes', 1],
  ];
  it.each(badValues)('createCache option %s = %o: the message names the option, the value and its type', (option, value) => {
    expectNamed(invalid(() => resolveCacheOptions({ redis: fakeClient, [option]: value })), option, value);
  });

  it('only undefined counts as absent: undefined takes the default', () => {
    expect(resolveCacheOptions({ redis: fakeClient, prefix: undefined, redisTimeout: undefined }).prefix).toBe(DEFAULTS.prefix);
  });

  it('the cache-wide lock is the default lock; giving it twice is an error naming "lock"', () => {
    expect(resolveCacheOptions({ redis: fakeClient, lock: 'local' }).defaults.lock).toBe('local');
    expect(resolveCacheOptions({ redis: fakeClient, defaults: { lock: 'none' } }).defaults.lock).toBe('none');
    expectNamed(invalid(() => resolveCacheOptions({ redis: fakeClient, lock: 'local', defaults: { lock: 'none' } })), 'lock', 'local');
  });

  it('replicaAck: { replicas, timeout } frozen; off unless given; bad parts, unknown parts and a timeout not below redisTimeout are named', () => {
    expect(resolveCacheOptions({ redis: fakeClient }).replicaAck).toBeUndefined();
    const ack = resolveCacheOptions({ redis: fakeClient, replicaAck: { replicas: 1, timeout: 100 } }).replicaAck;
    expect(ack).toEqual({ replicas: 1, timeout: 100 });
    expect(Object.isFrozen(ack)).toBe(true);
    expectNamed(invalid(() => resolveCacheOptions({ redis: fakeClient, replicaAck: 1 as never })), 'replicaAck', 1);
    expectNamed(invalid(() => resolveCacheOptions({ redis: fakeClient, replicaAck: { replicas: 0, timeout: 100 } })), 'replicaAck.replicas', 0);
    expectNamed(invalid(() => resolveCacheOptions({ redis: fakeClient, replicaAck: { replicas: 1, timeout: '100' as never } })), 'replicaAck.timeout', '100');
    expectNamed(invalid(() => resolveCacheOptions({ redis: fakeClient, replicaAck: { replicas: 1, timeout: 100, wait: 1 } as never })), 'replicaAck.wait', 1);
    expectNamed(invalid(() => resolveCacheOptions({ redis: fakeClient, redisTimeout: 100, replicaAck: { replicas: 1, timeout: 100 } })), 'replicaAck.timeout', 100);
  });

  it("notes: 'broadcast' by default; 'sharded' needs local off or tracked, and with L1 on notes the error names local and its value", () => {
    expect(resolveCacheOptions({ redis: fakeClient }).notes).toBe('broadcast');
    expect(resolveCacheOptions({ redis: fakeClient, notes: 'sharded' }).notes).toBe('sharded');
    expect(resolveCacheOptions({ redis: fakeClient, notes: 'broadcast', local: { max: 10 } }).notes).toBe('broadcast');
    expectNamed(invalid(() => resolveCacheOptions({ redis: fakeClient, notes: 'sharded', local: { max: 10 } })), 'local', { max: 10 });
    expectNamed(invalid(() => resolveCacheOptions({ redis: fakeClient, notes: 'sharded', local: { max: 10, invalidation: 'notes' } })), 'local', { max: 10, invalidation: 'notes' });
    // Under tracking the server drops L1 copies: L1 with sharded notes is allowed.
    expect(resolveCacheOptions({ redis: fakeClient, notes: 'sharded', local: { max: 10, invalidation: 'tracking' } }).local).toEqual({ max: 10, invalidation: 'tracking' });
  });

  it("local.invalidation: 'notes' by default; 'tracking' kept; a bad value, and tracking with a Cluster client, named with the value", () => {
    expect(resolveCacheOptions({ redis: fakeClient, local: { max: 10 } }).local).toEqual({ max: 10, invalidation: DEFAULTS.invalidation });
    expect(DEFAULTS.invalidation).toBe('notes');
    expect(resolveCacheOptions({ redis: fakeClient, local: { max: 10, invalidation: 'tracking' } }).local).toEqual({ max: 10, invalidation: 'tracking' });
    expectNamed(invalid(() => resolveCacheOptions({ redis: fakeClient, local: { max: 10, invalidation: 'push' as never } })), 'local.invalidation', 'push');
    const cluster = { ...fakeClient, isCluster: true } as unknown as CacheOptions['redis'];
    expect(resolveCacheOptions({ redis: cluster, local: { max: 10 } }).local).toEqual({ max: 10, invalidation: 'notes' });
    expectNamed(invalid(() => resolveCacheOptions({ redis: cluster, local: { max: 10, invalidation: 'tracking' } })), 'local.invalidation', 'tracking');
  });

  it('cache defaults are frozen, fill every call default, and keep a given ttl', () => {
    const d = resolveCacheOptions({ redis: fakeClient, defaults: { ttl: 5, staleTtl: 7 } }).defaults;
    expect(Object.isFrozen(d)).toBe(true);
    expect(d).toEqual({ ...DEFAULTS_OF_CALL, ttl: 5, staleTtl: 7 });
  });
});

/** The call-level defaults, spelled out: the schema must not change one by accident. */
const DEFAULTS_OF_CALL = {
  staleTtl: 0, lock: 'single', lockTtl: 10_000, waitTimeout: 5_000, onWaitTimeout: 'compute', pollInterval: 250,
  failSafeTtl: 0, failBackoff: 0, softTimeout: 0, hardTimeout: 0, refreshAhead: 0, ttlJitter: 0,
};

describe('DEFAULTS', () => {
  it('is frozen and holds exactly these values (every level in one flat object; no ttl, signal or clock)', () => {
    expect(Object.isFrozen(DEFAULTS)).toBe(true);
    expect(DEFAULTS).toEqual({
      prefix: 'sg', local: false, redisTimeout: 500, maxKeyLength: 1024, maxValueBytes: 1024 * 1024,
      breakerThreshold: 5, breakerCooldown: 1000, maxWaitersPerKey: 10_000, degradedMemo: 10_000, allowInsecureTls: false, notes: 'broadcast',
      ...DEFAULTS_OF_CALL,
      driftFactor: 0.01, retryCount: 3, retryDelay: 200, retryJitter: 100, nodeTimeout: 100, onNoQuorum: 'local',
      invalidation: 'notes',
    });
  });
});

describe('redlock options', () => {
  const nodes = [fakeClient, fakeClient, fakeClient];

  it('fills DEFAULTS and freezes the result and its node list', () => {
    const r = resolveCacheOptions({ redis: fakeClient, redlock: { nodes } }).redlock;
    expect(r).toEqual({
      nodes, driftFactor: DEFAULTS.driftFactor, retryCount: DEFAULTS.retryCount, retryDelay: DEFAULTS.retryDelay,
      retryJitter: DEFAULTS.retryJitter, nodeTimeout: DEFAULTS.nodeTimeout, onNoQuorum: DEFAULTS.onNoQuorum,
    });
    expect(Object.isFrozen(r)).toBe(true);
    expect(Object.isFrozen(r?.nodes)).toBe(true);
  });

  const bad: [string, Record<string, unknown>, unknown][] = [
    ['redlock.nodes', { nodes: [fakeClient, fakeClient] }, [fakeClient, fakeClient]],
    ['redlock.nodes', {}, undefined],
    ['redlock.driftFactor', { nodes, driftFactor: 1 }, 1],
    ['redlock.retryCount', { nodes, retryCount: 101 }, 101],
    ['redlock.retryDelay', { nodes, retryDelay: -1 }, -1],
    ['redlock.retryJitter', { nodes, retryJitter: 0.5 }, 0.5],
    ['redlock.nodeTimeout', { nodes, nodeTimeout: 0 }, 0],
    ['redlock.onNoQuorum', { nodes, onNoQuorum: 'wait' }, 'wait'],
    ['redlock.retries', { nodes, retries: 3 }, 3],
  ];
  it.each(bad)('rejects %s with a message naming it, the value and its type', (option, redlock, value) => {
    expectNamed(invalid(() => resolveCacheOptions({ redis: fakeClient, redlock } as unknown as CacheOptions)), option, value);
  });
});

describe('test-only switches (options[UNSAFE])', () => {
  it('are all off unless given, and frozen', () => {
    const u = resolveCacheOptions({ redis: fakeClient }).unsafe;
    expect(u).toEqual({ unfencedWrites: false, incoherentL1: false, sharedBreaker: false, clockSkewMs: 0, tagSnapshotAtWrite: false, tagReadUnchecked: false, ignoreInvalidations: false, tagStatesUndropped: false });
    expect(Object.isFrozen(u)).toBe(true);
  });

  it('are read from the UNSAFE symbol key', () => {
    const o = { redis: fakeClient, [UNSAFE]: { unfencedWrites: true } } as CacheOptions;
    expect(resolveCacheOptions(o).unsafe).toEqual({ unfencedWrites: true, incoherentL1: false, sharedBreaker: false, clockSkewMs: 0, tagSnapshotAtWrite: false, tagReadUnchecked: false, ignoreInvalidations: false, tagStatesUndropped: false });
    const both = { redis: fakeClient, [UNSAFE]: { unfencedWrites: true, incoherentL1: true } } as CacheOptions;
    expect(resolveCacheOptions(both).unsafe).toEqual({ unfencedWrites: true, incoherentL1: true, sharedBreaker: false, clockSkewMs: 0, tagSnapshotAtWrite: false, tagReadUnchecked: false, ignoreInvalidations: false, tagStatesUndropped: false });
  });

  it.each([
    ['[UNSAFE]', 'yes', 'yes'],
    ['[UNSAFE].unfencedWrites', { unfencedWrites: 1 }, 1],
    ['[UNSAFE].fenceless', { fenceless: true }, true],
  ])('a bad switch is an InvalidOptionError naming %s', (option, switches, value) => {
    expectNamed(invalid(() => resolveCacheOptions({ redis: fakeClient, [UNSAFE]: switches } as CacheOptions)), option, value);
  });

  it('the retired unsafeUnfencedWrites option is an unknown option, and the known list names no switch', () => {
    const err = invalid(() => resolveCacheOptions({ redis: fakeClient, unsafeUnfencedWrites: true } as CacheOptions));
    expectNamed(err, 'unsafeUnfencedWrites', true);
    expect(err.message).toContain(`known: ${Object.keys(CACHE_FIELDS).join(', ')}.`);
    expect(err.message.slice(err.message.indexOf('known:'))).not.toMatch(/unsafe|unfenced|incoherent/i);
    expect(Object.keys(CACHE_FIELDS).join()).not.toMatch(/unsafe/i);
  });
});
