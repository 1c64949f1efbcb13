import { LRUCache } from 'lru-cache';
import { clusterReceivers } from './clear.js';
import { InvalidOptionError, RedisUnavailableError } from './errors.js';
import type { Io } from './io.js';
import type { OwnKey } from './node-of.js';
import type { Clock } from './options.js';
import type { LoaderContext } from './loader.js';
import { singleKeyContext, type BatchLoader } from './many.js';
import type { DegradedMemo } from './degraded-memo.js';
import type { CallOptions, EntryOptions } from './options.js';
import { script, type RedisPort } from './client/port.js';
import { tagsToDelete } from './options/fields.js';
import type { TagInvalidation } from './tags.js';

/**
 * Namespaces: a view of a cache with its own key space, cleared in O(1) by a generation counter.
 *
 * A key `k` of the namespace path `users/admins` is stored under the internal cache key
 *   `\0` depth `\0` `users` `\0` g(users) `\0` `admins` `\0` g(users/admins) `\0` k
 * where g(p) is the current generation of path p, a counter in Redis at `<prefix>:ns:{<p>}` — created
 * from the server's TIME in µs when missing, never from 0 (SEED_GENERATION: a lost counter must not
 * bring back the generations it had passed).
 * Invariants:
 * - injective: user keys of the cache itself may not start with `\0` (InvalidKeyError), segment names
 *   contain no `\0`, the depth fixes how many (name, generation) pairs precede the key, and the key is
 *   the rest — so two (path, generations, key) triples never share an internal key, nor with a plain key;
 * - clear(p) increments g(p) (and so changes the internal key of every key of p and of every namespace
 *   nested in it): entries written before it are never found again, in Redis or in any L1, and a rebuild
 *   that started before it writes under the old internal key, where no later call looks. The old entries
 *   are not deleted: each expires by its own TTL (the cost of a clear is O(1); the memory is freed
 *   amortised, per key, by expiry);
 * - a process trusts its cached g(p) only while its subscription holds (the clear's note drops it); while
 *   the subscription is down (or before its first success) every operation reads g(p) from Redis, and
 *   every (re-)subscription drops the whole cache, since notes sent while away are lost.
 */

/** How a namespace path is named in notes and Redis: its segments joined by `/` (segments contain none). */
export type PathId = string;

/** A namespace name: 1–128 characters of letters, digits and `_ - . :` (no `/`, no braces, no `\0`). */
const NAME = /^[A-Za-z0-9_.:-]{1,128}$/;

export function validateNamespace(name: unknown): asserts name is string {
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new InvalidOptionError('namespace', name, 'a name of 1 to 128 letters, digits, "_", "-", "." or ":"');
  }
}

/** The internal cache key of `key` in the namespace `segments` under their current `generations`. */
export function namespacedKey(segments: readonly string[], generations: readonly number[], key: string): string {
  let out = `\0${segments.length}`;
  for (let i = 0; i < segments.length; i++) out += `\0${segments[i] as string}\0${generations[i] as number}`;
  return `${out}\0${key}`;
}

/** The namespace path segments and the user key of an internal key (namespacedKey's inverse), or undefined for a plain key. */
export function parseNamespacedKey(internal: string): { readonly segments: string[]; readonly key: string } | undefined {
  if (!internal.startsWith('\0')) return undefined;
  const parts = internal.split('\0'); // '', depth, (name, generation) × depth, then the key (which may hold \0)
  const depth = Number(parts[1]);
  if (!Number.isInteger(depth) || depth < 1 || parts.length < 3 + 2 * depth) return undefined;
  const segments = Array.from({ length: depth }, (_, i) => parts[2 + 2 * i] as string);
  return { segments, key: parts.slice(2 + 2 * depth).join('\0') };
}

/**
 * The degraded memo as the cache uses it: an invalidation of a namespaced internal key (this process's
 * delete, set or rebuild write, another process's note, a store read that found a value) also drops
 * the copy kept under its degraded-path key (Generations.unknown), which no note names, and detaches
 * a degraded load of it in progress (`forget`), so no later call joins a load older than the change.
 * Only while the memo holds or runs something: otherwise there is nothing to reach, and the hot path
 * (a store read finding a value) pays a `startsWith` and one check.
 */
