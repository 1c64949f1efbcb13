/**
 * Freshness math. Pure: derived from the remaining TTL Redis itself reports (PTTL), so two
 * machines whose clocks disagree still agree on whether an entry is fresh.
 */
export type EntryState = 'fresh' | 'stale';

/**
 * Physical TTL = ttl + staleMs. While more than `staleMs` remains the entry is fresh; inside the last
 * `staleMs` it is stale. A key without expiry (PTTL -1, only if someone wrote it by hand) counts as fresh.
 */
export function entryState(pttl: number, staleMs: number): EntryState {
  if (pttl < 0) return 'fresh';
  return pttl > staleMs ? 'fresh' : 'stale';
}

/** How much of the entry's fresh time is left, in ms (0 when stale). Bounds how long L1 may hold it. */
export function freshRemaining(pttl: number, staleMs: number): number {
  if (pttl < 0) return Number.POSITIVE_INFINITY;
  return Math.max(0, pttl - staleMs);
}
