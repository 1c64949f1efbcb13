import fc from 'fast-check';
import { readdirSync, readFileSync } from 'node:fs';
import { Packr } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { DecodeError, decodeEntry, encodeEntry, encodeStorable, FORMAT_VERSION } from '../../src/codec.js';
import { UnstorableValueError } from '../../src/errors.js';
import { FIXTURE_VALUES } from '../fixtures/entry-values.js';
import { decodeEntry as previousDecodeEntry } from '../fixtures/previous-codec.js';

const dir = new URL('../fixtures/entries/', import.meta.url);
const envelope = (value: unknown) => ({ value, fence: 7, loadMs: 3, writtenAt: 1, staleMs: 0, graceMs: 0, ttlMs: 1000 });

describe('wire format', () => {
  const files = readdirSync(dir).filter((f) => f.endsWith('.bin'));

  it('has a golden file for every pinned value of the current version, as sent and as the write script stamps it', () => {
    for (const name of Object.keys(FIXTURE_VALUES)) expect(files).toContain(`v${FORMAT_VERSION}-${name}.bin`);
    for (const name of Object.keys(FIXTURE_VALUES)) expect(files).toContain(`v${FORMAT_VERSION}-stamped-${name}.bin`);
  });

  it.each(files)('decodes golden file %s to its pinned value and envelope', (file) => {
    const name = file.replace(/^v\d+-(stamped-)?/, '').replace(/\.bin$/, '');
    const version = Number(/^v(\d+)-/.exec(file)?.[1]);
    const e = decodeEntry(readFileSync(new URL(file, dir)));
    expect(e.freshUntil).toBe(file.includes('-stamped-') ? 1_796_000_000_700.25 : undefined);
    expect(e.value).toEqual(FIXTURE_VALUES[name]);
    expect([e.fence, e.loadMs, e.writtenAt, e.staleMs]).toEqual([1_796_000_000_000_001, 42, 1_796_000_000_000, 500]);
    expect(e.graceMs).toBe(version === 1 ? 500 : 900); // v1 had no grace field: it equalled staleMs
    expect(e.ttlMs).toBe(version < 3 ? undefined : 700); // v1 and v2 did not carry the entry's ttl
    expect(e.refreshAhead).toEqual(version < 4 ? undefined : { beta: 1.5 }); // before v4 no entry carried its own refreshAhead
  });

  it.each(files.filter((f) => f.includes('-stamped-')))('the previous release decodes %s (this release\'s stamped entry) to the same fields', (file) => {
    const bytes = readFileSync(new URL(file, dir));
    const { freshUntil: _, ...now } = decodeEntry(bytes);
    expect(previousDecodeEntry(bytes)).toEqual(now);
  });

  it('ends every entry in the freshUntil slot the write script stamps: a float64 0 in the last 9 bytes', () => {
    const bytes = encodeEntry(envelope({ a: [1, 2] }));
    expect([...bytes.subarray(-9)]).toEqual([0xcb, 0, 0, 0, 0, 0, 0, 0, 0]);
    expect(decodeEntry(bytes).freshUntil).toBeUndefined();
  });

  it.each([[undefined], [0], [0.75], [{ beta: 2 }]])('round-trips the entry refreshAhead %o', (refreshAhead) => {
    expect(decodeEntry(encodeEntry({ ...envelope('v'), refreshAhead })).refreshAhead).toEqual(refreshAhead);
  });

  it.each(Object.entries(FIXTURE_VALUES))('round-trips %s', (_name, value) => {
    expect(decodeEntry(encodeEntry(envelope(value))).value).toEqual(value);
  });
});

