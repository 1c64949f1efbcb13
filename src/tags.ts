/**
 * Tags: invalidate a group of entries everywhere (`deleteByTag`), in O(1) per tag. The rule that
 * makes it safe, THE TAG RULE, is at the fence rule's side (lock/scripts.ts); this module holds the
 * tag records' layout, the read-side check, and the invalidation with its note and acknowledgements.
 *
 * Layout: a tag's record is `<prefix>:tag:{<prefix>}:<scope> <tag>`, where the scope is '' for the cache's own
 * `deleteByTag` and a namespace path (`users`, `users/admins`) for a namespace's. An entry of the
 * namespace path `users/admins` tagged `t` is governed by three records, (`''`, t), (`users`, t) and
 * (`users/admins`, t), so `cache.deleteByTag(t)` reaches it, as do `users.deleteByTag(t)` and
 * `admins.deleteByTag(t)`; another namespace's `deleteByTag(t)` does not. Injective: a scope has no
 * space (namespace names have none), so the first space ends it, and the tag is the rest. The hash tag
 * `{<prefix>}` (a prefix has no braces) puts every record of a cache, and its acknowledgement counters,
 * in one slot: on a Cluster one script can set several records, and all their times come from one
 * clock (THE TAG RULE, On a Cluster, lock/scripts.ts).
 */
import { randomBytes } from 'node:crypto';
import { script, type RedisPort, type Script } from './client/port.js';
import { clusterReceivers } from './clear.js';
import { TAG_ENSURE, TAG_GRANT_APART } from './lock/scripts.js';
import type { Io } from './io.js';
import type { OwnKey } from './node-of.js';
import { parseNamespacedKey, RESERVED_KEY_START } from './namespace.js';
import { tagList } from './options/fields.js';
import type { Clock } from './options.js';
import { TagStates } from './tag-states.js';

/**
 * How long a record created by a grant (or re-created by a refused write) lives at least: a write
 * extends its records to the entry's own physical ttl when that is longer. A record that lapses
 * invalidates what carries it (one rebuild each), never more.
 */
export const RECORD_TTL_MS = 24 * 60 * 60 * 1000;

/** The record of `tag` in `scope` ('' = the whole cache). */
export function tagRecordKey(prefix: string, scope: string, tag: string): string {
  return `${tagSlot(prefix)}${scope} ${tag}`;
}

/** The start of every record key of the cache: its hash tag decides their one slot. */
function tagSlot(prefix: string): string {
  return `${prefix}:tag:{${prefix}}:`;
}

/** The scopes an entry at internal key `key` is in: the whole cache, then each of its namespace paths. */
export function scopesOf(key: string): string[] {
  const segments = key.startsWith(RESERVED_KEY_START) ? parseNamespacedKey(key)?.segments : undefined;
  const scopes = [''];
  if (segments) for (let i = 1; i <= segments.length; i++) scopes.push(segments.slice(0, i).join('/'));
  return scopes;
}

/** Every record that governs the entry at internal key `key` tagged `tags` (THE TAG RULE). */
export function recordsOf(prefix: string, key: string, tags: readonly string[]): string[] {
  const scopes = scopesOf(key);
  const out: string[] = [];
  for (const tag of tags) for (const scope of scopes) out.push(tagRecordKey(prefix, scope, tag));
  return out;
}

/** Whether a tag note for `tags` in `scope` reaches the entry at internal key `key` tagged `entryTags`. */
export function noteReaches(scope: string, tags: readonly string[], key: string, entryTags: readonly string[]): boolean {
  if (!entryTags.some((t) => tags.includes(t))) return false;
  return scope === '' || scopesOf(key).includes(scope);
}

/** An entry's tags: the call's and its loader's (`ctx.setOptions({ tags })`) together, at most MAX_TAGS. */
export function entryTags(callTags: readonly string[] | undefined, loaderTags: readonly string[] | undefined, key: string): readonly string[] | undefined {
  if (loaderTags === undefined || loaderTags.length === 0) return callTags !== undefined && callTags.length > 0 ? callTags : undefined;
  if (callTags === undefined || callTags.length === 0) return loaderTags;
  // Counted without duplicates: a loader that names a tag its call declared adds nothing to the entry.
  return tagList([...new Set([...callTags, ...loaderTags])], 'ctx.setOptions.tags', key);
}

/** How many tag notes a process remembers; a flight older than the oldest is judged as reached by every tag. */
const HEARD_KEPT = 1024;

