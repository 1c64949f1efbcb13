import { EventEmitter, setMaxListeners } from 'node:events';
import { AbortedError, CacheClosedError, InvalidOptionError } from './errors.js';
import type { CacheEvents } from './events.js';
import { NoFlight, SingleFlight, type Coalescer } from './flight.js';
import { portFor } from './client/detect.js';
import { Io } from './io.js';
import { entryKeys, validateKey } from './keys.js';
import type { LoaderContext } from './loader.js';
import { LruTier, NO_LOCAL_TIER, type LocalTier } from './local-tier.js';
import { GrantRegistry } from './lock/grant.js';
import { defineScripts } from './lock/scripts.js';
import { RedlockLock } from './lock/redlock.js';
import { StoreLock, type LockDeps } from './lock/single.js';
import type { Grant, Locker } from './lock/types.js';
import { resolveCacheOptions, resolveCallOptions, writeTtl, type CacheOptions, type CallOptions, type LockMode, type ResolvedCache, type ResolvedCall } from './options.js';
import { Background, readEntry, Rebuild, refreshAheadOnHit, type Emit, type RebuildDeps } from './rebuild.js';
import { Store } from './store.js';
import { getOrComputeChannel, Telemetry, traced, type CacheStats, type GetOrComputeContext } from './telemetry.js';
import { Bus, Waiters, type Note } from './wait.js';

export type { Loader, LoaderContext } from './loader.js';

const REMOTE_CHANGES: Partial<Record<Note['kind'], 'written' | 'set' | 'deleted'>> = { w: 'written', s: 'set', d: 'deleted' };

export function createCache(options: CacheOptions): Cache {
  return new Cache(options);
}

/**
 * A cache whose `getOrCompute` runs one rebuild per key per expiry across every process sharing the
 * Redis. See README "Guarantees": the lock is an efficiency lock; the cache write is fenced.
 * This class is the composition root and the public face; one call's protocol lives in rebuild.ts.
 */
export class Cache extends EventEmitter<CacheEvents> {
  private readonly options: ResolvedCache;
  private readonly io: Io;
  private readonly bus: Bus;
  private readonly local: LocalTier;
  private readonly waiters = new Waiters();
  private readonly lockers: Record<LockMode, Locker>;
  /** Fence-only grants (no lock): set(). */
  private readonly fenceOnly: StoreLock;
  private readonly coalescers: Record<LockMode, Coalescer>;
  private readonly flight: SingleFlight;
  /** Grants held right now; close() releases them (and any acquired while it runs) without waiting for loaders. */
  private readonly grants = new GrantRegistry();
  /** Aborts every loader's ctx.signal on close(); after it, no loader starts and nothing is written. */
  private readonly lifetime = new AbortController();
  private readonly deps: RebuildDeps;
  private closed = false;
  /** The one shutdown: a second close() resolves only when the first has released everything. */
  private closing: Promise<void> | undefined;
  /** Resolved options per bare ttl; undefined when the lock policy is a function of the key. */
  private readonly byTtl: Map<number, ResolvedCall> | undefined;
  /** Removes the listener on the caller's client's reconnections (close()). */
  private readonly stopReadyListener: () => void;
  private readonly telemetry = new Telemetry();

  constructor(options: CacheOptions) {
    super();
    const o = resolveCacheOptions(options);
    this.options = o;
    this.byTtl = typeof o.defaults.lock === 'function' ? undefined : new Map();
    // Every running loader listens to the lifetime signal (and detaches when done): not a leak.
    setMaxListeners(0, this.lifetime.signal);
    this.io = new Io(o.redisTimeout, o.breakerThreshold, o.breakerCooldown, o.clock);
    const port = portFor(o.redis);
    const scripts = defineScripts(port);
    // The subscriber's heartbeat: a silently dead socket counts as down within 2 × redisTimeout.
    this.bus = new Bus(o.prefix, o.redisTimeout);
    this.local = o.local ? new LruTier(o.local, o.clock, { incoherent: o.unsafe.incoherentL1 }) : NO_LOCAL_TIER;
    const emit = this.safeEmit;
    const store = new Store(this.io, scripts, this.bus, o.maxValueBytes, {
      decodeError: (key, reason, error) => emit('decodeError', { key, reason, error }),
    }, o.unsafe.unfencedWrites);
    const onLost = (key: string, error: Error): void => {
      this.telemetry.lockLost();
      emit('lockLost', { key, error });
    };
    const lockDeps: LockDeps = { io: this.io, scripts, bus: this.bus, clock: o.clock, onLost };
    const local = new StoreLock(lockDeps, 'local', false);
    const single = new StoreLock(lockDeps, 'single', true);
    this.fenceOnly = local;
    const fallback = { throw: undefined, single, local };
    this.lockers = {
      none: new StoreLock(lockDeps, 'none', false),
      local,
      single,
      // Without redlock nodes, resolveCall() refuses mode 'redlock' before it gets here.
      redlock: o.redlock
        ? new RedlockLock(lockDeps, o.redlock, fallback[o.redlock.onNoQuorum], { threshold: o.breakerThreshold, cooldown: o.breakerCooldown })
        : single,
    };
    const flight = new SingleFlight(o.maxWaitersPerKey, this.lifetime.signal);
    this.coalescers = { none: new NoFlight(this.lifetime.signal), local: flight, single: flight, redlock: flight };
    this.flight = flight;
    this.deps = {
      store,
      lockers: this.lockers,
      fenceOnly: local,
      local: this.local,
      waiters: this.waiters,
      grants: this.grants,
      background: new Background(),
      lifetime: this.lifetime.signal,
      clock: o.clock,
      emit,
      telemetry: this.telemetry,
    };
    // L1 is trusted only while subscribed: notes sent while away are lost (see local-tier.ts).
    this.bus.start(port, {
      onNote: (note) => this.onNote(note),
      onUp: () => this.local.resume(),
      onDown: () => this.local.suspend(),
      onError: (error) => emit('degraded', { key: undefined, operation: 'subscribe', error }),
    });
    this.stopReadyListener = port.onReady(this.onReady);
  }

