/**
 * The lock-or-wait step: take the key's lock and rebuild, or wait to be woken by the winner (pub/sub,
 * or a short jittered poll) and retry the lock after each wake, until `waitTimeout`; then serve the
 * fail-safe value, throw, or compute under a fence-only grant. A miss behind this process's own
 * background load waits for that load first — within the same `waitTimeout`, counted from the miss.
 */
import { OriginBackoffError, RedisUnavailableError, UnstorableValueError, WaitTimeoutError } from '../errors.js';
import type { Ticket } from '../local-tier.js';
import type { Grant } from '../lock/types.js';
import { mayWaitOnOthers, pollDelay } from '../options.js';
import type { Found } from '../store.js';
import type { Wake } from '../wait.js';
import { degraded } from './degraded.js';
import { entryRead, readEntry } from './read.js';
import { loadWithin, rebuild, valueOf } from './rebuild.js';
import type { Trip } from './trip.js';

/**
 * This process is already loading the key in the background (an early refresh, a rebuild past its soft
 * timeout): wait for it and read again, rather than start a second loader here (lock 'local' would
 * grant one at once). Bounded like any wait: within waitTimeout, and a note on the key (a delete, a
 * set, another process's write) ends it at once — the background load may hang, and could no longer
 * write anyway. Answers (`{ value }`) when the read finds a value, else undefined: go on to the lock.
 */
export async function behindOwnLoad(t: Trip): Promise<{ value: unknown } | undefined> {
  const running = t.d.loads.pending(t.key);
  if (!running) return undefined;
  const waiter = t.d.waiters.register(t.key);
  const hold = t.d.wake.hold(t.key, t.keys);
  try {
    await Promise.race([running, waiter.next(t.call.waitTimeout, t.signal)]);
  } finally {
    waiter.wake('r'); // settles next() and clears its timer if the load finished first
    waiter.dispose();
    hold.release();
  }
  t.assertRunning();
  let found: Found;
  try {
    found = t.saw(await readEntry(t.d, t.key, t.keys));
  } catch (error) {
    return { value: await degraded(t, 'read', error) };
  }
  t.current = 'coalesced'; // answered by this process's own load
  if (found.state === 'fresh') return { value: found.value };
  if (found.state === 'stale') return { value: t.serveStale(found.value, 'window') };
  if (found.state === 'kept') t.fallback = found;
  return undefined;
}

/** Take the lock and rebuild, or wait to be woken by the winner; retry the lock after each wake. */
export async function lockOrWait(t: Trip): Promise<unknown> {
  const { clock, waiters } = t.d;
  const waiter = waiters.register(t.key); // before the first attempt: no notification can slip by
  // Sharded notes: the key's channel is subscribed before the first attempt, for the same reason
  // (bounded by redisTimeout; without it the waiter polls). Held until this trip ends, so a change
  // of the key while this process rebuilds it is heard too (forget(): no later caller joins).
  const hold = t.d.wake.hold(t.key, t.keys);
  const started = t.missedAt ?? clock.now();
  const deadline = started + t.call.waitTimeout;
  try {
    // A fence-only grant is never refused: such a call never waits, so its subscription is not awaited.
    if (mayWaitOnOthers(t.call.lock)) await hold.ready;
    for (let attempt = 0; ; attempt++) {
      t.assertRunning();
      // The store lock reads the entry with its grant (the re-read, in the same step): the L1 ticket
      // is taken before that is sent, as before any read.
      const ticket = t.d.local.begin(t.key);
      const sent = clock.now();
      let grant: Grant | null;
      try {
        grant = await t.d.lockers[t.call.lock].acquire(t.key, t.keys, t.call, { readUpTo: t.d.store.maxValueBytes });
      } catch (error) {
        return await acquireFailed(t, error);
      }
      if (grant) {
        const answer = loadWithin(t, grant, readWithGrant(t, grant, ticket, sent)); // owns the grant from here on
        if (attempt > 0) t.d.emit('waited', { key: t.key, ms: clock.now() - started, outcome: 'took-over' });
        return await answer;
      }
      const remaining = deadline - clock.now();
      if (remaining <= 0) return await waitTimedOut(t, started);
      const woken = await waiter.next(pollDelay(t.call.pollInterval, remaining, Math.random()), t.signal);
      const answered = await afterWake(t, woken, started);
      if (answered) return answered.value;
    }
  } finally {
    waiter.dispose();
    hold.release();
  }
}

