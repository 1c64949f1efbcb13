/**
 * The public option types, each option documented once here (TSDoc, with its default). The schema in
 * `schema.ts` must list exactly these names: its `satisfies` clauses and test/types/options.test.ts
 * fail when the two differ.
 */
import type { RedisClient } from '../redis-types.js';

/**
 * How a key's rebuild is coordinated.
 * - `none`: plain cache-aside; every missing call runs the loader (the baseline).
 * - `local`: one loader per key per process (in-process single-flight only).
 * - `single`: one loader per key across every process, via a lock on the store's Redis (an efficiency lock).
 * - `redlock`: as `single`, but the lock needs a quorum of independent Redis masters (`redlock.nodes`).
 */
export type LockMode = 'none' | 'local' | 'single' | 'redlock';
export const LOCK_MODES: readonly LockMode[] = ['none', 'local', 'single', 'redlock'];

/** A lock mode, or a function choosing one from the key (evaluated on every call). */
export type LockPolicy = LockMode | ((key: string) => LockMode);

/** What a caller that waited `waitTimeout` without seeing a value does next. */
export type OnWaitTimeout = 'compute' | 'throw';

/**
 * Refresh ahead: a fraction of `ttl` in (0, 1), `0` = off; or `{ beta }` for probabilistic early
 * refresh (XFetch) using how long the entry's loader took. See `CallOptions.refreshAhead`.
 */
export type RefreshAhead = number | { beta: number };

/** Monotonic milliseconds. Injectable so unit tests can use fake timers. */
export interface Clock {
  now(): number;
}
export const systemClock: Clock = { now: () => performance.now() };

/**
 * Options accepted per call and, as cache-wide defaults, in `createCache({ defaults })`.
 *
 * An options object is read afresh on every call, and resolved (validated, merged over the defaults,
 * frozen) once per shape: its own enumerable options and their values, less the value of `signal`.
 * So a new literal per call costs what a bare ttl does, and:
 * - `signal` is per call: checked and attached to each call alone, never remembered;
 * - a reused object mutated later is read with its new values on its next call: a new shape,
 *   validated on first sight (a bad value is an `InvalidOptionError` before any Redis traffic); a call
 *   already started keeps what it read;
 * - a lock policy that is a function of the key (`createCache({ lock })` or `defaults.lock`) is called
 *   on every call with its key; a function or object value given per call (`lock`, `refreshAhead`)
 *   makes that call resolve in full instead;
 * - a cache remembers at most 256 shapes (the oldest is forgotten first). See docs/options.md.
 */
export interface CallOptions {
  /** Fresh time in ms (a positive integer). No default: give it per call or in `defaults`. */
  ttl?: number;
  /** How long after `ttl` a stale value may still be served (at once) while one process refreshes it, in ms. Default `0` (no stale serving). */
  staleTtl?: number;
  /** Lock mode or per-key policy. Default `'single'`. */
  lock?: LockPolicy;
  /** Lifetime of a rebuild lock grant in ms; a watchdog extends it every `lockTtl / 3` while the loader runs. Default `10000`. */
  lockTtl?: number;
  /** Longest time a caller waits for another process's rebuild, in ms. Default `5000`. */
  waitTimeout?: number;
  /** After `waitTimeout`: `'compute'` runs the loader anyway (fenced), `'throw'` rejects with `WaitTimeoutError`. Default `'compute'`. */
  onWaitTimeout?: OnWaitTimeout;
  /** Fallback poll interval while waiting, in ms, jittered ±50%; waiters are normally woken by pub/sub first. Default `250`. */
  pollInterval?: number;
  /** The caller's AbortSignal: aborting it rejects this call with `AbortedError` (ERR_ABORTED). Default none. */
  signal?: AbortSignal;
  /** Fail-safe: how long after `ttl` an expired value is kept, to be served (flagged stale) when the loader fails or times out, in ms. Default `0` (off). */
  failSafeTtl?: number;
  /** After a loader failure, no process calls the loader for this key for this long (fleet-wide, kept in Redis), in ms. Default `0` (off). */
  failBackoff?: number;
  /** With a fallback value at hand (fail-safe), return it after this many ms of loading; the loader finishes in the background and still fills the cache. Default `0` (off). */
  softTimeout?: number;
  /** A loader running longer than this fails its callers with `LoaderTimeoutError`; its signal aborts and the lock is released, in ms. Default `0` (off). */
  hardTimeout?: number;
  /**
   * Refresh ahead. A number `r` in (0, 1): a hit (Redis or L1) on an entry older than `r × ttl` (the
   * entry's own ttl) returns the value at once and starts one background refresh — at most one per key
   * per process, and one per key across the fleet (the rebuild's lock and fence; a process that loses
   * the lock does nothing). `{ beta }` (beta > 0; 1 is XFetch's usual choice): each hit refreshes with a
   * probability rising towards expiry, `−loadMs × beta × ln(rand) ≥ fresh time left`, where `loadMs` is
   * the entry's last loader time. Only hits trigger it: a key nobody reads is never refreshed. A failed
   * refresh leaves the value served until it expires (then the miss path and fail-safe apply) and is
   * not retried by this process before then. Default `0` (off; the hit path does no extra work).
   */
  refreshAhead?: RefreshAhead;
  /**
   * A fraction in [0, 1): each write's ttl is drawn uniformly from `ttl × (1 − ttlJitter … 1)`, so keys
   * written together do not all expire together. The drawn ttl is kept in the entry (the refresh point
   * and L1 follow it). Default `0` (every write gets exactly `ttl`).
   */
  ttlJitter?: number;
  /**
   * Run the loader now, whatever the cache holds: L1 and a fresh or stale value in Redis are not served,
   * and the re-read under the lock accepts only an entry newer than the one bypassed. Still coalesced (concurrent `forceFresh` calls on the key
   * in one process share one load), locked and fenced like any rebuild. If another process holds the
   * key's lock, the call waits for it and takes only a value written after this call's own read (a
   * newer fence), never the entry it bypassed. Per call only. Default none (`false`).
   */
  forceFresh?: boolean;
  /**
   * Tags of the entry this call writes (its loader may add more with `ctx.setOptions({ tags })`):
   * `cache.deleteByTag(tag)` then invalidates it, with every other entry carrying the tag, in every
   * process. At most 32 tags per entry, each a non-empty string of at most 256 characters
   * (`InvalidOptionError` otherwise, before any Redis traffic). Per call
   * only. Default none. See docs/tags.md.
   */
  tags?: readonly string[];
}

