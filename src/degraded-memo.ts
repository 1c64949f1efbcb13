import { LRUCache } from 'lru-cache';
import type { Clock } from './options.js';

/**
 * Values computed on the degraded path (Redis unavailable for the key), kept in process memory for
 * their ttl so that while Redis stays unavailable a process runs at most one loader per key per ttl
 * instead of one per call; and L1's fresh copies, handed over when L1 stops being trusted (its
 * subscription lost: during an outage, before they expire). Bounded (LRU, `degradedMemo` entries);
 * independent of L1, so it works with L1 off.
 *
 * Invariants (what makes serving from it sound):
 * - It is read only when Redis is unavailable for the key: a Redis operation for it failed, or was not
 *   sent because its node is suspect or its breaker open (io.ts) — then it answers first, before any
 *   loader, for every entry point that may serve a cached value (getOrCompute and its batch and
 *   namespaced forms, get, getMany; never forceFresh, which asks the origin). While Redis answers for
 *   a key, the key's store entry (fenced) is the truth and the memo is never consulted.
 * - Nothing older than an invalidation is served: `invalidate(key)` (this process's delete, set or
 *   rebuild write — called before it is sent, so even one that fails counts —, a note from another
 *   process, or a store read that found a value for the key) drops the entry and voids every degraded
 *   load of the key that began before it, so a loader that was already running cannot put its older
 *   value back. A read that finds no value keeps the entry: it says nothing newer.
 * - `clear()` (a node's open breaker closed: an outage ended; or the client reconnected) drops
 *   everything and voids every running load: once Redis is back its entries are the truth, and a
 *   memo entry kept across the recovery could later be served after the store had handed this
 *   process a newer value.
 * - An entry is served until `ttl` ms after its loader finished, never longer.
 */
export interface DegradedMemo {
  /** The kept value, if any and still within its ttl. */
  get(key: string): { readonly value: unknown } | undefined;
  /** Call before running a degraded loader; hand the result to `fill` or `abandon`. */
  begin(key: string): MemoTicket;
  /** Keeps `value` for `ttlMs` unless the key was invalidated or the memo cleared since `begin`. */
  fill(ticket: MemoTicket, value: unknown, ttlMs: number): void;
  /** The loader failed or was cancelled: forget the ticket. */
  abandon(ticket: MemoTicket): void;
  /** Keeps an L1 copy handed over as L1 stops being trusted, for the `freshMs` it had left (never longer). */
  keep(key: string, value: unknown, freshMs: number): void;
  invalidate(key: string): void;
  clear(): void;
  /**
   * True only when nothing is kept and no degraded load is running, so an invalidation has nothing
   * to reach (lets a caller skip working out which keys to invalidate). False when it cannot tell.
   */
  readonly idle: boolean;
}

/** One degraded load in progress. Opaque to callers. */
export interface MemoTicket {
  readonly key: string;
  readonly epoch: number;
  voided: boolean;
}

interface Kept {
  readonly value: unknown;
  readonly until: number;
}

export class LruDegradedMemo implements DegradedMemo {
  private readonly kept: LRUCache<string, Kept>;
  /** Loads in progress per key (usually one: the in-process flight). Invariant: a ticket is here from begin() until fill()/abandon(). */
  private readonly running = new Map<string, MemoTicket[]>();
  /** Moves on every clear(); a ticket from an older epoch never fills. */
  private epoch = 0;

  constructor(max: number, private readonly clock: Clock) {
    this.kept = new LRUCache<string, Kept>({ max });
  }

  get idle(): boolean {
    return this.kept.size === 0 && this.running.size === 0;
  }

  get(key: string): { readonly value: unknown } | undefined {
    const kept = this.kept.get(key);
    if (!kept) return undefined;
    if (this.clock.now() >= kept.until) {
      this.kept.delete(key);
      return undefined;
    }
    return kept;
  }

  begin(key: string): MemoTicket {
    const ticket: MemoTicket = { key, epoch: this.epoch, voided: false };
    const list = this.running.get(key);
    if (list) list.push(ticket);
    else this.running.set(key, [ticket]);
    return ticket;
  }

  fill(ticket: MemoTicket, value: unknown, ttlMs: number): void {
    this.abandon(ticket);
    if (ticket.voided || ticket.epoch !== this.epoch || ttlMs <= 0) return;
    this.kept.set(ticket.key, { value, until: this.clock.now() + ttlMs });
  }

  keep(key: string, value: unknown, freshMs: number): void {
    // A degraded load's own value (kept or to come) is at least as new: never replaced by an older copy.
    if (freshMs <= 0 || this.kept.has(key) || this.running.has(key)) return;
    this.kept.set(key, { value, until: this.clock.now() + freshMs });
  }

  abandon(ticket: MemoTicket): void {
    const list = this.running.get(ticket.key);
    if (!list) return;
    const at = list.indexOf(ticket);
    if (at >= 0) list.splice(at, 1);
    if (list.length === 0) this.running.delete(ticket.key);
  }

  invalidate(key: string): void {
    // The common case (Redis healthy: nothing kept, nothing running) costs two size checks: every
    // store read that finds a value comes here.
    if (this.kept.size === 0 && this.running.size === 0) return;
    this.kept.delete(key);
    const list = this.running.get(key);
    if (list) for (const ticket of list) ticket.voided = true;
  }

  clear(): void {
    this.kept.clear();
    this.epoch++;
  }
}

/** `degradedMemo: 0`: nothing is kept; every degraded call runs its loader. */
export const NO_DEGRADED_MEMO: DegradedMemo = {
  get: () => undefined,
  begin: (key) => ({ key, epoch: 0, voided: true }),
  fill: () => undefined,
  abandon: () => undefined,
  keep: () => undefined,
  invalidate: () => undefined,
  clear: () => undefined,
  // Degraded loads run untracked here (every call runs its own), so whether one is running is unknown.
  idle: false,
};
