import { script, type RedisPort, type Script, type ScriptArg } from '../client/port.js';

/**
 * Lua scripts, run through the client port (EVALSHA with a NOSCRIPT fallback, whatever the client).
 * Each touches only its KEYS, which share one hash slot. Never rely on ordering between a script
 * and other commands in one pipeline: after SCRIPT FLUSH a client retries the script after them.
 */

/**
 * THE FENCE RULE (the single source; docs/guarantees.md and LockLostError quote it).
 *
 * The fence of an entry is one hash, so its fields share one key and one TTL:
 *   n  the counter: every grant, set and delete takes the next value as its token;
 *   w  the high-water mark: the token of the last accepted write, set or delete — or the seed;
 *   s  the seed itself, kept so that a refused write can tell why (below).
 *
 *   A write (a rebuild's write or set()) is accepted iff the entry's fence hash exists and the
 *   write's token is greater than `w`. `w` is raised by every accepted write, every set(), every
 *   delete(), and by a re-seed: whenever the hash is (re-)created (first use, TTL lapse, eviction,
 *   a restart without persistence) both `n` and `w` start at the server's TIME in µs, so any token
 *   issued before the re-creation is refused.
 *
 * So accepted tokens per key strictly increase, a late, stale rebuilder never overwrites a newer value,
 * and a value read before a delete cannot come back after the fence was lost and re-created.
 *
 * A refused write says why: `superseded` (w was raised by a newer write, set or delete: the store
 * holds the newer state) or `fenceLost` (the hash is gone, or w is still its seed: no write was
 * accepted since the fence was lost, so the stored value, if any, predates the loss — a set() then
 * deletes it rather than leave it; cache.ts).
 *
 * Decided: a newer *grant* alone does NOT refuse an older write; only a newer accepted write, set,
 * delete or re-seed does. Fence-only grants (modes none/local) overlap by design; if each newer grant
 * refused the older ones, concurrent rebuilders would reject each other's writes: every rebuild but the
 * last-granted one would be wasted, and with grants still arriving none might land for a while, so the
 * key would be rebuilt over and over. The lock makes such overlap rare, and once the newer grant writes,
 * the older is refused.
 *
 * The hash outlives every live grant (the watchdog extends it) and every value (the write extends it).
 * Re-seeding from TIME keeps new tokens above old ones unless more than one token per microsecond was
 * issued for the key since the previous seed, or the Redis host clock went backwards. TIME in µs is
 * about 1.8e15 in 2026, far below 2^53 (9.0e15, exact in Lua doubles and JS numbers) until the 2250s.
 * Digits are concatenated as strings: Lua would print a large number in exponent form.
 */
const BUMP_FENCE = `
local function bump_fence(fence_key, ttl)
  if redis.call('HEXISTS', fence_key, 'n') == 0 then
    local t = redis.call('TIME')
    local seed = t[1] .. string.format('%06d', tonumber(t[2]))
    redis.call('HSET', fence_key, 'n', seed, 'w', seed, 's', seed)
  end
  local f = redis.call('HINCRBY', fence_key, 'n', 1)
  if redis.call('PTTL', fence_key) < tonumber(ttl) then redis.call('PEXPIRE', fence_key, ttl) end
  return f
end
`;

/**
 * How every note leaves a script (`note(channel, message)`). THE CHANNEL RULE: a channel with a hash
 * tag (`{`) is a key's wake channel (`notes: 'sharded'`, keys.ts), in the slot of the script's keys:
 * SPUBLISH, so on a Cluster the note stays in its shard. Where the server has no SPUBLISH (Redis <
 * 7.0: an error reply, caught), PUBLISH on the same channel; the subscriber falls back the same way
 * (ShardSubscriberPort). A channel without a tag (the cache's one broadcast channel; a prefix has no
 * braces) is PUBLISHed, as always.
 */
const NOTE = `
local function note(channel, message)
  if string.find(channel, '{', 1, true) then
    local r = redis.pcall('SPUBLISH', channel, message)
    if type(r) ~= 'table' or not r.err then return end
  end
  redis.call('PUBLISH', channel, message)
end
`;

