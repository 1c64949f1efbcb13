import { describe, expect, it, vi } from 'vitest';
import type { CallOptions, LockMode } from '../../src/options.js';
import { CallShapes, MAX_SHAPES } from '../../src/options/shapes.js';
import { CALL_DEFAULTS, type ResolvedDefaults } from '../../src/options/schema.js';
import { refusal } from '../support/refusal.js';

const defaults = CALL_DEFAULTS as ResolvedDefaults;


describe('call options resolved once per shape', () => {
  it('two objects that say the same thing share one frozen resolution', () => {
    const shapes = new CallShapes(defaults);
    const a = shapes.resolve({ ttl: 1000, lock: 'single' }, 'k1');
    const b = shapes.resolve({ ttl: 1000, lock: 'single' }, 'k2');
    expect(b).toBe(a);
    expect(Object.isFrozen(a)).toBe(true);
    expect(a).toMatchObject({ ttl: 1000, lock: 'single', lockTtl: 10_000, signal: undefined });
    expect(shapes.size).toBe(1);
  });

  it('many shapes interleaved (more than are matched in place) each resolve to their own values', () => {
    const shapes = new CallShapes(defaults);
    const locks: LockMode[] = ['none', 'local', 'single'];
    for (let round = 0; round < 3; round++) {
      for (let n = 0; n < 12; n++) {
        const lock = locks[n % 3] as LockMode;
        // Same names, another order every other shape: order is part of a shape, never a reason to mix two.
        const options: CallOptions = n % 2 === 0 ? { ttl: 1000 + n, lock } : { lock, ttl: 1000 + n };
        expect(shapes.resolve(options, 'k')).toMatchObject({ ttl: 1000 + n, lock });
        expect(shapes.resolve({ ...options, signal: undefined }, 'k').signal).toBeUndefined();
      }
    }
  });

  it('a reused options object mutated later is read afresh: a bad value is refused, a good one applies', () => {
    const shapes = new CallShapes(defaults);
    const options: CallOptions = { ttl: 1000, lock: 'single' };
    expect(shapes.resolve(options, 'k').ttl).toBe(1000);
    options.ttl = -1;
    const err = refusal(() => shapes.resolve(options, 'k'));
    expect(err).toMatchObject({ option: 'ttl', value: -1 });
    options.ttl = 2000;
    options.lock = 'none';
    expect(shapes.resolve(options, 'k')).toMatchObject({ ttl: 2000, lock: 'none' });
  });

  it('a bad option after a good one with the same names is refused, naming option, value and type', () => {
    const shapes = new CallShapes(defaults);
    shapes.resolve({ ttl: 1000, lock: 'single' }, 'k');
    const err = refusal(() => shapes.resolve({ ttl: 1000, lock: 'bogus' as LockMode }, 'k'));
    expect(err).toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'lock', value: 'bogus' });
    expect(err.message).toContain('"bogus" (string)');
    // Same names, same string form of the value, another type.
    shapes.resolve({ ttl: 1000, forceFresh: true }, 'k');
    expect(refusal(() => shapes.resolve({ ttl: 1000, forceFresh: 'true' as unknown as boolean }, 'k'))).toMatchObject({ option: 'forceFresh', value: 'true' });
    // A string value cannot spell a remembered shape's id.
    shapes.resolve({ lock: 'single', ttl: 5 }, 'k');
    expect(refusal(() => shapes.resolve({ lock: 'single;ttl=5' as LockMode }, 'k'))).toMatchObject({ option: 'lock' });
    expect(refusal(() => shapes.resolve({ ttl: 1000, bogus: 1 } as CallOptions, 'k'))).toMatchObject({ option: 'bogus' });
  });

  it('the signal is per call and never remembered: each call gets its own, and a bad one is refused', () => {
    const shapes = new CallShapes(defaults);
    const a = new AbortController().signal;
    const b = new AbortController().signal;
    const withA = shapes.resolve({ ttl: 1000, signal: a }, 'k');
    const withB = shapes.resolve({ signal: b, ttl: 1000 }, 'k');
    expect(withA.signal).toBe(a);
    expect(withB.signal).toBe(b);
    expect(Object.isFrozen(withB)).toBe(true);
    expect(shapes.resolve({ ttl: 1000 }, 'k').signal).toBeUndefined();
    expect(shapes.resolve({ ttl: 1000, signal: undefined }, 'k').signal).toBeUndefined();
    expect(refusal(() => shapes.resolve({ ttl: 1000, signal: 'no' as unknown as AbortSignal }, 'k'))).toMatchObject({ option: 'signal', value: 'no' });
    expect(shapes.resolve({ ttl: 1000, signal: a }, 'k').signal).toBe(a);
  });

  it('tags are per call: one shape for every tags array, each call gets its own (validated) tags, a bad one is refused, an array mutated in place is read afresh', () => {
    const shapes = new CallShapes(defaults);
    const t1 = ['user:1', 'org:3'];
    expect(shapes.resolve({ ttl: 1000, tags: t1 }, 'k').tags).toEqual(['user:1', 'org:3']);
    expect(shapes.resolve({ ttl: 1000, tags: ['user:2'] }, 'k').tags).toEqual(['user:2']);
    expect(shapes.resolve({ ttl: 1000, tags: ['a', 'a'] }, 'k').tags).toEqual(['a']);
    expect(shapes.size).toBe(1);
    t1.push('org:4');
    expect(shapes.resolve({ ttl: 1000, tags: t1 }, 'k').tags).toEqual(['user:1', 'org:3', 'org:4']);
    t1.push('');
    expect(refusal(() => shapes.resolve({ ttl: 1000, tags: t1 }, 'k'))).toMatchObject({ option: 'tags', value: '' });
    expect(refusal(() => shapes.resolve({ ttl: 1000, tags: 'org:3' as unknown as string[] }, 'k'))).toMatchObject({ option: 'tags', value: 'org:3' });
    expect(shapes.resolve({ ttl: 1000 }, 'k').tags).toBeUndefined();
    expect(shapes.resolve({ ttl: 1000, tags: undefined }, 'k').tags).toBeUndefined();
    expect(Object.isFrozen(shapes.resolve({ ttl: 1000, tags: ['x'] }, 'k'))).toBe(true);
  });

  it('a lock policy that is a function of the key (cache defaults) is asked for every call, with its key', () => {
    const policy = vi.fn((key: string): LockMode => (key.startsWith('n') ? 'none' : 'single'));
    const shapes = new CallShapes({ ...defaults, lock: policy });
    const modes = ['n1', 'k1', 'n2', 'k1'].map((key) => shapes.resolve({ ttl: 1000 }, key).lock);
    expect(modes).toEqual(['none', 'single', 'none', 'single']);
    expect(policy.mock.calls.map(([key]) => key)).toEqual(['n1', 'k1', 'n2', 'k1']);
    // A policy answering garbage is still refused per call.
    const bad = new CallShapes({ ...defaults, lock: (key: string) => (key === 'x' ? ('bogus' as LockMode) : 'single') });
    expect(bad.resolve({ ttl: 1000 }, 'k').lock).toBe('single');
    expect(refusal(() => bad.resolve({ ttl: 1000 }, 'x'))).toMatchObject({ option: 'lock', value: 'bogus' });
  });

  it('a lock function or a refreshAhead object given per call is resolved per call, not remembered', () => {
    const shapes = new CallShapes(defaults);
    const policy = vi.fn((key: string): LockMode => (key === 'a' ? 'local' : 'none'));
    expect(shapes.resolve({ ttl: 1000, lock: policy }, 'a').lock).toBe('local');
    expect(shapes.resolve({ ttl: 1000, lock: policy }, 'b').lock).toBe('none');
    expect(policy).toHaveBeenCalledTimes(2);
    const ahead = { beta: 1 };
    expect(shapes.resolve({ ttl: 1000, refreshAhead: ahead }, 'a').refreshAhead).toEqual({ beta: 1 });
    ahead.beta = -1;
    expect(refusal(() => shapes.resolve({ ttl: 1000, refreshAhead: ahead }, 'a'))).toMatchObject({ option: 'refreshAhead.beta', value: -1 });
    expect(shapes.size).toBe(0);
  });

  it('memory is bounded: a caller making distinct shapes without end keeps at most MAX_SHAPES', () => {
    const shapes = new CallShapes(defaults);
    for (let ttl = 1; ttl <= MAX_SHAPES * 4; ttl++) expect(shapes.resolve({ ttl }, 'k').ttl).toBe(ttl);
    expect(shapes.size).toBe(MAX_SHAPES);
    // The newest are kept (and still answer), the oldest were evicted and resolve again correctly.
    expect(shapes.resolve({ ttl: MAX_SHAPES * 4 }, 'k')).toBe(shapes.resolve({ ttl: MAX_SHAPES * 4 }, 'k'));
    expect(shapes.resolve({ ttl: 1 }, 'k').ttl).toBe(1);
    expect(shapes.size).toBe(MAX_SHAPES);
  });
});
