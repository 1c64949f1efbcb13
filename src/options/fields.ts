/**
 * What one option is: how a given value is checked, and its default. The schema (`schema.ts`) is a
 * table of these; validation, DEFAULTS and the resolved types are all read off that table.
 */
import { isRedisClient } from '../client/detect.js';
import { InvalidOptionError } from '../errors.js';
import type { RedisClient } from '../redis-types.js';
import { LOCK_MODES, type Clock, type LockMode, type LockPolicy, type RefreshAhead } from './public.js';

/**
 * Checks a given value and returns it as its resolved type, or throws an `InvalidOptionError` naming
 * `name` (e.g. `redlock.nodeTimeout`), the value and the expected type. `key` is the user key of the
 * call, for per-call options. Only required fields are ever parsed with `undefined`.
 */
export type Parse<T> = (value: unknown, name: string, key?: string) => T;

export interface Field<T, D extends T | undefined = T | undefined> {
  readonly parse: Parse<T>;
  /** The value used when the option is absent, and listed in DEFAULTS; `undefined` = none (required, or absent stays absent). */
  readonly default: D;
  /** Absent is an error (no default can stand in). */
  readonly required?: true;
  /** Per call only: refused in `createCache({ defaults })`. */
  readonly perCallOnly?: true;
}

/** The value type a field resolves to. */
export type Parsed<F> = F extends { readonly parse: Parse<infer T> } ? T : never;
/** What `parseFields` returns for a schema: each field's type, `| undefined` where there is no default. */
export type ParsedFields<S> = { [K in keyof S]: Parsed<S[K]> | (S[K] extends { readonly required: true } ? never : S[K] extends { readonly default: undefined } ? undefined : never) };
/** The names of a schema's fields that have a default. */
export type Defaulted<S> = { [K in keyof S]: S[K] extends { readonly default: undefined } ? never : K }[keyof S];
/** The names of a schema's per-call-only fields. */
export type PerCallOnly<S> = { [K in keyof S]: S[K] extends { readonly perCallOnly: true } ? K : never }[keyof S];

// ---------------------------------------------------------------- validators

/** setTimeout's ceiling; longer timers fire at once in Node. Also the ceiling of every count. */
export const MAX_MS = 2 ** 31 - 1;

function isInt(v: unknown, min: number, max: number): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= min && v <= max;
}

export const positiveMs: Parse<number> = (v, name, key) => {
  if (isInt(v, 1, MAX_MS)) return v;
  throw new InvalidOptionError(name, v, `a positive integer number of milliseconds ≤ ${MAX_MS}`, key);
};

export const nonNegativeMs: Parse<number> = (v, name, key) => {
  if (isInt(v, 0, MAX_MS)) return v;
  throw new InvalidOptionError(name, v, `a non-negative integer number of milliseconds ≤ ${MAX_MS}`, key);
};

/** Any finite number (a test-only clock skew, which may be negative). */
export const finiteNumber: Parse<number> = (v, name) => {
  if (typeof v === 'number' && Number.isFinite(v)) return v;
  throw new InvalidOptionError(name, v, 'a finite number');
};

/** A count or a size (not a duration). */
export const positiveCount: Parse<number> = (v, name) => {
  if (isInt(v, 1, MAX_MS)) return v;
  throw new InvalidOptionError(name, v, `a positive integer ≤ ${MAX_MS}`);
};

export function intFrom(min: number, max: number): Parse<number> {
  return (v, name) => {
    if (isInt(v, min, max)) return v;
    throw new InvalidOptionError(name, v, `an integer from ${min} to ${max}`);
  };
}

export function numberFrom(min: number, max: number): Parse<number> {
  return (v, name) => {
    if (typeof v === 'number' && Number.isFinite(v) && v >= min && v <= max) return v;
    throw new InvalidOptionError(name, v, `a number from ${min} to ${max}`);
  };
}

/** A fraction in [0, 1), e.g. `ttlJitter`. */
export const fractionBelowOne: Parse<number> = (v, name, key) => {
  if (typeof v === 'number' && Number.isFinite(v) && v >= 0 && v < 1) return v;
  throw new InvalidOptionError(name, v, 'a number from 0 up to (not including) 1', key);
};

/** `refreshAhead`: a fraction in [0, 1) (0 = off), or `{ beta }` with beta a positive finite number. Resolved frozen. */
export const refreshAhead: Parse<RefreshAhead> = (v, name, key) => {
  if (typeof v === 'number') {
    if (Number.isFinite(v) && v >= 0 && v < 1) return v;
  } else if (typeof v === 'object' && v !== null && !Array.isArray(v)) {
    refuseUnknown({ beta: true }, v, `${name}.`, `${name} `, key);
    const beta = (v as { beta?: unknown }).beta;
    if (typeof beta === 'number' && Number.isFinite(beta) && beta > 0) return Object.freeze({ beta });
    throw new InvalidOptionError(`${name}.beta`, beta, 'a positive finite number (1 is the usual XFetch choice)', key);
  }
  throw new InvalidOptionError(name, v, 'a fraction of ttl from 0 (off) up to (not including) 1, or { beta: <positive number> }', key);
};