/**
 * THE TAG RULE (tagged entries only; docs/tags.md quotes it).
 *
 * Each tag has a record, a string key holding a server TIME in µs (digits, below 2^53): the time of
 * its last invalidation (deleteByTag), or of its (re-)creation — followed, after an expireByTag, by a
 * space and the TIME of that (tags.ts: it makes an entry granted before it stale on read, not
 * invalid; the write rule below reads the first time only). A tagged entry carries its tags and
 * `grantedAt` G, the server's TIME in µs taken by the script that granted its write (a rebuild's
 * acquire, or set()'s), after that script created the records of the call's tags that were missing
 * (value G − 1: below G, so they do not refuse this grant).
 *
 *   A tagged entry is valid iff every one of its tags has a record and every record is below G.
 *   The fenced write of a tagged entry is refused (as superseded: note 'd', the stored value deleted
 *   and the fence's mark raised, as a write followed at once by the invalidation it lost to) when it
 *   is not valid at the time of the write: a tag invalidated since the grant, or a record missing.
 *
 * So a value whose grant came before a deleteByTag of one of its tags is never stored after it, and a
 * stored one is never valid after it, whatever the loader chose as tags (ctx.setOptions: their records
 * are compared with the grant, not the write). A record that is lost (eviction, a restart without
 * persistence) makes every entry carrying it invalid (unknown means invalid): the refused write
 * re-creates it (value TIME: entries granted before stay invalid), so it costs one rebuild, never a
 * resurrection. deleteByTag sets a record only where one exists (a missing record already invalidates
 * everything that carries it), keeping its TTL; a write extends its records' TTL to at least the
 * entry's own, so a record outlives the entries it governs unless it is evicted. An expireByTag
 * since the grant refuses nothing: the write lands, and its entry, granted before the expiry, is read
 * as stale (never fresh) until a rebuild granted after it replaces it.
 * As for the fence's re-seed, this holds unless two of these scripts ran in the same microsecond on
 * either side of a record's loss, or the Redis host clock went backwards.
 *
 * On a Cluster, an entry's keys and its records are in different slots, so no script can both read
 * the records and write the entry. There, every record of a cache shares one hash slot (tags.ts), so
 * D, X and G all come from the clock of that slot's master, and the rule holds with two changes:
 *   - G is taken there (TAG_GRANT_APART: it creates the call's missing records as above) by a script
 *     sent alongside the grant's acquire (it may run a little before or after it, on its own node),
 *     and the loader starts only once both answered: the load reads its source after G, so an
 *     invalidation it may have missed (set before that read) has D > G. Every single-key grant takes
 *     it, tags or not: a loader may tag its entry, and a G taken later (at the write, or when the
 *     loader names a tag) would let a load that read its source before a deleteByTag land after it.
 *   - The write is not refused (it cannot read the records): a tagged entry written after an
 *     invalidation it was granted before lands, and is never served, because every read of a tagged
 *     entry from Redis judges it against its records first (tags.ts, store.ts `vetted`): the read is
 *     the rule's gate there. TAG_ENSURE, sent alongside the write, re-creates missing records (value
 *     TIME, as the refused write does here), extends them to the entry's life, and tells whether the
 *     entry was valid then: if not, its writer counts the write as refused (no L1 copy of it, a
 *     `writeRejected` event), as here; only its bytes stay, read as a miss until replaced.
 */
const TAG_GRANT = `
local function tag_grant(first, ttl)
  local t = redis.call('TIME')
  local g = tonumber(t[1]) * 1000000 + tonumber(t[2])
  for i = first, #KEYS do
    if redis.call('EXISTS', KEYS[i]) == 0 then redis.call('SET', KEYS[i], string.format('%.0f', g - 1), 'PX', ttl) end
  end
  return g
end
`;

/**
 * A Cluster's grant time (THE TAG RULE, On a Cluster): KEYS[1]=any key of the records' slot (routes the
 * script there), KEYS[2…]=the call's records; ARGV[1]=a created record's ttl. → G.
 */
export const TAG_GRANT_APART = `${TAG_GRANT}
return tag_grant(2, ARGV[1])`;

