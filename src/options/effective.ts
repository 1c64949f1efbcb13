/**
 * Effective values: every rule that combines options into the number or mode actually used is a named
 * pure function here, each with a table test (test/unit/options.test.ts).
 */
import { InvalidOptionError } from '../errors.js';
import { jitteredTtl } from '../entry.js';
import { LOCK_MODES, type LockMode, type LockPolicy } from './public.js';
import type { EntryOverrides, ResolvedCall } from './schema.js';

/** The mode a policy picks for a key; a policy function returning garbage is a typed error. */
export function lockModeFor(policy: LockPolicy, key: string): LockMode {
  const mode = typeof policy === 'function' ? policy(key) : policy;
  if (!(LOCK_MODES as readonly string[]).includes(mode)) {
    throw new InvalidOptionError('lock', mode, `the lock policy to return one of ${LOCK_MODES.join(', ')}`, key);
  }
  return mode;
}

/**
 * Whether a call in lock mode `mode` may have to wait for another process's rebuild: only an exclusive
 * lock (`single`, `redlock`) is ever refused. Fence-only grants (`none`, `local`) are never refused, so
 * such a call never waits on a note and need not wait for its wake subscription (`notes: 'sharded'`).
 */
export function mayWaitOnOthers(mode: LockMode): boolean {
  return mode === 'single' || mode === 'redlock';
}

/** How long an entry outlives its fresh time: the longer of the stale window and the fail-safe window. */
export function graceWindow(staleTtl: number, failSafeTtl: number): number {
  return Math.max(staleTtl, failSafeTtl);
}

/** How long Redis keeps an entry: fresh time plus its grace window. */
export function physicalTtl(ttl: number, staleTtl: number, failSafeTtl = 0): number {
  return ttl + graceWindow(staleTtl, failSafeTtl);
}

/**
 * Which loader timeout applies. With a fallback value at hand (fail-safe) a soft timeout returns it
 * early; otherwise only the hard timeout can end the wait. 0 = no timeout.
 */
export function loaderTimeout(hasFallback: boolean, softTimeout: number, hardTimeout: number): { kind: 'soft' | 'hard' | 'none'; ms: number } {
  if (hasFallback && softTimeout > 0 && (hardTimeout === 0 || softTimeout < hardTimeout)) return { kind: 'soft', ms: softTimeout };
  if (hardTimeout > 0) return { kind: 'hard', ms: hardTimeout };
  return { kind: 'none', ms: 0 };
}

/** How often the watchdog extends a grant: a third of its lifetime, so two extensions may fail before it lapses. */
export function watchdogInterval(lockTtl: number): number {
  return Math.max(1, Math.floor(lockTtl / 3));
}

/** The next fallback poll delay: `pollInterval` jittered to [0.5, 1.5)× and never past the deadline. `rand` is in [0, 1). */
export function pollDelay(pollInterval: number, remainingMs: number, rand: number): number {
  return Math.max(0, Math.min(remainingMs, Math.round(pollInterval * (0.5 + rand))));
}

/** This write's ttl: `ttl` itself without `ttlJitter` (no random draw), else drawn from `ttl × (1 − ttlJitter … 1)`. `rand` is in [0, 1). */
export function writeTtl(call: { readonly ttl: number; readonly ttlJitter: number }, rand: () => number = Math.random): number {
  return call.ttlJitter === 0 ? call.ttl : jitteredTtl(call.ttl, call.ttlJitter, rand());
}

/** How far the breaker's cooldown may grow over `breakerCooldown`: 8 × (×1.5 at most with jitter). */
export const BREAKER_MAX_GROWTH = 8;

/**
 * The open breaker's cooldown after its `openings`-th opening in a row (1 = the first): `base` doubled
 * per repeated opening up to `BREAKER_MAX_GROWTH × base`, then jittered to [0.5, 1.5)×, so probes of
 * many processes (and of one process across openings) never stay in phase with a periodic stall.
 * `rand` is in [0, 1).
 */
export function breakerCooldown(base: number, openings: number, rand: number): number {
  const grown = Math.min(base * 2 ** Math.max(0, openings - 1), base * BREAKER_MAX_GROWTH);
  return Math.max(1, Math.round(grown * (0.5 + rand)));
}

/** How long the breaker must stay closed after a closing before an opening counts as a first one again. */
export function breakerJudgementWindow(base: number): number {
  return 4 * base;
}

/** The opening count for a new opening `closedForMs` after the last closing: it grows within the judgement window, else starts at 1. */
export function breakerOpenings(previous: number, closedForMs: number, base: number): number {
  return closedForMs < breakerJudgementWindow(base) ? previous + 1 : 1;
}

/**
 * The options one entry is written with: the call's, with what its loader set through
 * `ctx.setOptions` in their place. Only that entry is affected; without overrides it is `call` itself.
 */
export function entryCall(call: ResolvedCall, overrides: EntryOverrides | undefined): ResolvedCall {
  if (overrides === undefined) return call;
  return Object.freeze({ ...call, ...overrides });
}
