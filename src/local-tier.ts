import { LRUCache } from 'lru-cache';
import type { EntryFacts } from './entry.js';
import type { Clock, ResolvedLocal } from './options.js';

/**
 * A read's place in the tier's history: taken by `begin(key)` BEFORE the store read is sent, handed
 * back to `fill`. Opaque to callers.
 */
export type Ticket = number;

/**
 * The optional in-process L1. It only ever serves fresh entries: an entry is kept until the fresh
 * time Redis reported when it was read or written. Values are shared by reference among callers.
 *
 * Coherence (the one rule): a value read from, or written to, the store enters L1 only if nothing
 * that could have made it old happened since its read began — no invalidation of that key (a delete,
 * a note from another process, a set or rebuild write in this one) and no flush. A read reply and a note travel on
 * two sockets with no order between them; the ticket makes their order irrelevant.
 *
 * L1 is trusted only while the subscription that carries other processes' notes holds: `suspend()`
 * (subscription down) flushes and stops serving and filling; `resume()` (subscribed again) flushes
 * again, because notes sent while away are lost, and serves again.
 */
export interface LocalTier {
  /** The fresh value, or `undefined` (also while suspended). */
  get(key: string): LocalHit | undefined;
  /** Call before sending the store read (or write) whose result may be passed to `fill`. */
  begin(key: string): Ticket;
  /**
   * Keeps `value` for `freshMs` unless `key` was invalidated, or L1 flushed, since `begin`. `facts`
   * (the stored entry's fence, ttl, loader time) let a hit find the entry's refresh point; a value
   * that is not in the store (computed while Redis was unavailable) has none and is never refreshed early;
   * `tags` (default: the facts' own) are kept with the copy, so a tag's note drops it (a degraded copy has tags but no facts).
   */
  fill(ticket: Ticket, key: string, value: unknown, freshMs: number, facts?: EntryFacts, tags?: readonly string[]): void;
  /** As `fill`, for a value read in its stale window: served with `stale: true`, never refreshed early. `tags`: the entry's, if tagged. */
  fillStale(ticket: Ticket, key: string, value: unknown, ms: number, tags?: readonly string[]): void;
  /**
   * Tags were invalidated: drops every copy `reaches` names (by its key and tags) and refuses every
   * fill of a tagged value whose read began before now (its tag records may have been read before the
   * invalidation: the same ticket rule as a key's).
   */
  invalidateTagged(reaches: (key: string, tags: readonly string[]) => boolean): void;
  /** Drops the key and refuses every fill whose read began before now. */
  invalidate(key: string): void;
  /**
   * This process's own fenced write (ticket taken before it was sent) finished: keep `value` only if
   * the fence `accepted` it; a refused write means a newer write, set or delete exists, so drop the key.
   * Either way every read begun before now can no longer fill the key (as after `invalidate`).
   */
  written(ticket: Ticket, key: string, value: unknown, freshMs: number, accepted: boolean, facts?: EntryFacts): void;
  /** This process's own delete finished: a read that was in flight across it must not refill L1. */
  deleted(key: string): void;
  /** Drops everything and refuses every fill whose read began before now. */
  flush(): void;
  /**
   * The subscription is down: flush, then neither serve nor fill until `resume()`. `keep` is handed
   * each fresh copy first (its value, the ms it stays fresh and its tags): the degraded memo, which answers
   * with it only while Redis is unavailable for the key (degraded-memo.ts).
   */
  suspend(keep?: (key: string, value: unknown, freshMs: number, tags: readonly string[] | undefined) => void): void;
  /** The subscription holds (again): flush (notes sent while away are lost), then serve and fill. */
  resume(): void;
  /**
   * The tier as a read made off the store's reads connection sees it (a lock's acquire-read, on the
   * caller's connection): itself, unless the server tracks the reads that fill L1 (tracking.ts), where
   * such a read's fills are refused.
   */
  untracked(): LocalTier;
}

