import type { Batch, Reply } from './batch.js';
import { isNoPerm, isWrongType } from './client/port.js';
import { decodeEntry, encodeStorable, type Envelope } from './codec.js';
import { entryState, type EntryFacts, type EntryState, type RefreshPolicy } from './entry.js';
import type { Io } from './io.js';
import type { EntryKeys } from './keys.js';
import type { Grant } from './lock/types.js';
import type { ReadReply, Scripts, WriteArgs } from './lock/scripts.js';
import { INVALID, RECORD_TTL_MS, type TagVerdict } from './tags.js';
import type { NodeClocks, TimeWindow } from './node-clock.js';
import { graceWindow, physicalTtl, type ResolvedCall } from './options.js';
import type { NoteKind } from './wait.js';
import type { NoteRoute } from './wake.js';

export type Found =
  | { readonly state: 'miss' }
  | ({ readonly state: EntryState; readonly value: unknown; readonly pttl: number; readonly graceMs: number; readonly staleMs: number; readonly freshUntil?: number | undefined; readonly grantedAt?: number | undefined } & EntryFacts);

/** A value the store holds (fresh, stale, or kept for fail-safe). */
export type Present = Exclude<Found, { readonly state: 'miss' }>;

const MISS: Found = Object.freeze({ state: 'miss' });

/** A plain read's answer: the bytes (empty for a missing key), or WRONG_TYPE for a key of another type. */
type PlainReply = Buffer | typeof WRONG_TYPE;
/** The read script's code for a key that is not a string; a plain read's WRONGTYPE reply maps to it. */
const WRONG_TYPE = -1;
/** The read script's code for bytes over the cap. */
const TOO_LARGE = -2;
/** A plain read Redis refused (NOPERM): the script reads instead. */
const REFUSED = -3;


/** One key's read in a batch: what the store holds, or why it could not be read (`Batch`'s error). */
export type ReadResult = { readonly ok: true; readonly found: Found } | { readonly ok: false; readonly error: unknown };

export interface StoreEvents {
  decodeError(key: string, reason: string, error?: unknown): void;
  /** A tagged entry read from Redis was invalid by a tag (THE TAG RULE): read as a miss. */
  tagInvalidated?(key: string): void;
}

