import { decodeEntry, encodeStorable } from './codec.js';
import { entryState, type EntryFacts, type EntryState, type RefreshPolicy } from './entry.js';
import type { Io } from './io.js';
import type { EntryKeys } from './keys.js';
import type { Grant } from './lock/types.js';
import type { Scripts } from './lock/scripts.js';
import { graceWindow, physicalTtl, type ResolvedCall } from './options.js';
import type { NoteKind } from './wait.js';
import type { NoteRoute } from './wake.js';

export type Found =
  | { readonly state: 'miss' }
  | ({ readonly state: EntryState; readonly value: unknown; readonly pttl: number; readonly graceMs: number; readonly staleMs: number } & EntryFacts);

/** A value the store holds (fresh, stale, or kept for fail-safe). */
export type Present = Exclude<Found, { readonly state: 'miss' }>;

const MISS: Found = Object.freeze({ state: 'miss' });

export interface StoreEvents {
  decodeError(key: string, reason: string, error?: unknown): void;
}

/** Entry reads and fenced writes on the store's Redis. Throws RedisUnavailableError; never a decode error. */
/**
 * What the fence made of a write (the rule: lock/scripts.ts). Refused, it was either `superseded` (a
 * newer write, set or delete is in the store) or `fenceLost` (nothing was accepted since the fence was
 * lost and re-seeded: the stored value, if any, is from before the loss).
 */
export type Written = 'accepted' | 'superseded' | 'fenceLost';

export class Store {
  constructor(
    private readonly io: Io,
    private readonly scripts: Scripts,
    private readonly notes: NoteRoute,
    /** The size cap of every read (maxValueBytes). */
    readonly maxValueBytes: number,
    private readonly events: StoreEvents,
    /** Negative control only: skip the fence check on writes. */
    unfenced = false,
  ) {
    this.writeScript = unfenced ? scripts.writeUnfenced : scripts.write;
  }

  private readonly writeScript: Scripts['write'];

  /** One round trip: bytes and PTTL together; oversized bytes never leave Redis. */
  async read(key: string, keys: EntryKeys): Promise<Found> {
    return this.found(key, await this.io.run('read', () => this.scripts.read(keys.value, this.maxValueBytes), key));
  }

  /** The read script's raw answer for `key` as an entry (a miss when absent, oversized or undecodable). Never throws. */
  found(key: string, raw: [number, Buffer | number] | null): Found {
    if (raw === null) return MISS;
    const [pttl, body] = raw;
    if (typeof body === 'number') {
      this.events.decodeError(key, body === -2 ? `larger than maxValueBytes (${this.maxValueBytes})` : 'not a string value');
      return MISS;
    }
    try {
      const entry = decodeEntry(body);
      return {
        state: entryState(pttl, entry.staleMs, entry.graceMs),
        value: entry.value,
        pttl,
        graceMs: entry.graceMs,
        staleMs: entry.staleMs,
        fence: entry.fence,
        ttlMs: entry.ttlMs,
        loadMs: entry.loadMs,
        refreshAhead: entry.refreshAhead,
      };
    } catch (err) {
      this.events.decodeError(key, err instanceof Error ? err.message : 'undecodable', err);
      return MISS;
    }
  }

  /**
   * Throws UnstorableValueError for a value that could never be read back, sending nothing: set()
   * checks before it takes a grant (the check encodes once more; a set() is an explicit write).
   */
  assertStorable(key: string, value: unknown, call: ResolvedCall): void {
    this.encode(key, value, 0, call, 0, call.ttl);
  }

  private encode(key: string, value: unknown, fence: number, call: ResolvedCall, loadMs: number, ttl: number, refreshAhead?: RefreshPolicy): Buffer {
    const graceMs = graceWindow(call.staleTtl, call.failSafeTtl);
    return encodeStorable(key, { value, fence, loadMs: Math.round(loadMs), writtenAt: Date.now(), staleMs: call.staleTtl, graceMs, ttlMs: ttl, refreshAhead }, this.maxValueBytes);
  }

  /**
   * Writes `value` under `grant`'s fence, releases the grant's lock and announces the outcome, all in
   * one script. Resolves with what the fence made of it (Written; the rule: lock/scripts.ts); a refused
   * write's waiters are told 'r' (released without a value).
   * Throws UnstorableValueError, before any Redis traffic and with the grant still held, for a value
   * that could never be read back; throws RedisUnavailableError (operation 'set' for kind 's').
   * `ttl` is this write's fresh time (`writeTtl(call)`: `call.ttl` drawn with `ttlJitter`); the entry carries it.
   * `refreshAhead`: the loader's own policy for this entry (`ctx.setOptions`), carried for every reader; omitted = the readers' option applies.
   */
  async write(key: string, keys: EntryKeys, grant: Grant, value: unknown, call: ResolvedCall, loadMs: number, kind: NoteKind, ttl = call.ttl, refreshAhead?: RefreshPolicy): Promise<Written> {
    const bytes = this.encode(key, value, grant.fence, call, loadMs, ttl, refreshAhead);
    const accepted = await this.io.run(
      kind === 's' ? 'set' : 'write',
      () => this.writeScript(
        [keys.value, keys.fence, keys.lock],
        [
          grant.token,
          String(grant.fence),
          bytes,
          physicalTtl(ttl, call.staleTtl, call.failSafeTtl),
          this.notes.channel(keys),
          this.notes.message(kind, key),
          this.notes.message('r', key),
        ],
      ),
      key,
    );
    grant.markReleased();
    return accepted === 1 ? 'accepted' : accepted === -1 ? 'fenceLost' : 'superseded';
  }

  /** Bumps the fence (so no in-flight rebuild can write), deletes the value and announces it. */
  async invalidate(key: string, keys: EntryKeys, fenceTtl: number): Promise<void> {
    await this.io.run('delete', () => this.scripts.invalidate(keys.value, keys.fence, fenceTtl, this.notes.channel(keys), this.notes.message('d', key)), key);
  }
}
