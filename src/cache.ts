import { EventEmitter } from 'node:events';
import { freshRemaining } from './entry.js';
import {
  CacheClosedError,
  InvalidOptionError,
  LoaderTimeoutError,
  OriginBackoffError,
  RedisUnavailableError,
  WaitTimeoutError,
} from './errors.js';
import type { CacheEvents } from './events.js';
import { NoFlight, SingleFlight, type Coalescer } from './flight.js';
import { Io } from './io.js';
import { entryKeys, validateKey, type EntryKeys } from './keys.js';
import { LruTier, NO_LOCAL_TIER, type LocalTier } from './local-tier.js';
import { defineScripts } from './lock/scripts.js';
import { RedlockLock } from './lock/redlock.js';
import { StoreLock, type LockDeps } from './lock/single.js';
import type { Grant, Locker, ReleaseNote } from './lock/types.js';
import {
  loaderTimeout,
  pollDelay,
  resolveCacheOptions,
  resolveCallOptions,
  type CacheOptions,
  type CallOptions,
  type LockMode,
  type ResolvedCache,
  type ResolvedCall,
} from './options.js';
import { Store, type Found } from './store.js';
import { UNSAFE, type UnsafeSwitches } from './unsafe.js';
import { Bus, Waiters, type Note } from './wait.js';

/** What a loader receives. */
export interface LoaderContext<T = unknown> {
  readonly key: string;
  /** Aborts when every caller sharing this rebuild aborted, the cache closed, or the lock was lost (reason: LockLostError). */
  readonly signal: AbortSignal;
  /** The grant's fencing token, strictly increasing per key; `undefined` when Redis was unavailable (degraded). */
  readonly fencingToken: number | undefined;
  /** The stale value being refreshed, when this is a background refresh. */
  readonly staleValue: T | undefined;
}

export type Loader<T> = (ctx: LoaderContext<T>) => T | Promise<T>;

/** An expired value kept for fail-safe. */
type Fallback = { readonly value: unknown };
type StaleReason = 'window' | 'loaderError' | 'backoff' | 'softTimeout' | 'waitTimeout';
const SOFT_TIMEOUT = Symbol('soft timeout');

/**
 * Runs a loader with its combined abort signal; a positive `hardTimeout` rejects with
 * LoaderTimeoutError after that long and aborts the loader's signal with the same error.
 */
async function runLoader(
  loader: Loader<unknown>,
  ctx: { key: string; signals: AbortSignal[]; fencingToken: number | undefined; staleValue: unknown },
  hardTimeout: number,
): Promise<unknown> {
  if (hardTimeout === 0) return loader({ key: ctx.key, signal: AbortSignal.any(ctx.signals), fencingToken: ctx.fencingToken, staleValue: ctx.staleValue });
  const timeout = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const err = new LoaderTimeoutError(ctx.key, hardTimeout);
      timeout.abort(err);
      reject(err);
    }, hardTimeout);
  });
  const running = Promise.resolve(
    loader({ key: ctx.key, signal: AbortSignal.any([...ctx.signals, timeout.signal]), fencingToken: ctx.fencingToken, staleValue: ctx.staleValue }),
  );
  running.catch(() => undefined); // after a hard timeout nobody awaits it
  try {
    return await Promise.race([running, expired]);
  } finally {
    clearTimeout(timer);
  }
}

const REMOTE_CHANGES: Partial<Record<Note['kind'], 'written' | 'set' | 'deleted'>> = { w: 'written', s: 'set', d: 'deleted' };

export function createCache(options: CacheOptions): Cache {
  return new Cache(options);
}

/**
 * A cache whose `getOrCompute` runs one rebuild per key per expiry across every process sharing the
 * Redis. See README "Guarantees": the lock is an efficiency lock; the cache write is fenced.
 */
