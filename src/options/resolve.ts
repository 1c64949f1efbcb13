/**
 * Resolution: createCache's options once (frozen), one call's options over the cache defaults on
 * every call. Both throw `InvalidOptionError` before any Redis traffic.
 */
import { assertOpening, portFor } from '../client/detect.js';
import { InvalidOptionError } from '../errors.js';
import type { RedisClient } from '../redis-types.js';
import { UNSAFE, type UnsafeSwitches } from '../unsafe.js';
import { lockModeFor } from './effective.js';
import { parseFields, positiveMs } from './fields.js';
import { systemClock, type CacheOptions, type CallOptions } from './public.js';
import {
  CACHE_FIELDS,
  CALL_DEFAULTS,
  UNSAFE_FIELDS,
  validateCall,
  type ResolvedCache,
  type ResolvedCall,
  type ResolvedDefaults,
} from './schema.js';

/**
 * A node-redis client that is not open is refused (ClientNotConnectedError); a client that does not
 * verify the server's certificate is refused unless `allowInsecureTls`, and then warned about.
 */
function checkClients(redis: RedisClient, nodes: readonly RedisClient[], allowInsecureTls: boolean): void {
  for (const [name, client] of [['redis', redis] as const, ...nodes.map((n, i) => [`redlock.nodes[${i}]`, n] as const)]) {
    if (portFor(client).skipsTlsVerification) {
      if (!allowInsecureTls) {
        throw new InvalidOptionError(name, 'tls.rejectUnauthorized: false', 'a client that verifies the server certificate, or allowInsecureTls: true');
      }
      process.emitWarning(`stampede-guard: ${name} does not verify the Redis server's TLS certificate (allowInsecureTls: true)`, { code: 'SG_INSECURE_TLS' });
    }
    assertOpening(client, name);
  }
}

const SAFE: Readonly<Required<UnsafeSwitches>> = Object.freeze(parseFields(UNSAFE_FIELDS, {}, '', ''));

/** The test-only switches at `input[UNSAFE]` (a symbol key, so they are never among the named options). */
function resolveUnsafe(input: object): Readonly<Required<UnsafeSwitches>> {
  const given = (input as { [UNSAFE]?: unknown })[UNSAFE];
  if (given === undefined) return SAFE;
  if (typeof given !== 'object' || given === null) throw new InvalidOptionError('[UNSAFE]', given, 'an object of test-only switches');
  return Object.freeze(parseFields(UNSAFE_FIELDS, given, '[UNSAFE].', 'test-only '));
}

/** Validates `createCache` options once; the result is frozen. */
export function resolveCacheOptions(input: CacheOptions): ResolvedCache {
  if (typeof input !== 'object' || input === null) throw new InvalidOptionError('options', input, 'an object with at least { redis }');
  const { defaults: given = {}, lock, clock, ...rest } = parseFields(CACHE_FIELDS, input, '', 'createCache ');
  checkClients(rest.redis, rest.redlock?.nodes ?? [], rest.allowInsecureTls);
  // WAIT runs inside the operation it confirms, which redisTimeout bounds.
  if (rest.replicaAck && rest.replicaAck.timeout >= rest.redisTimeout) {
    throw new InvalidOptionError('replicaAck.timeout', rest.replicaAck.timeout, `a number of ms below redisTimeout (${rest.redisTimeout})`);
  }
  // Tracking is per server: a Cluster client would need it on a connection to every master (not built yet).
  if (rest.local !== false && rest.local.invalidation === 'tracking' && portFor(rest.redis).cluster) {
    throw new InvalidOptionError('local.invalidation', 'tracking', "'notes' with a Cluster client (tracking is not supported on a Cluster yet: docs/tracking.md)");
  }
  // Under 'notes', L1 copies are dropped by the notes of every key, and with sharded notes a process hears
  // only the keys it waits on. Under tracking the server drops them (tag and clear notes stay broadcast).
  if (rest.notes === 'sharded' && rest.local !== false && rest.local.invalidation === 'notes') {
    throw new InvalidOptionError('local', input.local, "false, or { invalidation: 'tracking' }, when notes is 'sharded' (an L1 copy must hear every change of its key)");
  }
  if (lock !== undefined && given.lock !== undefined) throw new InvalidOptionError('lock', lock, 'either lock or defaults.lock, not both');
  const defaults: ResolvedDefaults = Object.freeze({ ...CALL_DEFAULTS, ...given, ...(lock === undefined ? {} : { lock }) });
  return Object.freeze({ ...rest, replicaAck: rest.replicaAck, defaults, clock: clock ?? systemClock, unsafe: resolveUnsafe(input) });
}

/** One call's options merged over the defaults, the lock policy not yet evaluated on a key. */
export type MergedCall = Omit<ResolvedCall, 'lock'> & { readonly lock: ResolvedDefaults['lock'] };

/**
 * Validates one call's options (a ttl number or an options object) and merges them over the cache
 * defaults. Throws `InvalidOptionError` before any Redis traffic. `key` only names the call in errors.
 */
export function mergeCallOptions(defaults: ResolvedDefaults, input: number | CallOptions | undefined, key: string | undefined): MergedCall {
  let given: Partial<ResolvedCall>;
  if (typeof input === 'number') given = { ttl: positiveMs(input, 'ttl', key) };
  else if (input === undefined) given = {};
  else if (typeof input === 'object' && input !== null) given = validateCall(input, '', key) as Partial<ResolvedCall>;
  else throw new InvalidOptionError('ttl', input, 'a ttl in ms or an options object', key);
  const merged = { ...defaults, ...given };
  if (merged.ttl === undefined) throw new InvalidOptionError('ttl', undefined, 'a positive integer number of ms, per call or in defaults', key);
  return { ...merged, ttl: merged.ttl, signal: merged.signal, forceFresh: merged.forceFresh, tags: merged.tags };
}

/** Merged options with the lock policy evaluated on `key`; frozen. */
export function withLockFor(merged: MergedCall, key: string): ResolvedCall {
  return Object.freeze({ ...merged, lock: lockModeFor(merged.lock, key) });
}

/**
 * Merges one call's options over the cache defaults. `input` is a ttl number or an options object.
 * Throws `InvalidOptionError` before any Redis traffic.
 */
export function resolveCallOptions(defaults: ResolvedDefaults, input: number | CallOptions | undefined, key: string): ResolvedCall {
  return withLockFor(mergeCallOptions(defaults, input, key), key);
}