export function withDegradedKeys(memo: DegradedMemo, degradedKeyOf: (internal: string) => string | undefined, forget: (key: string) => void): DegradedMemo {
  return {
    get: (key) => memo.get(key),
    begin: (key) => memo.begin(key),
    fill: (ticket, value, ttlMs, tags) => memo.fill(ticket, value, ttlMs, tags),
    abandon: (ticket) => memo.abandon(ticket),
    keep: (key, value, freshMs, tags) => {
      memo.keep(key, value, freshMs, tags);
      // A namespaced copy is also kept under the key the degraded path reads while the generation is
      // unknown (its cached generation goes with the subscription), so namespaced calls find it too.
      if (!key.startsWith(RESERVED_KEY_START)) return;
      const degraded = degradedKeyOf(key);
      if (degraded !== undefined && degraded !== key) memo.keep(degraded, value, freshMs, tags);
    },
    copy: (key, value, freshMs, staleMs, untilMs, sentAt, tags) => {
      memo.copy(key, value, freshMs, staleMs, untilMs, sentAt, tags);
      // As keep(): namespaced calls read the degraded-path key while the generation is unknown.
      const degraded = key.startsWith(RESERVED_KEY_START) ? degradedKeyOf(key) : undefined;
      if (degraded !== undefined && degraded !== key) memo.copy(degraded, value, freshMs, staleMs, untilMs, sentAt, tags);
    },
    missed: (key) => {
      memo.missed(key);
      const degraded = key.startsWith(RESERVED_KEY_START) && !memo.idle ? degradedKeyOf(key) : undefined;
      if (degraded !== undefined && degraded !== key) memo.missed(degraded);
    },
    found: (key) => {
      memo.found(key);
      if (!key.startsWith(RESERVED_KEY_START) || memo.idle) return;
      const degraded = degradedKeyOf(key);
      if (degraded === undefined || degraded === key) return;
      memo.found(degraded);
      forget(degraded);
    },
    invalidate: (key) => {
      memo.invalidate(key);
      const degraded = key.startsWith(RESERVED_KEY_START) ? degradedKeyOf(key) : undefined;
      if (degraded === undefined || degraded === key) return;
      // Recorded even while idle: a read in flight of the degraded-path key must not copy after it.
      memo.invalidate(degraded);
      forget(degraded);
    },
    // A degraded-path key is an internal key too (its scopes parse the same): the note judges it alike.
    invalidateTagged: (reaches) => memo.invalidateTagged(reaches),
    clear: () => memo.clear(),
    get idle() {
      return memo.idle;
    },
  };
}

/** Keys starting with this are the namespaces' (see namespacedKey): refused as plain keys. */
export const RESERVED_KEY_START = '\0';

/**
 * A generation counter that is missing — never used, or lost: evicted (allkeys-*), deleted, a restart
 * without persistence — is (re-)created at the server's TIME in µs, never at 0. Were a lost counter to
 * restart at 0 (or at any small number), the generations it had already passed would come back, and
 * with them every entry written under them that has not expired yet: values from before a clear would
 * be served. A seed from TIME is above every generation handed out before it (the same argument, and
 * the same bounds, as the fence's re-seed in lock/scripts.ts), so the entries of every earlier
 * generation stay unreachable. Digits are concatenated as strings: Lua would print a large number in
 * exponent form. Returns the generation and whether it was (re-)created just now.
 */
const SEED_GENERATION = `
local function generation(key)
  local g = redis.call('GET', key)
  if g then return g, false end
  local t = redis.call('TIME')
  g = t[1] .. string.format('%06d', tonumber(t[2]))
  redis.call('SET', key, g)
  return g, true
end
`;

/**
 * The path's generation, (re-)seeded if its counter is missing (SEED_GENERATION). A re-seed is a clear
 * that everyone must see: processes still holding the lost generation cached would otherwise keep
 * using internal keys nobody else uses (a delete or set made by one never reached the other). So a
 * re-seed publishes the path's clear note in the same step (ARGV[1] the channel, ARGV[2] the note),
 * and every subscriber drops its cached generation, as for clear(). Nobody waits for it to be
 * heard (no caller asked for a clear): it reaches the other processes as a delete's note does. The
 * first use of a path publishes one too (the server cannot tell it from a loss): one PUBLISH per path.
 */