export class Cache extends EventEmitter<CacheEvents> {
  private readonly options: ResolvedCache;
  private readonly io: Io;
  private readonly bus: Bus;
  private readonly store: Store;
  private readonly local: LocalTier;
  private readonly waiters = new Waiters();
  private readonly flight: SingleFlight;
  private readonly lockers: Record<LockMode, Locker>;
  private readonly coalescers: Record<LockMode, Coalescer>;
  /** Background refreshes by key: at most one per key per process. */
  private readonly refreshing = new Map<string, Promise<void>>();
  /** Grants held right now; close() releases them (their watchdogs stop) without waiting for loaders. */
  private readonly grants = new Set<Grant>();
  /** Aborts every loader's ctx.signal on close(). */
  private readonly lifetime = new AbortController();
  private closed = false;
  /** Resolved options per bare ttl; undefined when the lock policy is a function of the key. */
  private readonly byTtl: Map<number, ResolvedCall> | undefined;

  constructor(options: CacheOptions) {
    super();
    const o = resolveCacheOptions(options);
    this.options = o;
    this.flight = new SingleFlight(o.maxWaitersPerKey);
    this.byTtl = typeof o.defaults.lock === 'function' ? undefined : new Map();
    this.io = new Io(o.redisTimeout, o.breakerThreshold, o.breakerCooldown, o.clock);
    const scripts = defineScripts(options.redis);
    this.bus = new Bus(o.prefix, o.redisTimeout); // heartbeat: a silently dead subscriber is down within 2 × redisTimeout
    const unsafe = (options as { [UNSAFE]?: UnsafeSwitches })[UNSAFE];
    this.local = o.local ? new LruTier(o.local, o.clock, { incoherent: unsafe?.incoherentL1 === true }) : NO_LOCAL_TIER;
    this.store = new Store(this.io, scripts, this.bus, o.maxValueBytes, {
      decodeError: (key, reason, error) => this.emit('decodeError', { key, reason, error }),
    }, o.unsafeUnfencedWrites);
    const deps: LockDeps = {
      io: this.io,
      scripts,
      bus: this.bus,
      clock: o.clock,
      onLost: (key, error) => this.emit('lockLost', { key, error }),
    };
    const local = new StoreLock(deps, 'local', false);
    const single = new StoreLock(deps, 'single', true);
    const fallback = { throw: undefined, single, local };
    this.lockers = {
      none: new StoreLock(deps, 'none', false),
      local,
      single,
      // Without redlock nodes, resolveCall() refuses mode 'redlock' before it gets here.
      redlock: o.redlock
        ? new RedlockLock(deps, o.redlock, fallback[o.redlock.onNoQuorum], { threshold: o.breakerThreshold, cooldown: o.breakerCooldown })
        : single,
    };
    const none = new NoFlight();
    this.coalescers = { none, local: this.flight, single: this.flight, redlock: this.flight };
    this.bus.start(options.redis, {
      onNote: (note) => this.onNote(note),
      onUp: () => this.local.resume(),
      onDown: () => this.local.suspend(),
      onError: (error) => this.emit('degraded', { key: undefined, operation: 'subscribe', error }),
    });
    this.client = options.redis;
    this.client.on?.('ready', this.onReady);
  }

  private readonly client: CacheOptions['redis'];
  /** The caller's client reconnected: stop skipping Redis at once. */
  private readonly onReady = (): void => this.io.connected();

  /**
   * Returns the cached value for `key`, or runs `loader` — once across all processes — to rebuild it.
   * The story: L1 → in-process flight → store → fresh/stale → lock → re-read → loader → fenced write →
   * release → notify; losers wait to be woken (or poll) until `waitTimeout`.
   */
  async getOrCompute<T>(key: string, loader: Loader<T>, ttlOrOptions?: number | CallOptions): Promise<T> {
    const call = this.resolveCall(key, ttlOrOptions);
    if (typeof loader !== 'function') throw new InvalidOptionError('loader', loader, 'a function (ctx) => value | Promise<value>', key);
    const l1 = this.local.get(key);
    if (l1) {
      this.emit('hit', { key, tier: 'local' });
      return l1.value as T;
    }
    return this.coalescers[call.lock].run(key, call.signal, (signal) => this.fetch(key, loader as Loader<unknown>, call, signal)) as Promise<T>;
  }

