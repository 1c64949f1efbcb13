/**
 * The options schema: one entry per option, at each level (per call, createCache, redlock). DEFAULTS,
 * the name lists in error messages, validation and the resolved types are all derived from it.
 *
 * Adding an option = one entry here plus its TSDoc in `public.ts`. The `satisfies` clauses make a
 * name missing from either side a compile error, and test/types/options.test.ts checks that the
 * resolved value types equal the public ones.
 */
import { isRedisClient } from '../client/detect.js';
import { InvalidOptionError } from '../errors.js';
import type { RedisClient } from '../redis-types.js';
import type { UnsafeSwitches } from '../unsafe.js';
import {
  abortSignal,
  boolean,
  clock,
  fractionBelowOne,
  intFrom,
  CLIENT_KINDS,
  MAX_MS,
  finiteNumber,
  lockPolicy,
  nonNegativeMs,
  numberFrom,
  oneOf,
  parseFields,
  positiveCount,
  positiveMs,
  redisClient,
  refreshAhead,
  refuseUnknown,
  tagList,
  type Defaulted,
  type Field,
  type Parse,
  type Parsed,
  type PerCallOnly,
} from './fields.js';
import type { CacheOptions, CallOptions, Clock, EntryOptions, LocalInvalidation, LocalTierOptions, LockMode, Notes, OnNoQuorum, OnWaitTimeout, RedlockOptions, ReplicaAckOptions } from './public.js';

// Builds a field. Not exported, so its `const` type parameters (which keep DEFAULTS' literal types,
// `'single'`, `1000`) stay out of the published .d.ts: that still parses with TypeScript 4.9.

/** A field with no default. */
function field<T>(parse: Parse<T>): Field<T, undefined>;
/** A field with no default and flags, kept in its type (the resolved types read them). */
function field<T, const F extends { required?: true; perCallOnly?: true }>(parse: Parse<T>, flags: F): Field<T, undefined> & F;
/** A field whose default goes into DEFAULTS, typed as its literal (`'single'`, `1000`). Defaults are primitives: an object here would be read as flags. */
function field<T, const D extends T>(parse: Parse<T>, defaultValue: D): Field<T, D>;
function field<T>(parse: Parse<T>, second?: unknown): Field<T> {
  if (typeof second === 'object' && second !== null) return Object.freeze({ parse, default: undefined, ...second });
  return Object.freeze({ parse, default: second as T | undefined });
}

// ---------------------------------------------------------------- per call (and cache-wide `defaults`)

export const CALL_FIELDS = {
  // No default on purpose: how long a value stays fresh is the caller's decision.
  ttl: field(positiveMs),
  staleTtl: field(nonNegativeMs, 0),
  lock: field(lockPolicy, 'single'),
  lockTtl: field(positiveMs, 10_000),
  waitTimeout: field(positiveMs, 5_000),
  onWaitTimeout: field(oneOf<OnWaitTimeout>(['compute', 'throw']), 'compute'),
  pollInterval: field(positiveMs, 250),
  // A signal belongs to one call: a cache-wide one would abort every call at once.
  signal: field(abortSignal, { perCallOnly: true }),
  failSafeTtl: field(nonNegativeMs, 0),
  failBackoff: field(nonNegativeMs, 0),
  softTimeout: field(nonNegativeMs, 0),
  hardTimeout: field(nonNegativeMs, 0),
  refreshAhead: field(refreshAhead, 0),
  ttlJitter: field(fractionBelowOne, 0),
  // Per call only: cache-wide, it would turn the cache off.
  forceFresh: field(boolean, { perCallOnly: true }),
  // Per call only: what an entry is about is the call's (and its loader's) to say (docs/tags.md).
  tags: field(tagList, { perCallOnly: true }),
} satisfies { readonly [K in keyof CallOptions]-?: Field<NonNullable<CallOptions[K]>> };

type CallFields = typeof CALL_FIELDS;
type CallDefaulted = Exclude<Defaulted<CallFields>, PerCallOnly<CallFields>>;
type CallUndefaulted = Exclude<keyof CallFields, Defaulted<CallFields> | PerCallOnly<CallFields>>;

/** Cache-wide call defaults after validation: every option with a default is present, `ttl` only if given, never `signal`. */
export type ResolvedDefaults = Readonly<{ [K in CallDefaulted]: Parsed<CallFields[K]> } & { [K in CallUndefaulted]?: Parsed<CallFields[K]> }>;

/** One call's options after merging over the defaults; frozen. The lock policy has been evaluated on the key. */
export type ResolvedCall = Readonly<
  { [K in Exclude<keyof CallFields, 'lock' | PerCallOnly<CallFields>>]: Parsed<CallFields[K]> } & {
    [K in PerCallOnly<CallFields>]: Parsed<CallFields[K]> | undefined;
  } & { lock: LockMode }
>;

/**
 * Validates the options given to one call (or as `defaults`): unknown names are refused (named with
 * `where`, e.g. `defaults.bogus`); each given value is checked by its field. Absent values stay absent.
 * A bad value is named without `where` (`lockTtl`, also inside `defaults`): `option` keeps the value
 * it always had.
 */
