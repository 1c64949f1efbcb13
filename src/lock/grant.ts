import type { EntryKeys } from '../keys.js';
import type { NoteKind } from '../wait.js';
import type { LockDeps } from './single.js';
import type { Grant, ReleaseOutcome, ReleaseResult } from './types.js';

/**
 * The note kind that announces an unstorable value: "the loader's value cannot be stored; do not
 * rebuild in turn". The pub/sub module parses it; until then subscribers ignore it and poll.
 */
const UNSTORABLE = 'u' as NoteKind;

/** What the store is told for one outcome: the note to publish (none: nothing to announce) and whether to set the backoff. */
interface Announcement {
  readonly note: NoteKind | undefined;
  readonly backoff: boolean;
}

/**
 * The one mapping from a rebuild's outcome to the store's release note. A cancelled load wakes
 * waiters like an empty one and sets no backoff: a client going away is not an origin failure.
 */
const ANNOUNCE: Readonly<Record<ReleaseOutcome, Announcement>> = Object.freeze({
  written: { note: undefined, backoff: false }, // the fenced write script already released and published
  empty: { note: 'r', backoff: false },
  failed: { note: 'e', backoff: true },
  cancelled: { note: 'r', backoff: false },
  unstorable: { note: UNSTORABLE, backoff: false },
});

/** True when the outcome needs nothing from the store (the write script did it all). */
export function silentInStore(outcome: ReleaseOutcome): boolean {
  return ANNOUNCE[outcome].note === undefined;
}

/**
 * The store side of a release: compare-and-delete our lock (token '' frees nothing), set the
 * failure backoff, announce the outcome. Resolves the script's answer (1 freed, 0 not ours), or
 * undefined when Redis did not answer. Never throws.
 */
export async function announceInStore(deps: LockDeps, key: string, keys: EntryKeys, token: string, outcome: ReleaseOutcome, failBackoffMs: number, lockTtl = 0): Promise<number | undefined> {
  const { io, scripts, notes } = deps;
  const { note, backoff } = ANNOUNCE[outcome];
  const message = note === undefined ? '' : notes.message(note, key);
  const send = (note: string, backoffMs: number): Promise<number> => io.run('release', () => scripts.release(keys.lock, keys.backoff, token, notes.channel(keys), note, backoffMs), key);
  return send(message, backoff ? failBackoffMs : 0).catch(() => {
    // Unanswered (connection error, timeout, open breaker): our lock may still be held. Release it
    // again, by token, once Redis answers; its note ('r': re-read) then wakes the waiters, who take
    // over at once instead of waiting out the lease. Not the original note: by then a `u` or an `e`
    // is old news (another rebuild may have stored a value). The backoff is not sent again either
    // (its window counts from the failure).
    if (token !== '' && deps.retries) deps.retries.add(`${keys.lock}\n${token}`, deps.clock.now() + lockTtl, () => send(notes.message('r', key), 0));
    return undefined;
  });
}

/** How many unanswered releases are kept for a retry; the oldest is dropped first (its lock then lapses by its lease). */
const MAX_RETRIES = 10_000;

/**
 * Releases Redis did not answer, sent again (by token: never another holder's lock) whenever Redis
 * answers an operation again or the client reconnects (`flush`). Invariants: a retry is kept until it
 * is answered or its lock's lease has certainly lapsed (`until`: the lease counted from the failed
 * release, later than any extension could have pushed it); at most one send per retry is in flight.
 */
export class ReleaseRetries {
  private readonly pending = new Map<string, { readonly until: number; readonly send: () => Promise<unknown>; sending: boolean }>();

  constructor(private readonly clock: { now(): number }) {}

  get size(): number {
    return this.pending.size;
  }

  add(id: string, until: number, send: () => Promise<unknown>): void {
    if (this.pending.size >= MAX_RETRIES) this.pending.delete(this.pending.keys().next().value as string);
    this.pending.set(id, { until, send, sending: false });
  }

  /** Sends every kept release again; an answered one is done, an unanswered one waits for the next flush. */
  flush(): void {
    const now = this.clock.now();
    for (const [id, retry] of this.pending) {
      if (now >= retry.until) {
        this.pending.delete(id);
        continue;
      }
      if (retry.sending) continue;
      retry.sending = true;
      retry.send().then(
        () => this.pending.delete(id),
        () => void (retry.sending = false),
      );
    }
  }

  clear(): void {
    this.pending.clear();
  }
}

/**
 * Makes a release happen once: the first call runs it, every later call gets the same result and
 * sends nothing. A release that throws (it should not) reads as 'unknown'.
 */
export class ReleaseOnce {
  private result: Promise<ReleaseResult> | undefined;

  get done(): boolean {
    return this.result !== undefined;
  }

  run(release: () => Promise<ReleaseResult>): Promise<ReleaseResult> {
    this.result ??= (async () => release())().catch((): ReleaseResult => 'unknown');
    return this.result;
  }
}

/**
 * The grants a cache holds right now. A grant is registered the moment it is acquired and dropped
 * after its release, so close() can release every one of them — including loaders that ignore their
 * signal — and no grant outlives the cache with a watchdog extending it forever.
 */
export class GrantRegistry {
  /** Invariant: holds exactly the grants acquired and not yet dropped or released by close(); empty once close() resolved. */
  private readonly held = new Set<Grant>();
  private closing: Promise<void> | undefined;
  private finished = false;

  get size(): number {
    return this.held.size;
  }

  get closed(): boolean {
    return this.closing !== undefined;
  }

  /**
   * Registers a grant. False once close() was called: the caller must not start a loader and must
   * release it at once with 'cancelled'. While close() is still awaiting releases such a grant is
   * registered anyway, so close() also releases it and resolves only after that release settled
   * (the caller's own release is the same, idempotent one).
   */
  hold(grant: Grant): boolean {
    if (!this.finished) this.held.add(grant);
    return this.closing === undefined;
  }

  drop(grant: Grant): void {
    this.held.delete(grant);
  }

  /**
   * Refuses new grants and releases every held one with 'cancelled', looping until none is left
   * (grants registered while releases are awaited are released in the next round). Idempotent: a
   * second call returns the first call's promise.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      while (this.held.size > 0) {
        const batch = [...this.held];
        this.held.clear();
        await Promise.all(batch.map((g) => g.release('cancelled')));
      }
      this.finished = true;
    })();
    return this.closing;
  }
}
