import { createHash } from 'node:crypto';
import { slotOf } from './client/slot.js';
import { InvalidKeyError } from './errors.js';

/** The Redis keys of one entry. All share one Cluster hash slot (the `{tag}`). */
export interface EntryKeys {
  /** The encoded entry; physical TTL = ttl + staleTtl. */
  readonly value: string;
  /** The rebuild lock: a random token, `PX lockTtl`. */
  readonly lock: string;
  /** The fence hash: grant counter (epoch-seeded) and the high-water mark of accepted writes; expiring. */
  readonly fence: string;
  /** Present while the loader is backing off after a failure (fleet-wide). */
  readonly backoff: string;
  /**
   * Not a key: the key's wake channel (`notes: 'sharded'`), in the same slot, so the scripts that change
   * the entry may SPUBLISH on it (the channel rule, lock/scripts.ts).
   */
  readonly wake: string;
}

/**
 * Validates a user key. Lone surrogates are rejected because `'\uD800'` and `'\uDC00'` both
 * encode to the same UTF-8 replacement bytes and would silently share one Redis key.
 */
export function validateKey(key: unknown, maxKeyLength: number): asserts key is string {
  if (typeof key !== 'string') throw new InvalidKeyError(key, 'a key must be a string');
  if (key.length === 0) throw new InvalidKeyError(key, 'a key must not be empty');
  if (key.length > maxKeyLength) throw new InvalidKeyError(key, `a key is at most ${maxKeyLength} characters (option "maxKeyLength"); got ${key.length}`);
  if (!key.isWellFormed()) throw new InvalidKeyError(key, 'a key must be well-formed UTF-16 (no lone surrogates)');
}

/** 8 hex digits of SHA-1: only spreads keys over slots; injectivity comes from the verbatim key. */
export function slotTag(key: string): string {
  const known = recentTags.get(key);
  if (known !== undefined) return known;
  const tag = createHash('sha1').update(key, 'utf8').digest('hex').slice(0, 8);
  if (key.length <= MEMO_KEY_LENGTH) {
    // Oldest first out: a Map keeps insertion order. Bounded whatever the key space.
    if (recentTags.size >= MEMO_TAGS) recentTags.delete(recentTags.keys().next().value as string);
    recentTags.set(key, tag);
  }
  return tag;
}

/**
 * Tags of recently used keys. A SHA-1 per call (a Hash object, a digest) was ~5% of a fresh hit's CPU;
 * a hot key's tag is looked up instead. At most MEMO_TAGS keys of at most MEMO_KEY_LENGTH characters
 * (≈ 1 MB with 4,096 keys of 128 characters); longer keys are hashed every time.
 */
const recentTags = new Map<string, string>();
const MEMO_TAGS = 4096;
const MEMO_KEY_LENGTH = 128;

/**
 * `<prefix>:{<tag>}:<kind>:<key>`.
 * Invariants: the prefix has no braces, so `{<tag>}` is the first brace pair and alone decides the
 * slot, whatever braces the key holds; the tag has fixed length, so `<kind>` sits at a fixed offset
 * and distinct (kind, key) pairs give distinct strings — `x:lock` can never collide with a lock key.
 */
export function entryKeys(prefix: string, key: string): EntryKeys {
  const known = recentEntries.get(key);
  if (known !== undefined && known.prefix === prefix) return known.keys;
  const base = `${prefix}:{${slotTag(key)}}:`;
  const keys: EntryKeys = Object.freeze({ value: `${base}v:${key}`, lock: `${base}l:${key}`, fence: `${base}f:${key}`, backoff: `${base}b:${key}`, wake: `${base}n:${key}` });
  if (key.length <= MEMO_KEY_LENGTH) {
    if (known === undefined && recentEntries.size >= MEMO_TAGS) recentEntries.delete(recentEntries.keys().next().value as string);
    recentEntries.set(key, { prefix, keys });
  }
  return keys;
}

/** The length of `{<tag>}:v:` in a value key (entryKeys: the tag has fixed length). */
const VALUE_KEY_MIDDLE = '{12345678}:v:'.length;

/**
 * The key whose entry `redisKey` is the value key of (entryKeys' `value`, under `prefix`), or undefined
 * for any other key: the server's invalidations name Redis keys (tracking.ts).
 */
export function keyOfValueKey(prefix: string, redisKey: string): string | undefined {
  const start = prefix.length + 1;
  if (!redisKey.startsWith(`${prefix}:{`) || !redisKey.startsWith('}:v:', start + 9)) return undefined;
  return redisKey.slice(start + VALUE_KEY_MIDDLE);
}

/**
 * The Redis keys of recently used entries, one prefix per key (a key used under two prefixes, e.g.
 * two namespaces, is rebuilt when the prefix changes). Building four strings per call was ~5 µs of a
 * fresh hit's client CPU (bench/hit-layers.ts). Bounded like the tags: MEMO_TAGS keys of at most
 * MEMO_KEY_LENGTH characters; frozen, so a caller can never change another call's keys.
 */
const recentEntries = new Map<string, { readonly prefix: string; readonly keys: EntryKeys }>();

/**
 * The one pub/sub channel a cache's processes share: clears always; with `notes: 'broadcast'` (the
 * default) also the writes, deletes and failures of every key. Never a hash tag (the channel rule).
 */
export function eventsChannel(prefix: string): string {
  return `${prefix}:events`;
}

/** The Cluster hash slot of every Redis key of the entry of `key` (they share the `{tag}`). */
export function hashSlot(key: string): number {
  return slotOf(`{${slotTag(key)}}`);
}