  /** The fresh value, or `undefined`. Never runs a loader; a Redis failure is reported as `degraded` and reads as a miss. */
  async get<T = unknown>(key: string): Promise<T | undefined> {
    this.assertUsable(key);
    const l1 = this.local.get(key);
    if (l1) return l1.value as T;
    try {
      const ticket = this.local.begin(key);
      const found = await this.store.read(key, entryKeys(this.options.prefix, key));
      return found.state === 'fresh' ? (this.served(key, found, ticket) as T) : undefined;
    } catch (error) {
      this.emit('degraded', { key, operation: 'read', error });
      return undefined;
    }
  }

  /** Writes a value, fenced like a rebuild (an in-flight rebuild's older write is then rejected). Throws RedisUnavailableError. */
  async set<T>(key: string, value: T, ttlOrOptions?: number | CallOptions): Promise<void> {
    const call = this.resolveCall(key, ttlOrOptions);
    if (value === undefined) throw new InvalidOptionError('value', value, 'a value other than undefined (use delete() to remove)', key);
    const keys = entryKeys(this.options.prefix, key);
    this.local.invalidate(key); // the old value must not outlive this set, written or not
    const grant = (await this.lockers.local.acquire(key, keys, call)) as Grant;
    try {
      const ticket = this.local.begin(key);
      if (await this.store.write(key, keys, grant, value, call, 0, 's')) this.local.fill(ticket, key, value, call.ttl);
    } finally {
      await grant.release('');
    }
  }

  /** Removes the entry everywhere (store and every process's L1); bumps the fence so no in-flight rebuild resurrects it. */
  async delete(key: string): Promise<void> {
    this.assertUsable(key);
    this.local.invalidate(key);
    try {
      await this.store.invalidate(key, entryKeys(this.options.prefix, key), this.options.defaults.lockTtl);
    } finally {
      // Again once the store answered: a read sent after the first invalidate may have executed before the delete.
      this.local.invalidate(key);
    }
  }

  /**
   * Resolves true once this cache's pub/sub subscription is active, or false after at most
   * `redisTimeout` ms (the subscription keeps retrying in the background; failures are reported as
   * `degraded` with operation 'subscribe'). Never rejects. Optional: before it, waiters progress by
   * polling and L1 is neither served nor filled.
   */
  ready(): Promise<boolean> {
    return this.bus.ready(this.options.redisTimeout);
  }

