import { InvalidOptionError } from './errors.js';
import type { RedisClient } from './redis-types.js';
import { UNSAFE, type UnsafeSwitches } from './unsafe.js'; // campaign-branch shim, discarded on merge

/**
 * How a key's rebuild is coordinated.
 * - `none`: plain cache-aside; every missing call runs the loader (the baseline).
 * - `local`: one loader per key per process (in-process single-flight only).
 * - `single`: one loader per key across every process, via a lock on the store's Redis (an efficiency lock).
 * - `redlock`: as `single`, but the lock needs a quorum of independent Redis masters (`redlock.nodes`).
 */
export type LockMode = 'none' | 'local' | 'single' | 'redlock';
export const LOCK_MODES: readonly LockMode[] = ['none', 'local', 'single', 'redlock'];

/** A lock mode, or a function choosing one from the key (evaluated on every call). */
export type LockPolicy = LockMode | ((key: string) => LockMode);

/** What a caller that waited `waitTimeout` without seeing a value does next. */
export type OnWaitTimeout = 'compute' | 'throw';

/** Monotonic milliseconds. Injectable so unit tests can use fake timers. */
export interface Clock {
  now(): number;
}
export const systemClock: Clock = { now: () => performance.now() };

/** Options accepted per call and, as cache-wide defaults, in `createCache({ defaults })`. */
export interface CallOptions {
  /** Fresh time in ms (a positive integer). No default: give it per call or in `defaults`. */
  ttl?: number;
  /** How long after `ttl` a stale value may still be served (at once) while one process refreshes it, in ms. Default `0` (no stale serving). */
  staleTtl?: number;
  /** Lock mode or per-key policy. Default `'single'`. */
  lock?: LockPolicy;
  /** Lifetime of a rebuild lock grant in ms; a watchdog extends it every `lockTtl / 3` while the loader runs. Default `10000`. */
  lockTtl?: number;
  /** Longest time a caller waits for another process's rebuild, in ms. Default `5000`. */
  waitTimeout?: number;
  /** After `waitTimeout`: `'compute'` runs the loader anyway (fenced), `'throw'` rejects with `WaitTimeoutError`. Default `'compute'`. */
  onWaitTimeout?: OnWaitTimeout;
  /** Fallback poll interval while waiting, in ms, jittered ±50%; waiters are normally woken by pub/sub first. Default `250`. */
  pollInterval?: number;
  /** The caller's AbortSignal: aborting it rejects this call with `AbortedError` (ERR_ABORTED). Default none. */
  signal?: AbortSignal;
  /** Fail-safe: how long after `ttl` an expired value is kept, to be served (flagged stale) when the loader fails or times out, in ms. Default `0` (off). */
  failSafeTtl?: number;
  /** After a loader failure, no process calls the loader for this key for this long (fleet-wide, kept in Redis), in ms. Default `0` (off). */
  failBackoff?: number;
  /** With a fallback value at hand (fail-safe), return it after this many ms of loading; the loader finishes in the background and still fills the cache. Default `0` (off). */
  softTimeout?: number;
  /** A loader running longer than this fails its callers with `LoaderTimeoutError`; its signal aborts and the lock is released, in ms. Default `0` (off). */
  hardTimeout?: number;
}

/** The optional in-process L1 tier. */
export interface LocalTierOptions {
  /** Most entries kept (lru-cache `max`). Required. */
  max: number;
}

/** What a redlock acquisition does when no quorum of nodes answers. */
export type OnNoQuorum = 'throw' | 'single' | 'local';

/** Redlock: a quorum over N independent Redis masters (not replicas). */
export interface RedlockOptions {
  /** ioredis clients of independent masters, owned by the caller; at least 3 (odd numbers recommended). Required. */
  nodes: RedisClient[];
  /** Clock drift allowance as a fraction of lockTtl (plus 2 ms). Default `0.01`. */
  driftFactor?: number;
  /** Extra attempts after a split vote or an expired validity. Default `3`. */
  retryCount?: number;
  /** Base delay between attempts, ms. Default `200`. */
  retryDelay?: number;
  /** Random extra delay added to each retry, up to this many ms. Default `100`. */
  retryJitter?: number;
  /** Longest wait for one node's answer, ms; a hanging node costs at most this. Default `100`. */
  nodeTimeout?: number;
  /** No quorum reachable: `'throw'` NoQuorumError, or run under `'single'` (the store's lock) or `'local'`. Default `'local'`. */
  onNoQuorum?: OnNoQuorum;
}