const GENERATION = script('sgNsGenV2', 1, `${SEED_GENERATION}
local g, seeded = generation(KEYS[1])
if seeded then redis.call('PUBLISH', ARGV[1], ARGV[2]) end
return g
`);

/** The clear id of a re-seed's note: nobody waits for its acknowledgements, so nobody sends them. */
export const UNACKNOWLEDGED = '-';

/**
 * A clear, atomically: the acknowledgement counter starts at 0, the generation goes up (from a seed if
 * the counter is missing), the note goes out; returns how many subscribers received it (one script
 * instead of MULTI: it runs the same on every client family). Both keys share the path's `{slot}`.
 */
const CLEAR = script('sgNsClearV2', 2, `${SEED_GENERATION}
redis.call('SET', KEYS[2], '0', 'PX', ARGV[1])
generation(KEYS[1])
redis.call('INCR', KEYS[1])
return redis.call('PUBLISH', ARGV[2], ARGV[3])
`);
/** A process heard a clear: one more acknowledgement, kept ACK_TTL_MS. */
const ACK = script('sgNsAckV1', 1, `
redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
`);


/** How a clear reaches every process: the cache's broadcast channel and its clear notes (kind 'c'). */
export interface ClearNotes {
  readonly channel: string;
  /** The note saying that `path`'s generation moved (a clear, or a lost counter re-created), with a clear id. */
  note(path: PathId, id: string): string;
}

/** How many namespace paths' generations a process keeps cached. */
const MAX_KNOWN_PATHS = 10_000;

/**
 * What events and traces show of a key: the caller's key and, for a namespace's internal key, the
 * namespace's path. The internal key (NUL bytes, generations) never reaches a user's logs or spans.
 */
export function shownKey(key: string): { readonly key: string; readonly namespace?: string } {
  const parsed = key.startsWith(RESERVED_KEY_START) ? parseNamespacedKey(key) : undefined;
  return parsed ? { key: parsed.key, namespace: parsed.segments.join('/') } : { key };
}

/** How long a clear's acknowledgement counter lives in Redis. */
const ACK_TTL_MS = 60_000;
/** How often clear() looks at the acknowledgement counter. */
const ACK_POLL_MS = 5;

/** A clear note's key: `<path> <clear id>` (a path has no spaces). */
export function clearNoteKey(path: PathId, id: string): string {
  return `${path} ${id}`;
}

/** The path and clear id of a clear note's key, or undefined for a malformed one. */
export function parseClearNote(key: string): { readonly path: PathId; readonly id: string } | undefined {
  const at = key.lastIndexOf(' ');
  return at <= 0 ? undefined : { path: key.slice(0, at), id: key.slice(at + 1) };
}

/**
 * Every namespace path's current generation, as this process knows it. Cached while the subscription
 * holds; a clear note (kind 'c') for a path drops its entry. A GET that was in flight across such a
 * drop does not refill the cache (the same ticket rule as L1), so a late reply can never bring back an
 * older generation.
 */
export class Generations {
  /**
   * Invariant: holds only generations read (or set by this process's clear) while trusted, with no drop
   * of the path since. Bounded (LRU): namespace names may be made per tenant or per request, and a
   * forgotten path costs one read, never a wrong answer.
   */
  private readonly known = new LRUCache<PathId, number>({ max: MAX_KNOWN_PATHS });
  /**
   * The tickets (the L1 rule, for generations). `seq` only grows: every drop and flush takes the next
   * value. `droppedAt`: per path, the seq of its latest drop (a clear note heard, or this process's
   * clear); `floor`: the seq of the latest flush (a (re)subscription, or too many drops to remember).
   * Invariant: a read sent at ticket t (the seq when it was sent) fills `known` only if
   * `floor ≤ t` and `droppedAt[path] ≤ t`, i.e. nothing that could have moved the generation was heard
   * while it was in flight, so a late reply never brings an older generation back.
   */
  private readonly droppedAt = new Map<PathId, number>();
  /** Per path, the reads of its generation in flight (absent: none). */
  private readonly reading = new Map<PathId, number>();
  private seq = 0;
  private floor = 0;
  private trusted = false;

