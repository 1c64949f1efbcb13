/**
 * The steps under a grant: re-read (someone may have just written) → loader → fenced write → release.
 * Ownership: the grant is released by the one `finally` of `rebuild`, which starts as soon as the
 * acquisition returned, with the outcome it ended with — whatever throws in between.
 */
import { CacheClosedError } from '../errors.js';
import type { EntryKeys } from '../keys.js';
import { runLoader } from '../loader.js';
import type { Grant, ReleaseOutcome } from '../lock/types.js';
import { loaderTimeout } from '../options.js';
import type { Found } from '../store.js';
import type { ProtocolDeps } from './deps.js';
import { readEntry } from './read.js';
import type { Trip } from './trip.js';
import { writeEntry } from './write.js';

/**
 * When the re-read under a grant finds the work already done, so nothing is loaded:
 * - `fresh`: a fresh value (an exclusive grant; for `forceFresh`, only one newer than the entry it
 *   bypassed, `bypassed`: a load that finished between the call's read and its grant);
 * - `changed`: no longer the very entry an early refresh set out to replace (`fence`), still fresh —
 *   or the re-read failed (nothing is known to need refreshing);
 * - `never`: nothing is re-read (a fence-only grant keeps no other process out).
 */
export type DoneWhen =
  | { readonly kind: 'fresh'; readonly bypassed: number | undefined }
  | { readonly kind: 'changed'; readonly fence: number }
  | { readonly kind: 'never' };

/** What a rebuild under a grant is asked to do. */
export interface RebuildPlan {
  readonly doneWhen: DoneWhen;
  /** The loader's `ctx.staleValue`. */
  readonly staleValue: unknown;
  /** The re-read, already made with the grant itself (acquireRead) or with a batch's other keys; else it is read now. */
  readonly reread?: (() => Found | undefined) | undefined;
}

/** How a rebuild under a grant ended: the re-read found the work done (`again`: what it read), or the loader ran. */
export type Ending = { readonly kind: 'done'; readonly again: Found | undefined } | { readonly kind: 'loaded'; readonly value: unknown };

export function doneOnReread(again: Found | undefined, when: DoneWhen): boolean {
  switch (when.kind) {
    case 'never':
      return false;
    case 'fresh':
      return again?.state === 'fresh' && (when.bypassed === undefined || again.fence > when.bypassed);
    case 'changed':
      return again === undefined || again.state !== 'fresh' || again.fence !== when.fence;
  }
}

/** We hold `grant`: re-read, run the loader, write fenced, and release in one `finally` with the outcome. */
export async function rebuild(t: Trip, grant: Grant, plan: RebuildPlan): Promise<Ending> {
  const { d } = t;
  // The grant's release outcome, set as soon as it is known (a fail-safe answer or a throw may follow).
  const release: { outcome: ReleaseOutcome } = { outcome: 'empty' };
  try {
    if (!d.grants.hold(grant) || d.lifetime.aborted) {
      release.outcome = 'cancelled';
      throw new CacheClosedError(t.key);
    }
    if (plan.doneWhen.kind !== 'never') {
      let again = plan.reread ? plan.reread() : await readEntry(d, t.key, t.keys).catch(() => undefined);
      // A tagged entry read with the grant is judged by its tag records first (THE TAG RULE): an
      // invalid one is a miss, and the loader runs. (readEntry's own read is judged already.)
      if (plan.reread && again !== undefined && again.state !== 'miss' && again.tags !== undefined) again = await d.store.vetted(t.key, again, false).catch(() => undefined);
      if (doneOnReread(t.saw(again), plan.doneWhen)) return { kind: 'done', again };
    }
    // Re-checked after the awaits above: close() or every caller leaving meanwhile starts no loader.
    if (d.lifetime.aborted || t.signal.aborted) {
      release.outcome = 'cancelled';
      throw d.lifetime.aborted ? new CacheClosedError(t.key) : t.stopped();
    }
    return { kind: 'loaded', value: await load(t, grant, plan.staleValue, release) };
  } finally {
    d.grants.drop(grant);
    await grant.release(release.outcome);
  }
}

