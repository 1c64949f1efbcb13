import fc from 'fast-check';
import { readdirSync, readFileSync } from 'node:fs';
import { Packr } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { DecodeError, decodeEntry, encodeEntry, FORMAT_VERSION } from '../../src/codec.js';
import { FIXTURE_VALUES } from '../fixtures/entry-values.js';

const dir = new URL('../fixtures/entries/', import.meta.url);
const envelope = (value: unknown) => ({ value, fence: 7, loadMs: 3, writtenAt: 1, staleMs: 0, graceMs: 0 });

describe('wire format', () => {
  const files = readdirSync(dir).filter((f) => f.endsWith('.bin'));

  it('has a golden file for every pinned value of the current version', () => {
    for (const name of Object.keys(FIXTURE_VALUES)) expect(files).toContain(`v${FORMAT_VERSION}-${name}.bin`);
  });

  it.each(files)('decodes golden file %s to its pinned value and envelope', (file) => {
    const name = file.replace(/^v\d+-/, '').replace(/\.bin$/, '');
    const version = Number(/^v(\d+)-/.exec(file)?.[1]);
    const e = decodeEntry(readFileSync(new URL(file, dir)));
    expect(e.value).toEqual(FIXTURE_VALUES[name]);
    expect([e.fence, e.loadMs, e.writtenAt, e.staleMs]).toEqual([1_796_000_000_000_001, 42, 1_796_000_000_000, 500]);
    expect(e.graceMs).toBe(version === 1 ? 500 : 900); // v1 had no grace field: it equalled staleMs
  });

  it.each(Object.entries(FIXTURE_VALUES))('round-trips %s', (_name, value) => {
    expect(decodeEntry(encodeEntry(envelope(value))).value).toEqual(value);
  });
});

describe('untrusted bytes decode to a DecodeError, never anything else', () => {
  const evil = new Packr({ structuredClone: true, moreTypes: true });
  const plain = new Packr({ useRecords: false });
  const wrap = (value: unknown, p = evil) => p.pack([FORMAT_VERSION, value, 1, 0, 0, 0, 0]);

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