export interface ResolvedRedlock {
  readonly nodes: readonly RedisClient[];
  readonly driftFactor: number;
  readonly retryCount: number;
  readonly retryDelay: number;
  readonly retryJitter: number;
  readonly nodeTimeout: number;
  readonly onNoQuorum: OnNoQuorum;
}

export interface CacheOptions {
  /** An ioredis `Redis` or `Cluster`, owned by the caller. Required. Never quit by the cache; duplicated once for pub/sub. */
  redis: RedisClient;
  /** Key namespace; must not contain `{` or `}`. Default `'sg'`. */
  prefix?: string;
  /** The in-process L1 tier; `false` or omitted turns it off. Default off. */
  local?: LocalTierOptions | false;
  /** Cache-wide defaults for every per-call option. */
  defaults?: CallOptions;
  /** Longest time any single Redis operation may take before the call degrades, in ms. Default `1000`. */
  redisTimeout?: number;
  /** Longest accepted key, in UTF-16 code units. Default `1024`. */
  maxKeyLength?: number;
  /** Entries larger than this (bytes) are never decoded: treated as a miss and reported. Default `1048576` (1 MiB). */
  maxValueBytes?: number;
  /** Consecutive Redis failures that open the circuit breaker (Redis is then skipped for `breakerCooldown`). Default `5`. */
  breakerThreshold?: number;
  /** How long the open breaker skips Redis before one probe, in ms. Default `2000`. */
  breakerCooldown?: number;
  /** Callers of one key in one process beyond this get a fast `TooManyWaitersError`. Default `10000`. */
  maxWaitersPerKey?: number;
  /** Monotonic clock. Default `performance.now()`. */
  clock?: Clock;
  /** The cache-wide lock policy (same as `defaults.lock`; give one or the other). Default `'single'`. */
  lock?: LockPolicy;
  /** Redlock nodes and tuning; required for lock mode `'redlock'`. Default none. */
  redlock?: RedlockOptions;
  /** Accept clients whose TLS options set `rejectUnauthorized: false` (certificate not verified). Default `false`: such clients are refused. */
  allowInsecureTls?: boolean;
  /**
   * NEGATIVE CONTROL FOR FAULT-INJECTION TESTS ONLY — never in production. Writes skip the fence check,
   * so a late, stale rebuilder overwrites newer values; the test suite uses it to prove its checker
   * detects exactly that. Default `false`.
   */
  unsafeUnfencedWrites?: boolean;
}

/**
 * The one place defaults live. The README's options table lists exactly these.
 * `ttl` has no default on purpose: how long a value stays fresh is the caller's decision.
 */
export const DEFAULTS = Object.freeze({
  prefix: 'sg',
  redisTimeout: 1000,
  maxKeyLength: 1024,
  maxValueBytes: 1024 * 1024,
  breakerThreshold: 5,
  breakerCooldown: 2000,
  staleTtl: 0,
  lock: 'single',
  lockTtl: 10_000,
  waitTimeout: 5_000,
  onWaitTimeout: 'compute',
  pollInterval: 250,
  failSafeTtl: 0,
  failBackoff: 0,
  softTimeout: 0,
  hardTimeout: 0,
  maxWaitersPerKey: 10_000,
  driftFactor: 0.01,
  retryCount: 3,
  retryDelay: 200,
  retryJitter: 100,
  nodeTimeout: 100,
  onNoQuorum: 'local',
});