  /** Stops timers, background refreshes and the subscription. Never quits the caller's client. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.lifetime.abort(new CacheClosedError());
    this.waiters.wakeAll();
    // Loaders may ignore their signal; close() never waits for them. Their grants are released now,
    // and a loader that finishes later writes nothing (writeQuietly checks `closed`).
    await Promise.all([...this.grants].map((g) => g.release('r')));
    this.refreshing.clear();
    this.client.off?.('ready', this.onReady);
    this.io.close();
    if (this.lockers.redlock instanceof RedlockLock) this.lockers.redlock.close();
    await this.bus.stop();
    this.local.flush();
  }

  // ------------------------------------------------------------------ the story, step by step

  private async fetch(key: string, loader: Loader<unknown>, call: ResolvedCall, signal: AbortSignal): Promise<unknown> {
    const keys = entryKeys(this.options.prefix, key);
    let found: Found;
    const ticket = this.local.begin(key);
    try {
      found = await this.store.read(key, keys);
    } catch (error) {
      return this.computeDegraded(key, loader, call, signal, 'read', error);
    }
    if (found.state === 'fresh') return this.served(key, found, ticket);
    if (found.state === 'stale') {
      this.refreshInBackground(key, keys, loader, call, found.value);
      return this.served(key, found, ticket);
    }
    this.emit('miss', { key });
    return this.rebuildOrWait(key, keys, loader, call, signal, found.state === 'kept' ? found : undefined);
  }

  /**
   * Take the lock and rebuild, or wait to be woken by the winner; retry the lock after each wake.
   * `fallback` is an expired value kept for fail-safe: served if the loader fails, backs off or is slow.
   */
  private async rebuildOrWait(key: string, keys: EntryKeys, loader: Loader<unknown>, call: ResolvedCall, signal: AbortSignal, fallback: Fallback | undefined): Promise<unknown> {
    const clock = this.options.clock;
    const waiter = this.waiters.register(key); // before the first attempt: no notification can slip by
    const started = clock.now();
    const deadline = started + call.waitTimeout;
    try {
      for (let attempt = 0; ; attempt++) {
        this.assertRunning(key, signal);
        let grant: Grant | null;
        try {
          grant = await this.lockers[call.lock].acquire(key, keys, call);
        } catch (error) {
          if (error instanceof OriginBackoffError) return this.failSafe(key, fallback, error, 'backoff');
          return await this.degradeOrThrow(key, loader, call, signal, error);
        }
        if (grant) {
          if (attempt > 0) this.emit('waited', { key, ms: clock.now() - started, outcome: 'took-over' });
          return await this.loadWithin(key, keys, loader, call, signal, grant, fallback);
        }
        const remaining = deadline - clock.now();
        if (remaining <= 0) {
          this.emit('waited', { key, ms: clock.now() - started, outcome: 'timeout' });
          if (fallback) return this.serveFallback(key, fallback, 'waitTimeout');
          return await this.afterWaitTimeout(key, keys, loader, call, signal);
        }
        await waiter.next(pollDelay(call.pollInterval, remaining, Math.random()), signal);
        this.assertRunning(key, signal);
        let found: Found;
        const ticket = this.local.begin(key);
        try {
          found = await this.store.read(key, keys);
        } catch (error) {
          return await this.computeDegraded(key, loader, call, signal, 'read', error);
        }
        if (found.state === 'fresh' || found.state === 'stale') {
          this.emit('waited', { key, ms: clock.now() - started, outcome: found.state === 'fresh' ? 'value' : 'stale' });
          return this.served(key, found, ticket);
        }
        if (found.state === 'kept') fallback = found;
      }
    } finally {
      waiter.dispose();
    }
  }

  /** Runs the rebuild; with a fail-safe fallback and a soft timeout, answers with the fallback once it passes (the rebuild goes on). */
  private async loadWithin(key: string, keys: EntryKeys, loader: Loader<unknown>, call: ResolvedCall, signal: AbortSignal, grant: Grant, fallback: Fallback | undefined): Promise<unknown> {
    const rebuilding = this.rebuild(key, keys, loader, call, signal, grant, fallback, undefined);
    const wait = loaderTimeout(fallback !== undefined, call.softTimeout, call.hardTimeout);
    if (!fallback || wait.kind !== 'soft') return rebuilding;
    this.track(key, rebuilding);
    let timer: NodeJS.Timeout | undefined;
    const soft = new Promise<typeof SOFT_TIMEOUT>((resolve) => (timer = setTimeout(() => resolve(SOFT_TIMEOUT), wait.ms)));
    const first = await Promise.race([rebuilding, soft]);
    clearTimeout(timer);
    return first === SOFT_TIMEOUT ? this.serveFallback(key, fallback, 'softTimeout') : first;
  }