export function validateCall(input: object, where: string, key?: string): Partial<Record<keyof CallFields, unknown>> {
  refuseUnknown(CALL_FIELDS, input, where, '', key);
  const out: Partial<Record<keyof CallFields, unknown>> = {};
  for (const [name, value] of Object.entries(input)) {
    if (value !== undefined) out[name as keyof CallFields] = CALL_FIELDS[name as keyof CallFields].parse(value, name, key);
  }
  return out;
}

/** The call options a loader may set for its own entry (`ctx.setOptions`): the fields of the same names. */
export const ENTRY_FIELDS = {
  ttl: CALL_FIELDS.ttl,
  staleTtl: CALL_FIELDS.staleTtl,
  failSafeTtl: CALL_FIELDS.failSafeTtl,
  refreshAhead: CALL_FIELDS.refreshAhead,
  tags: CALL_FIELDS.tags,
} satisfies { readonly [K in keyof EntryOptions]-?: Field<NonNullable<EntryOptions[K]>> };

/** What `ctx.setOptions` resolved to: the given entry options, validated; absent ones stay absent. */
export type EntryOverrides = Readonly<{ [K in keyof typeof ENTRY_FIELDS]?: Parsed<(typeof ENTRY_FIELDS)[K]> }>;

/**
 * Validates `ctx.setOptions(input)`: unknown names (any call option but the five) and bad values are
 * an InvalidOptionError naming `ctx.setOptions.<name>`, the value and its type.
 */
export function validateEntryOptions(input: unknown, key: string): EntryOverrides {
  if (typeof input !== 'object' || input === null) throw new InvalidOptionError('ctx.setOptions', input, `an object of entry options (${Object.keys(ENTRY_FIELDS).join(', ')})`, key);
  refuseUnknown(ENTRY_FIELDS, input, 'ctx.setOptions.', 'entry ', key);
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(input)) {
    if (value !== undefined) out[name] = ENTRY_FIELDS[name as keyof typeof ENTRY_FIELDS].parse(value, `ctx.setOptions.${name}`, key);
  }
  return Object.freeze(out);
}

/** `createCache({ defaults })`: per-call options, less the per-call-only ones. */
const callDefaults: Parse<Partial<ResolvedDefaults>> = (v, name) => {
  if (typeof v !== 'object' || v === null) throw new InvalidOptionError(name, v, 'an object of per-call options');
  const given = validateCall(v, `${name}.`);
  for (const [option, f] of Object.entries(CALL_FIELDS)) {
    if ('perCallOnly' in f && given[option as keyof CallFields] !== undefined) {
      throw new InvalidOptionError(`${name}.${option}`, given[option as keyof CallFields], `no ${option} in defaults (pass it per call)`);
    }
  }
  return given as Partial<ResolvedDefaults>;
};

// ---------------------------------------------------------------- redlock

const redlockNodes: Parse<readonly RedisClient[]> = (v, name) => {
  if (Array.isArray(v) && v.length >= 3 && v.every(isRedisClient)) return Object.freeze([...v]);
  throw new InvalidOptionError(name, v, `an array of at least 3 clients of independent masters, each ${CLIENT_KINDS}`);
};

export const REDLOCK_FIELDS = {
  nodes: field(redlockNodes, { required: true }),
  driftFactor: field(numberFrom(0, 0.5), 0.01),
  retryCount: field(intFrom(0, 100), 3),
  retryDelay: field(nonNegativeMs, 200),
  retryJitter: field(nonNegativeMs, 100),
  nodeTimeout: field(positiveMs, 100),
  onNoQuorum: field(oneOf<OnNoQuorum>(['throw', 'single', 'local']), 'local'),
} satisfies { readonly [K in keyof RedlockOptions]-?: Field<unknown> };

type RedlockFields = typeof REDLOCK_FIELDS;
export type ResolvedRedlock = Readonly<{ [K in keyof RedlockFields]: Parsed<RedlockFields[K]> }>;

const redlock: Parse<ResolvedRedlock> = (v, name) => {
  if (typeof v !== 'object' || v === null) throw new InvalidOptionError(name, v, '{ nodes: [client, client, client, …] }');
  return Object.freeze(parseFields(REDLOCK_FIELDS, v, `${name}.`, 'redlock '));
};

// ---------------------------------------------------------------- createCache

const prefix: Parse<string> = (v, name) => {
  if (typeof v === 'string' && v.length > 0 && v.length <= 256 && !/[{}]/.test(v) && v.isWellFormed()) return v;
  throw new InvalidOptionError(name, v, 'a non-empty string of at most 256 characters without "{" or "}"');
};

export const LOCAL_FIELDS = {
  max: field(positiveCount, { required: true }),
  invalidation: field(oneOf<LocalInvalidation>(['notes', 'tracking']), 'notes'),
} satisfies { readonly [K in keyof LocalTierOptions]-?: Field<unknown> };

type LocalFields = typeof LOCAL_FIELDS;
export type ResolvedLocal = Readonly<{ [K in keyof LocalFields]: Parsed<LocalFields[K]> }>;