/** A tag note heard by this process: its number, and what it reaches. */
interface Heard {
  readonly seq: number;
  readonly scope: string;
  readonly tags: readonly string[];
  /** Not a note: notes may have been lost here (the subscription went down, or came back): it reaches every tagged entry. */
  readonly lost?: true;
}

/**
 * The tag notes this process heard (its own deleteByTag included), numbered in the order it acted on
 * them. THE JOIN RULE (call.ts) reads it: a caller that joined a flight after a note the flight began
 * before is not answered with the flight's value if that value may carry a tag the note reaches. A
 * flight's tags may be known only once it settles (tags chosen by the loader, or those of an entry it
 * read), so the check is made then, not when the note arrives. Bounded: a stretch partly forgotten
 * counts as reached (one more load, never an old value).
 */
export class HeardTags {
  private seq = 0;
  private readonly log: Heard[] = [];
  /**
   * While the subscription is down (and before it first holds), the `seq` it went down at: a note
   * sent meanwhile never arrives here, so a caller that joins a tagged flight then cannot know
   * whether one came between the flight's start and its join. Undefined while subscribed.
   */
  private downFrom: number | undefined = 0;
  /** Past stretches without a subscription: a number taken in [from, to) was taken while down. Bounded. */
  private readonly downs: { readonly from: number; readonly to: number }[] = [];
  /** Numbers below it may have been taken in a stretch forgotten (downs' bound): counted as taken while down. */
  private downsForgottenBelow = 0;

  /** The number of the latest note heard (0: none yet). */
  get latest(): number {
    // While the subscription is down no note orders calls: each number taken is a new one, so a flight
    // begun before a call is told from one begun after it (THE JOIN RULE judges only the former).
    return this.downFrom === undefined ? this.seq : ++this.seq;
  }

  /** Whether the subscription is down now (or has not held yet): notes may be lost. */
  get deaf(): boolean {
    return this.downFrom !== undefined;
  }

  heard(scope: string, tags: readonly string[]): void {
    this.push({ seq: ++this.seq, scope, tags });
  }

  /**
   * Tag notes may have been lost: the subscription went down, or came back (notes sent meanwhile never
   * arrive, and a deleteByTag does not wait for a process it cannot reach). Counted as a note that
   * reaches every tagged entry, so a caller that joins a flight begun before it is not answered with
   * a tagged value (it runs its call again), as L1 is flushed then.
   */
  private lost(): void {
    this.push({ seq: ++this.seq, scope: '', tags: [], lost: true });
  }

  /** The subscription went down: notes may be lost from now until it is back (`up`). */
  down(): void {
    this.lost();
    this.downFrom ??= this.seq;
  }

  /** The subscription holds again (or for the first time): notes sent while it was down were lost. */
  up(): void {
    if (this.downFrom !== undefined) {
      this.downs.push({ from: this.downFrom, to: this.seq + 1 });
      if (this.downs.length > HEARD_KEPT) this.downsForgottenBelow = (this.downs.shift() as { to: number }).to;
      this.downFrom = undefined;
    }
    this.lost();
  }

  /** Whether the number `n` (a `latest`) was taken while the subscription was down. */
  private whileDown(n: number): boolean {
    if (this.downFrom !== undefined && n >= this.downFrom) return true;
    return n < this.downsForgottenBelow || this.downs.some((d) => n >= d.from && n < d.to);
  }

  private push(heard: Heard): void {
    this.log.push(heard);
    if (this.log.length > HEARD_KEPT) this.log.shift();
  }

  /** Whether a note heard after `since` and at or before `upTo` reaches the entry at `key` tagged `tags`. */
  reached(since: number, upTo: number, key: string, tags: ReadonlySet<string> | readonly string[] | undefined): boolean {
    if (upTo <= since || tags === undefined || ('size' in tags ? tags.size : tags.length) === 0) return false;
    // Joined while the subscription was down: a note may have come, unheard, since the flight began.
    if (this.whileDown(upTo)) return true;
    const oldest = this.log[0]?.seq ?? this.seq + 1;
    if (since + 1 < oldest) return true;
    const carried = [...tags];
    return this.log.some((n) => n.seq > since && n.seq <= upTo && (n.lost === true || noteReaches(n.scope, n.tags, key, carried)));
  }

  /**
   * A write granted after note `since` was heard, of an entry at `key` tagged `tags`, may keep no L1
   * copy if a note heard since reaches it: the write may have landed (an expireByTag lets it; the
   * stored entry is then read as stale), but its value is not fresh for anyone who starts now.
   */
  reachedSince(since: number, key: string, tags: readonly string[] | undefined): boolean {
    return this.reached(since, this.seq, key, tags);
  }
}