describe('untrusted bytes decode to a DecodeError, never anything else', () => {
  const evil = new Packr({ structuredClone: true, moreTypes: true });
  const plain = new Packr({ useRecords: false });
  const wrap = (value: unknown, p = evil) => p.pack([FORMAT_VERSION, value, 1, 0, 0, 0, 0, 1000, null]);

  const cases: [string, Buffer][] = [
    ['empty', Buffer.alloc(0)],
    ['deep nesting 1e5', Buffer.concat([Buffer.alloc(100_000, 0x91), Buffer.from([0xc0])])],
    ['array32 length 2^32-1', Buffer.from([0xdd, 0xff, 0xff, 0xff, 0xff])],
    ['map32 length 2^32-1', Buffer.from([0xdf, 0xff, 0xff, 0xff, 0xff])],
    ['str32 length 2^32-1', Buffer.from([0xdb, 0xff, 0xff, 0xff, 0xff])],
    ['bin32 length 2^32-1', Buffer.from([0xc6, 0xff, 0xff, 0xff, 0xff])],
    ['ext32 length 2^32-1', Buffer.from([0xc9, 0xff, 0xff, 0xff, 0xff, 0x01])],
    ['truncated entry', encodeEntry(envelope({ a: 'hello' })).subarray(0, 8)],
    ['trailing garbage', Buffer.concat([encodeEntry(envelope(1)), Buffer.from([0xc1, 0xc1])])],
    ['not an array', plain.pack({ a: 1 })],
    ['unknown version', plain.pack([99, 'v', 1, 0, 0, 0])],
    ['v2 without its grace field', plain.pack([2, 'v', 1, 0, 0, 0])],
    ['v3 without its ttl field', plain.pack([3, 'v', 1, 0, 0, 0, 0])],
    ['v3 with ttl 0', plain.pack([3, 'v', 1, 0, 0, 0, 0, 0])],
    ['v3 with a string ttl', plain.pack([3, 'v', 1, 0, 0, 0, 0, '1000'])],
    ['v4 without its refreshAhead field', plain.pack([4, 'v', 1, 0, 0, 0, 0, 1000])],
    ['v4 with refreshAhead 1', plain.pack([4, 'v', 1, 0, 0, 0, 0, 1000, 1])],
    ['v4 with refreshAhead { beta: 0 }', new Packr({ useRecords: true }).pack([4, 'v', 1, 0, 0, 0, 0, 1000, { beta: 0 }])],
    ['v4 with refreshAhead { beta, extra }', new Packr({ useRecords: true }).pack([4, 'v', 1, 0, 0, 0, 0, 1000, { beta: 1, x: 1 }])],
    ['short envelope', plain.pack([1, 'v'])],
    ['negative fence', plain.pack([1, 'v', -1, 0, 0, 0])],
    ['RegExp value', wrap(/a+$/)],
    ['Error value', wrap(new Error('x'))],
    ['RegExp nested in a Map', wrap(new Map([['r', /x/]]))],
    ['cyclic structured clone', (() => { const o: Record<string, unknown> = {}; o.self = o; return wrap(o); })()],
    ['reserved byte 0xc1', Buffer.from([0xc1])],
  ];

  it.each(cases)('%s', (_name, bytes) => {
    expect(() => decodeEntry(bytes)).toThrow(DecodeError);
  });

  it('__proto__, constructor and hasOwnProperty keys never pollute a prototype or mimic a class', () => {
    const payload = plain.pack([1, JSON.parse('{"__proto__":{"polluted":1},"constructor":{"name":"Admin"},"hasOwnProperty":1}'), 1, 0, 0, 0]);
    const e = decodeEntry(payload);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    const v = e.value as Record<string, unknown>;
    expect(Object.getPrototypeOf(v)).not.toHaveProperty('polluted');
    expect(v instanceof Object && Object.getPrototypeOf(v) === Object.prototype).toBe(false); // decoded as a Map (maps stay Maps)
  });

  it('10,000 random byte strings never throw anything but DecodeError', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 256 }), (bytes) => {
        try {
          decodeEntry(Buffer.from(bytes));
        } catch (err) {
          return err instanceof DecodeError;
        }
        return true;
      }),
      { numRuns: 10_000, seed: 20261130 },
    );
  });

  it('10,000 bit-flipped or truncated valid entries never throw anything but DecodeError', () => {
    const valid = Object.values(FIXTURE_VALUES).map((v) => encodeEntry(envelope(v)));
    fc.assert(
      fc.property(fc.nat(valid.length - 1), fc.nat(), fc.nat(7), fc.boolean(), (which, pos, bit, truncate) => {
        const src = Buffer.from(valid[which] as Buffer);
        const at = pos % src.length;
        const bytes = truncate ? src.subarray(0, at) : (src.writeUInt8((src[at] as number) ^ (1 << bit), at), src);
        try {
          decodeEntry(bytes);
        } catch (err) {
          return err instanceof DecodeError;
        }
        return true;
      }),
      { numRuns: 10_000, seed: 20261130 },
    );
  });
});