/**
 * A Cluster's tagged write's records (THE TAG RULE, On a Cluster): KEYS as TAG_GRANT_APART's, for the
 * entry's records; ARGV[1]=a created record's ttl ARGV[2]=the entry's physical ttl ARGV[3]=its G. A
 * missing record is created with TIME (what carries it stays invalid: unknown means invalid), and every
 * record lives at least as long as the entry. → 1 the entry is valid now | 0 it is not (TAG_CHECK's test).
 */
export const TAG_ENSURE = `
local valid = 1
local g = tonumber(ARGV[3])
for i = 2, #KEYS do
  local r = redis.call('GET', KEYS[i])
  if r then r = string.match(r, '^%d+') end
  if not r then
    local t = redis.call('TIME')
    redis.call('SET', KEYS[i], t[1] .. string.format('%06d', tonumber(t[2])), 'PX', ARGV[1])
    valid = 0
  elseif tonumber(r) >= g then
    valid = 0
  end
  if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
end
return valid
`;

/**
 * read: KEYS[1]=value; ARGV[1]=max bytes.
 * → nil (absent) | {pttl, bytes, µs} | {pttl, -1, µs} (not a string) | {pttl, -2, µs} (larger than the
 * cap: never sent), where µs is the server's TIME in µs (an integer below 2^53 until the 2250s): the
 * reader's sample of the node's clock (node-clock.ts). The size check happens here, before a single byte crosses the wire or reaches the
 * decoder. A fresh hit is a plain GETRANGE instead (store.ts); this script answers where the plain
 * read cannot decide: no clock sample yet, an entry without `freshUntil`, a read too close to a
 * boundary between fresh, stale and kept to judge from the reader's clock.
 */
export const READ = `
local v = redis.pcall('GET', KEYS[1])
if not v then return nil end
local pttl = redis.call('PTTL', KEYS[1])
local t = redis.call('TIME')
local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
if type(v) ~= 'string' then return {pttl, -1, us} end
if string.len(v) > tonumber(ARGV[1]) then return {pttl, -2, us} end
return {pttl, v, us}
`;

/**
 * acquire: KEYS[1]=lock KEYS[2]=fence KEYS[3]=backoff; ARGV[1]=token ARGV[2]=lockTtl ('0' = fence only,
 * no lock) ARGV[3]=fence ttl ARGV[4]=ignore backoff ('1': an explicit set(), which calls no loader).
 * → {1, fence} granted | {0, lock pttl} held by someone else | {2, backoff pttl} the loader failed
 * recently somewhere in the fleet: nobody may call it until the backoff lapses.
 * Lock and fence move in one atomic step.
 */
const acquireThen = (granted: string): string => `${BUMP_FENCE}
if ARGV[4] ~= '1' and redis.call('EXISTS', KEYS[3]) == 1 then return {2, redis.call('PTTL', KEYS[3])} end
if ARGV[2] ~= '0' then
  if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return {0, redis.call('PTTL', KEYS[1])}
  end
end
${granted}
`;
export const ACQUIRE = acquireThen(`return {1, bump_fence(KEYS[2], ARGV[3])}`);

/**
 * acquireTagged: ACQUIRE with KEYS[4…]=the call's tag records and ARGV[5]=a record's ttl when created.
 * Granted: → {1, fence, G}, G the grant's time (THE TAG RULE), after the missing records were created.
 */
export const ACQUIRE_TAGGED = `${TAG_GRANT}${acquireThen(`local f = bump_fence(KEYS[2], ARGV[3])
return {1, f, tag_grant(4, ARGV[5])}`)}`;

/**
 * acquireRead: ACQUIRE with KEYS[4]=value and ARGV[5]=max bytes; when granted, the entry is read in
 * the same atomic step, so the rebuilder's re-read ("someone may have just written") costs no round
 * trip of its own: → {1, fence} granted, no entry | {1, fence, pttl, bytes | -1 | -2} granted, READ's
 * answer for the entry | {0, …} and {2, …} as ACQUIRE. The read part answers exactly as READ does
 * (the same cap before a byte leaves Redis; acquire-read.test.ts compares the two on one entry).
 * Refused or backing off, nothing is read: a waiter re-reads after its wake anyway.
 */
