import { CacheClosedError } from '../errors.js';
import { runLoader, type LoadResult } from '../loader.js';
import { entryCall } from '../options.js';
import type { Trip } from './trip.js';
import { entryTags } from '../tags.js';

/**
 * Redis failed: serve the value this process computed degraded within the last ttl (the memo), or run
 * the loader here (still one per key per process through the flight) and keep its value; no store
 * write. `fillLocal` false: no L1 copy (a key nothing reads L1 under).
 */
export async function degraded(t: Trip, operation: string, error: unknown, fillLocal = true): Promise<unknown> {
  const { key, d } = t;
  if (error instanceof CacheClosedError) throw error; // close(), not a Redis failure
  d.emit('degraded', { key, operation, error });
  t.assertRunning();
  t.current = 'degraded';
  // forceFresh asks for the origin's value: never answered from memory, its load refills the memo.
  const kept = t.call.forceFresh === true ? undefined : d.memo.get(key);
  t.carries(kept?.tags);
  if (kept?.state === 'fresh') return kept.value;
  // A copy past its fresh time answers only where the call allows it, as the store's entry would: at
  // once in its stale window (no refresh: Redis is unavailable), else as the fail-safe fallback.
  if (kept?.state === 'stale' && t.call.staleTtl > 0) return t.serveStale(kept.value, 'window');
  if (kept && t.call.failSafeTtl > 0) t.fallback ??= kept;
  const ticket = d.local.begin(key);
  const memoTicket = d.memo.begin(key);
  d.telemetry.loaderRun();
  let result: LoadResult;
  try {
    result = await runLoader(t.loader, { key, fencingToken: undefined, staleValue: undefined, signals: [t.signal], lifetime: d.lifetime, hardTimeout: t.call.hardTimeout, clock: d.clock });
  } finally {
    // Done running; fill() below follows synchronously (no invalidation can slip in) and still checks the ticket.
    d.memo.abandon(memoTicket);
  }
  if (result.kind !== 'value') {
    if (result.kind !== 'failed') throw result.error;
    d.emit('loaderError', { key, error: result.error });
    return t.failSafe(result.error, 'loaderError');
  }
  t.carries(result.entry.overrides?.tags);
  // The same tags rule as a stored load's (on a Cluster, a loader adds tags only in a call that declares them).
  d.store.assertTaggable(key, t.call.tags, result.entry.overrides?.tags);
  if (result.value !== undefined && !result.entry.skipped) {
    const { ttl } = entryCall(t.call, result.entry.overrides);
    // Its tags go with the L1 copy and the memo's (a tag's note drops them).
    const tags = entryTags(t.call.tags, result.entry.overrides?.tags, key);
    if (fillLocal) d.local.fill(ticket, key, result.value, ttl, undefined, tags);
    d.memo.fill(memoTicket, result.value, ttl, tags);
  }
  d.emit('computed', { key, lock: 'degraded', fence: undefined, loadMs: result.loadMs, written: false });
  return result.value;
}