describe('encodeStorable: a value that could never be read back is refused before anything is written', () => {
  const MAX = 64 * 1024;
  const refusal = (value: unknown, max = MAX): UnstorableValueError => {
    try {
      encodeStorable('k', envelope(value), max);
    } catch (err) {
      expect(err).toBeInstanceOf(UnstorableValueError);
      return err as UnstorableValueError;
    }
    throw new Error('expected UnstorableValueError');
  };
  const cyclic = () => {
    const o: Record<string, unknown> = { a: 1 };
    o.self = { back: o };
    return o;
  };
  const cyclicMap = () => {
    const m = new Map<string, unknown>();
    m.set('me', [m]);
    return m;
  };
  let deep: unknown = 1;
  for (let i = 0; i < 100_000; i++) deep = [deep];

  const cases: [string, unknown, string | RegExp][] = [
    ['a function (msgpackr would store undefined)', () => 1, 'function'],
    ['a function property', { id: 1, load: () => 1 }, 'function'],
    ['an own toJSON method (it is never called: refused as a function)', { a: 1, toJSON: () => 'x' }, 'function'],
    ['a function as a Map key', new Map([[() => 1, 'v']]), 'function'],
    ['a symbol value (msgpackr throws)', { s: Symbol('s') }, 'symbol'],
    ['a symbol in a Set', new Set([Symbol('s')]), 'symbol'],
    ['a cycle through objects', cyclic(), 'cycle'],
    ['a cycle through a Map and an array', cyclicMap(), 'cycle'],
    ['a RegExp (refused by the reader)', { at: [/a+$/] }, 'type RegExp'],
    ['an Error (refused by the reader)', new Error('x'), 'type Error'],
    ['a TypeError in a Map', new Map([['e', new TypeError('x')]]), 'type TypeError'],
    ['an ArrayBuffer (refused by the reader; typed arrays are fine)', { b: new ArrayBuffer(4) }, 'type ArrayBuffer'],
    ['nesting deeper than the encoder can go', deep, /^encode failed: .*call stack/],
  ];

  it.each(cases)('%s', (_name, value, reason) => {
    const err = refusal(value);
    expect(err.code).toBe('ERR_UNSTORABLE_VALUE');
    expect(err.key).toBe('k');
    if (typeof reason === 'string') expect(err.reason).toBe(reason);
    else expect(err.reason).toMatch(reason);
    expect(err.message).toContain(`(${err.reason})`);
    expect(err.message).toContain('Store plain data only');
  });

  it('a value whose encoding exceeds maxValueBytes: reason names both sizes, message names the option', () => {
    const err = refusal('x'.repeat(2000), 1000);
    expect(err.reason).toMatch(/^too large \(\d{4} > maxValueBytes 1000\)$/);
    expect(err.message).toContain('"maxValueBytes"');
  });

  it('a shared (acyclic) reference is not a cycle', () => {
    const shared = { n: 1 };
    expect(() => encodeStorable('k', envelope({ a: shared, b: [shared, shared] }), MAX)).not.toThrow();
  });

  it.each(Object.entries(FIXTURE_VALUES))('stores %s with exactly the bytes encodeEntry writes', (_name, value) => {
    expect(encodeStorable('k', envelope(value), MAX).equals(encodeEntry(envelope(value)))).toBe(true);
  });

  it('for 2,000 arbitrary values it either refuses with UnstorableValueError or returns bytes the reader accepts', () => {
    const arbitrary = fc.anything({
      withBigInt: true, withBoxedValues: true, withDate: true, withMap: true, withSet: true, withNullPrototype: true,
      withObjectString: true, withSparseArray: true, withTypedArray: true, maxDepth: 4,
    });
    fc.assert(
      fc.property(arbitrary, (value) => {
        let bytes: Buffer;
        try {
          bytes = encodeStorable('k', envelope(value), MAX);
        } catch (err) {
          return err instanceof UnstorableValueError;
        }
        decodeEntry(bytes); // throws (failing the property) if a stored value could not be read back
        return true;
      }),
      { numRuns: 2000, seed: 20261201 },
    );
  });
});

