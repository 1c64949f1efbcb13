/**
 * What one cache is made of, wired once: the port to the caller's client, the Io (timeouts and
 * breakers), the subscription and its notes, L1, the degraded memo, the lockers, every key's calls,
 * the namespaces' generations, the counters; and the rules that span them: what a note from another
 * process does, what "the key changed" undoes, and the one shutdown. The Cache is its public face.
 */
import { setMaxListeners } from 'node:events';
import { Batch } from './batch.js';
import { Calls } from './call.js';
import { portFor } from './client/detect.js';
import type { RedisPort, TrackingPort } from './client/port.js';
import { LruDegradedMemo, NO_DEGRADED_MEMO, type DegradedMemo } from './degraded-memo.js';
import type { Emit } from './emit.js';
import { CacheClosedError } from './errors.js';
import { CallResolver, Guard } from './guards.js';
import { nodeProbe, type CacheHealth, type HealthChange } from './health.js';
import { Io } from './io.js';
import { keyOfValueKey, slotTag } from './keys.js';
import { LruTier, NO_LOCAL_TIER, Trust, type LocalTier } from './local-tier.js';
import { NodeClocks } from './node-clock.js';
import { GrantRegistry, ReleaseRetries } from './lock/grant.js';
import { RedlockLock } from './lock/redlock.js';
import { defineScripts, type Scripts } from './lock/scripts.js';
import { StoreLock, type LockDeps } from './lock/single.js';
import type { Locker } from './lock/types.js';
import { clearNoteKey, Generations, parseClearNote, withDegradedKeys } from './namespace.js';
import type { LockMode, ResolvedCache } from './options.js';
import { ready } from './readiness.js';
import type { ProtocolDeps } from './protocol/deps.js';
import { replicaConfirm, withReplicaAck } from './replica-ack.js';
import { Store, type StoreTags } from './store.js';
import { HeardTags, noteReaches, parseTagNote, TagRecords } from './tags.js';
import { Telemetry } from './telemetry.js';
import { holdTracking, TrackedTier } from './tracking.js';
import { Bus, Waiters, type Note } from './wait.js';
import { broadcastNotes, ShardedWake, type WakeChannels } from './wake.js';

/** The node name a plain client's port gives every key (port.nodeOf): one breaker for the entries and the namespaces' counters. */
const STANDALONE = 'standalone';

const REMOTE_CHANGES: Partial<Record<Note['kind'], 'written' | 'set' | 'deleted'>> = { w: 'written', s: 'set', d: 'deleted' };

export class Runtime {
  readonly options: ResolvedCache;
  readonly io: Io;
  /** The caller's client, through its port (never quit: it is the caller's). */
  readonly port: RedisPort;
  readonly bus: Bus;
  /** Where key notes go, and the per-key wake channels of `notes: 'sharded'` (wake.ts). */
  readonly notes: WakeChannels;
  readonly local: LocalTier;
  /**
   * What the notes of other processes' writes and deletes drop from L1: L1 itself, or nothing where the
   * server tracks L1's keys (`local.invalidation: 'tracking'`: its invalidations drop them instead).
   */
  private readonly noteL1: LocalTier;
  /** L1 is trusted while the subscription (and, under tracking, the server's tracking) holds. */
  private readonly trust: Trust;
  /** The server's tracking of the reads that fill L1, or undefined (`local.invalidation: 'notes'`, or no L1). */
  private readonly tracking: Bus | undefined;
  readonly memo: DegradedMemo;
  /** Releases Redis did not answer, sent again once it answers (a waiter need not wait out the lease). */
  readonly retries: ReleaseRetries;
  readonly waiters = new Waiters();
  readonly lockers: Record<LockMode, Locker>;
  /** Grants held right now; close() releases them (and any acquired while it runs) without waiting for loaders. */
  readonly grants = new GrantRegistry();
  /** Aborts every loader's ctx.signal on close(); after it, no loader starts and nothing is written. */
  readonly lifetime = new AbortController();
  /** What every call's protocol borrows. */
  readonly deps: ProtocolDeps;
  /** Every key's call: flights, close guard, outcome (call.ts). */
  readonly calls: Calls;
  /** Many keys in one round trip per hash slot (getMany, deleteMany, getOrComputeMany, clear). */
  readonly batch: Batch;
  /** As `batch`, for the store's reads of many keys: on the tracked reads connection under tracking. */
  readonly readBatch: Batch;
  /** Every namespace path's generation (cached while subscribed). */
  readonly generations: Generations;
  /** The tag records: read-side checks, deleteByTag (tags.ts). */
  readonly tags: TagRecords;
  /** The tag notes this process heard, numbered (THE JOIN RULE, call.ts). */
  readonly heard = new HeardTags();
  readonly telemetry = new Telemetry();
  /** The checks of the public operations; `reservedGuard` is the namespaces' view (their `\0` keys allowed). */
  readonly guard: Guard;
  readonly reservedGuard: Guard;
  closed = false;
  /** The one shutdown: a second close() resolves only when the first has released everything. */
  private closing: Promise<void> | undefined;
  /** ready()'s PINGs still unanswered, joined by the next ready() (readiness.ts Readiness.pings). */
  private readonly pings: { current: Promise<void> | undefined } = { current: undefined };
  /** Each node's clock as this process measures it: a fresh hit is then one plain read (node-clock.ts). */
  private readonly clocks: NodeClocks;
  /** Removes the listener on the caller's client's reconnections (close()). */
  private readonly stopReadyListener: () => void;