/** A script over a variable number of records (one registered name per count, one SHA). */
function variadic(name: string, fixedKeys: number, lua: string, readOnly = false): (records: number) => Script {
  const byCount = new Map<number, Script>();
  return (records) => {
    let s = byCount.get(records);
    if (s === undefined) byCount.set(records, (s = script(`${name}k${records}`, fixedKeys + records, lua, readOnly)));
    return s;
  };
}

/**
 * A record's value: `D` — the server's TIME in µs of its last deleteByTag (or of its creation) — or
 * `D X`, X the TIME of an expireByTag since. THE TAG RULE reads D (an entry granted at or before it is
 * invalid); X makes an entry granted at or before it stale, not fresh (see `judge`).
 */
interface RecordTimes {
  readonly deleted: number;
  readonly expired: number | undefined;
}

function parseRecord(value: string | null | undefined): RecordTimes | undefined {
  const match = typeof value === 'string' ? /^(\d+)(?: (\d+))?$/.exec(value) : null;
  if (match === null) return undefined;
  return { deleted: Number(match[1]), expired: match[2] === undefined ? undefined : Number(match[2]) };
}

/** What a tagged entry's records say of it: valid; stale since an expireByTag `agoMs` ago; invalid (a miss). */
export type TagVerdict = { readonly kind: 'valid' } | { readonly kind: 'expired'; readonly agoMs: number } | { readonly kind: 'invalid' };

const VALID: TagVerdict = { kind: 'valid' };
export const INVALID: TagVerdict = { kind: 'invalid' };

/**
 * THE TAG RULE on read, for an entry granted at `grantedAt` (µs) whose records hold `states`, at the
 * server's `nowUs`: invalid if a record is missing or was deleted at or after the grant; else expired
 * if one was expired at or after it (stale since the earliest such expireByTag); else valid.
 */
export function judge(states: readonly (string | null | undefined)[], grantedAt: number, nowUs: number): TagVerdict {
  let expiredAt = Number.POSITIVE_INFINITY;
  for (const state of states) {
    const record = parseRecord(state);
    if (record === undefined || record.deleted >= grantedAt) return INVALID;
    if (record.expired !== undefined && record.expired >= grantedAt) expiredAt = Math.min(expiredAt, record.expired);
  }
  return expiredAt === Number.POSITIVE_INFINITY ? VALID : { kind: 'expired', agoMs: Math.max(0, (nowUs - expiredAt) / 1000) };
}

/** The records' values (or nil when missing), in KEYS order, then the server's TIME in µs: a read-only script. */
export const TAG_STATES = `
local out = {}
for i = 1, #KEYS do out[i] = redis.call('GET', KEYS[i]) end
local t = redis.call('TIME')
out[#KEYS + 1] = t[1] .. string.format('%06d', tonumber(t[2]))
return out
`;
const STATES = variadic('sgTagStatesV2', 0, TAG_STATES, true);
/** A Cluster's grant time and its tagged writes' records (lock/scripts.ts): KEYS[1] routes to the records' slot. */
const GRANT_APART = variadic('sgTagGrantApartV1', 1, TAG_GRANT_APART);
const ENSURE = variadic('sgTagEnsureV2', 1, TAG_ENSURE);

/**
 * deleteByTag: KEYS[1]=the acknowledgement counter, KEYS[2…]=records; ARGV[1]=the counter's ttl
 * ARGV[2]=channel ARGV[3]=note. Every existing record becomes TIME (its TTL kept); a missing one stays
 * missing (it invalidates what carries it already). → how many subscribers received the note.
 */
export const TAG_INVALIDATE = `
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', tonumber(t[2]))
for i = 2, #KEYS do
  local p = redis.call('PTTL', KEYS[i])
  if p > 0 then redis.call('SET', KEYS[i], now, 'PX', p)
  elseif p == -1 then redis.call('SET', KEYS[i], now) end
end
redis.call('SET', KEYS[1], '0', 'PX', ARGV[1])
return redis.call('PUBLISH', ARGV[2], ARGV[3])
`;
const INVALIDATE_TAGS = variadic('sgTagInvalidateV1', 1, TAG_INVALIDATE);

/**
 * expireByTag: TAG_INVALIDATE's keys and arguments; every existing record becomes `D now` (its deleted
 * time D and its TTL kept): entries granted before now are stale, no longer fresh. A missing record
 * stays missing (what carries it is invalid already).
 */
