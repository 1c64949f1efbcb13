/**
 * Freshness math. Pure: derived from the remaining TTL Redis itself reports (PTTL), so two
 * machines whose clocks disagree still agree on whether an entry is fresh.
 */
export type EntryState = 'fresh' | 'stale' | 'kept';

/**
 * Physical TTL = ttl + graceMs (graceMs = max(staleTtl, failSafeTtl)). While more than `graceMs`
 * remains the entry is fresh; for the first `staleMs` after that it is stale (served at once while one
 * process refreshes); after that it is only kept, as the fail-safe fallback when the loader fails.
 * A key without expiry (PTTL -1, only if someone wrote it by hand) counts as fresh.
 */
export function entryState(pttl: number, staleMs: number, graceMs = staleMs): EntryState {
  if (pttl < 0 || pttl > graceMs) return 'fresh';
  return graceMs - pttl < staleMs ? 'stale' : 'kept';
}

/** How much of the entry's fresh time is left, in ms (0 when stale). Bounds how long L1 may hold it. */
export function freshRemaining(pttl: number, graceMs: number): number {
  if (pttl < 0) return Number.POSITIVE_INFINITY;
  return Math.max(0, pttl - graceMs);
}
