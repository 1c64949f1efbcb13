import { Packr } from 'msgpackr';
import type { RefreshPolicy } from './entry.js';
import { UnstorableValueError } from './errors.js';

/**
 * The wire format of an entry (version 4): a msgpack array
 *   [4, value, fence, loadMs, writtenAtMs, staleMs, graceMs, ttlMs, refreshAhead, freshUntil]
 * (version 3 had no refreshAhead, version 2 no ttlMs either, version 1 neither ttlMs nor graceMs — it
 * equalled staleMs; all still decode, a missing field as `undefined`.)
 * - fence: the grant's fencing token (a number) the value was written under;
 * - loadMs: how long the loader took; writtenAtMs: wall-clock write time (informational only —
 *   freshness is derived from the PTTL Redis reports, never from another machine's clock);
 * - staleMs: the stale window it was written with; graceMs: how long it outlives its fresh time
 *   (max of stale and fail-safe windows), so readers split PTTL into fresh, stale and kept;
 * - ttlMs: the fresh time it was written with. With `ttlJitter` every write draws its own, and the
 *   refresh point (`refreshAhead × ttl`) is a fraction of the entry's own ttl, not the reader's.
 * - refreshAhead: `null`, or the refresh-ahead policy the loader chose for this entry with
 *   `ctx.setOptions({ refreshAhead })` (a fraction, or `{ beta }`): every reader then follows it
 *   instead of its own call option, so the entry refreshes as its loader decided in every process.
 * - freshUntil: when its fresh time ends, in ms of the server's own clock (TIME). The client sends a
 *   float64 placeholder of 0 as the array's last 9 bytes; the write script overwrites its 8 bytes with
 *   TIME + ttl (lock/scripts.ts), so a reader can judge freshness from a plain GETRANGE (node-clock.ts).
 *   A trailing element, not a new version: readers of v4 before it destructure nine elements and ignore
 *   the rest, so a fleet mid-upgrade reads every entry. Absent or 0 (an entry written before it, or
 *   by a script that did not stamp it): `undefined`, and readers judge by the read script's PTTL.
 * A tagged entry (docs/tags.md) has two more elements before the slot, which stays last:
 *   [4, value, fence, loadMs, writtenAtMs, staleMs, graceMs, ttlMs, refreshAhead, tags, grantedAt, freshUntil]
 * - tags: the entry's tags (an array of strings, the call's and its loader's);
 * - grantedAt: the server's TIME in µs when its grant (or its set()'s) was taken: the entry is
 *   invalid once a tag's record in Redis is missing or not below it (lock/scripts.ts, THE TAG RULE).
 *   The previous release (0.1.0) destructures nine elements and ignores the rest: it reads the value of
 *   a tagged entry (without knowing its tags). An untagged entry keeps ten elements, byte for byte.
 * Golden files in test/fixtures pin it; a format change gets a new version number, and the decoder
 * keeps reading every older one.
 */
export const FORMAT_VERSION = 4;

export interface Envelope {
  readonly value: unknown;
  readonly fence: number;
  readonly loadMs: number;
  readonly writtenAt: number;
  readonly staleMs: number;
  readonly graceMs: number;
  /** Absent (undefined) in entries of format v1 and v2. */
  readonly ttlMs: number | undefined;
  /** The loader's own refresh-ahead policy for this entry (`ctx.setOptions`); undefined = the reader's option applies (and in v1–v3). */
  readonly refreshAhead?: RefreshPolicy | undefined;
  /** When its fresh time ends, server clock ms; undefined when not stamped (see the format above). */
  readonly freshUntil?: number | undefined;
  /** The entry's tags; undefined (or empty) for an untagged entry. */
  readonly tags?: readonly string[] | undefined;
  /** A tagged entry's grant time, the server's TIME in µs (see the format above). */
  readonly grantedAt?: number | undefined;
}

/**
 * Records carry objects (so Maps stay Maps), `moreTypes` carries Set/Date/typed arrays; structured
 * clone stays off (no cyclic references or identity from untrusted bytes). No shared structures are
 * stored anywhere, so a hostile payload's record definitions cannot outlive its own decode.
 */
const packr = new Packr({
  useRecords: true,
  moreTypes: true,
  structuredClone: false,
  mapsAsObjects: false,
  useBigIntExtension: true,
});

export class DecodeError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'DecodeError';
  }
}

/** The allow-list refused a type; `typeName` is its class name (so the write side can name it). */
class DisallowedTypeError extends DecodeError {
  constructor(readonly typeName: string) {
    super(`disallowed type ${typeName} in entry value`);
  }
}

/** The placeholder `freshUntil` the write script stamps: msgpack float64 (0xcb) of 0, the last 9 bytes. */
const FRESH_UNTIL_SLOT = Buffer.from([0xcb, 0, 0, 0, 0, 0, 0, 0, 0]);
/** msgpack fixarray headers: nine elements (what the packer writes), ten (with the slot); eleven and twelve for a tagged entry. */
const NINE = 0x99;
const TEN = 0x9a;
const ELEVEN = 0x9b;
const TWELVE = 0x9c;