/** Per-call options after merging defaults and validating; frozen. */
export interface ResolvedCall {
  readonly ttl: number;
  readonly staleTtl: number;
  readonly lock: LockMode;
  readonly lockTtl: number;
  readonly waitTimeout: number;
  readonly onWaitTimeout: OnWaitTimeout;
  readonly pollInterval: number;
  readonly signal: AbortSignal | undefined;
  readonly failSafeTtl: number;
  readonly failBackoff: number;
  readonly softTimeout: number;
  readonly hardTimeout: number;
}

/** Cache defaults after validation: everything but ttl/signal may be present. */
export type ResolvedDefaults = Readonly<Omit<CallOptions, 'signal'> & Required<Pick<CallOptions, 'staleTtl' | 'lock' | 'lockTtl' | 'waitTimeout' | 'onWaitTimeout' | 'pollInterval' | 'failSafeTtl' | 'failBackoff' | 'softTimeout' | 'hardTimeout'>>>;

export interface ResolvedCache {
  readonly prefix: string;
  readonly local: LocalTierOptions | false;
  readonly defaults: ResolvedDefaults;
  readonly redisTimeout: number;
  readonly maxKeyLength: number;
  readonly maxValueBytes: number;
  readonly breakerThreshold: number;
  readonly breakerCooldown: number;
  readonly maxWaitersPerKey: number;
  readonly clock: Clock;
  readonly redlock: ResolvedRedlock | undefined;
  readonly unsafeUnfencedWrites: boolean;
}

// ---------------------------------------------------------------- validators

const MAX_MS = 2 ** 31 - 1; // setTimeout's ceiling; longer timers fire at once in Node.

function positiveInt(name: string, v: unknown, key?: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0 || v > MAX_MS) {
    throw new InvalidOptionError(name, v, `a positive integer number of milliseconds ≤ ${MAX_MS}`, key);
  }
  return v;
}

function nonNegativeInt(name: string, v: unknown, key?: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > MAX_MS) {
    throw new InvalidOptionError(name, v, `a non-negative integer number of milliseconds ≤ ${MAX_MS}`, key);
  }
  return v;
}

function lockPolicy(v: unknown, key?: string): LockPolicy {
  if (typeof v === 'function') return v as (key: string) => LockMode;
  if (typeof v === 'string' && (LOCK_MODES as readonly string[]).includes(v)) return v as LockMode;
  throw new InvalidOptionError('lock', v, `one of ${LOCK_MODES.map((m) => `'${m}'`).join(', ')} or a function of the key`, key);
}

function onWaitTimeout(v: unknown, key?: string): OnWaitTimeout {
  if (v === 'compute' || v === 'throw') return v;
  throw new InvalidOptionError('onWaitTimeout', v, `'compute' or 'throw'`, key);
}

function abortSignal(v: unknown, key?: string): AbortSignal | undefined {
  if (v === undefined || v instanceof AbortSignal) return v;
  throw new InvalidOptionError('signal', v, 'an AbortSignal', key);
}

type Validator = (v: unknown, key?: string) => unknown;
const CALL_VALIDATORS: Record<keyof CallOptions, Validator> = {
  ttl: (v, k) => positiveInt('ttl', v, k),
  staleTtl: (v, k) => nonNegativeInt('staleTtl', v, k),
  lock: lockPolicy,
  lockTtl: (v, k) => positiveInt('lockTtl', v, k),
  waitTimeout: (v, k) => positiveInt('waitTimeout', v, k),
  onWaitTimeout,
  pollInterval: (v, k) => positiveInt('pollInterval', v, k),
  signal: abortSignal,
  failSafeTtl: (v, k) => nonNegativeInt('failSafeTtl', v, k),
  failBackoff: (v, k) => nonNegativeInt('failBackoff', v, k),
  softTimeout: (v, k) => nonNegativeInt('softTimeout', v, k),
  hardTimeout: (v, k) => nonNegativeInt('hardTimeout', v, k),
};

function validateCallOptions(input: object, where: string, key?: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(input)) {
    if (!Object.hasOwn(CALL_VALIDATORS, name)) {
      throw new InvalidOptionError(`${where}${name}`, value, `no such option; known: ${Object.keys(CALL_VALIDATORS).join(', ')}`, key);
    }
    if (value === undefined) continue;
    out[name] = CALL_VALIDATORS[name as keyof CallOptions](value, key);
  }
  return out;
}