/**
 * What a loader may set for the entry it is about to write, with `ctx.setOptions()`: validated like the
 * call options of the same names, and applied to that one entry only (the call's options and the
 * cache defaults are unchanged). Every process reads the entry as written: its fresh time, its stale
 * and fail-safe windows, and its refresh-ahead policy (which overrides the reader's own option).
 * `tags` are added to the call's own (the entry carries both).
 */
export type EntryOptions = Pick<CallOptions, 'ttl' | 'staleTtl' | 'failSafeTtl' | 'refreshAhead' | 'tags'>;

/** The optional in-process L1 tier. */
export interface LocalTierOptions {
  /** Most entries kept (lru-cache `max`). Required. */
  max: number;
  /**
   * What drops another process's change from this process's L1. `'notes'`: the cache's own notes (a
   * write or delete publishes one that every process hears). `'tracking'`: the Redis server itself
   * (`CLIENT TRACKING` on a connection of the cache's own that makes the reads filling L1, redirected
   * to its subscriber connection): a copy is dropped when any client changes its key, whoever wrote
   * it. Allows L1 with `notes: 'sharded'`. Needs Redis 6+, a standalone client (a Cluster client is
   * refused for now) and, with ACLs, `client|tracking`, `client|id` and the channel
   * `__redis__:invalidate`; opens two more connections per cache. See docs/tracking.md. Default `'notes'`.
   */
  invalidation?: LocalInvalidation;
}

/** What invalidates L1 copies (`LocalTierOptions.invalidation`). */
export type LocalInvalidation = 'notes' | 'tracking';

/** What a redlock acquisition does when no quorum of nodes answers. */
export type OnNoQuorum = 'throw' | 'single' | 'local';

/** Redlock: a quorum over N independent Redis masters (not replicas). */
export interface RedlockOptions {
  /**
   * Clients of independent masters, owned by the caller; at least 3 (odd numbers recommended). Each
   * may be ioredis or node-redis (mixed families are fine). Required.
   */
  nodes: RedisClient[];
  /** Clock drift allowance as a fraction of lockTtl (plus 2 ms). Default `0.01`. */
  driftFactor?: number;
  /** Extra attempts after a split vote or an expired validity; a vote still split after the last one waits like any loser (it is not "no quorum"). Default `3`. */
  retryCount?: number;
  /** Base delay between attempts, ms. Default `200`. */
  retryDelay?: number;
  /** Random extra delay added to each retry, up to this many ms. Default `100`. */
  retryJitter?: number;
  /** Longest wait for one node's answer, ms; a hanging node costs at most this. Default `100`. */
  nodeTimeout?: number;
  /** No quorum reachable: `'throw'` NoQuorumError, or run under `'single'` (the store's lock) or `'local'`. Default `'local'`. */
  onNoQuorum?: OnNoQuorum;
}

/** `createCache({ replicaAck })`. */
export interface ReplicaAckOptions {
  /** Replicas that must acknowledge each grant, accepted write and delete. Required. */
  replicas: number;
  /** Longest wait for their acknowledgement, in ms (`WAIT`'s timeout); below `redisTimeout`. Required. */
  timeout: number;
}

