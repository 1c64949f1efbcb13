/**
 * One key's call, whatever made it (getOrCompute, forceFresh, each key of getOrComputeMany, a
 * namespace's degraded call, and this process's own background loads: an early refresh, the stale
 * window's refresh, a rebuild past its soft timeout): its place in the in-process flights — and
 * through them the linked stop signal (every caller gone, a change of the key, or close()) and the
 * close guard that settles it with CacheClosedError — and its outcome, which `stats()` and the
 * tracing channel read. A rule about an edge is written here or below (flight.ts, protocol/), never
 * in an entry point.
 */
import { freshRemaining, refreshPolicyFor } from './entry.js';
import { CacheClosedError, OriginBackoffError, TooManyWaitersError } from './errors.js';
import { NoFlight, SingleFlight, type Coalescer, type Stop, type Work } from './flight.js';
import { entryKeys, type EntryKeys } from './keys.js';
import type { Loader } from './loader.js';
import { shownKey } from './namespace.js';
import type { LockMode, ResolvedCall } from './options.js';
import type { OwnLoads, ProtocolDeps, RefreshPath } from './protocol/deps.js';
import { readEntry } from './protocol/read.js';
import { HoldOffs, refreshAheadOnFresh, refreshAheadOnHit, refreshStale, RefreshAbandoned, type Seen } from './protocol/refresh.js';
import { Trip } from './protocol/trip.js';
import type { Found, Present } from './store.js';
import { getOrComputeChannel, traced, type Answered, type GetOrComputeContext, type Outcome } from './telemetry.js';

/** How a call is answered once it owns its flight: by default the whole protocol (Trip.answer). */
export type Answer = (trip: Trip) => Promise<Answered>;

const IGNORE = (): void => undefined;

/**
 * A store read out now (`read`), shared by the calls of its key that start while it is out. Its
 * settling is the read's own (Io's): close() settles it at once (Io.stopReads), so no guard of its
 * own is needed.
 */
interface SharedRead {
  readonly found: Promise<Found>;
  /** The calls answered by it, bounded by maxWaitersPerKey. */
  callers: number;
}

export class Calls implements OwnLoads {
  /** What every trip borrows: the cache's parts, and these calls as its own loads. */
  readonly deps: ProtocolDeps;
  private readonly coalescers: Readonly<Record<LockMode, Coalescer>>;
  /** Normal calls' flights (lock modes local, single, redlock). */
  private readonly flight: SingleFlight;
  /** The flights of `forceFresh` calls, apart from normal ones: they coalesce only with each other. */
  private readonly freshFlight: SingleFlight;
  /**
   * This process's background loads of a key, at most one per key: no caller joins one (none waits
   * for its answer); a miss waits for it within its own waitTimeout, then reads again (wait.ts).
   * Invariant: a key is here only while its load runs; a change of the key aborts its stop (an early
   * refresh is abandoned) but leaves it here until it settles, so nothing starts beside it.
   */
  private readonly backgroundFlight: SingleFlight;
  /** The tags of the background loads that have some (an early refresh's: its call's and its entry's), while they run. */
  private readonly backgroundTags = new Map<string, { readonly tags: readonly string[] }>();
  private readonly holdOffs = new HoldOffs();
  /**
   * Store reads made before any trip (`read`), shared by the calls of a key that start while one is
   * out. Invariant: a key is here only while its read is out and no change of the key (`forget`, a
   * tag note, clear()) came since it was sent; its sender's call removes it once it settled, only if
   * it is still the key's (singleflight's cleanup rule). The same edges hold for a call waiting on a
   * read as on a load: close() rejects it at once with CacheClosedError (Io.stopReads), and callers
   * past maxWaitersPerKey are refused at once.
   */
  private readonly reads = new Map<string, SharedRead>();

  constructor(
    parts: Omit<ProtocolDeps, 'loads'>,
    private readonly prefix: string,
    private readonly maxCallers: number,
  ) {
    this.deps = { ...parts, loads: this };
    const { lifetime } = parts;
    this.flight = new SingleFlight(maxCallers, lifetime);
    this.freshFlight = new SingleFlight(maxCallers, lifetime);
    this.backgroundFlight = new SingleFlight(Number.POSITIVE_INFINITY, lifetime);
    this.coalescers = { none: new NoFlight(lifetime), local: this.flight, single: this.flight, redlock: this.flight };
  }

  /** Where a call coalesces: `forceFresh` only with other forceFresh calls (a normal trip may answer from the cache). */
  private coalescerOf(call: ResolvedCall): Coalescer {
    if (call.forceFresh !== true) return this.coalescers[call.lock];
    return call.lock === 'none' ? this.coalescers.none : this.freshFlight;
  }

  /** A call on `key` starting now would join a flight already running in this process. */
  joinable(key: string, call: ResolvedCall): boolean {
    return this.coalescerOf(call).has(key);
  }

