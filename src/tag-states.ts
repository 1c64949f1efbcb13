/**
 * The tag records' states this process read, kept so that a tagged hit from Redis costs no second
 * round trip while they hold (THE TAG RULE on read, tags.ts `judge`). Kept exactly as coherent as L1:
 *
 * - a tag note (deleteByTag / expireByTag, here or in another process) drops the states of its records
 *   before this process acknowledges it, so once a deleteByTag resolves no call that starts here is
 *   judged by a state from before it;
 * - a read of records takes a ticket before it is sent: a note (any) or a flush heard while it is out
 *   keeps its reply from being kept (the reply may predate the note's change; the read itself is still
 *   judged by it, as a call that started before the note may be);
 * - states are kept only while subscribed (notes sent while away are lost): flushed when the
 *   subscription goes down and again when it comes back, as L1 and the degraded memo are;
 * - a state lives at most TAG_STATE_MAX_AGE_MS (the bound for what no note announces: a record lost to
 *   eviction or a restart), and at most TAG_STATES_KEPT are kept.
 *
 * Only a plain `D` is kept: a missing record (unknown means invalid) and one with an expireByTag time
 * `X` (its verdict needs the server's clock) are read from Redis every time.
 */
import type { Clock } from './options.js';

/** How long a kept state may answer without being read again. */
export const TAG_STATE_MAX_AGE_MS = 10_000;
/** How many records' states one cache keeps (the oldest kept goes first). */
export const TAG_STATES_KEPT = 10_000;

const PLAIN_D = /^\d+$/;

export class TagStates {
  /** Record key → its value and until when (clock ms) it may answer. Insertion order is age order. */
  private readonly states = new Map<string, { readonly value: string; readonly until: number }>();
  /** Bumped by every drop and flush: a read whose ticket is older keeps nothing. */
  private epoch = 0;
  /** Kept only while subscribed. */
  private trusted = false;

  constructor(
    private readonly clock: Clock,
    private readonly maxAgeMs = TAG_STATE_MAX_AGE_MS,
    private readonly kept = TAG_STATES_KEPT,
  ) {}

  /** The values of every one of `records`, if each is kept and young enough; else undefined (read them). */
  get(records: readonly string[]): string[] | undefined {
    if (!this.trusted || records.length === 0) return undefined;
    const now = this.clock.now();
    const out: string[] = [];
    for (const record of records) {
      const state = this.states.get(record);
      if (state === undefined) return undefined;
      if (state.until <= now) {
        this.states.delete(record);
        return undefined;
      }
      out.push(state.value);
    }
    return out;
  }

  /** Taken before a read of records is sent. */
  begin(): number {
    return this.epoch;
  }

  /** A read's reply: kept only if nothing was dropped or flushed since its ticket, and only plain `D`s. */
  fill(ticket: number, records: readonly string[], values: readonly (string | null | undefined)[]): void {
    if (!this.trusted || ticket !== this.epoch) return;
    const until = this.clock.now() + this.maxAgeMs;
    records.forEach((record, i) => {
      const value = values[i];
      if (typeof value !== 'string' || !PLAIN_D.test(value)) return;
      this.states.delete(record); // re-inserted last: insertion order stays age order
      if (this.states.size >= this.kept) this.states.delete(this.states.keys().next().value as string);
      this.states.set(record, { value, until });
    });
  }

  /** A tag note changed these records. */
  drop(records: readonly string[]): void {
    this.epoch++;
    for (const record of records) this.states.delete(record);
  }

  /** The subscription is up again: trusted, from nothing (notes sent while it was away are lost). */
  up(): void {
    this.flush();
    this.trusted = true;
  }

  /** The subscription is down: nothing kept answers. */
  down(): void {
    this.trusted = false;
    this.flush();
  }

  private flush(): void {
    this.epoch++;
    this.states.clear();
  }
}
