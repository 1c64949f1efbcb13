import { Packr } from 'msgpackr';

/**
 * The wire format of an entry (version 2): a msgpack array
 *   [2, value, fence, loadMs, writtenAtMs, staleMs, graceMs]
 * (version 1 had no graceMs: it equalled staleMs; v1 entries still decode.)
 * - fence: the grant's fencing token (a number) the value was written under;
 * - loadMs: how long the loader took; writtenAtMs: wall-clock write time (informational only —
 *   freshness is derived from the PTTL Redis reports, never from another machine's clock);
 * - staleMs: the stale window it was written with; graceMs: how long it outlives its fresh time
 *   (max of stale and fail-safe windows), so readers split PTTL into fresh, stale and kept.
 * Golden files in test/fixtures pin it; a format change gets a new version number, and the decoder
 * keeps reading every older one.
 */
export const FORMAT_VERSION = 2;

export interface Envelope {
  readonly value: unknown;
  readonly fence: number;
  readonly loadMs: number;
  readonly writtenAt: number;
  readonly staleMs: number;
  readonly graceMs: number;
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

export function encodeEntry(e: Envelope): Buffer {
  return packr.pack([FORMAT_VERSION, e.value, e.fence, e.loadMs, e.writtenAt, e.staleMs, e.graceMs]);
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
  const [version, value, fence, loadMs, writtenAt, staleMs, grace] = raw as unknown[];
  if (version !== 1 && version !== FORMAT_VERSION) throw new DecodeError(`unknown entry format version ${String(version)}`);
  const graceMs = version === 1 ? staleMs : grace;
  if (!isCount(fence) || !isCount(loadMs) || !isCount(writtenAt) || !isCount(staleMs) || !isCount(graceMs)) throw new DecodeError('malformed entry envelope fields');
  assertAllowedValue(value);
  return { value, fence, loadMs, writtenAt, staleMs, graceMs };
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
      if (typeof v === 'function' || typeof v === 'symbol') throw new DecodeError(`disallowed type ${typeof v}`);
      continue;
    }
    if (Array.isArray(v)) {
      for (const item of v) stack.push(item);
      continue;
    }
    const proto: unknown = Object.getPrototypeOf(v);
    if (proto === Object.prototype || proto === null) {
      for (const k of Object.keys(v)) stack.push((v as Record<string, unknown>)[k]);
    } else if (v instanceof Map) {
      for (const [k, item] of v) stack.push(k, item);
    } else if (v instanceof Set) {
      for (const item of v) stack.push(item);
    } else if (v instanceof Date || ArrayBuffer.isView(v)) {
      continue;
    } else {
      throw new DecodeError(`disallowed type ${describeProto(proto)} in entry value`);
    }
  }
}

function describeProto(proto: unknown): string {
  // Read the name from the real constructor of the prototype chain, not from the decoded object's
  // own properties (a decoded `constructor` key must not be able to mimic a class).
  const ctor = (proto as { constructor?: { name?: unknown } } | null)?.constructor;
  return typeof ctor?.name === 'string' ? ctor.name : 'object';
}