/** What the store needs of the tag records (tags.ts). */
export interface StoreTags {
  /** THE TAG RULE on the records now: one round trip. Throws RedisUnavailableError. */
  judge(key: string, tags: readonly string[], grantedAt: number): Promise<TagVerdict>;
  records(key: string, tags: readonly string[]): readonly string[];
  /** Negative control only (UNSAFE.tagSnapshotAtWrite): the server's TIME in µs now, taken in place of the grant's. */
  timeNow(): Promise<number>;
  /** The UNSAFE switch: a tagged write carries the time of the write instead of its grant's. */
  readonly snapshotAtWrite: boolean;
  /** The UNSAFE switch: a tagged entry read from Redis is served unchecked (on a Cluster the check is the rule's only gate). */
  readonly readUnchecked: boolean;
  /**
   * A Cluster client: the records live in another slot than the entry, so a tagged write cannot check
   * them; it lands, and the read's check keeps it from being served if it is invalid (THE TAG RULE, On
   * a Cluster, lock/scripts.ts).
   */
  readonly apart: boolean;
  /**
   * On a Cluster, sent with a tagged write: re-creates its missing records, keeps them `ttl` ms at
   * least, and tells whether the entry granted at `grantedAt` is valid now. Never rejects.
   */
  ensure(key: string, tags: readonly string[], ttl: number, grantedAt: number): Promise<boolean>;
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
    /** Each node's clock, as this process knows it: whether a read can be a plain one (node-clock.ts). */
    private readonly clocks: NodeClocks,
    /** Negative control only: skip the fence check on writes. */
    unfenced = false,
    /** The tag records (absent: a store that reads and writes no tags, e.g. in a test). */
    private readonly tags?: StoreTags,
  ) {
    this.writeScript = unfenced ? scripts.writeUnfenced : scripts.write;
    this.capEnd = String(maxValueBytes);
  }

  private readonly writeScript: Scripts['write'];
  /** GETRANGE's end: bytes 0…maxValueBytes, so a value over the cap shows as one byte too many and no more of it leaves Redis. */
  private readonly capEnd: string;

  /**
   * One round trip. A plain read (GETRANGE up to the cap) when this process knows the node's clock
   * well enough; the entry's `freshUntil` then says whether it is fresh, stale or kept. Where that
   * cannot be decided (no sample, an entry written before `freshUntil`, a read that ran too close to
   * a boundary), the read script answers, with the PTTL Redis reports — a second round trip, rare.
   * `sent`: when the caller took the read's L1 ticket (clock time), just before this.
   */
  async read(key: string, keys: EntryKeys, sent = this.clocks.now()): Promise<Found> {
    const node = this.clocks.nodeOf(key);
    if (!this.plainAllowed || !this.clocks.plainReadable(node, sent)) return this.vetted(key, await this.scriptRead(key, keys, node));
    const reply = await this.io.run('read', () => this.plainRead(keys.value), key);
    const found = this.judged(key, reply, this.clocks.timeWindow(node, sent, this.clocks.now()));
    if (found === undefined) return this.vetted(key, await this.scriptRead(key, keys, node));
    // An untagged entry: no other command, no other await.
    return found.state === 'miss' || found.tags === undefined ? found : this.vetted(key, found);
  }

  /**
   * A tagged entry as THE TAG RULE judges it now (one round trip to its records): itself; stale, when
   * a tag was expired since its grant (expireByTag) and its stale window since then is not over; else,
   * or when a tag was deleted since its grant or its record is missing, a miss (counted in
   * `tagInvalidations`). Anything else is returned as is. `counted` false: the re-read under a grant
   * of a call whose own read was counted already. Throws RedisUnavailableError.
   */
  async vetted(key: string, found: Found, counted = true): Promise<Found> {
    if (found.state === 'miss' || found.tags === undefined || this.tags?.readUnchecked === true) return found;
    // An entry whose tags cannot be checked (no record keeper, no grant time) is unknown: invalid.
    const verdict = this.tags !== undefined && found.grantedAt !== undefined ? await this.tags.judge(key, found.tags, found.grantedAt) : INVALID;
    if (verdict.kind === 'valid') return found;
    const stale = verdict.kind === 'expired' ? expiredByTag(found, verdict.agoMs) : undefined;
    if (stale) return stale;
    if (counted) this.events.tagInvalidated?.(key);
    return MISS;
  }

  /**
   * False once Redis refused GETRANGE (an ACL user set up before reads needed it: NOPERM): every read
   * is then the script, as before, rather than fail. The least-privilege ACL lists `+getrange`.
   */
  private plainAllowed = true;

  /**
   * Many keys (getMany, getOrComputeMany): plain reads or scripts, as `read` chooses per key, pipelined
   * per slot; the keys a plain read could not decide go out once more as scripts. One result per key.
   */
  async readMany(batch: Batch, keys: readonly string[], valueKeys: readonly string[], scriptsOnly = false): Promise<ReadResult[]> {
    const nodes = keys.map((key) => this.clocks.nodeOf(key));
    const sent = this.clocks.now();
    const plain = nodes.map((node) => !scriptsOnly && this.plainAllowed && this.clocks.plainReadable(node, sent));
    const replies = await batch.run('read', keys, (scripts, i) => void (plain[i] ? scripts.getRange(valueKeys[i] as string, this.capEnd) : scripts.read(valueKeys[i] as string, this.maxValueBytes)));
    const received = this.clocks.now();
    const results = new Array<ReadResult>(keys.length);
    const undecided: number[] = [];
    replies.forEach((reply, i) => {
      const key = keys[i] as string;
      const node = nodes[i] as string;
      if (!plain[i]) {
        results[i] = reply.ok ? { ok: true, found: this.scriptAnswered(key, node, sent, received, reply.value as ReadReply) } : this.scriptFailed(node, reply);
        return;
      }
      const answer = reply.ok ? (reply.value as Buffer) : this.plainFailedInBatch(reply.error);
      if (answer === undefined) results[i] = reply as ReadResult;
      else {
        const found = this.judged(key, answer, this.clocks.timeWindow(node, sent, received));
        if (found) results[i] = { ok: true, found };
        else undecided.push(i);
      }
    });
    if (undecided.length > 0) {
      const again = await this.readMany(batch, undecided.map((i) => keys[i] as string), undecided.map((i) => valueKeys[i] as string), true);
      undecided.forEach((i, j) => (results[i] = again[j] as ReadResult));
    }
    return scriptsOnly ? results : this.vettedMany(keys, results);
  }

  /** readMany's tagged entries, each vetted (their checks in parallel); a check that fails fails that key's read. */
  private async vettedMany(keys: readonly string[], results: ReadResult[]): Promise<ReadResult[]> {
    const tagged = results.flatMap((r, i) => (r.ok && r.found.state !== 'miss' && r.found.tags !== undefined ? [i] : []));
    if (tagged.length === 0) return results;
    await Promise.all(
      tagged.map(async (i) => {
        const r = results[i] as { readonly ok: true; readonly found: Found };
        try {
          results[i] = { ok: true, found: await this.vetted(keys[i] as string, r.found) };
        } catch (error) {
          results[i] = { ok: false, error };
        }
      }),
    );
    return results;
  }

  /**
   * GETRANGE up to the cap; a key of another type answers WRONG_TYPE instead of failing the read, and
   * a refused GETRANGE (NOPERM) an empty window: the script answers (and every read after it).
   */
  private plainRead(valueKey: string): Promise<PlainReply | typeof REFUSED> {
    return this.scripts.getRange(valueKey, this.capEnd).catch((err: unknown) => this.plainFailed(err));
  }

  private plainFailed(err: unknown): PlainReply | typeof REFUSED {
    if (isWrongType(err)) return WRONG_TYPE;
    if (isNoPerm(err)) {
      this.plainAllowed = false;
      return REFUSED;
    }
    throw err;
  }

  /** The read script: bytes and PTTL together (oversized bytes never leave Redis), and a sample of the node's clock. */
  private async scriptRead(key: string, keys: EntryKeys, node: string): Promise<Found> {
    const sent = this.clocks.now();
    let raw: ReadReply;
    try {
      raw = await this.io.run('read', () => this.scripts.read(keys.value, this.maxValueBytes), key);
    } catch (err) {
      this.clocks.unclaim(node);
      throw err;
    }
    return this.scriptAnswered(key, node, sent, this.clocks.now(), raw);
  }

  private scriptAnswered(key: string, node: string, sent: number, received: number, raw: ReadReply): Found {
    if (raw === null) {
      this.clocks.unclaim(node);
      return MISS;
    }
    const serverMs = raw[2] / 1000;
    this.clocks.sample(node, sent, received, serverMs);
    return this.found(key, raw, serverMs);
  }

  /** A plain read's error reply in a batch (Batch wraps it): as plainFailed; undefined for any other failure (the key's read failed). */
  private plainFailedInBatch(error: unknown): PlainReply | typeof REFUSED | undefined {
    const cause = (error as { cause?: unknown } | undefined)?.cause;
    if (!isWrongType(cause) && !isNoPerm(cause)) return undefined;
    return this.plainFailed(cause);
  }

  private scriptFailed(node: string, reply: Reply): ReadResult {
    this.clocks.unclaim(node);
    return reply as ReadResult;
  }

  /**
   * A plain read's answer as an entry, judged at both ends of the server-time window the read ran in;
   * undefined when it cannot be (no window, no `freshUntil`, the ends disagree): the script decides.
   */
  private judged(key: string, reply: PlainReply | typeof REFUSED, window: TimeWindow | undefined): Found | undefined {
    if (reply === REFUSED) return undefined;
    if (reply === WRONG_TYPE) return this.unreadable(key, WRONG_TYPE);
    if (reply.length === 0) return MISS;
    if (reply.length > this.maxValueBytes) return this.unreadable(key, TOO_LARGE);
    if (window === undefined) return undefined;
    const entry = this.decoded(key, reply);
    if (entry === undefined) return MISS;
    const until = entry.freshUntil;
    if (until === undefined) return undefined;
    // The entry's physical expiry is freshUntil + graceMs (the write script's PX, from the same TIME):
    // the time left at the window's latest end, and at its earliest.
    const least = until + entry.graceMs - window[1];
    if (least <= 0) return undefined;
    const state = entryState(least, entry.staleMs, entry.graceMs);
    if (state !== entryState(until + entry.graceMs - window[0], entry.staleMs, entry.graceMs)) return undefined;
    // The least time left the window allows: L1 and the refresh point count from it.
    return present(entry, state, least);
  }

  /**
   * The read script's raw answer for `key` as an entry (a miss when absent, oversized or undecodable);
   * also acquireRead's. Never throws. With the server's time at the read (`serverMs`, the read
   * script's TIME), an entry with `freshUntil` is judged by it, as a plain read is: PTTL counts whole
   * ms from an expiry Redis set from its own ms clock, so near the boundary the two could disagree by
   * up to a ms. Otherwise by Redis's PTTL.
   */
  found(key: string, raw: readonly [number, Buffer | number, ...unknown[]] | null, serverMs?: number): Found {
    if (raw === null) return MISS;
    const [reported, body] = raw;
    if (typeof body === 'number') return this.unreadable(key, body);
    const entry = this.decoded(key, body);
    if (entry === undefined) return MISS;
    // Never below 0: a negative PTTL means "no expiry" (fresh) to entryState.
    const pttl = entry.freshUntil !== undefined && serverMs !== undefined ? Math.max(0, entry.freshUntil + entry.graceMs - serverMs) : reported;
    return present(entry, entryState(pttl, entry.staleMs, entry.graceMs), pttl);
  }

  /** A value that is not an entry (another type, over the cap): a decodeError, and a miss. */
  private unreadable(key: string, code: number): Found {
    this.events.decodeError(key, code === TOO_LARGE ? `larger than maxValueBytes (${this.maxValueBytes})` : 'not a string value');
    return MISS;
  }

  /** The entry in `body`, or undefined (and a decodeError) when the bytes are not one. */
  private decoded(key: string, body: Buffer): Envelope | undefined {
    try {
      return decodeEntry(body);
    } catch (err) {
      this.events.decodeError(key, err instanceof Error ? err.message : 'undecodable', err);
      return undefined;
    }
  }

  /**
   * Throws UnstorableValueError for a value that could never be read back, sending nothing: set()
   * checks before it takes a grant (the check encodes once more; a set() is an explicit write).
   */
  assertStorable(key: string, value: unknown, call: ResolvedCall): void {
    this.encode(key, value, 0, call, 0, call.ttl);
  }

  private encode(key: string, value: unknown, fence: number, call: ResolvedCall, loadMs: number, ttl: number, refreshAhead?: RefreshPolicy, tags?: readonly string[], grantedAt?: number): Buffer {
    const graceMs = graceWindow(call.staleTtl, call.failSafeTtl);
    return encodeStorable(key, { value, fence, loadMs: Math.round(loadMs), writtenAt: Date.now(), staleMs: call.staleTtl, graceMs, ttlMs: ttl, refreshAhead, tags, grantedAt }, this.maxValueBytes);
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
  async write(key: string, keys: EntryKeys, grant: Grant, value: unknown, call: ResolvedCall, loadMs: number, kind: NoteKind, ttl = call.ttl, refreshAhead?: RefreshPolicy, tags?: readonly string[]): Promise<Written> {
    const tagged = tags !== undefined && tags.length > 0;
    // THE TAG RULE: a tagged entry carries its grant's time G. A grant without one (a batch's; on a
    // Cluster, an untagged call whose G the records' node did not give) writes 0: every record is at
    // least 0, so such an entry is refused (on a Cluster: read as invalid), never wrongly accepted.
    let grantedAt = tagged ? (grant.grantedAt ?? 0) : undefined;
    if (tagged && this.tags?.snapshotAtWrite === true) grantedAt = await this.tags.timeNow(); // the negative control
    const bytes = this.encode(key, value, grant.fence, call, loadMs, ttl, refreshAhead, tagged ? tags : undefined, grantedAt);
    const args: WriteArgs = [
      grant.token,
      String(grant.fence),
      bytes,
      physicalTtl(ttl, call.staleTtl, call.failSafeTtl),
      this.notes.channel(keys),
      this.notes.message(kind, key),
      this.notes.message('r', key),
      ttl,
    ];
    const entry: [string, string, string] = [keys.value, keys.fence, keys.lock];
    // On a Cluster the records are checked alongside the write (THE TAG RULE, On a Cluster): an entry
    // found invalid there is stored all the same (the reads' check keeps it unserved) but counts as refused.
    const apart = tagged && this.tags?.apart === true ? this.tags.ensure(key, tags, args[3], grantedAt ?? 0) : undefined;
    const [accepted, valid] = await Promise.all([
      this.io.run(
        kind === 's' ? 'set' : 'write',
        () =>
          tagged && apart === undefined
            ? this.scripts.writeTagged(entry, args, { records: this.tagRecords(key, tags), grantedAt: grantedAt ?? 0, recordTtl: RECORD_TTL_MS, deleted: this.notes.message('d', key) })
            : this.writeScript(entry, args),
        key,
      ),
      apart,
    ]);
    grant.markReleased();
    return accepted === 1 ? (valid === false ? 'superseded' : 'accepted') : accepted === -1 ? 'fenceLost' : 'superseded';
  }

  /** The records of a tagged write; a store without tags cannot write one. */
  private tagRecords(key: string, tags: readonly string[]): readonly string[] {
    if (this.tags === undefined) throw new Error('stampede-guard: a tagged write on a store without tag records');
    return this.tags.records(key, tags);
  }

  /** Bumps the fence (so no in-flight rebuild can write), deletes the value and announces it. */
  async invalidate(key: string, keys: EntryKeys, fenceTtl: number): Promise<void> {
    await this.io.run('delete', () => this.scripts.invalidate(keys.value, keys.fence, fenceTtl, this.notes.channel(keys), this.notes.message('d', key)), key);
  }
}