const localTier: Parse<ResolvedLocal | false> = (v, name) => {
  if (v === false) return false;
  if (typeof v !== 'object' || v === null) throw new InvalidOptionError(name, v, "{ max: <positive integer>, invalidation?: 'notes' | 'tracking' } or false");
  return Object.freeze(parseFields(LOCAL_FIELDS, v, `${name}.`, 'local '));
};

const replicaAck: Parse<ReplicaAckOptions> = (v, name) => {
  if (typeof v !== 'object' || v === null) throw new InvalidOptionError(name, v, '{ replicas: <positive integer>, timeout: <ms> }');
  const { replicas, timeout, ...extra } = v as { replicas?: unknown; timeout?: unknown };
  const unknown = Object.keys(extra)[0];
  if (unknown !== undefined) throw new InvalidOptionError(`${name}.${unknown}`, (extra as Record<string, unknown>)[unknown], 'no such option (replicaAck takes replicas and timeout)');
  return Object.freeze({ replicas: positiveCount(replicas, `${name}.replicas`), timeout: positiveMs(timeout, `${name}.timeout`) });
};

export const CACHE_FIELDS = {
  redis: field(redisClient, { required: true }),
  prefix: field(prefix, 'sg'),
  local: field(localTier, false),
  defaults: field(callDefaults),
  redisTimeout: field(positiveMs, 500),
  maxKeyLength: field(positiveCount, 1024),
  maxValueBytes: field(positiveCount, 1024 * 1024),
  breakerThreshold: field(positiveCount, 5),
  breakerCooldown: field(positiveMs, 1000),
  maxWaitersPerKey: field(positiveCount, 10_000),
  degradedMemo: field(intFrom(0, MAX_MS), 10_000),
  // Not in DEFAULTS: the default is a function, `systemClock`.
  clock: field(clock),
  // Same as `defaults.lock`; resolved into `defaults`.
  lock: field(lockPolicy),
  redlock: field(redlock),
  allowInsecureTls: field(boolean, false),
  // No default: off unless given.
  replicaAck: field(replicaAck),
  notes: field(oneOf<Notes>(['broadcast', 'sharded']), 'broadcast'),
} satisfies { readonly [K in keyof CacheOptions]-?: Field<unknown> };

type CacheFields = typeof CACHE_FIELDS;
export type ResolvedCache = Readonly<
  { [K in Exclude<keyof CacheFields, 'defaults' | 'lock' | 'clock' | 'redlock' | 'replicaAck'>]: Parsed<CacheFields[K]> } & {
    defaults: ResolvedDefaults;
    replicaAck: ReplicaAckOptions | undefined;
    clock: Clock;
    redlock: ResolvedRedlock | undefined;
    /** Test-only negative controls, from `options[UNSAFE]`; all false unless a test turns one on. */
    unsafe: Readonly<Required<UnsafeSwitches>>;
  }
>;

// ---------------------------------------------------------------- test-only switches (not public)

/** `createCache({ ...options, [UNSAFE]: { … } })`: negative controls for tests; never listed among the known options. */
export const UNSAFE_FIELDS = {
  unfencedWrites: field(boolean, false),
  incoherentL1: field(boolean, false),
  sharedBreaker: field(boolean, false),
  clockSkewMs: field(finiteNumber, 0),
  tagSnapshotAtWrite: field(boolean, false),
  tagReadUnchecked: field(boolean, false),
  ignoreInvalidations: field(boolean, false),
  tagStatesUndropped: field(boolean, false),
} satisfies { readonly [K in keyof UnsafeSwitches]-?: Field<Required<UnsafeSwitches>[K]> };

// ---------------------------------------------------------------- DEFAULTS

type DefaultsOf<S> = { readonly [K in Defaulted<S>]: S[K] extends Field<infer _T, infer D> ? D : never };
type AllDefaults = Readonly<DefaultsOf<CacheFields> & DefaultsOf<CallFields> & DefaultsOf<RedlockFields> & DefaultsOf<LocalFields>>;

function defaultsOf(schemas: readonly Readonly<Record<string, Field<unknown>>>[]): Readonly<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  for (const schema of schemas) {
    for (const [name, f] of Object.entries(schema)) {
      if (f.default === undefined) continue;
      // One flat object: the same name at two levels may have one default only.
      if (Object.hasOwn(out, name)) throw new Error(`stampede-guard: option ${name} has a default at two levels`);
      out[name] = f.default;
    }
  }
  return Object.freeze(out);
}

/**
 * The one place defaults live, read off the schema (every level in one flat object). The options
 * table of docs/options.md lists exactly these (test/unit/options-doc.test.ts). `ttl` has none on purpose.
 */
export const DEFAULTS = defaultsOf([CACHE_FIELDS, CALL_FIELDS, REDLOCK_FIELDS, LOCAL_FIELDS]) as AllDefaults;

/** The call-level defaults alone, the base every cache's `defaults` is merged over. */
export const CALL_DEFAULTS = defaultsOf([CALL_FIELDS]) as Readonly<DefaultsOf<CallFields>>;
