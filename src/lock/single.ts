import { randomBytes } from 'node:crypto';
import { OriginBackoffError, RedisUnavailableError, type LockLostError } from '../errors.js';
import type { Batch } from '../batch.js';
import type { Io } from '../io.js';
import type { EntryKeys } from '../keys.js';
import type { Clock, LockMode, ResolvedCall } from '../options.js';
import type { NoteRoute } from '../wake.js';
import type { AcquireReadReply, Scripts, TagGrantArgs } from './scripts.js';
import { announceInStore, ReleaseOnce, silentInStore, type ReleaseRetries } from './grant.js';
import type { AcquireOptions, Grant, Locker, ReleaseOutcome, ReleaseResult } from './types.js';
import { Watchdog, type Extension } from './watchdog.js';
import { RECORD_TTL_MS, type GrantTime } from '../tags.js';

export function newToken(): string {
  return randomBytes(16).toString('base64url'); // 128 random bits per grant
}

export interface LockDeps {
  readonly io: Io;
  readonly scripts: Scripts;
  /** Where the key's notes go (`notes`). */
  readonly notes: NoteRoute;
  readonly clock: Clock;
  readonly onLost: (key: string, err: LockLostError) => void;
  /** Unanswered releases, retried once Redis answers again (optional: without it a failed release waits out its lease). */
  readonly retries?: ReleaseRetries;
  /** The tag records that govern the entry of `key` tagged `tags` (tags.ts). */
  readonly tagRecords?: (key: string, tags: readonly string[]) => readonly string[];
  /** On a Cluster, G taken on the records' node (tags.ts `grantApart`); undefined on a standalone Redis. */
  readonly tagGrantApart?: (key: string, tags: readonly string[] | undefined) => Promise<GrantTime> | undefined;
}

/** A grant's tags part and, on a Cluster, its G taken apart. */
export interface TagGrant {
  readonly args: TagGrantArgs;
  readonly apart: Promise<GrantTime> | undefined;
}

/**
 * A grant's tags part (THE TAG RULE, lock/scripts.ts): the records its acquire script creates and
 * takes G with — none on a Cluster, where G is taken on the records' node by `apart`, sent alongside.
 */
export function tagGrant(deps: LockDeps, key: string, call: ResolvedCall): TagGrant {
  const apart = deps.tagGrantApart?.(key, call.tags);
  const records = apart !== undefined || call.tags === undefined ? [] : (deps.tagRecords?.(key, call.tags) ?? []);
  return { args: { records, recordTtl: RECORD_TTL_MS }, apart };
}

/**
 * The grant's G, once its acquire was granted: the script's own, or on a Cluster `apart`'s (taken only
 * for a call that declares tags, `tags: []` included: only such a call's loader may add tags there).
 * A call whose G could not be taken apart has no grant (throws that error; the caller frees what the
 * acquire took).
 */
export function grantTimeOf(scriptG: number | undefined, apart: GrantTime | undefined): number | undefined {
  if (!(apart instanceof Error)) return apart ?? scriptG;
  throw apart;
}

/**
 * `single`: `SET lock token NX PX lockTtl` plus a fence increment, in one script on the store.
 * With `exclusive = false` the same class issues fence-only grants (modes `none` and `local`):
 * no lock key, but the write is still fenced and a watchdog keeps the fence alive for slow loaders.
 */
export class StoreLock implements Locker {
  constructor(
    private readonly deps: LockDeps,
    private readonly mode: LockMode,
    private readonly exclusive: boolean,
  ) {}

