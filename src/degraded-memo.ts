import { LRUCache } from 'lru-cache';
import type { Clock } from './options.js';

/**
 * Values computed on the degraded path (Redis unavailable for the key), kept in process memory for
 * their ttl so that while Redis stays unavailable a process runs at most one loader per key per ttl
 * instead of one per call; and copies of what the store held: L1's fresh copies, handed over when L1
 * stops being trusted (its subscription lost: during an outage, before they expire), and the last
 * value a store read found for a key whose entry has a stale or fail-safe window (so that window
 * still holds while Redis is unavailable). Bounded: two LRUs of `degradedMemo` entries each, one for
 * degraded values and one for copies, so copies never push a degraded value out; independent of L1,
 * so it works with L1 off.
 *
 * Invariants (what makes serving from it sound):
 * - It is read only when Redis is unavailable for the key: a Redis operation for it failed, or was not
 *   sent because its node is suspect or its breaker open (io.ts) — then it answers first, before any
 *   loader, for every entry point that may serve a cached value (getOrCompute and its batch and
 *   namespaced forms, get, getMany; never forceFresh, which asks the origin). While Redis answers for
 *   a key, the key's store entry (fenced) is the truth and the memo is never consulted. Copies are
 *   written on the healthy path (a store read), but still read only there.
 * - Nothing older than an invalidation is served: `invalidate(key)` (this process's delete, set or
 *   rebuild write — called before it is sent, so even one that fails counts —, a note from another
 *   process, or a store read that found a value for the key) drops the entry and voids every degraded
 *   load of the key that began before it, so a loader that was already running cannot put its older
 *   value back. A read that finds no value (`missed`) drops a copy — the value it copied was deleted,
 *   expired or evicted — and keeps a degraded value: it says nothing newer than one never stored.
 * - `clear()` (a node's open breaker closed: an outage ended; or the client reconnected) drops
 *   everything and voids every running load: once Redis is back its entries are the truth, and a
 *   memo entry kept across the recovery could later be served after the store had handed this
 *   process a newer value.
 * - A degraded value is served until `ttl` ms after its loader finished, an L1 copy until its fresh
 *   time ends, a read's copy within its entry's own windows (counted from when the read was sent):
 *   as a value while fresh, and past that only to calls that allow a stale (`staleTtl`) or fail-safe
 *   (`failSafeTtl`) value — never longer.
 */
export interface DegradedMemo {
  /** The kept value, if any and still within its windows, with the part of them it is in now. */
  get(key: string): MemoHit | undefined;
  /** Call before running a degraded loader; hand the result to `fill` or `abandon`. */
  begin(key: string): MemoTicket;
  /**
   * Keeps `value` for `ttlMs` unless the key was invalidated or the memo cleared since `begin` — or,
   * for a value with `tags`, a tag note was heard since (its loader may have chosen a tag it names).
   */
  fill(ticket: MemoTicket, value: unknown, ttlMs: number, tags?: readonly string[]): void;
  /** The loader failed or was cancelled: forget the ticket. */
  abandon(ticket: MemoTicket): void;
  /** Keeps an L1 copy handed over as L1 stops being trusted, for the `freshMs` it had left (never longer), with its `tags`. */
  keep(key: string, value: unknown, freshMs: number, tags?: readonly string[]): void;
  /**
   * Keeps a copy of a value a store read found with a stale or fail-safe window, within the entry's
   * own windows (ms from now): fresh for `freshMs`, stale until `staleMs`, fail-safe until `untilMs`.
   * A tagged one (`tags`) is refused if a tag note was heard since the read was sent.
   */
  copy(key: string, value: unknown, freshMs: number, staleMs: number, untilMs: number, sentAt: number, tags?: readonly string[]): void;
  /** A store read found no value: a copy of what the store held is gone with it (a degraded value stays). */
  missed(key: string): void;
  /** A store read found a value: the store is the truth again, every kept copy of the key goes. */
  found(key: string): void;
  /** The key changed (a write, set or delete here, a note from another process): also refuses every copy of a read sent before now. */
  invalidate(key: string): void;
  /**
   * Tags were invalidated: drops every kept value and copy `reaches` names (by its key and tags), and
   * refuses every tagged fill or copy begun before now. Untagged ones stay: the note says nothing of them.
   */
  invalidateTagged(reaches: (key: string, tags: readonly string[]) => boolean): void;
  clear(): void;
  /**
   * True only when nothing is kept and no degraded load is running, so an invalidation has nothing
   * to reach (lets a caller skip working out which keys to invalidate). False when it cannot tell.
   */
  readonly idle: boolean;
}

