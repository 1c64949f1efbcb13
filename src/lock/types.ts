import type { EntryKeys } from '../keys.js';
import type { LockMode, ResolvedCall } from '../options.js';
import type { ReleaseOutcome } from './grant.js';

/** What a rebuild announces when it ends without writing: `e` loader failed, `r` released (no value). */
export type ReleaseNote = 'e' | 'r' | 'u' | '';
export const NOTE_OF: Record<ReleaseOutcome, ReleaseNote> = { written: '', empty: 'r', failed: 'e', cancelled: 'r', unstorable: 'u' };

/**
 * One rebuild's right to write a key. Ownership is explicit: whoever acquires a grant releases it
 * in one `finally`; `release()` is idempotent and never throws (a release failure must not mask the
 * loader's own error; the lock then lapses after its TTL).
 */
export interface Grant {
  /** The fencing token: strictly increasing per key across grants, sets and deletes. */
  readonly fence: number;
  /** The random lock token ('' for a fence-only grant). */
  readonly token: string;
  /** The mode this rebuild actually ran under (after any fallback). */
  readonly mode: LockMode;
  /** True when the grant excluded other rebuilders, so re-reading the store after winning pays off. */
  readonly exclusive: boolean;
  /** Aborts with a LockLostError when the grant is known lost (extension refused or lapsed). */
  readonly signal: AbortSignal;
  /** Marks the lock as already freed (the fenced write script releases it atomically). */
  markReleased(): void;
  release(outcome: ReleaseOutcome): Promise<unknown>;
}

/** A lock strategy. `acquire` resolves `null` when someone else holds the lock. */
export interface Locker {
  acquire(key: string, keys: EntryKeys, call: ResolvedCall): Promise<Grant | null>;
}