/** The entry's bytes, ending in the `freshUntil` slot the write script stamps (or `e.freshUntil`, for tests and fixtures). */
export function encodeEntry(e: Envelope): Buffer {
  const tagged = e.tags !== undefined && e.tags.length > 0;
  const fields: unknown[] = [FORMAT_VERSION, e.value, e.fence, e.loadMs, e.writtenAt, e.staleMs, e.graceMs, e.ttlMs, e.refreshAhead ?? null];
  if (tagged) fields.push([...(e.tags)], e.grantedAt ?? 0);
  const packed = packr.pack(fields);
  // The packer writes an array of nine (eleven) as one header byte; a slot appended makes it ten (twelve).
  if (packed[0] !== (tagged ? ELEVEN : NINE)) throw new Error(`unexpected envelope header 0x${packed[0]?.toString(16) ?? ''}`);
  const bytes = Buffer.concat([packed, FRESH_UNTIL_SLOT]);
  bytes[0] = tagged ? TWELVE : TEN;
  if (e.freshUntil !== undefined) bytes.writeDoubleBE(e.freshUntil, bytes.length - 8);
  return bytes;
}

/**
 * The write side of the codec: the entry's bytes, or UnstorableValueError when they could never be
 * read back as the value (every read would be a miss and every process would rebuild on every call).
 * Invariant: whatever this returns passes decodeEntry — it is decoded once here to prove it, which
 * costs about one extra decode per loader run (a loader run is far slower; measured in docs/operations.md, "What a value becomes").
 *   1. a walk refuses what msgpackr would silently drop or turn into `undefined` (a function, a symbol
 *      value) and cycles (msgpackr would overflow the stack on them);
 *   2. the encoder's own exceptions (RangeError from deep nesting, …) are caught;
 *   3. the size cap the read script applies is applied here first;
 *   4. the bytes are decoded with the reader's allow-list (RegExp, Error, ArrayBuffer… are refused).
 */
export function encodeStorable(key: string, e: Envelope, maxValueBytes: number): Buffer {
  const walked = unstorablePart(e.value);
  if (walked) throw new UnstorableValueError(key, walked);
  let bytes: Buffer;
  try {
    bytes = encodeEntry(e);
  } catch (err) {
    throw new UnstorableValueError(key, `encode failed: ${err instanceof Error ? err.message : String(err)}`, err);
  }
  if (bytes.length > maxValueBytes) throw new UnstorableValueError(key, `too large (${bytes.length} > maxValueBytes ${maxValueBytes})`);
  try {
    decodeEntry(bytes);
  } catch (err) {
    const disallowed = err instanceof DisallowedTypeError ? err.typeName : undefined;
    throw new UnstorableValueError(key, disallowed === undefined ? `decode failed: ${err instanceof Error ? err.message : String(err)}` : `type ${disallowed}`, err);
  }
  return bytes;
}

/**
 * Why a value cannot be stored as it is ('function', 'symbol', 'cycle'), or undefined. Iterative (no
 * stack overflow on deep values); a cycle is an object met again while still on the current path —
 * a shared, acyclic reference is fine (it decodes as two copies). Walks what msgpackr encodes: array
 * items, own enumerable string keys of objects, Map keys and values, Set items, and a class
 * instance's toJSON() result when it has one.
 */
function unstorablePart(root: unknown): string | undefined {
  const onPath = new Set<object>();
  // An entry is a value to visit, or the marker that the walk is leaving `object`.
  const stack: ({ visit: unknown } | { leave: object })[] = [{ visit: root }];
  while (stack.length > 0) {
    const top = stack.pop() as { visit: unknown } | { leave: object };
    if ('leave' in top) {
      onPath.delete(top.leave);
      continue;
    }
    const v = top.visit;
    if (typeof v === 'function') return 'function';
    if (typeof v === 'symbol') return 'symbol';
    if (v === null || typeof v !== 'object') continue;
    if (onPath.has(v)) return 'cycle';
    if (ArrayBuffer.isView(v) || v instanceof Date) continue;
    onPath.add(v);
    stack.push({ leave: v });
    if (Array.isArray(v)) for (const item of v as unknown[]) stack.push({ visit: item });
    else if (v instanceof Map) for (const [k, item] of v) stack.push({ visit: k }, { visit: item });
    else if (v instanceof Set) for (const item of v) stack.push({ visit: item });
    else if (Object.getPrototypeOf(v) !== Object.prototype && typeof (v as { toJSON?: unknown }).toJSON === 'function') {
      // msgpackr writes a class instance's toJSON() result (a plain object's own toJSON is just a
      // function property). If toJSON throws, the encoder throws the same and step 2 reports it.
      let json: unknown;
      try {
        json = (v as { toJSON: () => unknown }).toJSON();
      } catch {
        return undefined;
      }
      if (json !== v) stack.push({ visit: json });
      else for (const k of Object.keys(v)) stack.push({ visit: (v as Record<string, unknown>)[k] });
    } else for (const k of Object.keys(v)) stack.push({ visit: (v as Record<string, unknown>)[k] });
  }
  return undefined;
}