/** A kept value and where it stands: `fresh` answers as a value; `stale` and `kept` only where the call allows (staleTtl, failSafeTtl). */
export interface MemoHit {
  readonly value: unknown;
  readonly state: 'fresh' | 'stale' | 'kept';
  /** The tags the value carries (its loader's and its call's, or its entry's). */
  readonly tags?: readonly string[] | undefined;
}

/** One degraded load in progress. Opaque to callers. */
export interface MemoTicket {
  readonly key: string;
  readonly epoch: number;
  /** Tag notes heard before it began: a tagged fill is refused if another came since. */
  readonly tagNotes: number;
  voided: boolean;
}

/** Ends of a kept value's windows (clock ms): fresh, then stale, then fail-safe; all three equal for a degraded value or an L1 copy. */
interface Kept {
  readonly value: unknown;
  readonly freshUntil: number;
  readonly staleUntil: number;
  readonly until: number;
  readonly tags?: readonly string[] | undefined;
}

export class LruDegradedMemo implements DegradedMemo {
  /** Values degraded loads computed: what the memo is for. */
  private readonly kept: LRUCache<string, Kept>;
  /**
   * Copies of what the store held (L1's at a subscription loss, store reads with a stale or fail-safe
   * window): their own LRU, so a large L1 or a stream of reads never pushes a degraded value out.
   */
  private readonly copies: LRUCache<string, Kept>;
  /** Loads in progress per key (usually one: the in-process flight). Invariant: a ticket is here from begin() until fill()/abandon(). */
  private readonly running = new Map<string, MemoTicket[]>();
  /** Moves on every clear(); a ticket from an older epoch never fills. */
  private epoch = 0;
  /** Tag notes heard, and when the last was (clock ms): tagged fills and copies begun before it are refused. */
  private tagNotes = 0;
  private tagNoteAt = Number.NEGATIVE_INFINITY;

  /**
   * When each key last changed (clock ms), for the most recent changes only: a read's copy is refused
   * if its key changed since the read was sent. Invariant: a key absent here last changed at or before
   * `changedFloor` (raised to an evicted entry's time), so what is forgotten refuses, never admits.
   */
  private readonly changedAt: LRUCache<string, number>;
  private changedFloor = Number.NEGATIVE_INFINITY;

  constructor(max: number, private readonly clock: Clock) {
    this.kept = new LRUCache<string, Kept>({ max });
    this.copies = new LRUCache<string, Kept>({ max });
    this.changedAt = new LRUCache<string, number>({
      max: Math.max(1024, max),
      dispose: (at, _key, reason) => {
        if (reason === 'evict' && at > this.changedFloor) this.changedFloor = at;
      },
    });
  }

  get idle(): boolean {
    return this.kept.size === 0 && this.copies.size === 0 && this.running.size === 0;
  }

  get(key: string): MemoHit | undefined {
    // A degraded value is newer than any copy of the store's: a read that found a value dropped it.
    return this.hit(this.kept, key) ?? this.hit(this.copies, key);
  }

  private hit(lru: LRUCache<string, Kept>, key: string): MemoHit | undefined {
    const kept = lru.get(key);
    if (!kept) return undefined;
    const now = this.clock.now();
    if (now >= kept.until) {
      lru.delete(key);
      return undefined;
    }
    return { value: kept.value, state: now < kept.freshUntil ? 'fresh' : now < kept.staleUntil ? 'stale' : 'kept', tags: kept.tags };
  }

  begin(key: string): MemoTicket {
    const ticket: MemoTicket = { key, epoch: this.epoch, tagNotes: this.tagNotes, voided: false };
    const list = this.running.get(key);
    if (list) list.push(ticket);
    else this.running.set(key, [ticket]);
    return ticket;
  }