export const ACQUIRE_READ = acquireThen(`local f = bump_fence(KEYS[2], ARGV[3])
local v = redis.pcall('GET', KEYS[4])
if not v then return {1, f} end
local pttl = redis.call('PTTL', KEYS[4])
if type(v) ~= 'string' then return {1, f, pttl, -1} end
if string.len(v) > tonumber(ARGV[5]) then return {1, f, pttl, -2} end
return {1, f, pttl, v}`);

/**
 * acquireReadTagged: ACQUIRE_READ with KEYS[5…]=the call's tag records and ARGV[6]=a record's ttl when
 * created: → {1, fence, G} granted, no entry | {1, fence, G, pttl, bytes | -1 | -2} | {0, …} | {2, …}.
 */
export const ACQUIRE_READ_TAGGED = `${TAG_GRANT}${acquireThen(`local f = bump_fence(KEYS[2], ARGV[3])
local g = tag_grant(5, ARGV[6])
local v = redis.pcall('GET', KEYS[4])
if not v then return {1, f, g} end
local pttl = redis.call('PTTL', KEYS[4])
if type(v) ~= 'string' then return {1, f, g, pttl, -1} end
if string.len(v) > tonumber(ARGV[5]) then return {1, f, g, pttl, -2} end
return {1, f, g, pttl, v}`)}`;

/**
 * write (fenced): KEYS[1]=value KEYS[2]=fence KEYS[3]=lock; ARGV[1]=token ARGV[2]=fence ARGV[3]=bytes
 * ARGV[4]=physical ttl ARGV[5]=channel ARGV[6]=message ARGV[7]=message if rejected ARGV[8]=fresh ttl.
 * Applies the fence rule (top of this file). The bytes end in the entry's `freshUntil` slot (a msgpack
 * float64, codec.ts): its 8 bytes become TIME + the fresh ttl, in ms of this server's clock, so that
 * a plain read can tell fresh from stale (node-clock.ts) and Redis's own expiry (PX, from the same
 * clock) stays exactly the fresh time plus the grace. `struct.pack('>d')`: big-endian, as msgpack.
 * Releases our lock either way and announces either way:
 * an accepted write with ARGV[6], a rejected one with ARGV[7] ("released without a value"), so waiters
 * are woken at once instead of polling.
 * → 1 accepted | 0 rejected: superseded (a newer write, set or delete raised w) | -1 rejected: the fence
 * was lost (no hash, or w is still its seed `s`: nothing accepted since the re-seed).
 */
const writeScript = (fenced: boolean, tagged = false): string => `${NOTE}
local exists = redis.call('EXISTS', KEYS[2]) == 1
local w = redis.call('HGET', KEYS[2], 'w')
local ok = ${fenced ? "exists and tonumber(ARGV[2]) > tonumber(w or '0')" : 'true'}
${tagged ? TAG_CHECK : ''}
if ok then
  local body = ARGV[3]
  if string.byte(body, -9) == 0xcb then
    local t = redis.call('TIME')
    body = string.sub(body, 1, -9) .. struct.pack('>d', tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000 + tonumber(ARGV[8]))
  end
  redis.call('SET', KEYS[1], body, 'PX', ARGV[4])
  redis.call('HSET', KEYS[2], 'w', ARGV[2])
  if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[4]) then redis.call('PEXPIRE', KEYS[2], ARGV[4]) end${tagged ? TAG_EXTEND : ''}
end
if redis.call('GET', KEYS[3]) == ARGV[1] then redis.call('DEL', KEYS[3]) end${tagged ? TAG_REFUSED : ''}
if ok then
  note(ARGV[5], ARGV[6])
  return 1
end
note(ARGV[5], ARGV[7])
if not exists or w == redis.call('HGET', KEYS[2], 's') then return -1 end
return 0
`;

/**
 * The tagged write's check (THE TAG RULE): KEYS[4…]=the entry's tag records, ARGV[9]=G, ARGV[10]=a
 * record's ttl when re-created, ARGV[11]=the note of a write refused by a tag alone. Runs only where the
 * fence accepts; a missing record is re-created (value TIME) so that the next grant's write can land.
 */
