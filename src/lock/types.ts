import type { EntryKeys } from '../keys.js';
import type { LockMode, ResolvedCall } from '../options.js';

/**
 * How a rebuild ended, told to its grant exactly once. The grant (src/lock/grant.ts) maps it to what
 * the store announces; callers never pick a note or a backoff themselves.
 *   written     the fenced write was accepted (it already freed the lock and announced the value);
 *   empty       nothing to write (undefined, a fresh value found on re-read, a refused write);
 *   failed      the loader failed: announce it and set the fleet-wide `failBackoff`;
 *   cancelled   the load was abandoned (callers aborted, close(), lock lost): not an origin failure;
 *   unstorable  the loader's value cannot be stored; others must not rebuild it in turn.
 */
export type ReleaseOutcome = 'written' | 'empty' | 'failed' | 'cancelled' | 'unstorable';

/** What a release found: our lock freed, not ours any more (lapsed or taken over), or unknown (Redis did not answer). */
export type ReleaseResult = 'released' | 'not-ours' | 'unknown';

/**
 * One rebuild's right to write a key. Ownership is explicit: whoever acquires a grant registers it
 * (GrantRegistry) and releases it once with its outcome. `release()` is idempotent (a second call
 * returns the first call's result and sends nothing) and never throws: a release failure must not
 * mask the loader's own error; the lock then lapses after its TTL.
 */
export interface Grant {
  /** The fencing token: strictly increasing per key across grants, sets and deletes. */
  readonly fence: number;
  /** The random lock token ('' for a fence-only grant). */
  readonly token: string;
  /**
   * The server's TIME in µs taken by the script that granted it, after it created the call's missing
   * tag records (THE TAG RULE, lock/scripts.ts): a tagged entry written under this grant carries it.
   * Every grant the lockers take has it, a batch's too (its loader may tag each key); a tagged write
   * under a grant without it is refused.
   */
  readonly grantedAt?: number | undefined;
  /** The mode this rebuild actually ran under (after any fallback). */
  readonly mode: LockMode;
  /** True when the grant excluded other rebuilders, so re-reading the store after winning pays off. */
  readonly exclusive: boolean;
  /**
   * `readUpTo`: the read script's raw answer for the entry, read atomically with the grant, handed
   * over once (the grant keeps no bytes after): null, no entry; undefined, nothing was read with the
   * grant, or it was taken already.
   */
  takeRead?(): [number, Buffer | number] | null | undefined;
  /** Aborts with a LockLostError when the grant is known lost (extension refused or lapsed). */
  readonly signal: AbortSignal;
  /**
   * The fenced write script ran (it frees the store lock atomically): stop extending. The outcome is
   * still announced by `release()`, so a refused write ('empty') still wakes waiters.
   */
  markReleased(): void;
  release(outcome: ReleaseOutcome): Promise<ReleaseResult>;
}

/** Per-acquisition switches (StoreLock only). */
export interface AcquireOptions {
  /** Take the grant even while a fleet-wide failure backoff is active (an explicit `set()` runs no loader). */
  readonly ignoreBackoff?: boolean;
  /** The operation named in a RedisUnavailableError (`'set'` for set()). Default `'acquire'`. */
  readonly operation?: string;
  /**
   * An exclusive grant also reads the entry (up to this many bytes, as the read script does) in the
   * same step, for the rebuilder's re-read: `Grant.takeRead()`. Lockers whose grant is not taken on
   * the store (Redlock) or not exclusive read nothing; the rebuilder then re-reads on its own.
   */
  readonly readUpTo?: number;
}

/** A lock strategy. `acquire` resolves `null` when someone else holds the lock (wait and try again). */
export interface Locker {
  acquire(key: string, keys: EntryKeys, call: ResolvedCall, opts?: AcquireOptions): Promise<Grant | null>;
}