const CACHE_OPTION_NAMES = new Set([
  'redis', 'prefix', 'local', 'defaults', 'redisTimeout', 'maxKeyLength', 'maxValueBytes',
  'breakerThreshold', 'breakerCooldown', 'maxWaitersPerKey', 'clock', 'redlock', 'lock', 'allowInsecureTls', 'unsafeUnfencedWrites',
]);

/** Reads an ioredis client's TLS options (Redis: options.tls; Cluster: options.redisOptions.tls). */
function skipsTlsVerification(client: unknown): boolean {
  const o = (client as { options?: { tls?: { rejectUnauthorized?: unknown }; redisOptions?: { tls?: { rejectUnauthorized?: unknown } } } }).options;
  const tls = o?.tls ?? o?.redisOptions?.tls;
  return typeof tls === 'object' && tls !== null && tls.rejectUnauthorized === false;
}

function isRedisClient(v: unknown): v is RedisClient {
  const c = v as Partial<RedisClient> | null;
  return typeof c === 'object' && c !== null && typeof c.defineCommand === 'function' && typeof c.duplicate === 'function';
}

/** Validates `createCache` options once; the result is frozen. */
export function resolveCacheOptions(input: CacheOptions): ResolvedCache {
  if (typeof input !== 'object' || input === null) throw new InvalidOptionError('options', input, 'an object with at least { redis }');
  for (const name of Object.keys(input)) {
    if (!CACHE_OPTION_NAMES.has(name)) {
      throw new InvalidOptionError(name, (input as unknown as Record<string, unknown>)[name], `no such createCache option; known: ${[...CACHE_OPTION_NAMES].join(', ')}`);
    }
  }
  if (!isRedisClient(input.redis)) throw new InvalidOptionError('redis', input.redis, 'an ioredis Redis or Cluster instance');
  if (input.allowInsecureTls !== undefined && typeof input.allowInsecureTls !== 'boolean') throw new InvalidOptionError('allowInsecureTls', input.allowInsecureTls, 'a boolean');
  const nodes: unknown[] = Array.isArray(input.redlock?.nodes) ? input.redlock.nodes : [];
  for (const [name, client] of [['redis', input.redis] as const, ...nodes.map((n, i) => [`redlock.nodes[${i}]`, n] as const)]) {
    if (!skipsTlsVerification(client)) continue;
    if (input.allowInsecureTls !== true) {
      throw new InvalidOptionError(name, 'tls.rejectUnauthorized: false', 'a client that verifies the server certificate, or allowInsecureTls: true');
    }
    process.emitWarning(`stampede-guard: ${name} does not verify the Redis server's TLS certificate (allowInsecureTls: true)`, { code: 'SG_INSECURE_TLS' });
  }
  const prefix = input.prefix ?? DEFAULTS.prefix;
  if (typeof prefix !== 'string' || prefix.length === 0 || /[{}]/.test(prefix) || !prefix.isWellFormed() || prefix.length > 256) {
    throw new InvalidOptionError('prefix', prefix, 'a non-empty string of at most 256 characters without "{" or "}"');
  }
  let local: LocalTierOptions | false = false;
  if (input.local !== undefined && input.local !== false) {
    const l = input.local as unknown;
    if (typeof l !== 'object' || l === null) throw new InvalidOptionError('local', l, '{ max: <positive integer> } or false');
    const max = (l as { max?: unknown }).max;
    if (typeof max !== 'number' || !Number.isInteger(max) || max <= 0) throw new InvalidOptionError('local.max', max, 'a positive integer');
    local = Object.freeze({ max });
  }
  const d = input.defaults ?? {};
  if (typeof d !== 'object' || d === null) throw new InvalidOptionError('defaults', d, 'an object of per-call options');
  const given = validateCallOptions(d, 'defaults.');
  if (input.lock !== undefined) {
    if (given.lock !== undefined) throw new InvalidOptionError('lock', input.lock, 'either lock or defaults.lock, not both');
    given.lock = lockPolicy(input.lock);
  }
  if (given.signal !== undefined) throw new InvalidOptionError('defaults.signal', given.signal, 'no signal in defaults (pass it per call)');
  const defaults = Object.freeze({
    staleTtl: DEFAULTS.staleTtl,
    lock: DEFAULTS.lock,
    lockTtl: DEFAULTS.lockTtl,
    waitTimeout: DEFAULTS.waitTimeout,
    onWaitTimeout: DEFAULTS.onWaitTimeout,
    pollInterval: DEFAULTS.pollInterval,
    failSafeTtl: DEFAULTS.failSafeTtl,
    failBackoff: DEFAULTS.failBackoff,
    softTimeout: DEFAULTS.softTimeout,
    hardTimeout: DEFAULTS.hardTimeout,
    ...given,
  }) as ResolvedDefaults;
  const clock = input.clock ?? systemClock;
  if (typeof clock !== 'object' || clock === null || typeof clock.now !== 'function') throw new InvalidOptionError('clock', clock, 'an object with now(): number');
  return Object.freeze({
    prefix,
    local,
    defaults,
    redisTimeout: positiveInt('redisTimeout', input.redisTimeout ?? DEFAULTS.redisTimeout),
    maxKeyLength: positiveInt('maxKeyLength', input.maxKeyLength ?? DEFAULTS.maxKeyLength),
    maxValueBytes: positiveInt('maxValueBytes', input.maxValueBytes ?? DEFAULTS.maxValueBytes),
    breakerThreshold: positiveInt('breakerThreshold', input.breakerThreshold ?? DEFAULTS.breakerThreshold),
    breakerCooldown: positiveInt('breakerCooldown', input.breakerCooldown ?? DEFAULTS.breakerCooldown),
    maxWaitersPerKey: positiveInt('maxWaitersPerKey', input.maxWaitersPerKey ?? DEFAULTS.maxWaitersPerKey),
    clock,
    redlock: input.redlock === undefined ? undefined : resolveRedlock(input.redlock),
    unsafeUnfencedWrites: input.unsafeUnfencedWrites === true || (input as { [UNSAFE]?: UnsafeSwitches })[UNSAFE]?.unfencedWrites === true,
  });
}