  /** `opts`: set() passes `{ ignoreBackoff: true, operation: 'set' }` (an explicit write runs no loader). */
  async acquire(key: string, keys: EntryKeys, call: ResolvedCall, opts: AcquireOptions = {}): Promise<Grant | null> {
    const attempt = this.attempt(key, keys, call);
    const { scripts } = this.deps;
    // Only an exclusive grant's rebuilder re-reads (src/protocol/rebuild.ts): a fence-only grant reads nothing.
    const readUpTo = this.exclusive && opts.ignoreBackoff !== true ? opts.readUpTo : undefined;
    // Every grant takes its time G (THE TAG RULE): a loader may tag its entry (ctx.setOptions).
    const { args: tags, apart } = tagGrant(this.deps, key, call);
    const send =
      readUpTo === undefined
        ? () => scripts.acquireTagged(keys.lock, keys.fence, keys.backoff, attempt.token, attempt.lockTtl, call.lockTtl, opts.ignoreBackoff === true, tags)
        : () => scripts.acquireReadTagged(keys.lock, keys.fence, keys.backoff, keys.value, attempt.token, attempt.lockTtl, call.lockTtl, readUpTo, tags);
    const reply = await this.deps.io.run(opts.operation ?? 'acquire', send, key, attempt.undo).catch((error: unknown) => {
      attempt.failed(error);
      throw error;
    });
    // Not granted: no loader starts, so nothing waits on G (`apart` never rejects: nothing unobserved).
    if (reply[0] !== 1) return attempt.answered(reply as [number, number], false);
    const elsewhere = await apart; // sent alongside: both answered before any loader starts
    // Granted: {1, fence, G} and, for acquireReadTagged with an entry, READ's [pttl, bytes].
    const [, fence, scriptG, ...read] = reply as [1, number, number, number, Buffer | number];
    let grantedAt: number | undefined;
    try {
      grantedAt = grantTimeOf(scriptG, elsewhere);
    } catch (error) {
      attempt.undo?.();
      throw error;
    }
    const answer: AcquireReadReply = read.length === 2 ? [1, fence, read[0], read[1]] : [1, fence];
    return attempt.answered(answer, readUpTo !== undefined, grantedAt);
  }

  /**
   * Many keys' acquisitions in one pipelined round trip per hash slot (getOrComputeMany's misses):
   * each answered as `acquire` would answer it — a grant, null (held by another), or the error
   * `acquire` would throw (OriginBackoffError, RedisUnavailableError) — in the order of `items`.
   */
  async acquireMany(batch: Batch, items: readonly ManyItem[]): Promise<(Grant | null | Error)[]> {
    const attempts = items.map((it) => this.attempt(it.key, it.keys, it.call));
    // Each key's G as a single key's (on a Cluster, taken apart for a call that declares tags).
    const grants = items.map((it) => tagGrant(this.deps, it.key, it.call));
    const replies = await batch.run(
      'acquire',
      items.map((it) => it.key),
      (scripts, i) => {
        const { keys, call } = items[i] as ManyItem;
        const a = attempts[i] as Attempt;
        void scripts.acquireTagged(keys.lock, keys.fence, keys.backoff, a.token, a.lockTtl, call.lockTtl, false, (grants[i] as TagGrant).args);
      },
      // A grant's state a failover must not lose: with replicaAck on, each group is confirmed by WAIT.
      (i) => (items[i] as ManyItem).keys.lock,
      (group) => group.forEach((i) => attempts[i]?.undo?.()),
    );
    // On a Cluster, the Gs taken apart: both answered before any loader starts.
    const elsewhere: (GrantTime | undefined)[] = grants.some((g) => g.apart !== undefined) ? await Promise.all(grants.map((g) => g.apart ?? Promise.resolve(undefined))) : [];
    return replies.map((reply, i) => {
      const a = attempts[i] as Attempt;
      if (!reply.ok) {
        a.failed(reply.error);
        return reply.error instanceof Error ? reply.error : new Error(String(reply.error));
      }
      try {
        // Granted: {1, fence, G}; else {0, pttl} or {2, pttl}.
        const [granted, fenceOrPttl, scriptG] = reply.value as [number, number, number | undefined];
        if (granted !== 1) return a.answered([granted, fenceOrPttl], false);
        let grantedAt: number | undefined;
        try {
          grantedAt = grantTimeOf(scriptG, elsewhere[i]);
        } catch (error) {
          a.undo?.();
          throw error;
        }
        return a.answered([granted, fenceOrPttl], false, grantedAt);
      } catch (error) {
        return error as Error;
      }
    });
  }