/** One of a few string literals; the message lists them. */
export function oneOf<L extends string>(choices: readonly L[]): Parse<L> {
  const shown = choices.map((c) => `'${c}'`).join(', ');
  return (v, name, key) => {
    if ((choices as readonly unknown[]).includes(v)) return v as L;
    throw new InvalidOptionError(name, v, `one of ${shown}`, key);
  };
}

export const boolean: Parse<boolean> = (v, name) => {
  if (typeof v === 'boolean') return v;
  throw new InvalidOptionError(name, v, 'a boolean');
};

export const lockPolicy: Parse<LockPolicy> = (v, name, key) => {
  if (typeof v === 'function') return v as (key: string) => LockMode;
  if ((LOCK_MODES as readonly unknown[]).includes(v)) return v as LockMode;
  throw new InvalidOptionError(name, v, `one of ${LOCK_MODES.map((m) => `'${m}'`).join(', ')} or a function of the key`, key);
};

/** The most tags one entry may carry (its call's and its loader's together). */
export const MAX_TAGS = 32;
/** The longest tag, in UTF-16 code units. */
export const MAX_TAG_LENGTH = 256;

/**
 * `tags`: an array of at most MAX_TAGS non-empty, well-formed strings of at most
 * MAX_TAG_LENGTH characters; resolved to a frozen copy without duplicates (the caller's array may be
 * changed afterwards without changing the call). An empty array is no tags.
 */
export const tagList: Parse<readonly string[]> = (v, name, key) => {
  if (!Array.isArray(v)) throw new InvalidOptionError(name, v, `an array of at most ${MAX_TAGS} tags (non-empty strings of at most ${MAX_TAG_LENGTH} characters)`, key);
  if (v.length > MAX_TAGS) throw new InvalidOptionError(name, v, `at most ${MAX_TAGS} tags per entry; got ${v.length}`, key);
  for (const tag of v as unknown[]) {
    if (typeof tag !== 'string' || tag.length === 0 || tag.length > MAX_TAG_LENGTH || !tag.isWellFormed()) {
      throw new InvalidOptionError(name, tag, `each tag a non-empty, well-formed string of at most ${MAX_TAG_LENGTH} characters`, key);
    }
  }
  return Object.freeze([...new Set(v as string[])]);
};

/** `deleteByTag`'s argument: one tag or an array of them, checked as the `tags` option is. */
export function tagsToDelete(given: unknown): readonly string[] {
  const tags = tagList(typeof given === 'string' ? [given] : given, 'tag');
  if (tags.length === 0) throw new InvalidOptionError('tag', given, 'a tag or a non-empty array of tags');
  return tags;
}

export const abortSignal: Parse<AbortSignal> = (v, name, key) => {
  if (v instanceof AbortSignal) return v;
  throw new InvalidOptionError(name, v, 'an AbortSignal', key);
};

export const clock: Parse<Clock> = (v, name) => {
  if (typeof v === 'object' && v !== null && typeof (v as Partial<Clock>).now === 'function') return v as Clock;
  throw new InvalidOptionError(name, v, 'an object with now(): number');
};

/** What a client option accepts, in messages. */
export const CLIENT_KINDS = 'an ioredis Redis or Cluster, or a node-redis client (createClient() or createCluster())';

export const redisClient: Parse<RedisClient> = (v, name) => {
  if (isRedisClient(v)) return v;
  throw new InvalidOptionError(name, v, CLIENT_KINDS);
};

/** Refuses any own key of `input` that `schema` does not list; the message lists the known names. */
export function refuseUnknown(schema: object, input: object, where: string, what: string, key?: string): void {
  for (const [name, value] of Object.entries(input)) {
    if (!Object.hasOwn(schema, name)) {
      throw new InvalidOptionError(`${where}${name}`, value, `no such ${what}option; known: ${Object.keys(schema).join(', ')}`, key);
    }
  }
}

/**
 * Parses an options object against `schema`: unknown names are refused; a given value goes through
 * its field's `parse`, an absent one becomes the default (a required one is parsed anyway, so its own
 * message says what is expected). `where` prefixes names in messages (`redlock.`); `what` names whose
 * options these are (`createCache `, `redlock `).
 */
export function parseFields<S extends Readonly<Record<string, Field<unknown>>>>(schema: S, input: object, where: string, what: string): ParsedFields<S> {
  refuseUnknown(schema, input, where, what);
  const given = input as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const [name, f] of Object.entries(schema)) {
    const value = given[name];
    out[name] = value !== undefined || f.required ? f.parse(value, `${where}${name}`) : f.default;
  }
  return out as ParsedFields<S>;
}