function nonNegativeNumber(name: string, v: unknown, max: number): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0 || v > max) throw new InvalidOptionError(name, v, `a number from 0 to ${max}`);
  return v;
}

function attemptCount(v: unknown): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 100) throw new InvalidOptionError('redlock.retryCount', v, 'an integer from 0 to 100');
  return v;
}

function resolveRedlock(input: RedlockOptions): ResolvedRedlock {
  if (typeof input !== 'object' || input === null) throw new InvalidOptionError('redlock', input, '{ nodes: [client, client, client, …] }');
  const known = ['nodes', 'driftFactor', 'retryCount', 'retryDelay', 'retryJitter', 'nodeTimeout', 'onNoQuorum'];
  for (const name of Object.keys(input)) {
    if (!known.includes(name)) throw new InvalidOptionError(`redlock.${name}`, (input as unknown as Record<string, unknown>)[name], `no such redlock option; known: ${known.join(', ')}`);
  }
  const nodes: unknown = input.nodes;
  if (!Array.isArray(nodes) || nodes.length < 3 || !nodes.every(isRedisClient)) {
    throw new InvalidOptionError('redlock.nodes', nodes, 'an array of at least 3 ioredis clients of independent masters');
  }
  const onNoQuorum = input.onNoQuorum ?? DEFAULTS.onNoQuorum;
  if (onNoQuorum !== 'throw' && onNoQuorum !== 'single' && onNoQuorum !== 'local') {
    throw new InvalidOptionError('redlock.onNoQuorum', onNoQuorum, `'throw', 'single' or 'local'`);
  }
  return Object.freeze({
    nodes: Object.freeze([...nodes]),
    driftFactor: nonNegativeNumber('redlock.driftFactor', input.driftFactor ?? DEFAULTS.driftFactor, 0.5),
    retryCount: attemptCount(input.retryCount ?? DEFAULTS.retryCount),
    retryDelay: nonNegativeInt('redlock.retryDelay', input.retryDelay ?? DEFAULTS.retryDelay),
    retryJitter: nonNegativeInt('redlock.retryJitter', input.retryJitter ?? DEFAULTS.retryJitter),
    nodeTimeout: positiveInt('redlock.nodeTimeout', input.nodeTimeout ?? DEFAULTS.nodeTimeout),
    onNoQuorum,
  });
}