  fill(ticket: MemoTicket, value: unknown, ttlMs: number, tags?: readonly string[]): void {
    this.abandon(ticket);
    if (ticket.voided || ticket.epoch !== this.epoch || ttlMs <= 0) return;
    if (tags !== undefined && ticket.tagNotes !== this.tagNotes) return;
    const until = this.clock.now() + ttlMs;
    this.kept.set(ticket.key, { value, freshUntil: until, staleUntil: until, until, tags });
  }

  keep(key: string, value: unknown, freshMs: number, tags?: readonly string[]): void {
    // A degraded load's own value (kept or to come) is at least as new: never replaced by an older copy.
    if (freshMs <= 0 || this.kept.has(key) || this.running.has(key)) return;
    const until = this.clock.now() + freshMs;
    this.copies.set(key, { value, freshUntil: until, staleUntil: until, until, tags });
  }

  copy(key: string, value: unknown, freshMs: number, staleMs: number, untilMs: number, sentAt: number, tags?: readonly string[]): void {
    if (untilMs <= 0) return;
    // A tagged value read before a tag note may have had its tags checked before the invalidation.
    if (tags !== undefined && sentAt <= this.tagNoteAt) return;
    // A change of the key since the read was sent (a note that overtook its reply, this process's own
    // write whose reply came first): the value read may be the one it replaced.
    const changed = this.changedAt.peek(key);
    if (sentAt <= this.changedFloor || (changed !== undefined && changed >= sentAt)) return;
    const now = this.clock.now();
    this.copies.set(key, { value, freshUntil: now + freshMs, staleUntil: now + staleMs, until: now + untilMs, tags });
  }

  missed(key: string): void {
    // The store held no value: a copy of an earlier one is older than the delete, expiry or eviction
    // that removed it. A degraded value stays: a key computed while Redis was down was never stored,
    // so a miss says nothing newer than it.
    if (this.copies.size > 0) this.copies.delete(key);
  }

  abandon(ticket: MemoTicket): void {
    const list = this.running.get(ticket.key);
    if (!list) return;
    const at = list.indexOf(ticket);
    if (at >= 0) list.splice(at, 1);
    if (list.length === 0) this.running.delete(ticket.key);
  }

  found(key: string): void {
    // The common case (Redis healthy: nothing kept, nothing running) costs three size checks: every
    // store read that finds a value comes here.
    if (this.idle) return;
    this.drop(key);
  }

  invalidate(key: string): void {
    this.changedAt.set(key, this.clock.now());
    if (this.idle) return;
    this.drop(key);
  }

  private drop(key: string): void {
    this.kept.delete(key);
    this.copies.delete(key);
    const list = this.running.get(key);
    if (list) for (const ticket of list) ticket.voided = true;
  }

  invalidateTagged(reaches: (key: string, tags: readonly string[]) => boolean): void {
    this.tagNotes++;
    this.tagNoteAt = this.clock.now();
    for (const lru of [this.kept, this.copies]) {
      const reached: string[] = [];
      for (const [key, kept] of lru.entries()) if (kept.tags !== undefined && reaches(key, kept.tags)) reached.push(key);
      for (const key of reached) lru.delete(key);
    }
  }

  clear(): void {
    this.kept.clear();
    this.copies.clear();
    this.epoch++;
    // Every read in flight now was sent before the clear: none may copy.
    this.changedFloor = this.clock.now();
    this.changedAt.clear();
  }
}

/** `degradedMemo: 0`: nothing is kept; every degraded call runs its loader. */
export const NO_DEGRADED_MEMO: DegradedMemo = {
  get: () => undefined,
  begin: (key) => ({ key, epoch: 0, tagNotes: 0, voided: true }),
  fill: () => undefined,
  abandon: () => undefined,
  keep: () => undefined,
  copy: () => undefined,
  missed: () => undefined,
  found: () => undefined,
  invalidate: () => undefined,
  invalidateTagged: () => undefined,
  clear: () => undefined,
  // Degraded loads run untracked here (every call runs its own), so whether one is running is unknown.
  idle: false,
};
