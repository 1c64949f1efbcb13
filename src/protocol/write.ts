import { UnstorableValueError } from '../errors.js';
import type { Grant, ReleaseOutcome } from '../lock/types.js';
import { entryCall, writeTtl, type EntryOverrides } from '../options.js';
import type { Trip } from './trip.js';
import { entryTags } from '../tags.js';

/**
 * The fenced write of a loaded value, and the notify: the write script stores the value only if no
 * newer grant exists, releases the lock and publishes the outcome, in one step. Never throws; returns
 * how the grant ends. L1 keeps this process's copy only if the fence accepted it.
 */
export async function writeEntry(t: Trip, grant: Grant, value: unknown, loadMs: number, overrides: EntryOverrides | undefined): Promise<ReleaseOutcome> {
  const { d, key } = t;
  if (d.lifetime.aborted) return 'cancelled'; // closed while loading: write nothing
  const ticket = d.local.begin(key);
  d.memo.invalidate(key); // this process's own write: an older degraded copy must not outlive it
  let outcome: ReleaseOutcome;
  let written = false;
  // The loader's ctx.setOptions apply to this entry only.
  const call = entryCall(t.call, overrides);
  const refreshAhead = overrides?.refreshAhead;
  // The call's tags and its loader's together (THE TAG RULE judges them all against the grant).
  const tags = entryTags(t.call.tags, overrides?.tags, key);
  const ttl = writeTtl(call);
  // Redis counts the ttl from when it ran the write: L1's copy starts counting when it was sent.
  const sent = d.clock.now();
  try {
    d.telemetry.ownWrite(key, grant.fence, 'load');
    written = (await d.store.write(key, t.keys, grant, value, call, loadMs, 'w', ttl, refreshAhead, tags)) === 'accepted';
    const freshMs = ttl - (d.clock.now() - sent);
    // A tag note heard since the trip began (an expireByTag lets the write land): no fresh copy here.
    const fresh = written && !d.heard.reachedSince(t.heardAt, key, tags);
    d.local.written(ticket, key, value, freshMs, fresh, { fence: grant.fence, ttlMs: ttl, loadMs: Math.round(loadMs), refreshAhead, tags });
    if (!written) {
      d.telemetry.writeRejected();
      d.emit('writeRejected', { key, fence: grant.fence });
    }
    outcome = 'written'; // the write script released the lock and announced the outcome
  } catch (error) {
    if (error instanceof UnstorableValueError) {
      d.emit('unstorable', { key, reason: error.reason, error });
      outcome = 'unstorable';
    } else {
      d.emit('degraded', { key, operation: 'write', error });
      outcome = 'empty';
    }
  }
  d.emit('computed', { key, lock: grant.mode, fence: grant.fence, loadMs, written });
  return outcome;
}