  constructor(
    o: ResolvedCache,
    readonly emit: Emit,
  ) {
    this.options = o;
    this.port = portFor(o.redis);
    const resolver = new CallResolver(o);
    this.guard = new Guard(o, resolver, () => this.closed, false);
    this.reservedGuard = new Guard(o, resolver, () => this.closed, true);
    // Every running loader listens to the lifetime signal (and detaches when done): not a leak.
    setMaxListeners(0, this.lifetime.signal);
    this.retries = new ReleaseRetries(o.clock);
    const memo = o.degradedMemo > 0 ? new LruDegradedMemo(o.degradedMemo, o.clock) : NO_DEGRADED_MEMO;
    this.memo = withDegradedKeys(memo, (key) => this.generations.degradedKeyOf(key), (key) => this.forget(key));
    this.clocks = new NodeClocks(o.clock, this.nodeOfKey, o.unsafe.clockSkewMs);
    this.io = this.newIo();
    const scripts = withReplicaAck(defineScripts(this.port), this.port, o.replicaAck);
    // The subscriber's heartbeat: a silently dead socket counts as down within 2 × redisTimeout.
    this.bus = new Bus(o.prefix, o.redisTimeout, o.clock);
    this.tags = new TagRecords({
      port: this.port,
      io: this.io,
      prefix: o.prefix,
      channel: this.bus.channel,
      message: (key) => this.bus.message('g', key),
      confirm: replicaConfirm(this.port, o.replicaAck),
      // As clear(): a subscriber that has not acknowledged within 2 × redisTimeout is one the heartbeat counts as down by then.
      ackWaitMs: 2 * o.redisTimeout,
      clock: o.clock,
    });
    this.notes = this.newNotes();
    // Tracking: the reads that fill L1 go on a connection of the cache's own, which the server tracks.
    const tracked = o.local !== false && o.local.invalidation === 'tracking' ? this.port.tracking() : undefined;
    const switches = { incoherent: o.unsafe.incoherentL1 };
    this.local = !o.local ? NO_LOCAL_TIER : tracked ? new TrackedTier(o.local, o.clock, switches) : new LruTier(o.local, o.clock, switches);
    this.noteL1 = tracked ? NO_LOCAL_TIER : this.local;
    this.trust = new Trust(this.local, tracked ? ['subscription', 'tracking'] : ['subscription']);
    this.lockers = this.newLockers(scripts);
    this.calls = new Calls(this.newParts(scripts, tracked), o.prefix, o.maxWaitersPerKey);
    this.deps = this.calls.deps;
    // A subscriber that has not acknowledged a clear within 2 × redisTimeout is one the heartbeat counts as down by then.
    const clearNotes = { channel: this.bus.channel, note: (path: string, id: string) => this.bus.message('c', clearNoteKey(path, id)) };
    this.generations = new Generations(this.port, this.io, o.prefix, clearNotes, replicaConfirm(this.port, o.replicaAck), 2 * o.redisTimeout, o.clock);
    this.startBus();
    this.batch = new Batch(this.port, this.io, replicaConfirm(this.port, o.replicaAck));
    this.readBatch = tracked ? new Batch(tracked.reads, this.io) : this.batch;
    this.tracking = tracked ? this.startTracking(tracked) : undefined;
    this.stopReadyListener = this.port.onReady(() => {
      this.clocks.forget(); // maybe another server now (a failover): its clock is measured again
      this.io.connected(); // reconnected: stop skipping Redis at once
    });
  }