export const TAG_EXPIRE = `
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', tonumber(t[2]))
for i = 2, #KEYS do
  local r = redis.call('GET', KEYS[i])
  if r then
    local d = string.match(r, '^%d+')
    local p = redis.call('PTTL', KEYS[i])
    if p > 0 then redis.call('SET', KEYS[i], d .. ' ' .. now, 'PX', p)
    else redis.call('SET', KEYS[i], d .. ' ' .. now) end
  end
end
redis.call('SET', KEYS[1], '0', 'PX', ARGV[1])
return redis.call('PUBLISH', ARGV[2], ARGV[3])
`;
const EXPIRE_TAGS = variadic('sgTagExpireV1', 1, TAG_EXPIRE);

/** What a tag invalidation does to the entries it reaches: `delete` (deleteByTag) or `expire` (expireByTag: stale, not fresh). */
export type TagInvalidation = 'delete' | 'expire';

/** A process heard a tag note: one more acknowledgement. */
export const TAG_ACK = `
redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
`;
const ACK = script('sgTagAckV1', 1, TAG_ACK);

/** How long an acknowledgement counter lives. */
const ACK_TTL_MS = 60_000;
/** How often deleteByTag looks at its acknowledgement counter. */
const ACK_POLL_MS = 5;

/** A tag note's key: what it invalidates, and the id its acknowledgements are counted under. */
export interface TagNote {
  readonly id: string;
  readonly scope: string;
  readonly tags: readonly string[];
}

export function formatTagNote(n: TagNote): string {
  return JSON.stringify([n.id, n.scope, n.tags]);
}

/** A tag note's key parsed; undefined for a malformed one (another publisher). */
export function parseTagNote(key: string): TagNote | undefined {
  try {
    const [id, scope, tags] = JSON.parse(key) as unknown[];
    if (typeof id !== 'string' || typeof scope !== 'string' || !Array.isArray(tags) || !tags.every((t) => typeof t === 'string')) return undefined;
    return { id, scope, tags: tags };
  } catch {
    return undefined;
  }
}

/** What one cache's tags need. */
export interface TagDeps {
  readonly port: RedisPort;
  readonly io: Io;
  readonly prefix: string;
  readonly channel: string;
  /** The note of kind 'g' with `key`. */
  readonly message: (key: string) => string;
  /** replicaAck's WAIT (undefined: off): an invalidation is confirmed like a delete. */
  readonly confirm: ((redisKey: string) => Promise<void>) | undefined;
  /** How long deleteByTag waits for acknowledgements (2 × redisTimeout, as clear()). */
  readonly ackWaitMs: number;
  readonly clock: Clock;
}

/** What a grant takes of the records on a Cluster (THE TAG RULE, On a Cluster): G, or why it could not. */
export type GrantTime = number | Error;

/** The records of one cache: the read-side check, the invalidation, the acknowledgement. */
export class TagRecords {
  /** The records' states this process read and keeps (tag-states.ts): a tagged hit's second round trip, saved. */
  readonly states: TagStates;

  constructor(private readonly d: TagDeps) {
    this.states = new TagStates(d.clock);
  }

  records(key: string, tags: readonly string[]): string[] {
    return recordsOf(this.d.prefix, key, tags);
  }

  /**
   * On a Cluster (THE TAG RULE, On a Cluster): the records' slot is not the entry's, so a grant takes G
   * there, with this, sent alongside its acquire (creating the missing records of `tags`, the call's).
   * Never rejects: resolves the RedisUnavailableError instead (the grant decides what it costs).
   * Undefined on a standalone Redis: the acquire script takes G itself.
   */
  grantApart(key: string, tags: readonly string[] | undefined): Promise<GrantTime> | undefined {
    // A call that declares no tags costs the records' node nothing, and does not wait on it: its
    // loader may not add tags on a Cluster (Store.assertTaggable), so its entry never needs a G.
    if (!this.d.port.cluster || tags === undefined) return undefined;
    const records = this.records(key, tags);
    const run = (): Promise<unknown> => this.d.port.run(GRANT_APART(records.length), [this.anchor, ...records], [RECORD_TTL_MS]);
    return this.d.io.run('acquire', run, this.on(key)).then(Number, (error: unknown) => (error instanceof Error ? error : new Error(String(error))));
  }