/** `createCache` options. Unknown names are an `InvalidOptionError`, not silently ignored. */
export interface CacheOptions {
  /**
   * An ioredis `Redis` or `Cluster` (5 or 6), or a node-redis `createClient()` or `createCluster()`
   * (5 or 6) that you connected; owned by the caller. Required. Never quit by the cache; duplicated
   * once for pub/sub (a node-redis duplicate is connected by the cache).
   */
  redis: RedisClient;
  /** Key namespace; must not contain `{` or `}`. Default `'sg'`. */
  prefix?: string;
  /** The in-process L1 tier; `false` or omitted turns it off. Default `false`. */
  local?: LocalTierOptions | false;
  /** Cache-wide defaults for every per-call option but `signal` (which is per call). */
  defaults?: Omit<CallOptions, 'signal'>;
  /**
   * Longest time any single Redis operation may take before the call degrades, in ms. Default `500`.
   * An operation unanswered this long while its node answered nothing else makes the node suspect:
   * nothing more is sent to it (calls answer from memory at once) until it answers a background probe
   * (one at a time). So is a node the subscriber's heartbeat finds silent while it answered none of
   * the cache's own operations since (not on a Cluster).
   * A stall of this process (a GC pause, synchronous work) that delays the timeout sweep by more than
   * a quarter of it is not counted against operations in flight (up to 2 × `redisTimeout` each), and
   * replies that arrived meanwhile are read before any operation is timed out.
   */
  redisTimeout?: number;
  /** Longest accepted key, in UTF-16 code units. Default `1024`. */
  maxKeyLength?: number;
  /** Entries larger than this (bytes) are never decoded: treated as a miss and reported. Default `1048576` (1 MiB). */
  maxValueBytes?: number;
  /**
   * Consecutive failures on one Redis node that open that node's circuit breaker (the node is then
   * skipped for a cooldown). One breaker per node: per slot owner on a Cluster, per Redlock node. Default `5`.
   */
  breakerThreshold?: number;
  /**
   * The base cooldown of an open breaker, in ms, before one probe is let through: jittered to
   * [0.5, 1.5)× and doubled for each reopening within 4 × this of the last closing, up to 8×, so probes
   * never stay in phase with a periodic stall. Ended early by the client's `ready` event. Default `1000`.
   */
  breakerCooldown?: number;
  /** Callers of one key in one process beyond this get a fast `TooManyWaitersError`. Default `10000`. */
  maxWaitersPerKey?: number;
  /**
   * While Redis is unavailable for a key, the value its loader returned here is kept in process memory
   * for its `ttl` and served to later degraded calls, so a process runs at most one loader per key per
   * ttl during an outage (with L1 on or off). Copies of the store's values join it, in an LRU of the
   * same size of their own: L1's fresh copies when L1's subscription is lost, and the last value read
   * for a key with `staleTtl` or `failSafeTtl` (served past its fresh time only to calls that allow it).
   * While Redis is unavailable for a key (a failed operation, or its node suspect or breaker open) it
   * answers first, on every entry point but `forceFresh`. This caps how many keys are kept (LRU); `0` turns it off.
   * A kept value is never served once this process deleted, set or rebuilt the key, heard of another
   * process's write or delete, read a value for the key from the store, or an outage ended (see docs/guarantees.md
   * "Guarantees"). Default `10000`.
   */
  degradedMemo?: number;
  /** Monotonic clock. Default `performance.now()`. */
  clock?: Clock;
  /** The cache-wide lock policy (same as `defaults.lock`; give one or the other). Default `'single'`. */
  lock?: LockPolicy;
  /** Redlock nodes and tuning; required for lock mode `'redlock'`. Default none. */
  redlock?: RedlockOptions;
  /**
   * Opt-in replication acknowledgement: after every grant, accepted write and delete, `WAIT replicas
   * timeout` on the connection that ran it (on a Cluster, the slot's master). One that fewer replicas
   * acknowledged in time is not trusted: a grant is released and the call runs its loader degraded (not
   * stored), a write's value reaches its callers but is not kept in L1, `set()`/`delete()` reject with
   * `RedisUnavailableError` (failure `'replicaAck'`). With it, the fence tokens served for a key never
   * repeat or go backwards across a failover to a replica among those that acknowledged (see docs/guarantees.md
   * "Guarantees"). `timeout` must be below `redisTimeout`. Default none (off: no `WAIT`, no cost).
   */
  replicaAck?: ReplicaAckOptions;
  /** Accept clients whose TLS options set `rejectUnauthorized: false` (certificate not verified). Default `false`: such clients are refused. */
  allowInsecureTls?: boolean;
  /**
   * Where a key's notes (written, set, deleted, released, failed) go. `'broadcast'`: the cache's one
   * channel, which every process hears. `'sharded'`: the key's own wake channel (in its hash slot:
   * `SPUBLISH`, so on a Cluster a note stays in its shard; `PUBLISH` on servers before Redis 7.0), which
   * a process subscribes to only while it waits on or rebuilds the key, so a process no longer handles
   * the notes of every key. Clears stay on the broadcast channel. `'sharded'` requires `local: false`
   * (L1 needs every change) or `local.invalidation: 'tracking'` (the server drops L1 copies), and must be the same in every process of a `prefix`: a process on
   * `'broadcast'` misses the notes of one on `'sharded'` (its waiters fall back to polling, its L1 and
   * degraded copies are not dropped). See docs/operations.md, "Sharded notes". Default `'broadcast'`.
   */
  notes?: Notes;
}

/** Where key notes go (`CacheOptions.notes`). */
export type Notes = 'broadcast' | 'sharded';
