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

/** How much of the entry's stale window is left, in ms (0 once only kept for fail-safe). Bounds an L1 stale copy. */
export function staleRemaining(pttl: number, graceMs: number, staleMs: number): number {
  if (pttl < 0) return 0;
  return Math.max(0, staleMs - (graceMs - pttl));
}

/** How much of the entry's fresh time is left, in ms (0 when stale). Bounds how long L1 may hold it. */
export function freshRemaining(pttl: number, graceMs: number): number {
  if (pttl < 0) return Number.POSITIVE_INFINITY;
  return Math.max(0, pttl - graceMs);
}

// ---------------------------------------------------------------- refresh ahead and ttl jitter

/**
 * `refreshAhead` resolved: `0` (off), a fraction of the entry's ttl in (0, 1), or the XFetch form.
 * Kept as the option's own shape so the off case is one `!== 0` comparison on the hit path.
 */
export type RefreshPolicy = number | { readonly beta: number };

/**
 * Deterministic form: has the entry passed its refresh point, i.e. is it older than
 * `refreshAhead × ttlMs`? Its age is `ttlMs − freshLeftMs` (Redis's remaining fresh time, or an L1
 * slot's monotonic remainder), so no writer's clock is involved. `refreshAhead` 0 = never.
 */
export function pastRefreshPoint(ttlMs: number, freshLeftMs: number, refreshAhead: number): boolean {
  if (refreshAhead <= 0) return false;
  // The point in whole ms of age (1000 × (1 − 0.8) is 199.99… in floating point).
  return ttlMs - freshLeftMs >= Math.round(ttlMs * refreshAhead);
}

/**
 * XFetch (Vattani, Chierichetti, Lowenstein, VLDB 2015): refresh early with a probability that rises
 * as expiry nears, scaled by how long the loader took: `−loadMs × beta × ln(rand) ≥ freshLeftMs`.
 * `rand` is uniform in (0, 1] (callers pass `1 − Math.random()`, so ln never sees 0). For an entry whose
 * loader took 0 ms it never fires; `refreshDue` adds a deterministic backstop (XFETCH_BACKSTOP).
 */
export function xfetchDue(loadMs: number, beta: number, freshLeftMs: number, rand: number): boolean {
  return -loadMs * beta * Math.log(rand) >= freshLeftMs;
}

/** What a reader knows of an entry besides its value and freshness. */
export interface EntryFacts {
  /** The fencing token it was written under: a different fence is a different (newer) entry. */
  readonly fence: number;
  /** The ttl it was written with (drawn with `ttlJitter`); `undefined` for entries of format v1/v2. */
  readonly ttlMs: number | undefined;
  /** How long its loader took. */
  readonly loadMs: number;
  /** The refresh-ahead policy its loader chose (`ctx.setOptions`), which overrides the reader's; `undefined` = the reader's applies. */
  readonly refreshAhead?: RefreshPolicy | undefined;
  /** Its tags (docs/tags.md); undefined for an untagged entry. L1 keeps them, so a tag's note drops the copy. */
  readonly tags?: readonly string[] | undefined;
}

/** Which refresh-ahead policy a hit on an entry follows: the entry's own (set by its loader), else the caller's option. */
export function refreshPolicyFor(callPolicy: RefreshPolicy, facts: EntryFacts | undefined): RefreshPolicy {
  return facts?.refreshAhead ?? callPolicy;
}

/**
 * Should this hit start an early refresh? `fallbackTtl` (the caller's ttl) stands in for entries
 * written before the envelope carried their own. `rand` in (0, 1] is read only by the XFetch form.
 */
export function refreshDue(policy: RefreshPolicy, facts: EntryFacts, fallbackTtl: number, freshLeftMs: number, rand: () => number): boolean {
  if (freshLeftMs <= 0) return false;
  const ttl = facts.ttlMs ?? fallbackTtl;
  if (typeof policy === 'number') return pastRefreshPoint(ttl, freshLeftMs, policy);
  // The backstop: the formula alone never fires for a loader time of 0 (set() entries, sub-ms loaders),
  // and such a hot key would then be missed at every expiry.
  return xfetchDue(facts.loadMs, policy.beta, freshLeftMs, rand()) || pastRefreshPoint(ttl, freshLeftMs, XFETCH_BACKSTOP);
}

/** `refreshAhead: { beta }` also refreshes once an entry is this far into its ttl, whatever XFetch drew. */
export const XFETCH_BACKSTOP = 0.9;

/**
 * One write's ttl with `ttlJitter`: drawn from `ttl × (1 − jitter … 1)` with `rand` in [0, 1), an
 * integer of at least 1 ms, so keys written together do not all expire together. Jitter 0 = `ttl`.
 */
export function jitteredTtl(ttl: number, jitter: number, rand: number): number {
  if (jitter <= 0) return ttl;
  return Math.max(1, Math.min(ttl, Math.round(ttl * (1 - jitter * rand))));
}
