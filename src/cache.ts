import { randomBytes } from 'node:crypto';
import { EventEmitter, setMaxListeners } from 'node:events';
import { Batch } from './batch.js';
import { invalidateEverything } from './clear.js';
import type { RedisPort } from './client/port.js';
import { LruDegradedMemo, NO_DEGRADED_MEMO, type DegradedMemo } from './degraded-memo.js';
import { refreshPolicyFor } from './entry.js';
import { AbortedError, CacheClosedError, InvalidKeyError, InvalidOptionError, type RedisUnavailableError } from './errors.js';
import type { CacheEvents } from './events.js';
import { Calls } from './call.js';
import { portFor } from './client/detect.js';
import { nodeProbe, type CacheHealth } from './health.js';
import { Io } from './io.js';
import { ready } from './readiness.js';
import { entryKeys, slotTag, validateKey } from './keys.js';
import type { LoaderContext } from './loader.js';
import { LruTier, NO_LOCAL_TIER, type LocalTier } from './local-tier.js';
import { GrantRegistry, ReleaseRetries } from './lock/grant.js';
import { defineScripts } from './lock/scripts.js';
import { RedlockLock } from './lock/redlock.js';
import { StoreLock, type LockDeps } from './lock/single.js';
import type { Grant, Locker } from './lock/types.js';
import { CallShapes } from './options/shapes.js';
import { resolveCacheOptions, resolveCallOptions, writeTtl, type CacheOptions, type CallOptions, type LockMode, type ResolvedCache, type ResolvedCall } from './options.js';
import { Background, entryRead, readEntry, refreshAheadOnHit, type Emit, type RebuildDeps } from './rebuild.js';
import { replicaConfirm, withReplicaAck } from './replica-ack.js';
import { Store, type Found } from './store.js';
import { getOrComputeChannel, Telemetry, traced, type CacheStats, type GetOrComputeContext } from './telemetry.js';
import { computeMany, type BatchLoader } from './many.js';
import { clearNoteKey, Generations, Namespace, parseClearNote, RESERVED_KEY_START, shownKey, validateNamespace, withDegradedKeys, type NamespaceHost } from './namespace.js';
import { Bus, Waiters, type Note } from './wait.js';
import { broadcastNotes, ShardedWake, type WakeChannels } from './wake.js';

export type { Loader, LoaderContext } from './loader.js';

/** The path of the cache's own clear() for its note and acknowledgements ('*' is no namespace name: never a namespace's path). */
const WHOLE_CACHE = '*';

/** The node name a plain client's port gives every key (port.nodeOf): one breaker for the entries and the namespaces' counters. */
const STANDALONE = 'standalone';

const REMOTE_CHANGES: Partial<Record<Note['kind'], 'written' | 'set' | 'deleted'>> = { w: 'written', s: 'set', d: 'deleted' };

export function createCache(options: CacheOptions): Cache {
  return new Cache(options);
}

/**
 * A cache whose `getOrCompute` runs one rebuild per key per expiry across every process sharing the
 * Redis. See docs/guarantees.md: the lock is an efficiency lock; the cache write is fenced.
 * This class is the composition root and the public face; one call's protocol lives in rebuild.ts.
 */