const TAG_CHECK = `
local stale_tag = false
if ok then
  local g = tonumber(ARGV[9])
  for i = 4, #KEYS do
    local r = redis.call('GET', KEYS[i])
    if r then r = string.match(r, '^%d+') end
    if not r then
      local t = redis.call('TIME')
      redis.call('SET', KEYS[i], t[1] .. string.format('%06d', tonumber(t[2])), 'PX', ARGV[10])
      stale_tag = true
    elseif tonumber(r) >= g then
      stale_tag = true
    end
  end
  ok = not stale_tag
end
`;

/** An accepted tagged write: its records live at least as long as the entry. */
const TAG_EXTEND = `
  for i = 4, #KEYS do
    if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[4]) then redis.call('PEXPIRE', KEYS[i], ARGV[4]) end
  end`;

/**
 * Refused by a tag alone (the fence accepted it): the write happened, then the invalidation it lost
 * to: the stored value (older than this grant) goes, the mark rises to this token (no older rebuild
 * lands either), and a 'd' note drops every L1 copy and wakes the waiters.
 */
const TAG_REFUSED = `
if stale_tag then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[2], 'w', ARGV[2])
  note(ARGV[5], ARGV[11])
  return 0
end`;

// A missing 'w' only exists in a hash seeded by an older library version (before w was seeded); a
// hash seeded by an older version has no 's' either (a refusal there reads as superseded).
export const WRITE = writeScript(true);

/** The negative control's write: WRITE without the fence check (tests only, see `unsafeUnfencedWrites`). */
export const WRITE_UNFENCED = writeScript(false);

/** WRITE of a tagged entry: KEYS[4…] its tag records, ARGV[9…11] as TAG_CHECK says. */
export const WRITE_TAGGED = writeScript(true, true);

/**
 * release: KEYS[1]=lock KEYS[2]=backoff; ARGV[1]=token ARGV[2]=channel ARGV[3]=message ('' = announce
 * nothing) ARGV[4]=backoff ms ('0' = none: set after a loader failure).
 * Deletes the lock only while it still holds our token: a release never frees another holder's lock.
 * Announces only when no one else holds the lock: the waiters then wait on us (or on no one) and act
 * on the note; once another holder has it, they wait on that holder, and our note (a late `u` or `e`,
 * a release retried after a reconnect) would tell them about a rebuild that is not theirs.
 * → 1 released | 0 not ours (expired or taken over).
 */
export const RELEASE = `${NOTE}
local ok = 0
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  ok = 1
end
if ARGV[4] ~= '0' then redis.call('SET', KEYS[2], '1', 'PX', ARGV[4]) end
if ARGV[3] ~= '' and (ok == 1 or not holder) then note(ARGV[2], ARGV[3]) end
return ok
`;

/**
 * extend (watchdog): KEYS[1]=lock KEYS[2]=fence; ARGV[1]=token ('' = fence-only grant) ARGV[2]=ttl.
 * → 1 still ours (lock and fence pushed to at least ttl) | 0 lost.
 */
export const EXTEND = `
if ARGV[1] ~= '' then
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
return 1
`;

/**
 * invalidate (delete): KEYS[1]=value KEYS[2]=fence; ARGV[1]=fence ttl ARGV[2]=channel ARGV[3]=message.
 * Takes a new token and raises the high-water mark to it, so a rebuild already in flight (an older
 * token) cannot resurrect what was deleted. If the hash is later lost (TTL, eviction), its re-seed
 * keeps that promise (the fence rule above).
 */
export const INVALIDATE = `${BUMP_FENCE}${NOTE}
local f = bump_fence(KEYS[2], ARGV[1])
redis.call('HSET', KEYS[2], 'w', f)
redis.call('DEL', KEYS[1])
note(ARGV[2], ARGV[3])
return f
`;

/**
 * clearEntry (the cache's clear(), per entry found by SCAN): KEYS[1]=value KEYS[2]=fence; ARGV[1]=fence
 * ttl. INVALIDATE without its note: one note for the whole clear goes out at its end.
 */
export const CLEAR_ENTRY = `${BUMP_FENCE}
local f = bump_fence(KEYS[2], ARGV[1])
redis.call('HSET', KEYS[2], 'w', f)
redis.call('DEL', KEYS[1])
return f
`;

/**
 * Redlock node acquire: KEYS[1]=lock; ARGV[1]=token ARGV[2]=ttl. → 1 ours | 0 held by another token.
 * A key already holding our own token (left over on a minority node by a failed attempt) counts as
 * ours and is refreshed, so a retry with the same token is never blocked by itself.
 */