  constructor(
    private readonly port: RedisPort,
    private readonly io: Io,
    private readonly prefix: string,
    /** How a path's clear is announced: the broadcast channel, and the clear note of a path and clear id. */
    private readonly notes: ClearNotes,
    /** replicaAck's WAIT on the node that owns a Redis key (undefined: off); a clear is confirmed like a delete. */
    private readonly confirm: ((redisKey: string) => Promise<void>) | undefined,
    /**
     * How long a clear (or a re-seed) waits for the subscribers' acknowledgements: a subscriber that
     * has not acknowledged by then is one the heartbeat counts as down (2 × redisTimeout).
     */
    private readonly ackWaitMs: number,
    private readonly clock: Clock,
  ) {}

  /** The generation counter. `{path}`: it and the clear's acknowledgement counter share a Cluster slot (one script). */
  private redisKey(path: PathId): string {
    return `${this.prefix}:ns:{${path}}`;
  }

  /** The current generation of every prefix of `segments` (`users`, `users/admins`, …), in order. */
  async of(segments: readonly string[]): Promise<number[]> {
    return Promise.all(segments.map((_, i) => this.one(segments.slice(0, i + 1).join('/'))));
  }

  private async one(path: PathId): Promise<number> {
    const known = this.trusted ? this.known.get(path) : undefined;
    if (known !== undefined) return known;
    const ticket = this.seq;
    const counter = { namespace: path, redisKey: this.redisKey(path) };
    // The note a re-seed publishes (see GENERATION); sent only if the counter is missing.
    const note = this.notes.note(path, UNACKNOWLEDGED);
    this.reading.set(path, (this.reading.get(path) ?? 0) + 1);
    let generation: number;
    try {
      generation = Number(await this.io.run('read', () => this.port.run(GENERATION, [counter.redisKey], [this.notes.channel, note]), counter));
    } finally {
      const left = (this.reading.get(path) ?? 1) - 1;
      if (left > 0) this.reading.set(path, left);
      else this.reading.delete(path);
    }
    if (this.trusted && ticket >= this.floor && (this.droppedAt.get(path) ?? -1) <= ticket) this.known.set(path, generation);
    return generation;
  }

  /** Waits until `receivers` subscribers acknowledged the clear note counted at `acks`, or `ackWaitMs` passed. */
  private async acknowledged(acks: string, receivers: number, counter: OwnKey): Promise<void> {
    const deadline = this.clock.now() + this.ackWaitMs;
    while (this.clock.now() < deadline) {
      const acked = Number((await this.io.run('clear', () => this.port.command(acks, ['GET', acks]), counter)) ?? 0);
      if (acked >= receivers) return;
      await new Promise((resolve) => setTimeout(resolve, ACK_POLL_MS));
    }
  }

  /**
   * Increments the path's generation and announces it (`message`: a 'c' note naming the path and the
   * clear `id`), in one script; then waits until every subscriber that received the note acknowledged
   * it (ack(): each dropped its cached generation first), or `ackWaitMs` passed. PUBLISH's reply says
   * how many received it on a single Redis; on a Cluster (where it counts only the subscribers of the
   * node that ran it) the subscribers of every node that answers are counted first (PUBSUB NUMSUB).
   * With replicaAck, the bump is confirmed by WAIT like a delete (a failover to a replica that missed
   * it would roll the generation back, and pre-clear entries would be reachable again): fewer
   * acknowledgements reject with RedisUnavailableError (failure 'replicaAck'), as delete() does.
   * `confirmed` false: the cache's own clear, whose counter no call reads (its deletes were confirmed).
   * Throws RedisUnavailableError. This process's own cache is dropped for the path at once.
   */
  async clear(path: PathId, id: string, message: string, confirmed = true): Promise<void> {
    this.drop(path);
    const acks = this.ackKey(path, id);
    const { channel } = this.notes;
    const counter = { namespace: path, redisKey: this.redisKey(path) }; // the breaker of the counter's node
    // On a Cluster PUBLISH counts only the subscribers of the node that ran it: count every node's first.
    const everywhere = await clusterReceivers(this.port, this.io, channel);
    const bump = async (): Promise<unknown> => {
      const reached = await this.port.run(CLEAR, [counter.redisKey, acks], [ACK_TTL_MS, channel, message]);
      if (confirmed) await this.confirm?.(counter.redisKey);
      return reached;
    };
    const published = Number(await this.io.run('clear', bump, counter));
    const receivers = Math.max(published, everywhere ?? 0);
    this.drop(path); // a read that raced the INCR must not keep the old generation
    await this.acknowledged(acks, receivers, counter);
  }