export class Cache extends EventEmitter<CacheEvents> {
  private readonly options: ResolvedCache;
  private readonly io: Io;
  /** The caller's client, through its port (never quit: it is the caller's). */
  private readonly port: RedisPort;
  private readonly bus: Bus;
  /** Where key notes go, and the per-key wake channels of `notes: 'sharded'` (wake.ts). */
  private readonly notes: WakeChannels;
  private readonly local: LocalTier;
  private readonly memo: DegradedMemo;
  /** Releases Redis did not answer, sent again once it answers (a waiter need not wait out the lease). */
  private readonly retries: ReleaseRetries;
  private readonly waiters = new Waiters();
  private readonly lockers: Record<LockMode, Locker>;
  /** Fence-only grants (no lock): set(). */
  private readonly fenceOnly: StoreLock;
  /** Every key's call: flights, close guard, outcome (call.ts). */
  private readonly calls: Calls;
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
  /** Resolved options per options object's shape (its values less the signal), bounded. */
  private readonly shapes: CallShapes;
  /** Many keys in one round trip per hash slot (getMany, deleteMany). */
  private readonly batch: Batch;
  /** Every namespace path's generation (cached while subscribed). */
  private readonly generations: Generations;
  /** True only on the namespaces' internal view of this cache (`host`): keys starting with `\0` are theirs. */
  private readonly reservedKeys: boolean = false;
  private namespaceHost: NamespaceHost | undefined;
  /** Removes the listener on the caller's client's reconnections (close()). */
  private readonly stopReadyListener: () => void;
  private readonly telemetry = new Telemetry();

  constructor(options: CacheOptions) {
    super();
    const o = resolveCacheOptions(options);
    this.options = o;
    this.byTtl = typeof o.defaults.lock === 'function' ? undefined : new Map();
    this.shapes = new CallShapes(o.defaults);
    // Every running loader listens to the lifetime signal (and detaches when done): not a leak.
    setMaxListeners(0, this.lifetime.signal);
    this.retries = new ReleaseRetries(o.clock);
    const memo = o.degradedMemo > 0 ? new LruDegradedMemo(o.degradedMemo, o.clock) : NO_DEGRADED_MEMO;
    this.memo = withDegradedKeys(memo, (key) => this.generations.degradedKeyOf(key), (key) => this.forget(key));
    const port = portFor(o.redis);
    this.port = port;
    // Redis answering again after failures ends every degraded copy (see degraded-memo.ts) and sends
    // the releases it did not answer again (lock/grant.ts); one breaker per node.
    // A plain client is one node: its breaker needs no slot tag per call (a Cluster's does).
    const nodeOfKey = port.cluster ? (key: string | undefined) => (key === undefined ? '' : port.nodeOf(`{${slotTag(key)}}`)) : (key: string | undefined) => (key === undefined ? '' : STANDALONE);
    // UNSAFE sharedBreaker (negative control only): every key charged to one breaker, so one dead master degrades every key (what the per-node breakers prevent).
    const shared = o.unsafe.sharedBreaker;
    this.io = new Io(o.redisTimeout, o.breakerThreshold, o.breakerCooldown, o.clock, this.onAnswer, shared ? () => STANDALONE : nodeOfKey, shared ? () => STANDALONE : (redisKey) => port.nodeOf(redisKey), (change) => this.safeEmit('health', change), nodeProbe(port, o.prefix));
    const scripts = withReplicaAck(defineScripts(port), port, o.replicaAck);
    // The subscriber's heartbeat: a silently dead socket counts as down within 2 × redisTimeout.
    this.bus = new Bus(o.prefix, o.redisTimeout);
    this.notes = o.notes === 'sharded'
      ? new ShardedWake(this.bus, port.shardSubscriber(), o.redisTimeout, {
        onNote: (note) => this.onNote(note),
        // Notes may have been missed: the key's waiters re-read now rather than at their next poll.
        onLost: (key) => this.waiters.wake(key, 'r'),
        onError: (error) => this.safeEmit('degraded', { key: undefined, operation: 'subscribe', error }),
      })
      : broadcastNotes(this.bus);
    this.local = o.local ? new LruTier(o.local, o.clock, { incoherent: o.unsafe.incoherentL1 }) : NO_LOCAL_TIER;
    const emit = this.safeEmit;
    const store = new Store(this.io, scripts, this.notes, o.maxValueBytes, {
      decodeError: (key, reason, error) => emit('decodeError', { key, reason, error }),
    }, o.unsafe.unfencedWrites);
    const onLost = (key: string, error: Error): void => {
      this.telemetry.lockLost();
      emit('lockLost', { key, error });
    };
    const lockDeps: LockDeps = { io: this.io, scripts, notes: this.notes, clock: o.clock, onLost, retries: this.retries };
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
    this.deps = {
      store,
      lockers: this.lockers,
      fenceOnly: local,
      local: this.local,
      memo: this.memo,
      waiters: this.waiters,
      wake: this.notes,
      grants: this.grants,
      background: new Background(),
      lifetime: this.lifetime.signal,
      clock: o.clock,
      emit,
      telemetry: this.telemetry,
    };
    this.calls = new Calls(this.deps, o.prefix, o.maxWaitersPerKey);
    // A subscriber that has not acknowledged a clear within 2 × redisTimeout is one the heartbeat counts as down by then.
    const notes = { channel: this.bus.channel, note: (path: string, id: string) => this.bus.message('c', clearNoteKey(path, id)) };
    this.generations = new Generations(port, this.io, o.prefix, notes, replicaConfirm(port, o.replicaAck), 2 * o.redisTimeout, o.clock);
    // L1 and cached namespace generations are trusted only while subscribed: notes sent while away are lost (see local-tier.ts).
    this.bus.start(port, {
      onNote: (note) => this.onNote(note),
      onUp: () => {
        this.generations.resume();
        this.local.resume();
        // Notes sent while the subscription was down are lost, so a degraded copy may be older than a
        // write or delete made meanwhile: like L1, the memo starts over on every (re)subscribe.
        this.memo.clear();
      },
      onDown: () => {
        this.generations.suspend();
        this.local.suspend((key, value, freshMs) => this.memo.keep(key, value, freshMs)); // served only while Redis is unavailable
      },
      onError: (error) => emit('degraded', { key: undefined, operation: 'subscribe', error }),
    });
    this.batch = new Batch(port, this.io, replicaConfirm(port, o.replicaAck));
    this.stopReadyListener = port.onReady(this.onReady);
  }