  /** One key's acquisition: its token, and what its reply (or failure) makes of it. */
  private attempt(key: string, keys: EntryKeys, call: ResolvedCall): Attempt {
    const token = this.exclusive ? newToken() : '';
    const { scripts, notes } = this.deps;
    const started = this.deps.clock.now();
    // A timed-out acquire may still be applied (now or later): free that orphan by its token.
    const undo = this.exclusive ? () => void scripts.release(keys.lock, keys.backoff, token, notes.channel(keys), '', 0).catch(() => undefined) : undefined;
    return {
      token,
      lockTtl: this.exclusive ? call.lockTtl : 0,
      undo,
      failed: (error) => {
        // A failed acquire may have been applied all the same (a grant too few replicas acknowledged, a
        // reply lost with its connection, a refused WAIT): free it now, by its token. Idempotent, and it
        // cannot free another holder's lock. (A timeout was already undone by Io; the breaker sent nothing.)
        if (error instanceof RedisUnavailableError && error.failure !== 'timeout' && error.failure !== 'breaker') undo?.();
      },
      answered: (reply, read, grantedAt) => {
        const [granted, fenceOrPttl] = reply;
        if (granted === 2) throw new OriginBackoffError(key, fenceOrPttl);
        if (granted !== 1) return null;
        const readAtGrant = read ? (reply.length === 4 ? ([reply[2], reply[3]] as [number, Buffer | number]) : null) : undefined;
        return new StoreGrant(this.deps, key, keys, token, fenceOrPttl, this.mode, this.exclusive, call.lockTtl, call.failBackoff, started, readAtGrant, grantedAt);
      },
    };
  }
}

/** One key of `acquireMany`. */
export interface ManyItem {
  readonly key: string;
  readonly keys: EntryKeys;
  readonly call: ResolvedCall;
}

interface Attempt {
  readonly token: string;
  readonly lockTtl: number;
  /** Frees the grant by its token, if it was applied unanswered (exclusive grants only). */
  readonly undo: (() => void) | undefined;
  /** The acquisition failed: undo unless it surely sent nothing or Io already undid it. */
  failed(error: unknown): void;
  /** The script's reply (`read`: acquireRead's): a grant, null (held), or throws OriginBackoffError. `grantedAt`: the grant's G. */
  answered(reply: AcquireReadReply, read: boolean, grantedAt?: number): Grant | null;
}

class StoreGrant implements Grant {
  readonly signal: AbortSignal;
  private readonly ttl: number;
  private readonly watchdog: Watchdog;
  private readonly once = new ReleaseOnce();

  constructor(
    private readonly deps: LockDeps,
    private readonly key: string,
    private readonly keys: EntryKeys,
    readonly token: string,
    readonly fence: number,
    readonly mode: LockMode,
    readonly exclusive: boolean,
    ttl: number,
    /** Fleet-wide backoff set on release after a loader failure (0 = none). */
    private readonly backoffMs: number,
    acquiredAt: number,
    /** acquireRead's entry, until takeRead() hands it over. */
    private readAtGrant: [number, Buffer | number] | null | undefined,
    readonly grantedAt: number | undefined,
  ) {
    this.ttl = ttl;
    const extendOnce = async (): Promise<Extension> =>
      (await deps.io.run('extend', () => deps.scripts.extend(keys.lock, keys.fence, token, ttl), key)) === 1 ? 'kept' : 'lost';
    // A fence-only grant holds no lock that could lapse: a Redis stall must not abort its loader (a
    // lapsed fence only refuses the write). Only an exclusive grant has a validity to lose.
    const validFor = exclusive ? ttl : Number.POSITIVE_INFINITY;
    this.watchdog = new Watchdog(key, deps.clock, ttl, acquiredAt + validFor, extendOnce, validFor, deps.onLost);
    this.signal = this.watchdog.signal;
  }

  takeRead(): [number, Buffer | number] | null | undefined {
    const read = this.readAtGrant;
    this.readAtGrant = undefined;
    return read;
  }

  markReleased(): void {
    this.watchdog.stop();
  }

  release(outcome: ReleaseOutcome): Promise<ReleaseResult> {
    return this.once.run(async () => {
      this.watchdog.stop();
      // After an accepted write the script freed our lock (if still ours: it does not say) and announced the value: nothing to send.
      if (silentInStore(outcome)) return 'released';
      const freed = await announceInStore(this.deps, this.key, this.keys, this.token, outcome, this.backoffMs, this.ttl);
      if (freed === undefined) return 'unknown';
      // A fence-only grant holds no lock key: the script answered, there was nothing else to free.
      return freed === 1 || !this.exclusive ? 'released' : 'not-ours';
    });
  }
}