  /**
   * A clear note, another process's or this one's (`own`): forget the path's generation, then
   * acknowledge. A re-seed's note (UNACKNOWLEDGED) is not acknowledged, and this process's own is
   * skipped: the generation it read is the re-seeded one. Never throws.
   */
  ack(path: PathId, id: string, own: boolean): void {
    if (id === UNACKNOWLEDGED) {
      // Only where there is something to protect: a cached generation, or a read that could cache
      // one. A note for a path this process never used (a first use elsewhere, per-tenant namespaces)
      // records nothing: recording it would count towards the flush that empties every path's cache.
      if (!own && (this.known.has(path) || this.reading.has(path))) this.drop(path);
      return;
    }
    this.drop(path);
    const acks = this.ackKey(path, id);
    this.io.run('clear', () => this.port.run(ACK, [acks], [ACK_TTL_MS]), { namespace: path, redisKey: acks }).catch(() => undefined);
  }

  private ackKey(path: PathId, id: string): string {
    return `${this.prefix}:ns:{${path}}:ack:${id}`;
  }

  /**
   * The generations a call uses while Redis cannot give the real ones (the degraded path: nothing is
   * sent for the entry). Per prefix path, `-1 − its local epoch`: never a real generation (those are
   * ≥ 0), so no stored entry is ever named; and new after every drop of the path in this process (a
   * clear heard or made) or flush (a (re)subscription), so a degraded value or a degraded load in
   * progress from before a clear is never found after it — each clear moves on to new keys, and
   * the other keys' degraded copies are kept.
   */
  unknown(segments: readonly string[]): number[] {
    return segments.map((_, i) => -1 - Math.max(this.droppedAt.get(segments.slice(0, i + 1).join('/')) ?? 0, this.floor));
  }

  /** The degraded-path key of an internal key (`unknown` generations), or undefined for a plain key. */
  degradedKeyOf(internal: string): string | undefined {
    const parsed = parseNamespacedKey(internal);
    return parsed && namespacedKey(parsed.segments, this.unknown(parsed.segments), parsed.key);
  }

  /** A clear of `path` (here or elsewhere): forget its generation. */
  drop(path: PathId): void {
    this.known.delete(path);
    this.droppedAt.set(path, ++this.seq);
    // Bounded: beyond a few thousand remembered drops, forget them all and raise the floor instead.
    if (this.droppedAt.size > 4096) this.flush();
  }

  /** Subscription down (notes may be lost): read every generation from Redis until resume(). */
  suspend(): void {
    this.flush();
    this.trusted = false;
  }

  /** Subscribed again: notes sent while away are lost, so forget everything, then cache again. */
  resume(): void {
    this.flush();
    this.trusted = true;
  }

  private flush(): void {
    this.known.clear();
    this.droppedAt.clear();
    this.floor = ++this.seq;
  }
}

/** What a namespace needs of its cache: the cache's own operations on internal keys (the reserved ones allowed). */
export interface KeyedOps {
  getOrCompute<T, S = T>(key: string, loader: (ctx: LoaderContext<S>) => T | PromiseLike<T>, ttlOrOptions?: number | CallOptions): Promise<T>;
  get<T = unknown>(key: string): Promise<T | undefined>;
  set<T>(key: string, value: T, ttlOrOptions?: number | CallOptions): Promise<void>;
  delete(key: string): Promise<void>;
  has(key: string): Promise<boolean>;
  getMany<T = unknown>(keys: readonly string[]): Promise<(T | undefined)[]>;
  deleteMany(keys: readonly string[]): Promise<void>;
  getOrComputeMany<T>(keys: readonly string[], loadMany: BatchLoader<T>, ttlOrOptions?: number | CallOptions): Promise<(T | undefined)[]>;
}