  /** Redis answered (see Io): on a recovery the degraded copies go; unanswered releases are sent again. */
  private readonly onAnswer = (recovered: boolean): void => {
    if (recovered) this.memo.clear();
    if (this.retries.size > 0) this.retries.flush();
  };

  /** The caller's client reconnected: stop skipping Redis at once. */
  private readonly onReady = (): void => this.io.connected();

  /**
   * Listeners must not throw; one that does is reported as a process warning and breaks neither the
   * call (a throw between acquiring a grant and releasing it must not leak the grant) nor the other
   * listeners of the event. With no listener, an emit costs one count.
   */
  private readonly safeEmit: Emit = (name, ...args) => {
    if (this.listenerCount(name) === 0) return;
    // A namespace's internal key is shown as the caller's key and its namespace (namespace.ts).
    const first = args[0] as { key?: unknown } | undefined;
    const payload = typeof first?.key === 'string' && first.key.startsWith(RESERVED_KEY_START) ? [{ ...first, ...shownKey(first.key) }] : args;
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
    const context: GetOrComputeContext = { ...shownKey(key), lock: undefined };
    return getOrComputeChannel.tracePromise(() => this.compute(key, loader, ttlOrOptions, context), context);
  }

  /** Each Redis node's state now (healthy, suspect, open) — cheap, for a health endpoint; changes are `health` events (health.ts). */
  health(): CacheHealth {
    return this.io.health();
  }

  /** Counters since creation (a copy): see CacheStats for what each counts, and docs/observability.md. */
  stats(): CacheStats {
    return this.telemetry.stats();
  }

  /** A getOrCompute call's checks, before any Redis traffic: its options, its loader, its signal. */
  private callOf(key: string, loader: unknown, ttlOrOptions: number | CallOptions | undefined, trace: GetOrComputeContext | undefined): ResolvedCall {
    const call = this.resolveCall(key, ttlOrOptions);
    if (trace) trace.lock = call.lock;
    if (typeof loader !== 'function') throw new InvalidOptionError('loader', loader, 'a function (ctx) => value | Promise<value>', key);
    if (call.signal?.aborted) throw new AbortedError(key, call.signal.reason);
    return call;
  }