export const REDLOCK_ACQUIRE = `
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if cur then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`;

/** READ's answer: nil, or PTTL, the bytes (or -1 / -2) and the server's TIME in µs. */
export type ReadReply = [pttl: number, body: Buffer | number, micros: number] | null;

/** acquireRead's answer: ACQUIRE's pair, or when granted with an entry, the fence followed by READ's [pttl, bytes | -1 | -2]. */
export type AcquireReadReply = [number, number] | [1, number, number, Buffer | number];

/** WRITE's ARGV: token, fence, bytes, physical ttl, channel, note if accepted, note if rejected. */
export type WriteArgs = [token: string, fence: string, bytes: Buffer, ttl: number, channel: string, accepted: string, rejected: string, freshTtl: number];

/** A tagged call's part of an acquisition: its tags' record keys, and how long a record created by the grant lives. */
export interface TagGrantArgs {
  readonly records: readonly string[];
  readonly recordTtl: number;
}

/** A tagged write's part: the entry's tag records, its grant time G (µs), a re-created record's ttl, the note of a write refused by a tag. */
export interface TagWriteArgs {
  readonly records: readonly string[];
  readonly grantedAt: number;
  readonly recordTtl: number;
  readonly deleted: string;
}

/** The registered commands, as methods the rest of the library calls. */
export interface Scripts {
  read: (valueKey: string, maxBytes: number) => Promise<ReadReply>;
  /** Not a script: GETRANGE valueKey 0 end as a Buffer (a fresh hit: store.ts). */
  getRange: (valueKey: string, end: string) => Promise<Buffer>;
  /**
   * `ignoreBackoff`: an explicit set() is never refused by a fleet-wide failBackoff (it runs no loader).
   * Optional only until every caller passes it; omitted means false.
   */
  acquire: (lockKey: string, fenceKey: string, backoffKey: string, token: string, lockTtl: number, fenceTtl: number, ignoreBackoff: boolean) => Promise<[number, number]>;
  /** acquire, and when granted READ's answer for the entry in the same step (never ignores a backoff: a set() reads nothing). */
  acquireRead: (lockKey: string, fenceKey: string, backoffKey: string, valueKey: string, token: string, lockTtl: number, fenceTtl: number, maxBytes: number) => Promise<AcquireReadReply>;
  write: (keys: [string, string, string], args: WriteArgs) => Promise<number>;
  /** ACQUIRE_TAGGED: → {1, fence, G} | {0, pttl} | {2, pttl}. */
  acquireTagged: (lockKey: string, fenceKey: string, backoffKey: string, token: string, lockTtl: number, fenceTtl: number, ignoreBackoff: boolean, tags: TagGrantArgs) => Promise<number[]>;
  /** ACQUIRE_READ_TAGGED: → {1, fence, G} | {1, fence, G, pttl, bytes | -1 | -2} | {0, …} | {2, …}. */
  acquireReadTagged: (lockKey: string, fenceKey: string, backoffKey: string, valueKey: string, token: string, lockTtl: number, fenceTtl: number, maxBytes: number, tags: TagGrantArgs) => Promise<unknown[]>;
  /** WRITE_TAGGED. */
  writeTagged: (keys: [string, string, string], args: WriteArgs, tags: TagWriteArgs) => Promise<number>;
  /** Tests only: the unfenced write of the negative control. */
  writeUnfenced: (keys: [string, string, string], args: WriteArgs) => Promise<number>;
  release: (lockKey: string, backoffKey: string, token: string, channel: string, message: string, backoffMs: number) => Promise<number>;
  extend: (lockKey: string, fenceKey: string, token: string, ttl: number) => Promise<number>;
  invalidate: (valueKey: string, fenceKey: string, fenceTtl: number, channel: string, message: string) => Promise<number>;
  clearEntry: (valueKey: string, fenceKey: string, fenceTtl: number) => Promise<number>;
  /** Redlock nodes only: take or re-own a lock key. */
  redlockAcquire: (lockKey: string, token: string, ttl: number) => Promise<number>;
}