  /** The node that owns a user key's entry; a plain client is one node, so it needs no slot tag per call (a Cluster's does). */
  private readonly nodeOfKey = (key: string | undefined): string => {
    if (!this.port.cluster) return key === undefined ? '' : STANDALONE;
    return key === undefined ? '' : this.port.nodeOf(`{${slotTag(key)}}`);
  };

  /** One breaker per node. */
  private newIo(): Io {
    const { options: o, port } = this;
    // UNSAFE sharedBreaker (negative control only): every key charged to one breaker, so one dead master degrades every key (what the per-node breakers prevent).
    const shared = o.unsafe.sharedBreaker;
    return new Io(o.redisTimeout, o.breakerThreshold, o.breakerCooldown, o.clock, this.onAnswer, shared ? () => STANDALONE : this.nodeOfKey, shared ? () => STANDALONE : (redisKey) => port.nodeOf(redisKey), (change) => this.emit('health', change), nodeProbe(port, o.prefix));
  }

  /** Redis answered (see Io): on a recovery the degraded copies go (degraded-memo.ts); unanswered releases are sent again (lock/grant.ts). */
  private readonly onAnswer = (recovered: boolean): void => {
    if (recovered) this.memo.clear();
    if (this.retries.size > 0) this.retries.flush();
  };

  private newNotes(): WakeChannels {
    if (this.options.notes !== 'sharded') return broadcastNotes(this.bus);
    return new ShardedWake(this.bus, this.port.shardSubscriber(), this.options.redisTimeout, {
      onNote: (note) => this.onNote(note),
      // Notes may have been missed: the key's waiters re-read now rather than at their next poll.
      onLost: (key) => this.waiters.wake(key, 'r'),
      onError: (error) => this.emit('degraded', { key: undefined, operation: 'subscribe', error }),
    });
  }

  private newLockers(scripts: Scripts): Record<LockMode, Locker> {
    const o = this.options;
    const onLost: LockDeps['onLost'] = (key, error) => {
      this.telemetry.lockLost();
      this.emit('lockLost', { key, error });
    };
    const lockDeps: LockDeps = { io: this.io, scripts, notes: this.notes, clock: o.clock, onLost, retries: this.retries,
      tagRecords: (key, tags) => this.tags.records(key, tags),
      tagGrantApart: (key, tags) => this.tags.grantApart(key, tags),
    };
    const local = new StoreLock(lockDeps, 'local', false);
    const single = new StoreLock(lockDeps, 'single', true);
    const fallback = { throw: undefined, single, local };
    const nodes = { threshold: o.breakerThreshold, cooldown: o.breakerCooldown, prefix: o.prefix, onHealth: (change: HealthChange) => this.emit('health', change) };
    // Without redlock nodes, the call's options refuse mode 'redlock' before it gets here.
    const redlock = o.redlock ? new RedlockLock(lockDeps, o.redlock, fallback[o.redlock.onNoQuorum], nodes) : single;
    return { none: new StoreLock(lockDeps, 'none', false), local, single, redlock };
  }