  /** The caller's client reconnected: stop skipping Redis at once. */
  private readonly onReady = (): void => this.io.connected();

  /**
   * Listeners must not throw; one that does is reported as a process warning and breaks neither the
   * call (a throw between acquiring a grant and releasing it must not leak the grant) nor the other
   * listeners of the event. With no listener, an emit costs one count.
   */
  private readonly safeEmit: Emit = (name, ...payload) => {
    if (this.listenerCount(name) === 0) return;
    const report = (error: unknown): void =>
      process.emitWarning(`stampede-guard: a "${String(name)}" listener threw: ${error instanceof Error ? error.message : String(error)}`, { code: 'SG_LISTENER_THREW' });
    for (const listener of this.rawListeners(name) as ((...args: unknown[]) => unknown)[]) {
      try {
        const returned = listener.apply(this, payload);
        // An async listener's rejection is reported the same way, never left unhandled.
        if (returned instanceof Promise) returned.catch(report);
      } catch (error) {
        report(error);
      }
    }
  };

  /**
   * Returns the cached value for `key`, or runs `loader` — once across all processes — to rebuild it.
   * The story: L1 → in-process flight → store → fresh/stale → lock → re-read → loader → fenced write →
   * release → notify; losers wait to be woken (or poll) until `waitTimeout` (see rebuild.ts).
   *
   * `T` is inferred from what the loader returns. `S` (the type of `ctx.staleValue`) is separate so that
   * an unannotated `(ctx) => …` loader does not pin `T` to `unknown`: TypeScript must type `ctx` before
   * it reads the loader's body, so with a single parameter `T` would be fixed from `ctx` first. `S` is `T`
   * when `T` is given explicitly or the loader annotates `ctx` (`Loader<T>`), else `unknown`.
   */
  getOrCompute<T, S = T>(key: string, loader: (ctx: LoaderContext<S>) => T | PromiseLike<T>, ttlOrOptions?: number | CallOptions): Promise<T> {
    // The tracing context exists only while someone subscribes: without, a call costs this one check.
    if (!traced()) return this.compute(key, loader, ttlOrOptions, undefined);
    const context: GetOrComputeContext = { key, lock: undefined };
    return getOrComputeChannel.tracePromise(() => this.compute(key, loader, ttlOrOptions, context), context);
  }

  /** Counters since creation (a copy): see CacheStats for what each counts, and README "Observability". */
  stats(): CacheStats {
    return this.telemetry.stats();
  }

  private async compute<T, S>(key: string, loader: (ctx: LoaderContext<S>) => T | PromiseLike<T>, ttlOrOptions: number | CallOptions | undefined, trace: GetOrComputeContext | undefined): Promise<T> {
    const call = this.resolveCall(key, ttlOrOptions);
    if (trace) trace.lock = call.lock;
    if (typeof loader !== 'function') throw new InvalidOptionError('loader', loader, 'a function (ctx) => value | Promise<value>', key);
    if (call.signal?.aborted) throw new AbortedError(key, call.signal.reason);
    const l1 = this.local.get(key);
    const untyped = loader as (ctx: LoaderContext) => unknown;
    if (l1?.stale) {
      this.telemetry.localStale();
      if (trace) trace.outcome = 'stale';
      this.safeEmit('stale', { key, reason: 'window' });
      return l1.value as T;
    }
    if (l1) {
      this.telemetry.localHit();
      if (trace) trace.outcome = 'localHit';
      this.safeEmit('hit', { key, tier: 'local' });
      if (call.refreshAhead !== 0 && l1.facts) refreshAheadOnHit(this.deps, key, () => entryKeys(this.options.prefix, key), untyped, call, { value: l1.value, freshUntil: l1.freshUntil, facts: l1.facts });
      return l1.value as T;
    }
    const keys = entryKeys(this.options.prefix, key);
    let led = false; // this caller's work ran the trip (else it joined another caller's flight)
    const answered = await this.coalescers[call.lock].run(key, call.signal, (signal) => {
      led = true;
      return new Rebuild(this.deps, key, keys, untyped, call, signal).answer();
    });
    const outcome = this.telemetry.caller(answered, led);
    if (trace) trace.outcome = outcome;
    return answered.value as T;
  }

