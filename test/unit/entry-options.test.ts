import { describe, expect, it } from 'vitest';
import { refreshPolicyFor } from '../../src/entry.js';
import { InvalidOptionError } from '../../src/errors.js';
import { DEFAULTS, entryCall, resolveCallOptions, validateEntryOptions } from '../../src/options.js';
import { CALL_DEFAULTS } from '../../src/options/schema.js';

const call = resolveCallOptions(CALL_DEFAULTS, { ttl: 3_600_000, staleTtl: 10, failSafeTtl: 20, refreshAhead: 0.8, lockTtl: 999 }, 'k');

describe('entryCall: the options one entry is written with', () => {
  it.each([
    ['no overrides: the call itself', undefined, { ttl: 3_600_000, staleTtl: 10, failSafeTtl: 20, refreshAhead: 0.8 }],
    ['ttl only', { ttl: 5_000 }, { ttl: 5_000, staleTtl: 10, failSafeTtl: 20, refreshAhead: 0.8 }],
    ['windows', { staleTtl: 0, failSafeTtl: 60_000 }, { ttl: 3_600_000, staleTtl: 0, failSafeTtl: 60_000, refreshAhead: 0.8 }],
    ['refreshAhead off', { refreshAhead: 0 }, { ttl: 3_600_000, staleTtl: 10, failSafeTtl: 20, refreshAhead: 0 }],
    ['XFetch form', { refreshAhead: { beta: 1 } }, { ttl: 3_600_000, staleTtl: 10, failSafeTtl: 20, refreshAhead: { beta: 1 } }],
  ] as const)('%s', (_name, overrides, expected) => {
    const out = entryCall(call, overrides);
    expect(out).toMatchObject(expected);
    expect(out.lockTtl).toBe(999); // nothing else changes
    expect(Object.isFrozen(out)).toBe(true);
    if (overrides === undefined) expect(out).toBe(call);
  });
});

describe('refreshPolicyFor: the entry’s own policy wins over the caller’s', () => {
  it.each([
    [0, undefined, 0],
    [0.5, undefined, 0.5],
    [0, { fence: 1, ttlMs: 1, loadMs: 0 }, 0],
    [0, { fence: 1, ttlMs: 1, loadMs: 0, refreshAhead: 0.7 }, 0.7],
    [0.5, { fence: 1, ttlMs: 1, loadMs: 0, refreshAhead: 0 }, 0],
    [0.5, { fence: 1, ttlMs: 1, loadMs: 0, refreshAhead: { beta: 2 } }, { beta: 2 }],
  ] as const)('call %o, entry facts %o → %o', (policy, facts, expected) => {
    expect(refreshPolicyFor(policy, facts)).toEqual(expected);
  });
});

describe('validateEntryOptions (ctx.setOptions)', () => {
  it('accepts the four entry options, validated like call options; absent values stay absent', () => {
    expect(validateEntryOptions({ ttl: 5, staleTtl: 0, failSafeTtl: 7, refreshAhead: { beta: 1 } }, 'k')).toEqual({ ttl: 5, staleTtl: 0, failSafeTtl: 7, refreshAhead: { beta: 1 } });
    expect(validateEntryOptions({ ttl: undefined }, 'k')).toEqual({});
  });

  it.each([
    ['ttl', { ttl: 0 }, 'ctx.setOptions.ttl', 0],
    ['ttl', { ttl: 1.5 }, 'ctx.setOptions.ttl', 1.5],
    ['staleTtl', { staleTtl: -1 }, 'ctx.setOptions.staleTtl', -1],
    ['failSafeTtl', { failSafeTtl: '5' }, 'ctx.setOptions.failSafeTtl', '5'],
    ['refreshAhead', { refreshAhead: 1 }, 'ctx.setOptions.refreshAhead', 1],
    ['an option the loader may not set', { lockTtl: 5 }, 'ctx.setOptions.lockTtl', 5],
    ['not an object', 5_000, 'ctx.setOptions', 5_000],
  ] as const)('refuses %s with an InvalidOptionError naming the option, the value and its type', (_what, input, option, value) => {
    let error: unknown;
    try {
      validateEntryOptions(input, 'key1');
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect(error).toMatchObject({ code: 'ERR_INVALID_OPTION', option, value, key: 'key1' });
    expect((error as Error).message).toContain(`(${typeof value})`);
  });

  it('forceFresh is per call only: not in DEFAULTS, refused in cache defaults', () => {
    expect(Object.hasOwn(DEFAULTS, 'forceFresh')).toBe(false);
    expect(resolveCallOptions(CALL_DEFAULTS, { ttl: 1, forceFresh: true }, 'k').forceFresh).toBe(true);
    expect(() => resolveCallOptions(CALL_DEFAULTS, { ttl: 1, forceFresh: 1 as never }, 'k')).toThrow(InvalidOptionError);
  });
});