  /**
   * Runs the call: joins the key's flight, or starts it with `answer` on this call's Trip; counts
   * and traces the outcome (the caller that ran the trip, or a joiner of it).
   */
  run(key: string, loader: Loader<unknown>, call: ResolvedCall, trace: GetOrComputeContext | undefined, answer: Answer = (trip) => trip.answer(), heardAt?: number): Promise<unknown> {
    if (trace === undefined && traced()) {
      const context: GetOrComputeContext = { ...shownKey(key), lock: call.lock };
      return getOrComputeChannel.tracePromise(() => this.trip(key, loader, call, context, answer, heardAt), context);
    }
    return this.trip(key, loader, call, trace, answer, heardAt);
  }

  /**
   * getOrCompute's call after L1: the story starts with the store read, and most calls end there (a
   * fresh hit). So the read is made first, outside any flight — shared by the calls of the key that
   * start meanwhile — and a trip (the flight, the rest of the protocol) starts only when the read found
   * no fresh value, or failed; the trip goes on from that read. A call that would join a running
   * flight joins it; a call with a signal or `forceFresh`, or traced, takes the trip from the start
   * (its flight carries the abort and the trace).
   */
  read(key: string, loader: Loader<unknown>, call: ResolvedCall): Promise<unknown> {
    // A read is shared only while tag notes are heard: else one sent before a deleteByTag this process
    // never heard could answer a call that started after it (its records read before it).
    if (call.signal !== undefined || call.forceFresh === true || traced() || this.deps.heard.deaf || this.coalescerOf(call).has(key)) return this.run(key, loader, call, undefined);
    const sent = this.deps.clock.now();
    // Every read being shared was sent after the last tag note (a note detaches them: tagsInvalidated),
    // so the note heard now is the one heard before the read was sent, for a sharer as for its sender.
    const heardAt = this.deps.heard.latest;
    let read = this.reads.get(key);
    const sender = read === undefined;
    if (read === undefined) {
      read = { found: readEntry(this.deps, key, entryKeys(this.prefix, key), sent), callers: 0 };
      this.reads.set(key, read);
    } else if (read.callers >= this.maxCallers) return Promise.reject(new TooManyWaitersError(key, this.maxCallers));
    read.callers++;
    return this.answerRead(key, loader, call, read, sender, sent, heardAt);
  }

  /**
   * `sent`: when this call began its read (a sharer: when it joined one already out); `heardAt`: the
   * last tag note heard before the read was sent (the trip it may go on as judges its joiners by it).
   */
  private async answerRead(key: string, loader: Loader<unknown>, call: ResolvedCall, read: SharedRead, sender: boolean, sent: number, heardAt: number): Promise<unknown> {
    let found: Found;
    try {
      found = await read.found;
    } catch (error) {
      if (sender && this.reads.get(key) === read) this.reads.delete(key);
      // close(), not a failed read (or a read that failed just before close() began): no trip.
      if (error instanceof CacheClosedError) throw error;
      if (this.deps.lifetime.aborted) throw new CacheClosedError(key);
      return this.trip(key, loader, call, undefined, (trip) => trip.answerFailedRead(error), heardAt);
    }
    // The sender's reaction runs first (it awaited first): no call joins a settled read.
    if (sender && this.reads.get(key) === read) this.reads.delete(key);
    // close() began after the read's reply came in but before this call was answered (Io.stopReads
    // settles only reads still out): the call is in progress, so it rejects, as a flight's callers do.
    if (this.deps.lifetime.aborted) throw new CacheClosedError(key);
    if (found.state !== 'fresh') return this.trip(key, loader, call, undefined, (trip) => trip.answerFound(found, sent), heardAt);
    this.deps.telemetry.redisHit();
    // The read's sender checks the refresh point (once per read, as a trip's caller does for its joiners).
    if (sender && refreshPolicyFor(call.refreshAhead, found) !== 0) {
      this.refreshAhead(key, () => entryKeys(this.prefix, key), loader, call, { value: found.value, freshUntil: sent + freshRemaining(found.pttl, found.graceMs), facts: found });
    }
    return found.value;
  }

  /**
   * THE JOIN RULE: a caller that joined a flight after a tag note the flight began before (a
   * deleteByTag, here or elsewhere) is not answered with its value when that value may carry a tag
   * the note reaches — the flight's load may have been granted, or its read checked the tag records,
   * before the deleteByTag. It runs its call again instead (a new trip reads the store, which the tag
   * rule keeps clean). Judged once the flight settles: the tags a loader chooses (ctx.setOptions) and
   * those of an entry the flight read are known only then. A flight that carries none of the note's
   * tags — every untagged one — keeps all its callers.
   */
  private async trip(key: string, loader: Loader<unknown>, call: ResolvedCall, trace: GetOrComputeContext | undefined, answer: Answer, heardAt: number | undefined): Promise<unknown> {
    const keys = entryKeys(this.prefix, key);
    const { heard } = this.deps;
    // THE JOIN RULE judges a flight begun before this call started (not before a later join of its
    // own: a flight begun after the call started began after any note it must respect).
    const joinedAt = heard.latest;
    for (;;) {
      let led = false; // this caller's work ran the trip (else it joined another caller's flight)
      const answered = await this.coalescerOf(call).run(key, call.signal, (stop: Stop) => {
        led = true;
        return answer(new Trip(this.deps, key, keys, loader, call, stop, heardAt));
      });
      if (!led && heard.reached(answered.heardAt, joinedAt, key, answered.carried)) {
        heardAt = undefined; // a trip of its own reads afresh
        continue;
      }
      const outcome = this.deps.telemetry.caller(answered, led);
      if (trace) trace.outcome = outcome;
      return answered.value;
    }
  }

