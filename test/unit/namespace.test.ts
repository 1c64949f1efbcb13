import { describe, expect, it } from 'vitest';
import { clearNoteKey, namespacedKey, parseClearNote, parseNamespacedKey, validateNamespace } from '../../src/namespace.js';

describe('namespacedKey: (path, generations, key) → internal key, injective', () => {
  const triples: [string[], number[], string][] = [
    [['users'], [0], 'k'],
    [['users'], [1], 'k'],
    [['users'], [0], '1\u0000k'],
    [['users'], [0], 'admins\u00000\u0000k'],
    [['users', 'admins'], [0, 0], 'k'],
    [['users', 'admins'], [0, 1], 'k'],
    [['users', 'admins'], [1, 0], 'k'],
    [['users:admins'], [0], 'k'],
    [['u'], [10], 'k'],
    [['u'], [1], '0\u0000k'],
  ];
  it('gives distinct triples distinct keys, all starting with U+0000 (refused as plain keys)', () => {
    const keys = triples.map(([s, g, k]) => namespacedKey(s, g, k));
    expect(new Set(keys).size).toBe(triples.length);
    for (const key of keys) expect(key.startsWith('\u0000')).toBe(true);
  });

  it('parseNamespacedKey inverts it: the segments and the key come back, keys holding U+0000 included', () => {
    for (const [segments, generations, key] of [...triples, [['users'], [-3], 'k'] as [string[], number[], string]]) {
      expect(parseNamespacedKey(namespacedKey(segments, generations, key))).toEqual({ segments, key });
    }
  });

  it.each([['plain'], [''], ['\u0000'], ['\u0000x\u0000users\u00000\u0000k'], ['\u00002\u0000users\u00000\u0000k'], ['\u00000\u0000k']])('parseNamespacedKey(%o) is undefined (not an internal key)', (key) => {
    expect(parseNamespacedKey(key)).toBeUndefined();
  });

  it.each([['users'], ['a.b-c_d:e'], ['x'.repeat(128)]])('accepts the name %s', (name) => {
    expect(() => validateNamespace(name)).not.toThrow();
  });
  it.each([[''], ['a b'], ['a/b'], ['{x}'], ['x'.repeat(129)], [7], [null]])('refuses the name %o with InvalidOptionError naming "namespace"', (name) => {
    expect(() => validateNamespace(name)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'namespace' }) as Error);
  });

  it('clear notes round-trip their path and id', () => {
    expect(parseClearNote(clearNoteKey('users/admins', 'abc'))).toEqual({ path: 'users/admins', id: 'abc' });
    expect(parseClearNote('nospace')).toBeUndefined();
  });
});