/** Decodes untrusted bytes. Every failure — malformed, hostile, unknown version, disallowed type — is a DecodeError. */
export function decodeEntry(bytes: Buffer): Envelope {
  let raw: unknown;
  try {
    raw = packr.unpack(bytes);
  } catch (err) {
    // Includes RangeError from deep nesting and "incomplete" errors from truncated or huge-length input.
    throw new DecodeError('undecodable entry bytes', { cause: err });
  }
  if (!Array.isArray(raw) || raw.length < 6) throw new DecodeError('not an entry envelope');
  const [version, value, fence, loadMs, writtenAt, staleMs, grace, ttl, refresh] = raw as unknown[];
  // A tagged entry has its tags and grant time before the slot, which is always last (see the format above).
  const tagged = version === FORMAT_VERSION && raw.length >= 12;
  const until: unknown = version === FORMAT_VERSION ? raw[tagged ? 11 : 9] : undefined;
  const tags = tagged ? decodeTags(raw[9]) : undefined;
  const grantedAt: unknown = tagged ? raw[10] : undefined;
  if (tagged && !isCount(grantedAt)) throw new DecodeError('malformed entry envelope grantedAt');
  if (version !== 1 && version !== 2 && version !== 3 && version !== FORMAT_VERSION) throw new DecodeError(`unknown entry format version ${String(version)}`);
  const graceMs = version === 1 ? staleMs : grace;
  if (!isCount(fence) || !isCount(loadMs) || !isCount(writtenAt) || !isCount(staleMs) || !isCount(graceMs)) throw new DecodeError('malformed entry envelope fields');
  let ttlMs: number | undefined;
  if (version === 3 || version === FORMAT_VERSION) {
    if (!isCount(ttl) || ttl === 0) throw new DecodeError('malformed entry envelope ttl');
    ttlMs = ttl;
  }
  const refreshAhead = version === FORMAT_VERSION ? decodeRefreshPolicy(refresh) : undefined;
  if (until !== undefined && !isCount(until)) throw new DecodeError('malformed entry envelope freshUntil');
  assertAllowedValue(value);
  const freshUntil = until !== 0 ? (until) : undefined;
  if (tags === undefined) return { value, fence, loadMs, writtenAt, staleMs, graceMs, ttlMs, refreshAhead, freshUntil };
  return { value, fence, loadMs, writtenAt, staleMs, graceMs, ttlMs, refreshAhead, freshUntil, tags, grantedAt: grantedAt as number };
}

/** A tagged entry's tags: a non-empty array of non-empty strings (frozen). */
function decodeTags(v: unknown): readonly string[] {
  if (!Array.isArray(v) || v.length === 0 || !v.every((t) => typeof t === 'string' && t.length > 0)) throw new DecodeError('malformed entry envelope tags');
  return Object.freeze(v as string[]);
}

/** v4's refreshAhead field: `null` (none), a fraction in [0, 1), or `{ beta }` with a positive finite beta. */
function decodeRefreshPolicy(v: unknown): RefreshPolicy | undefined {
  if (v === null) return undefined;
  if (typeof v === 'number' && Number.isFinite(v) && v >= 0 && v < 1) return v;
  if (typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length === 1) {
    const beta = (v as { beta?: unknown }).beta;
    if (typeof beta === 'number' && Number.isFinite(beta) && beta > 0) return Object.freeze({ beta });
  }
  throw new DecodeError('malformed entry envelope refreshAhead');
}

function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0;
}

/**
 * A post-decode allow-list walk: primitives, bigint, arrays, plain objects, Map, Set, Date and
 * binary (Buffer, typed arrays). Anything else (RegExp, Error, …) from cache bytes is refused:
 * a RegExp is a ReDoS waiting to happen, an Error can mimic ours.
 */
export function assertAllowedValue(root: unknown): void {
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const v = stack.pop();
    if (v === null || typeof v !== 'object') {
      if (typeof v === 'function' || typeof v === 'symbol') throw new DisallowedTypeError(typeof v);
      continue;
    }
    if (Array.isArray(v)) {
      for (const item of v) stack.push(item);
      continue;
    }
    const proto: unknown = Object.getPrototypeOf(v);
    if (proto === Object.prototype || proto === null) {
      // for-in over own keys: the same keys as Object.keys, without an array per object (every hit walks its value).
      for (const k in v) if (Object.hasOwn(v, k)) stack.push((v as Record<string, unknown>)[k]);
    } else if (v instanceof Map) {
      for (const [k, item] of v) stack.push(k, item);
    } else if (v instanceof Set) {
      for (const item of v) stack.push(item);
    } else if (v instanceof Date || ArrayBuffer.isView(v)) {
      continue;
    } else {
      throw new DisallowedTypeError(describeProto(proto));
    }
  }
}

function describeProto(proto: unknown): string {
  // Read the name from the real constructor of the prototype chain, not from the decoded object's
  // own properties (a decoded `constructor` key must not be able to mimic a class).
  const ctor = (proto as { constructor?: { name?: unknown } } | null)?.constructor;
  return typeof ctor?.name === 'string' ? ctor.name : 'object';
}