/** An L1 hit: the value, when it stops being fresh, and what refresh ahead needs to know of it. */
export interface LocalHit {
  readonly value: unknown;
  /**
   * Monotonic ms after which the slot is not served: the fresh time Redis reported (or the write's
   * ttl), counted from when it was read. Its refresh point, `freshUntil − ttl × (1 − refreshAhead)`,
   * is on the same monotonic clock, so an L1 hit knows when that point passed without asking Redis.
   */
  readonly freshUntil: number;
  /** A stale-window copy (fillStale): getOrCompute serves it as stale, get() not at all. */
  readonly stale?: true;
  readonly facts: EntryFacts | undefined;
}
/** A copy, with its entry's tags (a stale copy has no facts, but keeps them). */
type Slot = LocalHit & { readonly tags?: readonly string[] | undefined };

export interface LruTierSwitches {
  /**
   * Negative control only (UNSAFE.incoherentL1): as before coherence — fill ignores tickets, a refused
   * own write still fills, an own delete drops the key only before it is sent, and the subscription
   * going down or up neither flushes nor stops L1. Invalidate and flush still drop entries.
   */
  readonly incoherent?: boolean;
}

/** How many invalidations are remembered per L1 entry allowed (at least MIN_REMEMBERED). */
const MIN_REMEMBERED = 1024;

export class LruTier implements LocalTier {
  private readonly lru: LRUCache<string, Slot>;
  /**
   * Moves on every invalidation and flush. A ticket is its value at `begin`.
   * Invariant: every invalidation or flush that happened after a ticket was taken has a seq > ticket.
   */
  private seq = 0;
  /**
   * Tickets below the floor are refused. Raised by flush (to the flush's seq) and when
   * `invalidatedAt` forgets a key (to that key's seq): what the tier no longer remembers it refuses,
   * which costs a refill, never a stale value. Invariant: floor <= seq, and never decreases.
   */
  private floor = 0;
  /**
   * The seq of each key's latest invalidation, for the most recent ones only (bounded, O(1)).
   * Invariant: for a key absent here, its latest invalidation (if any) has seq <= floor.
   * Read with `peek` so eviction order is seq order and the floor rises as little as it can.
   */
  private readonly invalidatedAt: LRUCache<string, number>;
  /**
   * Tickets below it are refused for tagged values (raised by every tag invalidation). Invariant:
   * every tag invalidation that happened after a ticket was taken raised it above that ticket.
   */
  private tagFloor = 0;
  /** False from construction until the first `resume()`, and between `suspend()` and `resume()`. */
  private trusted = false;
  private readonly incoherent: boolean;

  constructor(options: Pick<ResolvedLocal, 'max'>, private readonly clock: Clock, switches: LruTierSwitches = {}) {
    this.lru = new LRUCache<string, Slot>({ max: options.max });
    this.invalidatedAt = new LRUCache<string, number>({
      max: Math.max(MIN_REMEMBERED, options.max),
      dispose: (at, _key, reason) => {
        if (reason === 'evict' && at > this.floor) this.floor = at;
      },
    });
    this.incoherent = switches.incoherent === true;
    if (this.incoherent) this.trusted = true;
  }

  get(key: string): LocalHit | undefined {
    if (!this.trusted) return undefined;
    const slot = this.lru.get(key);
    if (!slot) return undefined;
    if (this.clock.now() >= slot.freshUntil) {
      this.lru.delete(key);
      return undefined;
    }
    return slot;
  }

  begin(_key: string): Ticket {
    return this.seq;
  }

  fill(ticket: Ticket, key: string, value: unknown, freshMs: number, facts?: EntryFacts, tags = facts?.tags): void {
    if (freshMs <= 0) return;
    if (!this.incoherent && !this.fillable(ticket, key, tags)) return;
    this.put(key, value, freshMs, facts, tags);
  }

  /** The slot for a fresh value; `tags` only where there are some (untagged slots keep their shape). */
  private put(key: string, value: unknown, freshMs: number, facts: EntryFacts | undefined, tags: readonly string[] | undefined): void {
    const freshUntil = this.clock.now() + freshMs;
    this.lru.set(key, tags === undefined ? { value, freshUntil, facts } : { value, freshUntil, facts, tags });
  }

