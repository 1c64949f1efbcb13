import { EventEmitter } from 'node:events';
import { clearCache } from './clearing.js';
import { getOrCompute } from './compute.js';
import { safeEmitter } from './emit.js';
import type { CacheEvents } from './events.js';
import type { Guard } from './guards.js';
import type { LoaderContext } from './loader.js';
import { getOrComputeMany, type BatchLoader } from './many.js';
import { Namespace, validateNamespace, type NamespaceHost } from './namespace.js';
import { namespaceHost } from './namespace-host.js';
import { resolveCacheOptions, type CacheOptions, type CallOptions } from './options.js';
import { get, getMany } from './reads.js';
import { Runtime } from './runtime.js';
import type { CacheHealth } from './health.js';
import type { CacheStats } from './telemetry.js';
import { invalidateTags, remove, removeMany, set } from './writes.js';
import type { TagInvalidation } from './tags.js';
import { InvalidOptionError } from './errors.js';
import { tagsToDelete } from './options/fields.js';

export type { Loader, LoaderContext } from './loader.js';

export function createCache(options: CacheOptions): Cache {
  return new Cache(options);
}

/**
 * A cache whose `getOrCompute` runs one rebuild per key per expiry across every process sharing the
 * Redis. See docs/guarantees.md: the lock is an efficiency lock; the cache write is fenced.
 * This class is the public face and the composition root (runtime.ts wires the parts); what each
 * operation does lives in the module named for it: compute.ts, many.ts, reads.ts, writes.ts,
 * clearing.ts, namespace-host.ts, and one call's protocol in call.ts and protocol/.
 */
export class Cache extends EventEmitter<CacheEvents> {
  private readonly rt: Runtime;
  /** The checks of every operation; the namespaces' view of this cache has its own (their reserved keys allowed). */
  private readonly guard: Guard;
  private host: NamespaceHost | undefined;

  constructor(options: CacheOptions) {
    super();
    this.rt = new Runtime(resolveCacheOptions(options), safeEmitter(this));
    this.guard = this.rt.guard;
  }

  /**
   * Returns the cached value for `key`, or runs `loader` — once across all processes — to rebuild it.
   * The story: L1 → in-process flight → store → fresh/stale → lock → re-read → loader → fenced write →
   * release → notify; losers wait to be woken (or poll) until `waitTimeout` (see protocol/trip.ts).
   *
   * `T` is inferred from what the loader returns. `S` (the type of `ctx.staleValue`) is separate so that
   * an unannotated `(ctx) => …` loader does not pin `T` to `unknown`: TypeScript must type `ctx` before
   * it reads the loader's body, so with a single parameter `T` would be fixed from `ctx` first. `S` is `T`
   * when `T` is given explicitly or the loader annotates `ctx` (`Loader<T>`), else `unknown`.
   */
  getOrCompute<T, S = T>(key: string, loader: (ctx: LoaderContext<S>) => T | PromiseLike<T>, ttlOrOptions?: number | CallOptions): Promise<T> {
    return getOrCompute(this.rt, this.guard, key, loader as (ctx: LoaderContext) => unknown, ttlOrOptions) as Promise<T>;
  }

  /** Each Redis node's state now (healthy, suspect, open) — cheap, for a health endpoint; changes are `health` events (health.ts). */
  health(): CacheHealth {
    return this.rt.health();
  }

  /** Counters since creation (a copy): see CacheStats for what each counts, and docs/observability.md. */
  stats(): CacheStats {
    return this.rt.telemetry.stats();
  }

  /** The fresh value, or `undefined`. Never runs a loader; a Redis failure is reported as `degraded` and reads as the degraded copy (degraded-memo.ts) or a miss. */
  async get<T = unknown>(key: string): Promise<T | undefined> {
    this.guard.usable(key);
    return (await get(this.rt, key)) as T | undefined;
  }

  /**
   * Removes every entry of the cache — its plain keys and every namespace's — in every process: each
   * master is walked with SCAN (never KEYS; a Cluster's masters in parallel) and each entry found is
   * invalidated as `delete()` does, its fence raised (a rebuild already running cannot write after
   * it), 100 per pipeline, one pipeline at a time per node; then one note tells every process to drop its L1,
   * degraded copies and running flights, and the call resolves once they acknowledged (at most
   * 2 × `redisTimeout`), as a namespace's clear does. Cost: SCAN visits every key of each master in
   * steps of 1,000, plus one short script per entry. Rejects with `RedisUnavailableError` if Redis
   * fails meanwhile (some entries are then left: call it again). A namespace's own `clear()` is O(1)
   * whatever its size: prefer namespaces for data cleared often.
   */
  clear(): Promise<void> {
    return clearCache(this.rt);
  }

  /**
   * A view of this cache with its own key space: same connections, subscription, L1 and options, the
   * same operations, and `clear()` (O(1), every process). `name`: 1–128 letters, digits, `_ - . :`.
   * Namespaces nest (`cache.namespace('users').namespace('admins')`); clearing one clears its nested ones.
   */
  namespace(name: string): Namespace {
    validateNamespace(name);
    this.guard.open();
    // The namespaces' operations: this cache, seen through the guard that allows their reserved keys.
    this.host ??= namespaceHost(this.rt, Object.create(this, { guard: { value: this.rt.reservedGuard } }) as Cache);
    return new Namespace(this.host, [name]);
  }