  /**
   * We hold a grant: re-read (someone may have just written), run the loader (bounded by hardTimeout),
   * write fenced, release in one finally. A failure releases with a fleet-wide backoff and falls back
   * to the fail-safe value when there is one.
   */
  private async rebuild(key: string, keys: EntryKeys, loader: Loader<unknown>, call: ResolvedCall, signal: AbortSignal, grant: Grant, fallback: Fallback | undefined, staleValue: unknown): Promise<unknown> {
    let note: ReleaseNote = 'r';
    this.grants.add(grant);
    try {
      if (grant.exclusive) {
        const ticket = this.local.begin(key);
        const again = await this.store.read(key, keys).catch(() => undefined);
        if (again?.state === 'fresh') {
          note = '';
          return this.served(key, again, ticket);
        }
      }
      const started = this.options.clock.now();
      let value: unknown;
      try {
        value = await runLoader(loader, { key, signals: [signal, grant.signal, this.lifetime.signal], fencingToken: grant.fence, staleValue }, call.hardTimeout);
      } catch (error) {
        note = 'e';
        this.emit('loaderError', { key, error });
        return this.failSafe(key, fallback, error, 'loaderError');
      }
      const loadMs = this.options.clock.now() - started;
      // `undefined` means "do not cache": callers get it, nothing is written, waiters are told to retry.
      if (value === undefined) return value;
      const written = await this.writeQuietly(key, keys, grant, value, call, loadMs);
      if (written) note = '';
      this.emit('computed', { key, lock: grant.mode, fence: grant.fence, loadMs, written });
      return value;
    } finally {
      this.grants.delete(grant);
      await grant.release(note);
    }
  }

  /** Serves the fail-safe value when one is kept, else throws `error` (a loader's own error reaches its callers unchanged). */
  private failSafe(key: string, fallback: Fallback | undefined, error: unknown, reason: StaleReason): unknown {
    if (!fallback) throw error;
    return this.serveFallback(key, fallback, reason);
  }

  /** Serves a kept value, flagged with a `stale` event naming why. */
  private serveFallback(key: string, fallback: Fallback, reason: StaleReason): unknown {
    this.emit('stale', { key, reason });
    return fallback.value;
  }

  /** An acquire failed: an unreachable store degrades to a local computation; anything else (NoQuorumError…) reaches the caller. */
  private degradeOrThrow(key: string, loader: Loader<unknown>, call: ResolvedCall, signal: AbortSignal, error: unknown): Promise<unknown> {
    if (!(error instanceof RedisUnavailableError)) throw error;
    return this.computeDegraded(key, loader, call, signal, 'acquire', error);
  }

  private async writeQuietly(key: string, keys: EntryKeys, grant: Grant, value: unknown, call: ResolvedCall, loadMs: number): Promise<boolean> {
    if (this.closed) return false;
    try {
      const ticket = this.local.begin(key);
      const accepted = await this.store.write(key, keys, grant, value, call, loadMs, 'w');
      if (accepted) this.local.fill(ticket, key, value, call.ttl);
      else this.emit('writeRejected', { key, fence: grant.fence });
      return accepted;
    } catch (error) {
      // Includes values msgpackr cannot encode: the caller still gets the value.
      this.emit('degraded', { key, operation: 'write', error });
      return false;
    }
  }

  /** After `waitTimeout`: throw, or compute under a fence-only grant (its write still cannot clobber a newer value). */
  private async afterWaitTimeout(key: string, keys: EntryKeys, loader: Loader<unknown>, call: ResolvedCall, signal: AbortSignal): Promise<unknown> {
    if (call.onWaitTimeout === 'throw') throw new WaitTimeoutError(key, call.waitTimeout);
    let grant: Grant;
    try {
      grant = (await this.lockers.local.acquire(key, keys, call)) as Grant;
    } catch (error) {
      return this.degradeOrThrow(key, loader, call, signal, error);
    }
    return this.rebuild(key, keys, loader, call, signal, grant, undefined, undefined);
  }