  fillStale(ticket: Ticket, key: string, value: unknown, ms: number, tags?: readonly string[]): void {
    if (ms <= 0) return;
    if (!this.incoherent && !this.fillable(ticket, key, tags)) return;
    this.lru.set(key, { value, freshUntil: this.clock.now() + ms, facts: undefined, stale: true, tags });
  }

  /** The one rule: nothing that could have made the value old happened since `ticket`. */
  private fillable(ticket: Ticket, key: string, tags: readonly string[] | undefined): boolean {
    if (!this.trusted || ticket < this.floor) return false;
    if (tags !== undefined && ticket < this.tagFloor) return false;
    const at = this.invalidatedAt.peek(key);
    return at === undefined || at <= ticket;
  }

  invalidateTagged(reaches: (key: string, tags: readonly string[]) => boolean): void {
    // O(copies held): a tag note walks L1 once (bounded by `local.max`); an index is for a later step.
    const reached: string[] = [];
    for (const [key, slot] of this.lru.entries()) if (slot.tags !== undefined && reaches(key, slot.tags)) reached.push(key);
    for (const key of reached) this.lru.delete(key);
    this.tagFloor = ++this.seq;
  }

  invalidate(key: string): void {
    this.lru.delete(key);
    this.invalidatedAt.set(key, ++this.seq);
  }

  written(ticket: Ticket, key: string, value: unknown, freshMs: number, accepted: boolean, facts?: EntryFacts): void {
    if (this.incoherent) return this.fill(ticket, key, value, freshMs, facts);
    const tags = facts?.tags;
    const keep = accepted && freshMs > 0 && this.fillable(ticket, key, tags);
    // Our own write is a change of the key like any other: a read begun before it finished may carry
    // the value it replaced, and that read's fill can run after this (its reply came first, but its
    // continuation has more steps to go): it must be refused, not overwrite ours.
    this.invalidate(key);
    if (keep) this.put(key, value, freshMs, facts, tags);
  }

  deleted(key: string): void {
    if (!this.incoherent) this.invalidate(key);
  }

  flush(): void {
    this.lru.clear();
    this.floor = ++this.seq;
    // Every remembered seq is now below the floor: nothing left to remember.
    this.invalidatedAt.clear();
  }

  suspend(keep?: (key: string, value: unknown, freshMs: number, tags: readonly string[] | undefined) => void): void {
    if (this.incoherent) return;
    if (keep && this.trusted) {
      const now = this.clock.now();
      // Least recently used first: if L1 holds more than the memo keeps, the most used copies are the ones left.
      for (const key of this.lru.rkeys()) {
        const slot = this.lru.peek(key);
        if (slot && !slot.stale && slot.freshUntil > now) keep(key, slot.value, slot.freshUntil - now, slot.tags);
      }
    }
    this.flush();
    this.trusted = false;
  }

  resume(): void {
    if (this.incoherent) return;
    this.flush();
    this.trusted = true;
  }

  untracked(): LocalTier {
    return this;
  }
}

/**
 * L1 is trusted only while every one of its sources holds: the subscription (notes, tag and clear
 * notes) and, under tracking, the server's tracking. The first one lost suspends it; it resumes (empty)
 * once all hold again. Every source starts lost.
 */
export class Trust {
  private readonly lost: Set<string>;

  constructor(
    private readonly tier: LocalTier,
    sources: readonly string[],
  ) {
    this.lost = new Set(sources);
  }

  down(source: string, keep?: (key: string, value: unknown, freshMs: number, tags: readonly string[] | undefined) => void): void {
    if (this.lost.size === 0) this.tier.suspend(keep);
    this.lost.add(source);
  }

  up(source: string): void {
    if (this.lost.delete(source) && this.lost.size === 0) this.tier.resume();
  }
}

/** L1 switched off: every call is a no-op (no bookkeeping). */
export const NO_LOCAL_TIER: LocalTier = {
  get: () => undefined,
  begin: () => 0,
  fill: () => undefined,
  fillStale: () => undefined,
  invalidateTagged: () => undefined,
  invalidate: () => undefined,
  written: () => undefined,
  deleted: () => undefined,
  flush: () => undefined,
  suspend: () => undefined,
  resume: () => undefined,
  untracked: () => NO_LOCAL_TIER,
};