/** Each claim of README "What a value becomes": through Redis a value is a msgpack round trip (L1 returns the same object). */
describe('what a value becomes through Redis', () => {
  const roundTrip = <T>(value: T): unknown => decodeEntry(encodeStorable('k', envelope(value), 1024 * 1024)).value;

  it('a class instance becomes a plain object of its own enumerable fields (no prototype, methods or getters)', () => {
    class User {
      secret = 's';
      constructor(readonly id: number) {}
      get label() {
        return `user ${this.id}`;
      }
      greet() {
        return 'hi';
      }
    }
    const out = roundTrip(new User(7)) as Record<string, unknown>;
    expect(Object.getPrototypeOf(out)).toBe(Object.prototype);
    expect(out).toEqual({ secret: 's', id: 7 });
    expect('label' in out).toBe(false);
  });

  it("a class instance's toJSON() is what is stored (and checked); a plain object's own toJSON is a function: refused", () => {
    class Money {
      constructor(readonly cents: number) {}
      toJSON() {
        return { eur: this.cents / 100 };
      }
    }
    class Sneaky {
      toJSON() {
        return { run: () => 1 };
      }
    }
    expect(roundTrip(new Money(250))).toEqual({ eur: 2.5 });
    expect(() => roundTrip(new Sneaky())).toThrow(expect.objectContaining({ reason: 'function' }));
    expect(() => roundTrip({ a: 1, toJSON: () => 'x' })).toThrow(expect.objectContaining({ reason: 'function' }));
  });

  it('a URL becomes its href string (its toJSON); a boxed primitive becomes a plain object of its own properties', () => {
    expect(roundTrip(new URL('https://example.com/a?b=1'))).toBe('https://example.com/a?b=1');
    expect(roundTrip([new Number(3), new String('ab')])).toEqual([{}, { 0: 'a', 1: 'b' }]);
  });

  it('-0 becomes 0; NaN and ±Infinity stay', () => {
    expect(Object.is(roundTrip(-0), 0)).toBe(true);
    expect(roundTrip([NaN, Infinity, -Infinity])).toEqual([NaN, Infinity, -Infinity]);
  });

  it('a sparse array becomes dense: holes become undefined elements', () => {
    const out = roundTrip([1, , 3]) as unknown[];
    expect(out).toHaveLength(3);
    expect(1 in out).toBe(true);
    expect(out[1]).toBeUndefined();
  });

  it('symbol keys, non-enumerable properties and extra properties on arrays are dropped', () => {
    const tagged = Object.defineProperty({ a: 1, [Symbol('tag')]: 2 }, 'hidden', { value: 3, enumerable: false });
    const out = roundTrip(tagged) as Record<string | symbol, unknown>;
    expect(Object.getOwnPropertySymbols(out)).toEqual([]);
    expect(Object.keys(out)).toEqual(['a']);
    expect(Object.keys(roundTrip(Object.assign([1], { extra: 2 })) as object)).toEqual(['0']);
  });

  it('undefined stays undefined inside objects (the key is kept) and arrays', () => {
    const out = roundTrip({ a: undefined, b: [undefined, 1] }) as Record<string, unknown>;
    expect('a' in out).toBe(true);
    expect(out).toEqual({ a: undefined, b: [undefined, 1] });
  });

  it('Map (any keys), Set, Date (even invalid), Buffer, typed arrays, null-prototype objects and bigint beyond 64 bits keep their type', () => {
    const key = { composite: true };
    const out = roundTrip({
      map: new Map<unknown, unknown>([[key, 'object key'], [1, 'number key']]),
      set: new Set(['a', 1]),
      date: new Date(0),
      invalid: new Date(NaN),
      buf: Buffer.from([1, 2]),
      f64: new Float64Array([1.5]),
      big: -(2n ** 70n),
      bare: Object.assign(Object.create(null) as object, { a: 1 }),
    }) as Record<string, unknown>;
    expect(out.map).toBeInstanceOf(Map);
    expect([...(out.map as Map<unknown, unknown>).entries()]).toEqual([[{ composite: true }, 'object key'], [1, 'number key']]);
    expect(out.set).toEqual(new Set(['a', 1]));
    expect(out.date).toEqual(new Date(0));
    expect(Number.isNaN((out.invalid as Date).getTime())).toBe(true);
    expect(Buffer.isBuffer(out.buf)).toBe(true);
    expect(out.f64).toEqual(new Float64Array([1.5]));
    expect(out.big).toBe(-(2n ** 70n));
    expect(out.bare).toEqual({ a: 1 });
  });

  it('a shared reference becomes two copies (identity is not kept)', () => {
    const shared = { n: 1 };
    const out = roundTrip({ a: shared, b: shared }) as { a: object; b: object };
    expect(out.a).toEqual(out.b);
    expect(out.a).not.toBe(out.b);
  });
});