/** What a namespace needs of its cache besides the operations. */
export interface NamespaceHost {
  readonly ops: KeyedOps;
  readonly generations: Generations;
  /** Checks a user key as the cache would (type, length, well-formed); throws InvalidKeyError. */
  validateKey(key: unknown): asserts key is string;
  /** A call's checks (its options, its loader, its signal), before any Redis traffic: the generation is read only after them. */
  checkCall(key: string, loader: unknown, ttlOrOptions: number | CallOptions | undefined): void;
  /** A set()'s checks (its value, its options: `tags` among them), before any Redis traffic: the generation is read only after them. */
  checkSet(key: string, value: unknown, ttlOrOptions: number | CallOptions | undefined): void;
  /** Clears `path` everywhere: the generation bump and its note. */
  clear(path: PathId): Promise<void>;
  /** Deletes or expires (`how`) the entries of `path` (and of the namespaces nested in it) tagged with any of `tags`, everywhere. */
  invalidateTags(path: PathId, tags: readonly string[], how: TagInvalidation): Promise<void>;
  /** Runs `loader` for `key` on the degraded path (in-process flight, degraded memo, `degraded` event), sending nothing to Redis. */
  degraded(key: string, loader: (ctx: LoaderContext) => unknown, ttlOrOptions: number | CallOptions | undefined, cause: RedisUnavailableError): Promise<unknown>;
  /** A read that could not reach Redis: the `degraded` event get() emits; answers the key's degraded copy, if one is kept. */
  /** Reads whose generation is unknown: each key's degraded copy or a miss, counted and traced as the get()/getMany() they answer. */
  degradedReads(keys: readonly string[], error: unknown, operation: 'get' | 'getMany'): Promise<unknown[]>;
  /** The key is changing (a set or delete of this process): its degraded copy and degraded load in progress go, as a plain key's do. */
  invalidateDegraded(key: string): void;
}

/** The generations could not be read: Redis was unavailable for the path's counter. */
interface Unknown {
  readonly cause: RedisUnavailableError;
}

/**
 * A view of a cache with its own key space (`cache.namespace('users')`): the same connections,
 * subscription, L1 and options; the same operations; and `clear()`. Nested namespaces clear with their
 * parent. Every operation first resolves the path's generations (cached; see Generations), then runs
 * the cache's own operation on the internal key, so every guarantee of the cache holds per key.
 */
export class Namespace {
  private readonly path: PathId;

  /** @internal Use `cache.namespace(name)` or `namespace.namespace(name)`. */
  constructor(
    private readonly host: NamespaceHost,
    private readonly segments: readonly string[],
  ) {
    this.path = segments.join('/');
  }

  /** The namespace's name path, `users` or `users/admins`. */
  get name(): string {
    return this.path;
  }

  /** A namespace nested in this one: its own key space, also cleared by this one's `clear()`. */
  namespace(name: string): Namespace {
    validateNamespace(name);
    return new Namespace(this.host, [...this.segments, name]);
  }

  /** The internal key; rejects (RedisUnavailableError) if Redis cannot give the generations: for writes, which must reach Redis. */
  private async internal(key: unknown): Promise<string> {
    const at = await this.locate(key);
    if (typeof at !== 'string') throw at.cause;
    return at;
  }

  /**
   * The internal key, or — Redis unavailable for the path's counter — why not. Reads and loads then
   * take the cache's degraded path (a miss; the loader runs here), as they would had Redis failed
   * for the entry itself; anything else (a closed cache, a bad key) still rejects.
   */
  private async locate(key: unknown): Promise<string | Unknown> {
    this.host.validateKey(key);
    const generations = await this.generations();
    return Array.isArray(generations) ? namespacedKey(this.segments, generations, key) : generations;
  }