  private newParts(scripts: Scripts, tracked: TrackingPort | undefined): Omit<ProtocolDeps, 'loads'> {
    const o = this.options;
    const emit = this.emit;
    const { tags, port } = this;
    const storeTags: StoreTags = {
      judge: (key, entryTags, grantedAt) => tags.judge(key, entryTags, grantedAt),
      records: (key, entryTags) => tags.records(key, entryTags),
      snapshotAtWrite: o.unsafe.tagSnapshotAtWrite,
      readUnchecked: o.unsafe.tagReadUnchecked,
      apart: port.cluster,
      ensure: (key, entryTags, ttl, grantedAt) => tags.ensure(key, entryTags, ttl, grantedAt),
      timeNow: () => tags.timeNow(),
    };
    // Under tracking the store reads on the tracked connection; every other script stays on the caller's.
    const reads = tracked ? defineScripts(tracked.reads) : scripts;
    const store = new Store(this.io, { ...scripts, read: reads.read, getRange: reads.getRange }, this.notes, o.maxValueBytes, {
      decodeError: (key, reason, error) => emit('decodeError', { key, reason, error }),
      tagInvalidated: () => this.telemetry.tagInvalidated(),
    }, this.clocks, o.unsafe.unfencedWrites, storeTags);
    // Fence-only grants (no lock) are the 'local' locker's: set(), computing after waitTimeout.
    const { local: l1, memo, waiters, grants, telemetry } = this;
    return { store, lockers: this.lockers, fenceOnly: this.lockers.local, local: l1, memo, waiters, wake: this.notes, grants, lifetime: this.lifetime.signal, clock: o.clock, emit, telemetry, heard: this.heard };
  }

  /** L1 and cached namespace generations are trusted only while subscribed: notes sent while away are lost (see local-tier.ts). */
  private startBus(): void {
    this.bus.start(this.port, {
      onNote: (note) => this.onNote(note),
      onUp: () => {
        this.generations.resume();
        this.trust.up('subscription');
        this.tags.states.up();
        this.tagNotesLost('up');
        // Notes sent while the subscription was down are lost, so a degraded copy may be older than a
        // write or delete made meanwhile: like L1, the memo starts over on every (re)subscribe.
        this.memo.clear();
      },
      onDown: () => {
        this.generations.suspend();
        this.trust.down('subscription', this.keepInMemo); // served only while Redis is unavailable
        this.tags.states.down();
        this.tagNotesLost('down');
        // The heartbeat found the node silent: if it answered our operations nothing since either, it is
        // hung — suspect now, so the calls that L1 answered until now answer from memory at once instead
        // of each waiting out a read. (A close alone is no such sign: a subscriber killed on a live
        // server.) A Cluster's subscriber is on one node of many: it says nothing of the others.
        const silentSince = this.bus.silentSince;
        if (silentSince !== undefined && !this.port.cluster) this.io.silent(STANDALONE, silentSince);
      },
      onError: (error) => this.emit('degraded', { key: undefined, operation: 'subscribe', error }),
    });
  }

  /** L1's fresh copies, kept by the degraded memo when L1 is suspended: served only while Redis is unavailable. */
  private readonly keepInMemo = (key: string, value: unknown, freshMs: number, tags: readonly string[] | undefined): void => this.memo.keep(key, value, freshMs, tags);

  /**
   * Server-assisted invalidation: L1 trusted only while tracking holds (flushed when it is lost and when
   * it holds again); each invalidated value key drops its copy, a flush (null) every copy.
   */
  private startTracking(port: TrackingPort): Bus {
    const { prefix } = this.options;
    const clientPrefix = port.reads.keyPrefix; // ioredis keyPrefix: the server names keys with it
    // UNSAFE ignoreInvalidations (negative control only): tracking holds, but no push drops a copy.
    const deaf = this.options.unsafe.ignoreInvalidations;
    // The listener's heartbeat, as the subscriber's: a silently dead socket counts as down within 2 × redisTimeout.
    return holdTracking(port, this.options.redisTimeout, this.options.clock, {
      onUp: () => this.trust.up('tracking'),
      onDown: () => this.trust.down('tracking', this.keepInMemo),
      onInvalidate: (keys) => {
        if (deaf) return;
        if (keys === null) return this.local.flush();
        for (const redisKey of keys) {
          const key = redisKey.startsWith(clientPrefix) ? keyOfValueKey(prefix, redisKey.slice(clientPrefix.length)) : undefined;
          if (key !== undefined) this.local.invalidate(key);
        }
      },
      onError: (error) => this.emit('degraded', { key: undefined, operation: 'subscribe', error }),
    });
  }