  /** A call answered without a trip (a fresh hit a batch read): counted, and traced when someone listens. */
  answered(key: string, call: ResolvedCall, outcome: 'hit' | 'localHit', value: unknown): void {
    if (outcome === 'localHit') this.deps.telemetry.localHit();
    else this.deps.telemetry.redisHit();
    if (!traced()) return;
    const context: GetOrComputeContext = { ...shownKey(key), lock: call.lock, outcome: outcome satisfies Outcome };
    void getOrComputeChannel.tracePromise(() => Promise.resolve(value), context);
  }

  // ------------------------------------------------------------- this process's own loads (OwnLoads)

  pending(key: string): Promise<unknown> | undefined {
    return this.backgroundFlight.pending(key)?.then(IGNORE, IGNORE);
  }

  mayRefresh(path: RefreshPath, key: string, fence: number, now: number, own?: Stop): boolean {
    const loading = this.backgroundFlight.has(key) || this.freshFlight.has(key) || (this.flight.has(key) && !this.flight.owns(key, own));
    return !loading && !this.holdOffs.heldOff(path, key, fence, now);
  }

  background(key: string, work: Work<unknown>, tags?: readonly string[]): void {
    // Already one (a rebuild past its soft timeout behind a refresh that outlived a waitTimeout): this
    // work is running already; it is only observed.
    const already = this.backgroundFlight.has(key);
    const running = already ? Promise.resolve().then(() => work({ signal: this.deps.lifetime })) : this.backgroundFlight.run(key, undefined, work);
    if (!already && tags !== undefined && tags.length > 0) {
      const entry = { tags };
      this.backgroundTags.set(key, entry);
      void running.then(IGNORE, IGNORE).then(() => this.backgroundTags.get(key) === entry && this.backgroundTags.delete(key));
    }
    running.catch((error: unknown) => {
      if (!(error instanceof OriginBackoffError) && !(error instanceof CacheClosedError)) this.deps.emit('refreshError', { key, error });
    });
  }

  holdOff(path: RefreshPath, key: string, fence: number, until: number): void {
    this.holdOffs.holdOff(path, key, fence, until);
  }

  refreshAheadOnFresh(t: Trip, found: Present, sent: number): void {
    refreshAheadOnFresh(t, found, sent);
  }

  refreshStale(t: Trip, stale: Present): void {
    refreshStale(t, stale);
  }

  /** A hit outside a trip (L1, a batch's read): the refresh ahead, if due. */
  refreshAhead(key: string, keysOf: () => EntryKeys, loader: Loader<unknown>, call: ResolvedCall, seen: Seen): void {
    refreshAheadOnHit(this.deps, key, keysOf, loader, call, seen);
  }

  // ------------------------------------------------------------- changes

  /**
   * The key changed: calls starting now join no flight (normal or forceFresh) begun before the change,
   * and an early refresh begun before it is abandoned.
   */
  forget(key: string): void {
    this.reads.delete(key);
    this.flight.forget(key);
    this.freshFlight.forget(key);
    this.backgroundFlight.abort(key, new RefreshAbandoned(key));
  }

  /**
   * Tags were invalidated: an early refresh whose tags `reaches` names is abandoned (its write would
   * be refused by THE TAG RULE, and its lock would hold callers up), and no store read out now is
   * shared any more. Nothing else here is touched: a
   * flight's callers are judged when it settles (THE JOIN RULE), and a refresh whose loader adds such
   * a tag later has its write refused.
   */
  tagsInvalidated(reaches: (key: string, tags: readonly string[]) => boolean): void {
    // A read out now may have checked its entry's tag records before the invalidation: no call that
    // starts from now shares it (its own callers may still use it: they started before).
    this.reads.clear();
    for (const [key, { tags }] of this.backgroundTags) if (reaches(key, tags)) this.backgroundFlight.abort(key, new RefreshAbandoned(key));
  }

  forgetAll(): void {
    this.reads.clear();
    this.flight.forgetAll();
    this.freshFlight.forgetAll();
    this.backgroundFlight.abortAll((key) => new RefreshAbandoned(key));
  }
}
