/**
 * Refreshes, as background calls of the key (call.ts runs them as its background load: at most one
 * per key per process, none beside another load of the key here, settled by close()):
 * - early (refresh ahead): a hit of a fresh entry past its refresh point refreshes it before it expires;
 * - the stale window's: a stale value was served; the entry is rebuilt if this process wins the lock.
 * Each tries the lock once (a process that loses does nothing: another refreshes) and rebuilds under
 * it like any call (re-read, loader, fenced write, release). What is their own: the hold-offs (how
 * often one entry is tried), and the early refresh's abandonment when its key changes.
 */
import { freshRemaining, refreshDue, refreshPolicyFor, type EntryFacts } from '../entry.js';
import { RedisUnavailableError } from '../errors.js';
import type { Stop } from '../flight.js';
import type { EntryKeys } from '../keys.js';
import type { Loader } from '../loader.js';
import type { Grant } from '../lock/types.js';
import type { ResolvedCall } from '../options.js';
import type { Present } from '../store.js';
import type { RefreshCounted } from '../telemetry.js';
import type { ProtocolDeps, RefreshPath } from './deps.js';
import { rebuild, whileHeld } from './rebuild.js';
import { Trip } from './trip.js';

/** What a hit saw: the value, the entry's facts, and when (monotonic ms) it stops being fresh. */
export interface Seen {
  readonly value: unknown;
  readonly freshUntil: number;
  readonly facts: EntryFacts;
}

/** XFetch's rand in (0, 1]: ln never sees 0. */
const unitInterval = (): number => 1 - Math.random();

/** A trip's fresh hit from the store (`sent`: when its read was sent): the refresh ahead, if the entry asks for one. */
export function refreshAheadOnFresh(t: Trip, found: Present, sent: number): void {
  if (refreshPolicyFor(t.call.refreshAhead, found) === 0) return;
  const seen = { value: found.value, freshUntil: sent + freshRemaining(found.pttl, found.graceMs), facts: found };
  refreshAheadOnHit(t.d, t.key, () => t.keys, t.loader, t.call, seen, t.stop);
}

/**
 * Refresh ahead, on a hit (Redis or L1) of a fresh entry. Callers test `refreshPolicyFor(call.refreshAhead,
 * facts) !== 0` first (the entry's own policy, set by its loader, wins), so the option costs nothing
 * when off; `keysOf` is called only when a refresh starts. If the entry passed its refresh point, this
 * returns at once and refreshes in the background:
 * - one per key per process (no other load of the key here: `own` is the flight of the hit, if any)
 *   and one per key across the fleet: the lock (a process that loses it does nothing) and, under the
 *   grant, a re-read that goes on only if the entry is still the one that was hit (same fence);
 * - a process tries an entry (one fence) once: after a failure, or a refresh that wrote nothing, it
 *   does not try that entry again — the value is served until it expires, and then the miss path
 *   (and fail-safe) apply; after losing the lock, or Redis failing it, it may try again `pollInterval`
 *   later (the winner may fail). With `failBackoff`, a failure stops every process's attempts for that
 *   long. These hold-offs are the early path's own: the stale window's refresh keeps its own.
 */
export function refreshAheadOnHit(d: ProtocolDeps, key: string, keysOf: () => EntryKeys, loader: Loader<unknown>, call: ResolvedCall, seen: Seen, own?: Stop): void {
  const now = d.clock.now();
  if (!refreshDue(refreshPolicyFor(call.refreshAhead, seen.facts), seen.facts, call.ttl, seen.freshUntil - now, unitInterval)) return;
  if (!d.loads.mayRefresh('early', key, seen.facts.fence, now, own) || d.lifetime.aborted) return;
  report(d, key, 'started');
  const keys = keysOf(); // only now: hashing the key is the costliest part of a hit not due
  // Its stop aborts when the key changes (a delete, a set, another process's write): the refresh is
  // abandoned, its write could no longer land or is no longer needed, and its lock would hold callers
  // up until the loader ends — so the loader's result is not awaited past that (abandonable).
  // Its tags as known now (the call's and the entry's): a deleteByTag of one of them abandons it too.
  const tags = call.tags === undefined ? seen.facts.tags : seen.facts.tags === undefined ? call.tags : [...call.tags, ...seen.facts.tags];
  d.loads.background(key, (stop) => earlyRefresh(new Trip(d, key, keys, abandonable(loader, stop.signal), call, stop), seen), tags);
}

function report(d: ProtocolDeps, key: string, outcome: RefreshCounted): void {
  d.telemetry.refresh(outcome);
  d.emit('refresh', { key, outcome });
}