  private async generations(): Promise<number[] | Unknown> {
    try {
      return await this.host.generations.of(this.segments);
    } catch (error) {
      if (error instanceof RedisUnavailableError) return { cause: error };
      throw error;
    }
  }

  private async locateMany(keys: readonly string[]): Promise<string[] | Unknown> {
    const given: unknown = keys;
    if (!Array.isArray(given)) throw new InvalidOptionError('keys', given, 'an array of cache keys');
    for (const key of keys as unknown[]) this.host.validateKey(key);
    const generations = await this.generations();
    return Array.isArray(generations) ? keys.map((key: string) => namespacedKey(this.segments, generations, key)) : generations;
  }

  private async internalMany(keys: readonly string[]): Promise<string[]> {
    const at = await this.locateMany(keys);
    if (!Array.isArray(at)) throw at.cause;
    return at;
  }

  /** `cache.getOrCompute` in this namespace. */
  async getOrCompute<T, S = T>(key: string, loader: (ctx: LoaderContext<S>) => T | PromiseLike<T>, ttlOrOptions?: number | CallOptions): Promise<T> {
    // The loader sees the key it was asked for, not the internal one.
    const asked = (ctx: LoaderContext<S>) => loader({ ...ctx, key });
    this.host.checkCall(key, loader, ttlOrOptions);
    const at = await this.locate(key);
    if (typeof at !== 'string') return (await this.host.degraded(this.degradedKey(key), asked as (ctx: LoaderContext) => unknown, ttlOrOptions, at.cause)) as T;
    return this.host.ops.getOrCompute(at, asked, ttlOrOptions);
  }

  async get<T = unknown>(key: string): Promise<T | undefined> {
    const at = await this.locate(key);
    if (typeof at !== 'string') return (await this.missed([key], at, 'get'))[0] as T | undefined;
    return this.host.ops.get<T>(at);
  }

  /** A read whose generation is unknown: reported as degraded (as get() reports a failed read); the degraded copy if one is kept, else a miss. */
  private missed(keys: readonly string[], at: Unknown, operation: 'get' | 'getMany'): Promise<unknown[]> {
    return this.host.degradedReads(keys.map((key) => this.degradedKey(key)), at.cause, operation);
  }

  /** The key this namespace's `key` runs under on the degraded path (Generations.unknown). */
  private degradedKey(key: string): string {
    return namespacedKey(this.segments, this.host.generations.unknown(this.segments), key);
  }

  async set<T>(key: string, value: T, ttlOrOptions?: number | CallOptions): Promise<void> {
    this.host.checkSet(key, value, ttlOrOptions);
    this.changing(key);
    return this.host.ops.set(await this.internal(key), value, ttlOrOptions);
  }

  async delete(key: string): Promise<void> {
    this.changing(key);
    return this.host.ops.delete(await this.internal(key));
  }

  /** Before a set or delete is sent — even one that then fails for want of the generation — the key's degraded copy goes. */
  private changing(key: unknown): void {
    this.host.validateKey(key);
    this.host.invalidateDegraded(this.degradedKey(key));
  }

  async has(key: string): Promise<boolean> {
    return (await this.get(key)) !== undefined;
  }

  async getMany<T = unknown>(keys: readonly string[]): Promise<(T | undefined)[]> {
    const at = await this.locateMany(keys);
    if (!Array.isArray(at)) return (await this.missed(keys, at, 'getMany')) as (T | undefined)[];
    return this.host.ops.getMany<T>(at);
  }

  async deleteMany(keys: readonly string[]): Promise<void> {
    const given: unknown = keys;
    if (Array.isArray(given)) for (const key of given as unknown[]) this.changing(key);
    return this.host.ops.deleteMany(await this.internalMany(keys));
  }