/** A decoded entry as the store holds it: in `state`, with `pttl` ms of its physical life left. */
function present(entry: Envelope, state: EntryState, pttl: number): Present {
  return {
    state,
    value: entry.value,
    pttl,
    graceMs: entry.graceMs,
    staleMs: entry.staleMs,
    fence: entry.fence,
    ttlMs: entry.ttlMs,
    loadMs: entry.loadMs,
    refreshAhead: entry.refreshAhead,
    freshUntil: entry.freshUntil,
    tags: entry.tags,
    grantedAt: entry.grantedAt,
  };
}

/**
 * A present entry whose tag was expired `agoMs` ago, after its grant: a fresh one is stale from then,
 * for its `staleMs` (never past its own end: `pttl` is cut so the stale window's math ends there);
 * one already stale or kept stays as it is. Undefined (a miss) once that window is over, or at once
 * for an entry without one (`staleTtl` 0: an expired entry is a deleted one).
 */
function expiredByTag(found: Present, agoMs: number): Present | undefined {
  if (found.state !== 'fresh') return found;
  const left = found.staleMs - agoMs;
  if (left <= 0) return undefined;
  const pttl = found.graceMs - found.staleMs + left;
  return { ...found, state: 'stale', pttl: found.pttl < 0 ? pttl : Math.min(found.pttl, pttl) };
}