  /** Redis failed: run the loader here (still one per key per process through the flight); no store write. */
  private async computeDegraded(key: string, loader: Loader<unknown>, call: ResolvedCall, signal: AbortSignal, operation: string, error: unknown): Promise<unknown> {
    this.emit('degraded', { key, operation, error });
    const ticket = this.local.begin(key);
    const started = this.options.clock.now();
    let value: unknown;
    try {
      value = await runLoader(loader, { key, signals: [signal, this.lifetime.signal], fencingToken: undefined, staleValue: undefined }, call.hardTimeout);
    } catch (loaderError) {
      this.emit('loaderError', { key, error: loaderError });
      throw loaderError;
    }
    if (value !== undefined) this.local.fill(ticket, key, value, call.ttl);
    this.emit('computed', { key, lock: 'degraded', fence: undefined, loadMs: this.options.clock.now() - started, written: false });
    return value;
  }

  /** Stale served: refresh once per key per process, only if this process wins the lock. */
  private refreshInBackground(key: string, keys: EntryKeys, loader: Loader<unknown>, call: ResolvedCall, staleValue: unknown): void {
    if (this.refreshing.has(key) || this.closed) return;
    this.track(
      key,
      (async () => {
        const grant = await this.lockers[call.lock].acquire(key, keys, call);
        if (grant) await this.rebuild(key, keys, loader, call, this.lifetime.signal, grant, undefined, staleValue);
      })(),
    );
  }

  /** Background work on a key (a refresh, or a rebuild that outlived its soft timeout): at most one per key, never an unhandled rejection. */
  private track(key: string, work: Promise<unknown>): void {
    const tracked = work
      .then(() => undefined, (error: unknown) => {
        if (!(error instanceof OriginBackoffError)) this.emit('refreshError', { key, error });
      })
      .finally(() => {
        if (this.refreshing.get(key) === tracked) this.refreshing.delete(key);
      });
    this.refreshing.set(key, tracked);
  }

  /** `ticket`: taken before the read that found it (LocalTier.begin). */
  private served(key: string, found: Found, ticket: number): unknown {
    if (found.state === 'miss') return undefined;
    if (found.state === 'fresh') {
      this.local.fill(ticket, key, found.value, freshRemaining(found.pttl, found.graceMs));
      this.emit('hit', { key, tier: 'redis' });
    } else {
      this.emit('stale', { key, reason: 'window' });
    }
    return found.value;
  }

  private onNote(note: Note): void {
    const change = REMOTE_CHANGES[note.kind];
    if (change && note.origin !== this.bus.origin) {
      this.local.invalidate(note.key);
      this.emit('remoteChange', { key: note.key, kind: change });
    }
    this.waiters.wake(note.key, note.kind);
  }

  // ------------------------------------------------------------------ guards

  private resolveCall(key: string, ttlOrOptions: number | CallOptions | undefined): ResolvedCall {
    this.assertUsable(key);
    if (typeof ttlOrOptions === 'number') {
      // A bare ttl resolves to the same frozen options every time (unless the policy depends on the key).
      const known = this.byTtl?.get(ttlOrOptions);
      if (known) return known;
    }
    const call = resolveCallOptions(this.options.defaults, ttlOrOptions, key);
    if (call.lock === 'redlock' && !this.options.redlock) throw new InvalidOptionError('lock', 'redlock', 'redlock nodes configured: createCache({ redlock: { nodes } })', key);
    if (typeof ttlOrOptions === 'number' && this.byTtl && this.byTtl.size < 256) this.byTtl.set(ttlOrOptions, call);
    return call;
  }

  private assertUsable(key: unknown): asserts key is string {
    validateKey(key, this.options.maxKeyLength);
    if (this.closed) throw new CacheClosedError(key);
  }

  private assertRunning(key: string, signal: AbortSignal): void {
    if (this.closed) throw new CacheClosedError(key);
    if (signal.aborted) throw signal.reason instanceof Error ? signal.reason : new CacheClosedError(key);
  }
}