/** Woken (or polled): the winner's value, if the store now holds one this call may take; else undefined (try the lock again). */
async function afterWake(t: Trip, woken: Wake, started: number): Promise<{ value: unknown } | undefined> {
  t.assertRunning();
  // The winner's value can never reach this process through Redis: rebuilding in turn would fail the same way.
  if (woken === 'u') throw new UnstorableValueError(t.key, 'reported by the process that ran the loader');
  let found: Found;
  try {
    found = t.saw(await readEntry(t.d, t.key, t.keys));
  } catch (error) {
    return { value: await degraded(t, 'read', error) };
  }
  if ((found.state === 'fresh' || found.state === 'stale') && t.acceptable(found)) {
    t.d.emit('waited', { key: t.key, ms: t.d.clock.now() - started, outcome: found.state === 'fresh' ? 'value' : 'stale' });
    // Another process's load, or this process's own (a forceFresh call, a batch) that held the lock.
    t.current = t.d.telemetry.answeredBy(t.key, found.fence);
    return { value: found.state === 'fresh' ? found.value : t.serveStale(found.value, 'window') };
  }
  if (found.state === 'kept' || (found.state === 'stale' && !t.acceptable(found))) t.fallback = found;
  return undefined;
}

/** `waitTimeout` passed: the fail-safe value, else throw or compute under a fence-only grant (its write still cannot clobber a newer value). */
async function waitTimedOut(t: Trip, started: number): Promise<unknown> {
  t.d.emit('waited', { key: t.key, ms: t.d.clock.now() - started, outcome: 'timeout' });
  if (t.fallback) return t.serveStale(t.fallback.value, 'waitTimeout');
  if (t.call.onWaitTimeout === 'throw') throw new WaitTimeoutError(t.key, t.call.waitTimeout);
  let grant: Grant | null;
  try {
    grant = await t.d.fenceOnly.acquire(t.key, t.keys, t.call);
  } catch (error) {
    return acquireFailed(t, error);
  }
  if (!grant) throw new Error('unreachable: a fence-only grant is never refused');
  return valueOf(t, await rebuild(t, grant, { doneWhen: { kind: 'never' }, staleValue: undefined }));
}

/** An acquire failed: backoff serves the fail-safe value or rethrows; an unreachable store degrades; anything else reaches the caller. */
function acquireFailed(t: Trip, error: unknown): unknown {
  if (error instanceof OriginBackoffError) return t.failSafe(error, 'backoff');
  if (error instanceof RedisUnavailableError) return degraded(t, 'acquire', error);
  throw error;
}

/**
 * The entry the store lock read with `grant` (acquireRead), as the re-read the rebuild makes once it
 * owns the grant: decoded then, filling L1 only if `ticket` (taken before the acquire was sent) still
 * holds. Undefined when nothing was read with the grant: the rebuild re-reads on its own.
 */
function readWithGrant(t: Trip, grant: Grant, ticket: Ticket, sent: number): (() => Found) | undefined {
  let raw = grant.takeRead?.();
  if (raw === undefined) return undefined;
  return () => {
    const found = t.d.store.found(t.key, raw ?? null);
    raw = undefined; // the bytes are not kept for the loader's run
    // A tagged entry is not known valid yet (the rebuild checks its tag records): nothing fills L1 from it here.
    if (found.state !== 'miss' && found.tags !== undefined) return found;
    const serves = t.call.forceFresh !== true || (found.state === 'fresh' && t.acceptable(found));
    // Read on the caller's connection, not the tracked one: under tracking it fills nothing (LocalTier.untracked).
    return entryRead(t.d, t.key, ticket, sent, found, serves, t.d.local.untracked());
  };
}