/**
 * Merges one call's options over the cache defaults. `input` is a ttl number or an options object.
 * Throws `InvalidOptionError` before any Redis traffic.
 */
export function resolveCallOptions(defaults: ResolvedDefaults, input: number | CallOptions | undefined, key: string): ResolvedCall {
  let given: Record<string, unknown>;
  if (typeof input === 'number') given = { ttl: positiveInt('ttl', input, key) };
  else if (input === undefined) given = {};
  else if (typeof input === 'object' && input !== null) given = validateCallOptions(input, '', key);
  else throw new InvalidOptionError('ttl', input, 'a ttl in ms or an options object', key);
  const merged = { ...defaults, ...given } as CallOptions & ResolvedDefaults;
  if (merged.ttl === undefined) throw new InvalidOptionError('ttl', undefined, 'a positive integer number of ms, per call or in defaults', key);
  return Object.freeze({
    ttl: merged.ttl,
    staleTtl: merged.staleTtl,
    lock: lockModeFor(merged.lock, key),
    lockTtl: merged.lockTtl,
    waitTimeout: merged.waitTimeout,
    onWaitTimeout: merged.onWaitTimeout,
    pollInterval: merged.pollInterval,
    signal: merged.signal,
    failSafeTtl: merged.failSafeTtl,
    failBackoff: merged.failBackoff,
    softTimeout: merged.softTimeout,
    hardTimeout: merged.hardTimeout,
  });
}

// ---------------------------------------------------------------- effective values (pure)

/** The mode a policy picks for a key; a policy function returning garbage is a typed error. */
export function lockModeFor(policy: LockPolicy, key: string): LockMode {
  const mode = typeof policy === 'function' ? policy(key) : policy;
  if (!(LOCK_MODES as readonly string[]).includes(mode)) {
    throw new InvalidOptionError('lock', mode, `the lock policy to return one of ${LOCK_MODES.join(', ')}`, key);
  }
  return mode;
}

/** How long an entry outlives its fresh time: the longer of the stale window and the fail-safe window. */
export function graceWindow(staleTtl: number, failSafeTtl: number): number {
  return Math.max(staleTtl, failSafeTtl);
}

/** How long Redis keeps an entry: fresh time plus its grace window. */
export function physicalTtl(ttl: number, staleTtl: number, failSafeTtl = 0): number {
  return ttl + graceWindow(staleTtl, failSafeTtl);
}

/**
 * Which loader timeout applies. With a fallback value at hand (fail-safe) a soft timeout returns it
 * early; otherwise only the hard timeout can end the wait. 0 = no timeout.
 */
export function loaderTimeout(hasFallback: boolean, softTimeout: number, hardTimeout: number): { kind: 'soft' | 'hard' | 'none'; ms: number } {
  if (hasFallback && softTimeout > 0 && (hardTimeout === 0 || softTimeout < hardTimeout)) return { kind: 'soft', ms: softTimeout };
  if (hardTimeout > 0) return { kind: 'hard', ms: hardTimeout };
  return { kind: 'none', ms: 0 };
}

/** How often the watchdog extends a grant: a third of its lifetime, so two extensions may fail before it lapses. */
export function watchdogInterval(lockTtl: number): number {
  return Math.max(1, Math.floor(lockTtl / 3));
}

/** The next fallback poll delay: `pollInterval` jittered to [0.5, 1.5)× and never past the deadline. `rand` is in [0, 1). */
export function pollDelay(pollInterval: number, remainingMs: number, rand: number): number {
  return Math.max(0, Math.min(remainingMs, Math.round(pollInterval * (0.5 + rand))));
}