  /** The fresh value, or `undefined`. Never runs a loader; a Redis failure is reported as `degraded` and reads as a miss. */
  async get<T = unknown>(key: string): Promise<T | undefined> {
    this.assertUsable(key);
    const l1 = this.local.get(key);
    if (l1 && !l1.stale) return l1.value as T;
    try {
      const found = await readEntry(this.deps, key, entryKeys(this.options.prefix, key));
      return found.state === 'fresh' ? (found.value as T) : undefined;
    } catch (error) {
      if (error instanceof CacheClosedError) throw error;
      this.safeEmit('degraded', { key, operation: 'read', error });
      return undefined;
    }
  }

  /**
   * Writes a value, fenced like a rebuild (an in-flight rebuild's older write is then rejected); works
   * during a `failBackoff`. Throws RedisUnavailableError, or UnstorableValueError for a value that could
   * never be read back (nothing is written then).
   */
  async set<T>(key: string, value: T, ttlOrOptions?: number | CallOptions): Promise<void> {
    const call = this.resolveCall(key, ttlOrOptions);
    if (value === undefined) throw new InvalidOptionError('value', value, 'a value other than undefined (use delete() to remove)', key);
    const keys = entryKeys(this.options.prefix, key);
    this.deps.store.assertStorable(key, value, call); // before any Redis traffic
    // The value is changing: this process's copy goes now, and comes back only if the fence accepts ours.
    this.local.invalidate(key);
    const grant = (await this.fenceOnly.acquire(key, keys, call, { ignoreBackoff: true, operation: 'set' })) as Grant;
    let outcome: 'written' | 'empty' | 'cancelled' = 'empty';
    try {
      if (!this.grants.hold(grant)) {
        outcome = 'cancelled';
        throw new CacheClosedError(key);
      }
      const ticket = this.local.begin(key);
      const ttl = writeTtl(call);
      const sent = this.options.clock.now();
      this.telemetry.ownWrite(key, grant.fence);
      const accepted = await this.deps.store.write(key, keys, grant, value, call, 0, 's', ttl);
      outcome = 'written';
      // Redis started the entry's ttl between `sent` and now: L1's copy counts from `sent`.
      this.local.written(ticket, key, value, ttl - (this.options.clock.now() - sent), accepted, { fence: grant.fence, ttlMs: ttl, loadMs: 0 });
      if (!accepted) {
        this.telemetry.writeRejected();
        this.safeEmit('writeRejected', { key, fence: grant.fence });
      }
      this.flight.forget(key); // a call starting now must not join a rebuild begun before this set
    } finally {
      this.grants.drop(grant);
      await grant.release(outcome);
    }
  }

  /** Removes the entry everywhere (store and every process's L1); bumps the fence so no in-flight rebuild resurrects it. */
  async delete(key: string): Promise<void> {
    this.assertUsable(key);
    this.local.invalidate(key);
    try {
      await this.deps.store.invalidate(key, entryKeys(this.options.prefix, key), this.options.defaults.lockTtl);
      this.flight.forget(key); // a call starting now must not join a rebuild begun before this delete
    } finally {
      this.local.deleted(key);
    }
  }

  /**
   * Resolves `true` once this cache's pub/sub subscription is active, or `false` after at most
   * `redisTimeout` ms without it (the subscription keeps retrying in the background; failures are
   * `degraded` events with operation `'subscribe'`). Never rejects. Optional: until subscribed, waiters
   * progress by polling and L1 is not used.
   */
  ready(): Promise<boolean> {
    return this.bus.ready(this.options.redisTimeout);
  }

  /** Stops timers, background refreshes and the subscription. Never quits the caller's client. Idempotent. */
  close(): Promise<void> {
    this.closing ??= this.shutDown();
    return this.closing;
  }

  private async shutDown(): Promise<void> {
    this.closed = true;
    this.lifetime.abort(new CacheClosedError());
    this.waiters.wakeAll();
    // Loaders may ignore their signal; close() never waits for them. Their grants are released now
    // (and any grant acquired meanwhile is refused by the registry); a loader that finishes later writes nothing.
    await this.grants.close();
    this.deps.background.clear();
    this.stopReadyListener();
    this.io.close();
    if (this.lockers.redlock instanceof RedlockLock) this.lockers.redlock.close();
    await this.bus.stop();
    this.local.flush();
  }

  /** Another process's write, set or delete drops this process's copy before any waiter re-reads. */
  private onNote(note: Note): void {
    const change = REMOTE_CHANGES[note.kind];
    if (change && note.origin !== this.bus.origin) {
      this.local.invalidate(note.key);
      this.flight.forget(note.key);
      this.safeEmit('remoteChange', { key: note.key, kind: change });
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
}
