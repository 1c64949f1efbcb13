/**
 * The read step: the entry as the store holds it, and what reading it does in this process (L1, the
 * degraded memo, the `hit` event). Every read takes its L1 ticket before it is sent, so a delete or a
 * note that lands while the read is out keeps its stale answer out of L1.
 */
import { freshRemaining, staleRemaining } from '../entry.js';
import type { EntryKeys } from '../keys.js';
import type { Ticket } from '../local-tier.js';
import type { Found, Present } from '../store.js';
import type { ProtocolDeps } from './deps.js';

/** How long a stale value may sit in L1 without the note that ends its window. */
const STALE_L1_MS = 50;

/**
 * Reads the entry; a fresh value is served (a `hit`) and fills L1 — only if no invalidation of the key
 * reached this process while the read was in flight (the ticket is taken before the read is sent).
 * Throws RedisUnavailableError.
 */
export async function readEntry(d: ProtocolDeps, key: string, keys: EntryKeys, sent = d.clock.now(), serves = true): Promise<Found> {
  const ticket = d.local.begin(key);
  return entryRead(d, key, ticket, sent, await d.store.read(key, keys, sent), serves);
}

/**
 * What a read found, once it arrived: fills L1 (if `ticket`, taken before the read was sent, still
 * holds) and reports a hit — unless the reader does not serve what it reads (`serves` false: a
 * `forceFresh` call bypasses the entry it finds).
 */
export function entryRead(d: ProtocolDeps, key: string, ticket: Ticket, sent: number, found: Found, serves = true, local = d.local): Found {
  // A miss: a copy of a value the store held is gone with it (deleted, expired, evicted); a degraded
  // value, never stored, stays. A value: the store is the truth again, every kept copy goes, and one
  // with a stale or fail-safe window is copied so that window still holds while Redis is unavailable.
  if (found.state === 'miss') d.memo.missed(key);
  else {
    d.memo.found(key);
    if (found.graceMs > 0 && found.pttl >= 0) keepCopy(d, key, found, sent);
  }
  if (found.state === 'fresh') {
    // Redis measured PTTL somewhere between `sent` and now: count L1's copy from `sent`, so a slow reply
    // never makes L1 outlive the entry in Redis.
    local.fill(ticket, key, found.value, freshRemaining(found.pttl, found.graceMs) - (d.clock.now() - sent), found);
    if (serves) d.emit('hit', { key, tier: 'redis' });
  } else if (found.state === 'stale') {
    // The stale window is served from L1 too, briefly: the winner's write note drops the copy in every
    // other process, this process's own write replaces it; STALE_L1_MS (and the window's end) bound it.
    local.fillStale(ticket, key, found.value, Math.min(STALE_L1_MS, staleRemaining(found.pttl, found.graceMs, found.staleMs)) - (d.clock.now() - sent), found.tags);
  }
  return found;
}

/** The memo's copy of a value read with a stale or fail-safe window: its windows counted from when the read was sent (never past the entry's). */
function keepCopy(d: ProtocolDeps, key: string, found: Present, sent: number): void {
  const { pttl, graceMs, staleMs } = found;
  const elapsed = d.clock.now() - sent;
  d.memo.copy(key, found.value, freshRemaining(pttl, graceMs) - elapsed, staleRemaining(pttl, graceMs, staleMs) - elapsed, pttl - elapsed, sent, found.tags);
}