async function earlyRefresh(t: Trip, seen: Seen): Promise<void> {
  const { d, key } = t;
  // Tried once: never again for this entry (fence). Not `seen.freshUntil`: that is a lower bound
  // (counted from when the hit's read was sent), and a later, faster read of the same entry counts
  // it fresh for longer, so a hold-off ending there let a process try the entry again in its last
  // moments. An entry's fresh life is fixed when it is written (nothing extends it), so no fresh hit
  // of it comes after its expiry anyway; another fence ends the hold-off.
  let retryAt = Number.POSITIVE_INFINITY;
  // Redis failing says nothing about the origin: try again soon, not only after the entry expired.
  const soon = (): number => d.clock.now() + t.call.pollInterval;
  try {
    const grant = await acquire(t).catch((error: unknown) => {
      if (error instanceof RedisUnavailableError) retryAt = soon();
      throw error;
    });
    if (!grant) {
      report(d, key, 'lost');
      retryAt = soon();
      return;
    }
    report(d, key, 'won');
    const ending = await whileHeld(d, key, t.keys, () => rebuild(t, grant, { doneWhen: { kind: 'changed', fence: seen.facts.fence }, staleValue: seen.value }));
    if (ending.kind === 'done' && ending.again === undefined) retryAt = soon(); // the re-read failed: nothing is known to be refreshed
    else if (ending.kind === 'done') d.emit('refresh', { key, outcome: 'already-refreshed' });
  } catch (error) {
    // Only the abandonment itself: a loader failure or a bad setOptions that lands as the key changes is still reported.
    if (!(error instanceof RefreshAbandoned)) throw error;
    if (!d.lifetime.aborted) d.emit('refresh', { key, outcome: 'abandoned' });
  } finally {
    d.loads.holdOff('early', key, seen.facts.fence, retryAt);
  }
}

/** A stale value was served (`t` found it): refresh the entry once per key per process, only if this process wins the lock. */
export function refreshStale(t: Trip, stale: Present): void {
  const { d, key } = t;
  if (!d.loads.mayRefresh('stale', key, stale.fence, d.clock.now(), t.stop) || d.lifetime.aborted) return;
  // Not abandoned when the key changes (its stop is the cache's lifetime): its write is fenced like any.
  const refresh = new Trip(d, key, t.keys, t.loader, t.call, { signal: d.lifetime });
  d.loads.background(key, async () => {
    const grant = await acquire(refresh);
    if (grant) await whileHeld(d, key, t.keys, () => rebuild(refresh, grant, { doneWhen: refresh.doneWhen(grant), staleValue: stale.value }));
    // Lost: another process refreshes. This process tries that entry's lock again only after
    // pollInterval (in case the winner fails), not on every stale read of the window.
    else d.loads.holdOff('stale', key, stale.fence, d.clock.now() + t.call.pollInterval);
  });
}

/** A refresh tries the lock once, without waiting. */
function acquire(t: Trip): Promise<Grant | null> {
  return t.d.lockers[t.call.lock].acquire(t.key, t.keys, t.call);
}

/**
 * The loader, settling at once (rejecting with the signal's reason) when `signal` aborts: the rebuild
 * then releases its grant with 'cancelled' (waiters elsewhere retry the lock) without waiting for a
 * loader that ignores its `ctx.signal`. The loader's own late result is dropped.
 */
function abandonable(loader: Loader<unknown>, signal: AbortSignal): Loader<unknown> {
  return (ctx) =>
    new Promise((resolve, reject) => {
      const onAbort = (): void => reject(signal.reason as Error); // always a RefreshAbandoned
      signal.addEventListener('abort', onAbort, { once: true });
      Promise.resolve()
        .then(() => loader(ctx))
        .then(resolve, reject)
        .finally(() => signal.removeEventListener('abort', onAbort));
    });
}

/** Why an abandoned refresh stopped (its loader's `ctx.signal.reason`); never reaches a caller or an event. */
export class RefreshAbandoned extends Error {
  constructor(readonly key: string) {
    super(`the early refresh of ${JSON.stringify(key)} was abandoned: the key changed while it ran`);
    this.name = 'RefreshAbandoned';
  }
}

/** How many keys' hold-offs are remembered per path; forgetting one costs one more attempt, never a wrong value. */
const MAX_HELD_OFF = 10_000;

/**
 * Refreshes this process will not start, per path: per key, the entry (fence) already tried and until
 * when (monotonic ms; Infinity: for good). A record for another fence, or past its time, is obsolete.
 * One map per path: an entry stays one fence from fresh to stale, and an early refresh that failed
 * while it was fresh must not stop the stale window's refresh of it. Each bounded.
 */
export class HoldOffs {
  private readonly tried: Record<RefreshPath, Map<string, { readonly fence: number; readonly until: number }>> = { early: new Map(), stale: new Map() };

  /** Records that the entry `fence` of `key` was tried on `path`: no refresh of it there before `until`. */
  holdOff(path: RefreshPath, key: string, fence: number, until: number): void {
    const tried = this.tried[path];
    tried.delete(key);
    if (tried.size >= MAX_HELD_OFF) tried.delete(tried.keys().next().value as string);
    tried.set(key, { fence, until });
  }

  /** Is a refresh of the entry `fence` of `key` on `path` held off at `now`? */
  heldOff(path: RefreshPath, key: string, fence: number, now: number): boolean {
    const tried = this.tried[path];
    const t = tried.get(key);
    if (!t) return false;
    if (t.fence === fence && now < t.until) return true;
    tried.delete(key);
    return false;
  }
}