/** Runs the loader under `grant` and writes its value; a failure answers with the fail-safe value or throws. */
async function load(t: Trip, grant: Grant, staleValue: unknown, release: { outcome: ReleaseOutcome }): Promise<unknown> {
  const { d } = t;
  d.telemetry.loaderRun();
  t.current = 'computed';
  const signals = [t.signal, grant.signal];
  const result = await runLoader(t.loader, { key: t.key, fencingToken: grant.fence, staleValue, signals, lifetime: d.lifetime, hardTimeout: t.call.hardTimeout, clock: d.clock });
  switch (result.kind) {
    case 'cancelled':
      release.outcome = 'cancelled';
      // close(): no fail-safe answer either; a background load's report drops CacheClosedError.
      if (result.error instanceof CacheClosedError) throw result.error;
      return t.failSafe(result.error, 'cancelled');
    case 'failed':
      release.outcome = 'failed';
      d.emit('loaderError', { key: t.key, error: result.error });
      return t.failSafe(result.error, 'loaderError');
    case 'invalid':
      // A bad ctx.setOptions is the caller's bug, not the origin's: no fail-safe value hides it, no backoff.
      throw result.error;
    case 'value':
      t.carries(result.entry.overrides?.tags); // the loader's tags (THE JOIN RULE), written or not
      // `undefined` or ctx.skip() means "do not cache": callers get the value, nothing is written, waiters are told to retry.
      if (result.value === undefined || result.entry.skipped) return result.value;
      release.outcome = await writeEntry(t, grant, result.value, result.loadMs, result.entry.overrides);
      return result.value;
  }
}

/**
 * What a caller is answered with: the loaded value, or — the re-read found the work done — the
 * value someone wrote between the call's miss and its grant: another process's load (`waited`),
 * this process's own load (`coalesced`), or its own set() (a plain hit).
 */
export function valueOf(t: Trip, ending: Ending): unknown {
  if (ending.kind === 'loaded') return ending.value;
  const { again } = ending;
  t.current = again !== undefined && again.state !== 'miss' ? t.d.telemetry.answeredBy(t.key, again.fence) : 'waited';
  return again?.state === 'miss' ? undefined : again?.value;
}

const SOFT_TIMEOUT = Symbol('soft timeout');

/**
 * A caller's rebuild under `grant`; with a fail-safe value and a soft timeout, answers with that value
 * once it passes — the rebuild goes on as this process's background load of the key.
 */
export async function loadWithin(t: Trip, grant: Grant, reread: (() => Found | undefined) | undefined): Promise<unknown> {
  const rebuilding = rebuild(t, grant, { doneWhen: t.doneWhen(grant), staleValue: undefined, reread }).then((ending) => valueOf(t, ending));
  const fallback = t.fallback;
  const wait = loaderTimeout(fallback !== undefined, t.call.softTimeout, t.call.hardTimeout);
  if (!fallback || wait.kind !== 'soft') return rebuilding;
  t.d.loads.background(t.key, () => rebuilding);
  let timer: NodeJS.Timeout | undefined;
  try {
    const soft = new Promise<typeof SOFT_TIMEOUT>((resolve) => (timer = setTimeout(() => resolve(SOFT_TIMEOUT), wait.ms)));
    const first = await Promise.race([rebuilding, soft]);
    return first === SOFT_TIMEOUT ? t.serveStale(fallback.value, 'softTimeout') : first;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Runs work that holds its grant already (a background refresh, a batch's won key) with the key's
 * wake channel held (`notes: 'sharded'`), so a change of the key made elsewhere meanwhile is heard as
 * with broadcast notes (an early refresh is abandoned; later callers join no rebuild begun before it).
 * The subscription is not awaited: the grant is held, so no note this work waits for can be missed.
 */
export async function whileHeld<T>(d: ProtocolDeps, key: string, keys: EntryKeys, work: () => Promise<T>): Promise<T> {
  const hold = d.wake.hold(key, keys);
  try {
    return await work();
  } finally {
    hold.release();
  }
}