  private async compute<T, S>(key: string, loader: (ctx: LoaderContext<S>) => T | PromiseLike<T>, ttlOrOptions: number | CallOptions | undefined, trace: GetOrComputeContext | undefined): Promise<T> {
    const call = this.callOf(key, loader, ttlOrOptions, trace);
    const untyped = loader as (ctx: LoaderContext) => unknown;
    if (call.forceFresh === true) return this.calls.run(key, untyped, call, trace) as Promise<T>;
    const l1 = this.local.get(key);
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
      if (l1.facts && refreshPolicyFor(call.refreshAhead, l1.facts) !== 0) refreshAheadOnHit(this.deps, key, () => entryKeys(this.options.prefix, key), untyped, call, { value: l1.value, freshUntil: l1.freshUntil, facts: l1.facts });
      return l1.value as T;
    }
    return this.calls.run(key, untyped, call, trace) as Promise<T>;
  }

  /**
   * A namespace call whose generation Redis could not give (namespace.ts): the loader runs on the
   * degraded path at once — the call's flight, the degraded memo, a `degraded` event — and nothing
   * is sent to Redis, since the entry's key depends on the generation. Traced like getOrCompute.
   */
  private computeDegraded(key: string, loader: (ctx: LoaderContext) => unknown, ttlOrOptions: number | CallOptions | undefined, cause: RedisUnavailableError): Promise<unknown> {
    if (!traced()) return this.degradedTrip(key, loader, ttlOrOptions, cause, undefined);
    const context: GetOrComputeContext = { ...shownKey(key), lock: undefined };
    return getOrComputeChannel.tracePromise(() => this.degradedTrip(key, loader, ttlOrOptions, cause, context), context);
  }

  private async degradedTrip(key: string, loader: (ctx: LoaderContext) => unknown, ttlOrOptions: number | CallOptions | undefined, cause: RedisUnavailableError, trace: GetOrComputeContext | undefined): Promise<unknown> {
    const call = this.callOf(key, loader, ttlOrOptions, trace);
    return this.calls.run(key, loader, call, trace, (trip) => trip.answerDegraded(cause));
  }

  /** The fresh value, or `undefined`. Never runs a loader; a Redis failure is reported as `degraded` and reads as the degraded copy (degraded-memo.ts) or a miss. */
  async get<T = unknown>(key: string): Promise<T | undefined> {
    this.assertUsable(key);
    const l1 = this.local.get(key);
    if (l1 && !l1.stale) return this.readHit(key, l1.value) as T;
    try {
      const found = await readEntry(this.deps, key, entryKeys(this.options.prefix, key));
      return this.read(found) as T | undefined;
    } catch (error) {
      if (error instanceof CacheClosedError) throw error;
      return this.degradedRead(key, error) as T | undefined;
    }
  }

  /** A read Redis could not answer: a `degraded` event, and the key's degraded copy if kept (degraded-memo.ts), else a miss. */
  private degradedRead(key: string, error: unknown): unknown {
    this.safeEmit('degraded', { key, operation: 'read', error });
    return this.memo.get(key)?.value;
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
  async clear(): Promise<void> {
    if (this.closed) throw new CacheClosedError();
    await invalidateEverything(this.port, this.io, this.batch, this.options.prefix, this.options.defaults.lockTtl);
    this.clearedEverything(); // this process at once; the others on the note
    await this.announceClear(WHOLE_CACHE, 'a');
  }

  /** A clear's note (`c`: a namespace path; `a`: the whole cache), then the wait for every subscriber's acknowledgement. */
  private announceClear(path: string, kind: 'c' | 'a'): Promise<void> {
    const id = randomBytes(9).toString('base64url');
    // The cache's own clear (kind 'a') confirmed its deletes already; its counter names no key space.
    return this.generations.clear(path, id, this.bus.message(kind, clearNoteKey(path, id)), kind === 'c');
  }

  /** Everything was cleared (here, or a note from another process): nothing kept from before may answer a call. */
  private clearedEverything(): void {
    this.local.flush();
    this.memo.clear();
    this.calls.forgetAll();
    this.deps.background.abandonAll();
  }

  /**
   * A view of this cache with its own key space: same connections, subscription, L1 and options, the
   * same operations, and `clear()` (O(1), every process). `name`: 1–128 letters, digits, `_ - . :`.
   * Namespaces nest (`cache.namespace('users').namespace('admins')`); clearing one clears its nested ones.
   */
  namespace(name: string): Namespace {
    validateNamespace(name);
    if (this.closed) throw new CacheClosedError();
    return new Namespace(this.host(), [name]);
  }

  /** What namespaces use: this cache's operations with the reserved keys allowed, and the generations. */
  private host(): NamespaceHost {
    const ops = Object.create(this, { reservedKeys: { value: true } }) as Cache;
    this.namespaceHost ??= {
      ops,
      generations: this.generations,
      validateKey: (key: unknown): asserts key is string => this.assertUsable(key),
      checkCall: (key, loader, ttlOrOptions) => void this.callOf(key, loader, ttlOrOptions, undefined),
      degraded: (key, loader, ttlOrOptions, cause) => ops.computeDegraded(key, loader, ttlOrOptions, cause),
      degradedRead: (key, error) => this.degradedRead(key, error),
      invalidateDegraded: (key) => {
        this.memo.invalidate(key);
        this.forget(key);
      },
      clear: (path) => {
        if (this.closed) return Promise.reject(new CacheClosedError());
        return this.announceClear(path, 'c');
      },
    };
    return this.namespaceHost;
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
    this.assertKeys(keys);
    if (typeof loadMany !== 'function') throw new InvalidOptionError('loadMany', loadMany, 'a function (missing, ctx) => Map<key, value>');
    const signal = typeof ttlOrOptions === 'object' ? ttlOrOptions.signal : undefined;
    const single = ttlOrOptions;
    return (await computeMany({
      deps: this.deps,
      batch: this.batch,
      prefix: this.options.prefix,
      maxValueBytes: this.options.maxValueBytes,
      calls: this.calls,
      resolveCall: (key) => this.resolveCall(key, ttlOrOptions),
      one: (key, loader) => this.getOrCompute(key, loader, single),
    }, keys, loadMany, signal)) as (T | undefined)[];
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
    this.assertKeys(keys);
    const values = new Array<T | undefined>(keys.length);
    const remote: number[] = [];
    keys.forEach((key, i) => {
      const l1 = this.local.get(key);
      if (l1 && !l1.stale) values[i] = this.readHit(key, l1.value) as T;
      else remote.push(i);
    });
    if (remote.length === 0) return values;
    const names = remote.map((i) => keys[i] as string);
    const tickets = names.map((key) => this.local.begin(key));
    const sent = this.options.clock.now();
    const { maxValueBytes, prefix } = this.options;
    const replies = await this.batch.run('read', names, (scripts, j) => void scripts.read(entryKeys(prefix, names[j] as string).value, maxValueBytes));
    replies.forEach((reply, j) => {
      const key = names[j] as string;
      if (!reply.ok) {
        if (reply.error instanceof CacheClosedError) throw reply.error;
        values[remote[j] as number] = this.degradedRead(key, reply.error) as T | undefined;
        return;
      }
      const found = entryRead(this.deps, key, tickets[j] as number, sent, this.deps.store.found(key, reply.value as [number, Buffer | number] | null));
      values[remote[j] as number] = this.read(found) as T | undefined;
    });
    return values;
  }

  /** get()/getMany() found a fresh value in L1: a local hit, as for getOrCompute. */
  private readHit(key: string, value: unknown): unknown {
    this.telemetry.localHit();
    this.safeEmit('hit', { key, tier: 'local' });
    return value;
  }

  /** What get()/getMany() answer from a store read: its fresh value (a hit; entryRead emitted the event), else nothing (a miss). */
  private read(found: Found): unknown {
    if (found.state !== 'fresh') {
      this.telemetry.readMiss();
      return undefined;
    }
    this.telemetry.redisHit();
    return found.value;
  }

  /**
   * delete() for each of `keys`, pipelined (one round trip per hash slot): each key's fence is raised
   * (no rebuild in flight can bring it back) and every process drops it from its L1. Rejects with the
   * first key's RedisUnavailableError when Redis failed for some keys; the others are deleted.
   */
  async deleteMany(keys: readonly string[]): Promise<void> {
    this.assertKeys(keys);
    for (const key of keys) {
      this.local.invalidate(key);
      this.memo.invalidate(key); // as delete(): before anything is sent
    }
    const { prefix } = this.options;
    const lockTtl = this.options.defaults.lockTtl;
    try {
      const replies = await this.batch.run('delete', keys, (scripts, i) => {
        const key = keys[i] as string;
        const k = entryKeys(prefix, key);
        void scripts.invalidate(k.value, k.fence, lockTtl, this.notes.channel(k), this.notes.message('d', key));
      }, (i) => entryKeys(prefix, keys[i] as string).value); // a delete changes state: replicaAck confirms each group

      const failed = replies.find((r) => !r.ok);
      keys.forEach((key, i) => {
        if (replies[i]?.ok) this.forget(key); // calls starting now join no rebuild begun before the delete
      });
      if (failed && !failed.ok) throw failed.error;
    } finally {
      for (const key of keys) this.local.deleted(key);
    }
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
    const call = this.resolveCall(key, ttlOrOptions);
    if (value === undefined) throw new InvalidOptionError('value', value, 'a value other than undefined (use delete() to remove)', key);
    const keys = entryKeys(this.options.prefix, key);
    this.deps.store.assertStorable(key, value, call); // before any Redis traffic
    // The value is changing: this process's copy goes now, and comes back only if the fence accepts ours.
    this.local.invalidate(key);
    this.memo.invalidate(key);
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
      this.telemetry.ownWrite(key, grant.fence, 'set');
      const written = await this.deps.store.write(key, keys, grant, value, call, 0, 's', ttl);
      outcome = 'written';
      // Redis started the entry's ttl between `sent` and now: L1's copy counts from `sent`.
      this.local.written(ticket, key, value, ttl - (this.options.clock.now() - sent), written === 'accepted', { fence: grant.fence, ttlMs: ttl, loadMs: 0 });
      if (written !== 'accepted') {
        this.telemetry.writeRejected();
        this.safeEmit('writeRejected', { key, fence: grant.fence });
      }
      if (written === 'fenceLost') {
        // The fence was lost (evicted, deleted, a restart) since this set's token, and nothing was
        // accepted since: the store may still hold a value from before this call, which every process
        // would go on serving. Delete the entry as delete() does (a new token, the mark raised, a 'd'
        // note to every L1): nothing older than this set() survives it. A set() superseded by a newer
        // write leaves that newer value alone (deleting it would refuse, and so delete, every write in
        // flight, over and over while sets overlap).
        try {
          await this.deps.store.invalidate(key, keys, this.options.defaults.lockTtl);
        } finally {
          this.local.deleted(key); // even if the delete failed: it may still be applied, and L1 must not outlive it
        }
      }
      this.forget(key); // a call starting now must not join a rebuild begun before this set
    } finally {
      this.grants.drop(grant);
      await grant.release(outcome);
    }
  }

  /** Removes the entry everywhere (store and every process's L1); bumps the fence so no in-flight rebuild resurrects it. */
  async delete(key: string): Promise<void> {
    this.assertUsable(key);
    this.local.invalidate(key);
    // Before anything is sent: even a delete that fails (Redis down) ends the degraded copy.
    this.memo.invalidate(key);
    try {
      await this.deps.store.invalidate(key, entryKeys(this.options.prefix, key), this.options.defaults.lockTtl);
      this.forget(key); // a call starting now must not join a rebuild begun before this delete
    } finally {
      this.local.deleted(key);
    }
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
    if (this.closed) return Promise.resolve(false);
    return ready({
      port: this.port,
      bus: this.bus,
      timeoutMs: this.options.redisTimeout,
      lifetime: this.lifetime.signal,
      refusal: () => this.io.refusal(),
      why: (error) => this.safeEmit('degraded', { key: undefined, operation: 'ready', error }),
    });
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
    this.notes.close();
    this.local.flush();
    this.memo.clear();
    this.retries.clear();
  }

  /** Another process's write, set or delete drops this process's copy before any waiter re-reads. */
  private onNote(note: Note): void {
    if (note.kind === 'c' || note.kind === 'a') {
      const clear = parseClearNote(note.key);
      if (clear && note.kind === 'a') this.clearedEverything();
      if (clear) this.generations.ack(clear.path, clear.id, note.origin === this.bus.origin);
      return;
    }
    const change = REMOTE_CHANGES[note.kind];
    if (change && note.origin !== this.bus.origin) {
      this.local.invalidate(note.key);
      this.memo.invalidate(note.key); // a namespaced key's degraded copy and load too (withDegradedKeys)
      this.forget(note.key);
      this.safeEmit('remoteChange', { key: note.key, kind: change });
    }
    this.waiters.wake(note.key, note.kind);
  }

  /**
   * The key changed: calls starting now join no flight (normal or forceFresh) begun before the change,
   * and an early refresh begun before it is abandoned.
   */
  private forget(key: string): void {
    this.calls.forget(key);
    this.deps.background.abandon(key);
  }

  // ------------------------------------------------------------------ guards

  private resolveCall(key: string, ttlOrOptions: number | CallOptions | undefined): ResolvedCall {
    this.assertUsable(key);
    if (typeof ttlOrOptions === 'number') {
      // A bare ttl resolves to the same frozen options every time (unless the policy depends on the key).
      const known = this.byTtl?.get(ttlOrOptions);
      if (known) return known;
    }
    const call = typeof ttlOrOptions === 'object' && ttlOrOptions !== null ? this.shapes.resolve(ttlOrOptions, key) : resolveCallOptions(this.options.defaults, ttlOrOptions, key);
    if (call.lock === 'redlock' && !this.options.redlock) throw new InvalidOptionError('lock', 'redlock', 'redlock nodes configured: createCache({ redlock: { nodes } })', key);
    if (typeof ttlOrOptions === 'number' && this.byTtl && this.byTtl.size < 256) this.byTtl.set(ttlOrOptions, call);
    return call;
  }

  /** A batch's keys: an array of valid keys, checked before any Redis traffic. */
  private assertKeys(keys: unknown): asserts keys is readonly string[] {
    if (!Array.isArray(keys)) throw new InvalidOptionError('keys', keys, 'an array of cache keys');
    for (const key of keys as unknown[]) this.assertUsable(key);
    if (this.closed) throw new CacheClosedError();
  }

  private assertUsable(key: unknown): asserts key is string {
    validateKey(key, this.options.maxKeyLength);
    if (!this.reservedKeys && key.startsWith(RESERVED_KEY_START)) throw new InvalidKeyError(key, 'keys starting with U+0000 are reserved for namespaces (cache.namespace())');
    if (this.closed) throw new CacheClosedError(key);
  }
}
