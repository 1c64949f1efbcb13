import { createHash } from 'node:crypto';
import clusterKeySlot from 'cluster-key-slot';
import { describe, expect, it } from 'vitest';
import { InvalidKeyError } from '../../src/errors.js';
import { entryKeys, slotTag, validateKey } from '../../src/keys.js';

const calculateSlot = clusterKeySlot as (key: string) => number;

const HOSTILE = ['', '}', '}abc', '{x}', 'a{b}c', '{', '{}', 'x:lock', 'x', 'v:x', 'l:x', '\r\n', '\0', '*', 'a?[b]\\', 'ü', '😀', 'a'.repeat(1024)];

describe('entry keys', () => {
  it.each(HOSTILE.filter((k) => k !== ''))('all keys of %j, and its wake channel, share one Cluster slot', (key) => {
    const k = entryKeys('sg', key);
    const slot = calculateSlot(k.value);
    expect(calculateSlot(k.lock)).toBe(slot);
    expect(calculateSlot(k.fence)).toBe(slot);
    expect(calculateSlot(k.backoff)).toBe(slot);
    // A script may SPUBLISH only on a channel of its keys' slot (the channel rule, lock/scripts.ts).
    expect(calculateSlot(k.wake)).toBe(slot);
  });

  it('distinct user keys give disjoint sets of Redis keys (no x:lock-style collisions)', () => {
    const seen = new Map<string, string>();
    const inputs = [...HOSTILE.filter((k) => k !== ''), 'a', 'a:', ':a', 'a:v', 'a:l:a', 'sg', 'sg:{x}:v:a'];
    for (let i = 0; i < 2000; i++) inputs.push(`k${i}`, `k${i}:lock`, `k${i}:v`);
    for (const key of inputs) {
      for (const redisKey of Object.values<string>({ ...entryKeys('sg', key) })) {
        const owner = seen.get(redisKey);
        expect(owner === undefined || owner === key, `${redisKey} is shared by ${owner} and ${key}`).toBe(true);
        seen.set(redisKey, key);
      }
    }
    expect(seen.size).toBe(inputs.length * 5); // value, lock, fence, backoff, wake channel
  });

  it('two prefixes never produce the same Redis key', () => {
    const a = Object.values(entryKeys('sg', 'x:y'));
    const b = Object.values(entryKeys('sg:x', 'y'));
    for (const k of a) expect(b).not.toContain(k);
  });

  it('the remembered keys of a key follow its prefix: one key used under two prefixes in turn gets each prefix\'s keys', () => {
    for (let i = 0; i < 3; i++) {
      for (const prefix of ['sg', 'ns:7']) {
        const k = entryKeys(prefix, 'same');
        expect(k.value).toBe(`${prefix}:{${slotTag('same')}}:v:same`);
        expect(k.fence).toBe(`${prefix}:{${slotTag('same')}}:f:same`);
      }
    }
    expect(Object.isFrozen(entryKeys('sg', 'same'))).toBe(true);
  });
});

describe('validateKey', () => {
  it.each([
    ['an empty key', ''],
    ['a number', 42],
    ['undefined', undefined],
    ['null', null],
    ['an object', { id: 1 }],
    ['a lone high surrogate', '\uD800'],
    ['a lone low surrogate', '\uDC00'],
    ['a surrogate pair reversed', '\uDC00\uD800'],
    ['a key over maxKeyLength', 'x'.repeat(1025)],
  ])('rejects %s with ERR_INVALID_KEY', (_what, key) => {
    expect(() => validateKey(key, 1024)).toThrow(InvalidKeyError);
    expect(() => validateKey(key, 1024)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_KEY' }));
  });

  it.each(['a', '😀', '\r\n\0', '*?[', 'x'.repeat(1024), '\uFFFD'])('accepts %j', (key) => {
    expect(() => validateKey(key, 1024)).not.toThrow();
  });
});

describe('slotTag', () => {
  const sha1Tag = (key: string) => createHash('sha1').update(key, 'utf8').digest('hex').slice(0, 8);

  it('a remembered tag equals the SHA-1 tag, for hot keys, keys past the memo bound and long keys alike', () => {
    const keys = [...Array.from({ length: 5000 }, (_, i) => `user:${i}`), 'x'.repeat(129), 'é{}:'.repeat(40)];
    for (let pass = 0; pass < 3; pass++) {
      for (const key of keys) expect(slotTag(key)).toBe(sha1Tag(key));
    }
  });
});