  /**
   * Many keys at once, coordinated key by key across processes: one pipelined read per hash slot; the
   * misses' locks taken together; keys whose lock another process holds are waited for (not reloaded);
   * the keys this process won go to ONE `loadMany(missing, ctx)` call returning a Map (a key left out =
   * not found, not cached; an `Error` value fails that key alone); each key is written fenced on its
   * own, with its own stale, refresh-ahead and fail-safe handling. Resolves the values aligned with
   * `keys`; rejects with the first failed key's error once every key settled (the others are cached).
   */
  async getOrComputeMany<T>(keys: readonly string[], loadMany: BatchLoader<T>, ttlOrOptions?: number | CallOptions): Promise<(T | undefined)[]> {
    this.guard.keys(keys);
    // Tags on batches come in a later release: refused rather than silently dropped.
    if (typeof ttlOrOptions === 'object' && ttlOrOptions !== null && ttlOrOptions.tags !== undefined) throw new InvalidOptionError('tags', ttlOrOptions.tags, 'no tags on getOrComputeMany (not supported yet: tag each key with getOrCompute or set)');
    return (await getOrComputeMany(this.rt, this.guard, keys, loadMany, ttlOrOptions)) as (T | undefined)[];
  }

  /**
   * Does a fresh value exist for `key` (in L1 or Redis)? Expired values (stale or kept for fail-safe)
   * do not count. Like get(): never runs a loader; a Redis failure reads as the degraded copy if one is kept, else `false` (a `degraded` event).
   */
  async has(key: string): Promise<boolean> {
    return (await this.get(key)) !== undefined;
  }

  /**
   * The fresh values of `keys`, aligned with them (`undefined` for a miss), like get() for each: L1
   * first, then one pipelined round trip per hash slot for the rest (one in all on a single Redis).
   * A Redis failure reads as a miss for the keys it hit (a `degraded` event per key).
   */
  async getMany<T = unknown>(keys: readonly string[]): Promise<(T | undefined)[]> {
    this.guard.keys(keys);
    return (await getMany(this.rt, keys)) as (T | undefined)[];
  }

  /**
   * delete() for each of `keys`, pipelined (one round trip per hash slot): each key's fence is raised
   * (no rebuild in flight can bring it back) and every process drops it from its L1. Rejects with the
   * first key's RedisUnavailableError when Redis failed for some keys; the others are deleted.
   */
  async deleteMany(keys: readonly string[]): Promise<void> {
    this.guard.keys(keys);
    return removeMany(this.rt, keys);
  }

  /**
   * Writes a value, fenced like a rebuild (an in-flight rebuild's older write is then rejected); works
   * during a `failBackoff`. If the fence refuses the write because the fence hash was lost since this
   * call's token (nothing accepted since), the entry is deleted instead, as by `delete()`; a set()
   * superseded by a newer write leaves that value. Throws
   * RedisUnavailableError, or UnstorableValueError for a value that could never be read back (nothing
   * is written then).
   */
  async set<T>(key: string, value: T, ttlOrOptions?: number | CallOptions): Promise<void> {
    return set(this.rt, key, value, this.guard.call(key, ttlOrOptions));
  }

  /**
   * Invalidates every entry tagged `tag` (or any of the tags of an array), namespaced ones included,
   * in every process: once this resolves, no call that starts afterwards returns an entry tagged so
   * whose load was granted (or whose set() was made) before it — not from Redis, not from any L1, not
   * from a loader that was paused across it (its write is refused, or on a Cluster read as a miss). O(1) in the number of entries:
   * one record per tag is set to the server's time and one note tells every process to drop its
   * copies; it resolves once every subscribed process acknowledged (at most 2 × `redisTimeout`, as
   * clear()). Bad tags are an InvalidOptionError before any Redis traffic; RedisUnavailableError if
   * Redis fails. See docs/tags.md (on a Cluster: what a tagged hit costs there).
   */
  async deleteByTag(tag: string | readonly string[]): Promise<void> {
    return this.byTag(tag, 'delete');
  }

  /**
   * Expires every entry tagged `tag` (or any of the tags of an array), namespaced ones included, in
   * every process: once this resolves, no call that starts afterwards gets a FRESH answer of an entry
   * tagged so whose load was granted (or whose set() was made) before it — not from Redis, not from
   * any L1. Such an entry is stale instead: served (with a `stale` event) for its `staleTtl` from now
   * while exactly one rebuild per key runs across the fleet (its waiters woken as usual); an entry
   * whose `staleTtl` is 0 is a miss, as after deleteByTag. Costs, acknowledgements and errors as
   * deleteByTag's. See docs/tags.md.
   */
  async expireByTag(tag: string | readonly string[]): Promise<void> {
    return this.byTag(tag, 'expire');
  }

  private async byTag(tag: string | readonly string[], how: TagInvalidation): Promise<void> {
    const tags = tagsToDelete(tag);
    this.guard.open();
    return invalidateTags(this.rt, '', tags, how);
  }

  /** Removes the entry everywhere (store and every process's L1); bumps the fence so no in-flight rebuild resurrects it. */
  async delete(key: string): Promise<void> {
    this.guard.usable(key);
    return remove(this.rt, key);
  }

  /**
   * Resolves `true` once calls can reach Redis: this cache's pub/sub subscription is active, every
   * master of the caller's client answered a PING, and no circuit breaker refuses operations. Resolves
   * `false` after at most `redisTimeout` ms otherwise (at once on close()), with a `degraded` event
   * (operation `'ready'`) per part that did not hold, whose error says which (`'subscribe'`, `'ping'`,
   * or `'ready'` with the breaker's cause) and why; the subscription keeps retrying
   * in the background. Never rejects. Optional: until subscribed, waiters progress by polling and L1 is
   * not used.
   */
  ready(): Promise<boolean> {
    return this.rt.ready();
  }

  /** Stops timers, background refreshes and the subscription. Never quits the caller's client. Idempotent. */
  close(): Promise<void> {
    return this.rt.close();
  }
}