  /**
   * On a Cluster, with a tagged write (THE TAG RULE, On a Cluster): re-creates the entry's missing
   * records, keeps them at least `ttl` ms (the entry's physical life), and tells whether the entry
   * granted at `grantedAt` is valid now. Never rejects: false when the records' node did not answer
   * (a record not kept makes the entry invalid, nothing worse).
   */
  async ensure(key: string, tags: readonly string[], ttl: number, grantedAt: number): Promise<boolean> {
    const records = this.records(key, tags);
    const run = (): Promise<unknown> => this.d.port.run(ENSURE(records.length), [this.anchor, ...records], [RECORD_TTL_MS, ttl, grantedAt]);
    return this.d.io.run('write', run, this.on(key)).then((valid) => Number(valid) === 1, () => false);
  }

  /** Negative control only (UNSAFE.tagSnapshotAtWrite): the records' clock now, in µs. */
  async timeNow(): Promise<number> {
    const [s, us] = (await this.d.io.run('write', () => this.d.port.command(this.anchor, ['TIME']), this.on(undefined))) as [string, string];
    return Number(s) * 1_000_000 + Number(us);
  }

  /**
   * What THE TAG RULE says of the entry at `key` tagged `tags` and granted at `grantedAt` (see
   * `judge`): from the states this process keeps, or one round trip, to the records' node. Throws
   * RedisUnavailableError.
   */
  async judge(key: string, tags: readonly string[], grantedAt: number): Promise<TagVerdict> {
    const records = this.records(key, tags);
    // Kept states are plain D's: their verdict needs no server clock (valid or invalid, never expired).
    const kept = this.states.get(records);
    if (kept !== undefined) return judge(kept, grantedAt, 0);
    const ticket = this.states.begin();
    const reply = (await this.d.io.run('read', () => this.d.port.run(STATES(records.length), records, []), this.on(key))) as (string | null)[];
    if (reply.length !== records.length + 1) return INVALID;
    const states = reply.slice(0, records.length);
    this.states.fill(ticket, records, states);
    return judge(states, grantedAt, Number(reply[records.length]));
  }

  /** A tag note for `tags` in `scope` (heard here or sent from here): their records' kept states go. */
  dropStates(scope: string, tags: readonly string[]): void {
    this.states.drop(tags.map((tag) => tagRecordKey(this.d.prefix, scope, tag)));
  }

  /** A key of the records' slot, never written: routes a script with no record there. */
  private get anchor(): string {
    return tagSlot(this.d.prefix);
  }

  /** Io's target for a command on the records about the entry at `key`: the breaker charged is the records' node's, errors name `key`. */
  private on(key: string | undefined): OwnKey {
    return { namespace: '', redisKey: this.anchor, key };
  }

  /**
   * Sets the records of `tags` in `scope` to the server's TIME (`how`: as deleted, or as expired) and
   * publishes the note, then waits until every subscriber that received it acknowledged (each dropped
   * its copies first), or `ackWaitMs` passed. Throws RedisUnavailableError.
   */
  async invalidate(scope: string, tags: readonly string[], how: TagInvalidation): Promise<void> {
    const { d } = this;
    const id = randomBytes(9).toString('base64url');
    const ack = this.ackKey(id);
    const records = tags.map((tag) => tagRecordKey(d.prefix, scope, tag));
    const message = d.message(formatTagNote({ id, scope, tags }));
    const run = async (): Promise<unknown> => {
      const script = how === 'delete' ? INVALIDATE_TAGS : EXPIRE_TAGS;
      const reached = await d.port.run(script(records.length), [ack, ...records], [ACK_TTL_MS, d.channel, message]);
      await d.confirm?.(ack);
      return reached;
    };
    const own = { namespace: scope, redisKey: ack };
    // On a Cluster PUBLISH counts only the subscribers of the node that ran it: count every node's first (as clear()).
    const everywhere = await clusterReceivers(d.port, d.io, d.channel);
    const receivers = Math.max(Number(await d.io.run('delete', run, own)), everywhere ?? 0);
    const deadline = d.clock.now() + d.ackWaitMs;
    while (d.clock.now() < deadline) {
      const acked = Number((await d.io.run('delete', () => d.port.command(ack, ['GET', ack]), own)) ?? 0);
      if (acked >= receivers) return;
      await new Promise((resolve) => setTimeout(resolve, ACK_POLL_MS));
    }
  }

  /** Acknowledges a tag note once this process dropped its copies. Never throws. */
  ack(id: string): void {
    const key = this.ackKey(id);
    this.d.io.run('delete', () => this.d.port.run(ACK, [key], [ACK_TTL_MS]), { namespace: '', redisKey: key }).catch(() => undefined);
  }

  /** In the records' slot (the invalidation's script sets both); no space, so never a record. */
  private ackKey(id: string): string {
    return `${this.anchor}ack:${id}`;
  }
}