  /** Another process's write, set or delete drops this process's copy before any waiter re-reads. */
  private onNote(note: Note): void {
    if (note.kind === 'g') {
      const heard = parseTagNote(note.key);
      if (heard) {
        this.tagsInvalidated(heard.scope, heard.tags);
        this.tags.ack(heard.id);
      }
      return;
    }
    if (note.kind === 'c' || note.kind === 'a') {
      const clear = parseClearNote(note.key);
      if (clear && note.kind === 'a') this.clearedEverything();
      if (clear) this.generations.ack(clear.path, clear.id, note.origin === this.bus.origin);
      return;
    }
    const change = REMOTE_CHANGES[note.kind];
    if (change && note.origin !== this.bus.origin) {
      this.noteL1.invalidate(note.key);
      this.memo.invalidate(note.key); // a namespaced key's degraded copy and load too (withDegradedKeys)
      this.forget(note.key);
      this.emit('remoteChange', { key: note.key, kind: change });
    }
    this.waiters.wake(note.key, note.kind);
  }

  /**
   * The key changed: calls starting now join no flight (normal or forceFresh) begun before the change,
   * and an early refresh begun before it is abandoned.
   */
  forget(key: string): void {
    this.calls.forget(key);
  }

  /**
   * Tags were invalidated (here, or a note from another process), and only what may carry them is
   * touched: the note is numbered first (a caller that joins a flight from now on is judged by THE
   * JOIN RULE, call.ts, once the flight settles); L1 and the degraded memo drop every copy the note
   * reaches and refuse tagged fills of reads or loads begun before now (their tags may have been
   * checked, or their loads granted, before it); an early refresh whose tags it reaches is abandoned.
   */
  tagsInvalidated(scope: string, tags: readonly string[]): void {
    const reaches = (key: string, entryTags: readonly string[]): boolean => noteReaches(scope, tags, key, entryTags);
    this.heard.heard(scope, tags);
    // UNSAFE tagStatesUndropped (negative control only): the kept tag states outlive the note.
    if (!this.options.unsafe.tagStatesUndropped) this.tags.dropStates(scope, tags);
    this.local.invalidateTagged(reaches);
    this.memo.invalidateTagged(reaches);
    this.calls.tagsInvalidated(reaches);
  }

  /**
   * Tag notes may have been lost (the subscription went down, or came back): as if a note reaching
   * every tagged entry was heard — a caller that joins a flight begun before now, or joins any while
   * the subscription is down, is judged by THE JOIN RULE as reached — and no store read out now is
   * shared any more (it may have checked its records before a deleteByTag this process never heard).
   */
  private tagNotesLost(how: 'down' | 'up'): void {
    if (how === 'down') this.heard.down();
    else this.heard.up();
    this.calls.tagsInvalidated(() => false);
  }

  /** Everything was cleared (here, or a note from another process): nothing kept from before may answer a call. */
  clearedEverything(): void {
    this.local.flush();
    this.memo.clear();
    this.calls.forgetAll();
  }

  /** See Cache.health(): the store's nodes, then the Redlock nodes. */
  health(): CacheHealth {
    const store = this.io.health();
    if (!(this.lockers.redlock instanceof RedlockLock)) return store;
    const nodes = [...store.nodes, ...this.lockers.redlock.health()];
    return { healthy: nodes.every((n) => n.state === 'healthy'), nodes };
  }

  /** See Cache.ready(). */
  ready(): Promise<boolean> {
    if (this.closed) return Promise.resolve(false);
    return ready({
      port: this.port,
      bus: this.bus,
      tracked: (timeoutMs) => this.tracking?.ready(timeoutMs) ?? Promise.resolve(true),
      timeoutMs: this.options.redisTimeout,
      lifetime: this.lifetime.signal,
      refusal: () => this.io.refusal(),
      why: (error) => this.emit('degraded', { key: undefined, operation: 'ready', error }),
      pings: this.pings,
    });
  }

  close(): Promise<void> {
    this.closing ??= this.shutDown();
    return this.closing;
  }

  private async shutDown(): Promise<void> {
    this.closed = true;
    this.lifetime.abort(new CacheClosedError());
    this.io.stopReads();
    this.waiters.wakeAll();
    // Loaders may ignore their signal; close() never waits for them. Their grants are released now
    // (and any grant acquired meanwhile is refused by the registry); a loader that finishes later writes nothing.
    await this.grants.close();
    this.stopReadyListener();
    this.io.close();
    if (this.lockers.redlock instanceof RedlockLock) this.lockers.redlock.close();
    await this.bus.stop();
    await this.tracking?.stop();
    this.notes.close();
    this.local.flush();
    this.memo.clear();
    this.retries.clear();
  }
}