// Versioned names: a script change gets a new name, so two library versions on one client never clash.
const SCRIPTS = {
  read: script('sgReadV3', 1, READ, true),
  acquire: script('sgAcquireV4', 3, ACQUIRE),
  acquireRead: script('sgAcquireReadV1', 4, ACQUIRE_READ),
  write: script('sgWriteV6', 3, WRITE),
  writeUnfenced: script('sgWriteUnfencedV6', 3, WRITE_UNFENCED),
  release: script('sgReleaseV4', 2, RELEASE),
  extend: script('sgExtendV1', 2, EXTEND),
  invalidate: script('sgInvalidateV5', 2, INVALIDATE),
  clearEntry: script('sgClearEntryV2', 2, CLEAR_ENTRY),
  redlockAcquire: script('sgRedlockAcquireV1', 1, REDLOCK_ACQUIRE),
} as const;

type Name = keyof typeof SCRIPTS;

/**
 * A script whose last keys are a variable number of tag records: one registered name per key count
 * (the client port sends a fixed key count per script), all with the same Lua (the same SHA).
 */
function variadic(name: string, fixedKeys: number, lua: string): (records: number) => Script {
  const byCount = new Map<number, Script>();
  return (records) => {
    let s = byCount.get(records);
    if (s === undefined) byCount.set(records, (s = script(`${name}k${records}`, fixedKeys + records, lua)));
    return s;
  };
}

const TAGGED = {
  acquire: variadic('sgAcquireTaggedV1', 3, ACQUIRE_TAGGED),
  acquireRead: variadic('sgAcquireReadTaggedV1', 4, ACQUIRE_READ_TAGGED),
  write: variadic('sgWriteTaggedV2', 3, WRITE_TAGGED),
} as const;

/** Typed callers of the scripts on one client (through its port). */
export function defineScripts(port: Pick<RedisPort, 'run' | 'getRange'>): Scripts {
  const call = (name: Name, keys: readonly string[], args: readonly ScriptArg[], bytes = false): Promise<unknown> => port.run(SCRIPTS[name], keys, args, bytes);
  return {
    read: (k, max) => call('read', [k], [max], true) as Promise<ReadReply>,
    getRange: (k, end) => port.getRange(k, end),
    acquire: (l, f, b, token, ttl, fttl, ignoreBackoff = false) => call('acquire', [l, f, b], [token, ttl, fttl, ignoreBackoff ? '1' : '0']) as Promise<[number, number]>,
    acquireRead: (l, f, b, v, token, ttl, fttl, max) => call('acquireRead', [l, f, b, v], [token, ttl, fttl, '0', max], true) as Promise<AcquireReadReply>,
    write: (keys, args) => call('write', keys, args) as Promise<number>,
    acquireTagged: (l, f, b, token, ttl, fttl, ignoreBackoff, tags) =>
      port.run(TAGGED.acquire(tags.records.length), [l, f, b, ...tags.records], [token, ttl, fttl, ignoreBackoff ? '1' : '0', tags.recordTtl]) as Promise<number[]>,
    acquireReadTagged: (l, f, b, v, token, ttl, fttl, max, tags) =>
      port.run(TAGGED.acquireRead(tags.records.length), [l, f, b, v, ...tags.records], [token, ttl, fttl, '0', max, tags.recordTtl], true) as Promise<unknown[]>,
    writeTagged: (keys, args, tags) => port.run(TAGGED.write(tags.records.length), [...keys, ...tags.records], [...args, tags.grantedAt, tags.recordTtl, tags.deleted]) as Promise<number>,
    writeUnfenced: (keys, args) => call('writeUnfenced', keys, args) as Promise<number>,
    release: (l, b, token, ch, msg, backoff) => call('release', [l, b], [token, ch, msg, backoff]) as Promise<number>,
    extend: (l, f, token, ttl) => call('extend', [l, f], [token, ttl]) as Promise<number>,
    invalidate: (v, f, ttl, ch, msg) => call('invalidate', [v, f], [ttl, ch, msg]) as Promise<number>,
    clearEntry: (v, f, ttl) => call('clearEntry', [v, f], [ttl]) as Promise<number>,
    redlockAcquire: (l, token, ttl) => call('redlockAcquire', [l], [token, ttl]) as Promise<number>,
  };
}