  /** `cache.getOrComputeMany` in this namespace: `loadMany` sees and returns the caller's keys. */
  async getOrComputeMany<T>(keys: readonly string[], loadMany: BatchLoader<T>, ttlOrOptions?: number | CallOptions): Promise<(T | undefined)[]> {
    if (Array.isArray(keys)) for (const key of keys as unknown[]) if (typeof key === 'string') this.host.checkCall(key, loadMany, ttlOrOptions);
    // No key, no generation to read: the cache's batch checks the loader and the options, and answers [].
    if (Array.isArray(keys) && keys.length === 0) return this.host.ops.getOrComputeMany([], loadMany, ttlOrOptions);
    const at = await this.locateMany(keys);
    if (!Array.isArray(at)) return this.degradedMany(keys, loadMany, ttlOrOptions, at);
    const internal = at;
    const toUser = new Map(internal.map((k, i) => [k, keys[i] as string]));
    const toInternal = new Map(internal.map((k, i) => [keys[i] as string, k]));
    const translated: BatchLoader<T> = async (missing, ctx) => {
      const tokens = new Map([...ctx.fencingTokens].map(([k, t]) => [toUser.get(k) as string, t]));
      const setOptions = (k: string, options: EntryOptions): void => ctx.setOptions(toInternal.get(k) ?? k, options);
      const found = await loadMany(missing.map((k) => toUser.get(k) as string), { signal: ctx.signal, fencingTokens: tokens, setOptions });
      if (!(found instanceof Map)) return found;
      return new Map([...found].flatMap(([k, v]) => (toInternal.has(k) ? [[toInternal.get(k) as string, v] as const] : [])));
    };
    return this.host.ops.getOrComputeMany(internal, translated, ttlOrOptions);
  }

  /**
   * getOrComputeMany with the generations unknown: as the cache's own batch does for keys whose read
   * failed, each key takes the degraded path on its own (its memo entry, if any, answers; else
   * `loadMany([key])` under the call's signals and hardTimeout). Rejects, as the cache's does, with
   * the first failed key's error once every key settled.
   */
  private async degradedMany<T>(keys: readonly string[], loadMany: BatchLoader<T>, ttlOrOptions: number | CallOptions | undefined, at: Unknown): Promise<(T | undefined)[]> {
    if (typeof loadMany !== 'function') throw new InvalidOptionError('loadMany', loadMany, 'a function (missing, ctx) => Map<key, value>');
    const one = async (key: string, ctx: LoaderContext): Promise<unknown> => {
      const found: unknown = await loadMany([key], singleKeyContext(key, ctx));
      if (!(found instanceof Map)) throw new InvalidOptionError('loadMany', found, 'loadMany to return a Map<key, value>', key);
      const value: unknown = found.get(key);
      if (value instanceof Error) throw value;
      return value;
    };
    const unique = [...new Set(keys)];
    const settled = await Promise.allSettled(unique.map((key) => this.host.degraded(this.degradedKey(key), (ctx) => one(key, ctx), ttlOrOptions, at.cause)));
    const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
    const values = new Map(unique.map((key, i) => [key, (settled[i] as PromiseFulfilledResult<unknown>).value as T | undefined]));
    return keys.map((key) => values.get(key));
  }

  /**
   * Every entry of this namespace and of the namespaces nested in it, in every process: once this
   * resolves, no call of this process sees an entry written before it, nor does any process whose
   * subscription holds once the clear's note reached it (see docs/api.md, "Namespaces and clear()", for the bounds).
   * O(1): one INCR and one PUBLISH; the old entries expire by their TTL. Throws RedisUnavailableError.
   */
  clear(): Promise<void> {
    return this.host.clear(this.path);
  }

  /**
   * `cache.deleteByTag` for this namespace's entries only (and those of the namespaces nested in it,
   * as clear()): the same guarantee, in every process; other namespaces' and plain entries tagged
   * the same are untouched. See docs/tags.md.
   */
  async deleteByTag(tag: string | readonly string[]): Promise<void> {
    const tags = tagsToDelete(tag);
    return this.host.invalidateTags(this.path, tags, 'delete');
  }

  /**
   * `cache.expireByTag` for this namespace's entries only (and those of the namespaces nested in it):
   * the same guarantee for fresh answers, in every process; other entries tagged the same are
   * untouched. See docs/tags.md.
   */
  async expireByTag(tag: string | readonly string[]): Promise<void> {
    const tags = tagsToDelete(tag);
    return this.host.invalidateTags(this.path, tags, 'expire');
  }
}
