import type { RedisClient } from '../redis-types.js';

/**
 * Lua scripts, registered with ioredis `defineCommand` (EVALSHA with a NOSCRIPT fallback).
 * Each touches only its KEYS, which share one hash slot. Never rely on ordering between a script
 * and other commands in one pipeline: after SCRIPT FLUSH ioredis retries the script after them.
 */

/**
 * The fence of an entry is one hash with two fields, so both share one key and one TTL:
 *   n  the grant counter: incremented on every grant, set and delete;
 *   w  the high-water mark: the token of the last accepted write, set or delete.
 * A write is accepted only if its token is above `w` (so accepted tokens strictly increase and a late,
 * stale rebuilder can never overwrite a newer value) and only while the hash exists (it outlives every
 * live grant through the watchdog, and every value through the write; a Redis restart without
 * persistence loses it, so a pre-restart holder's write is then refused).
 *
 * A missing counter is seeded from the server clock (TIME, in µs): the epoch. A token issued after a
 * restart is larger than any issued before it, unless more than one grant per microsecond was issued
 * for the key or the Redis host clock went backwards. Tokens stay below 2^53 (exact in Lua and JS).
 * Digits are concatenated as strings: Lua would print a large number in exponent form.
 */
const BUMP_FENCE = `
local function bump_fence(fence_key, ttl)
  if redis.call('HEXISTS', fence_key, 'n') == 0 then
    local t = redis.call('TIME')
    redis.call('HSET', fence_key, 'n', t[1] .. string.format('%06d', tonumber(t[2])))
  end
  local f = redis.call('HINCRBY', fence_key, 'n', 1)
  if redis.call('PTTL', fence_key) < tonumber(ttl) then redis.call('PEXPIRE', fence_key, ttl) end
  return f
end
`;

/**
 * read: KEYS[1]=value; ARGV[1]=max bytes.
 * → nil (absent) | {pttl, bytes} | {pttl, -1} (not a string) | {pttl, -2} (larger than the cap: never sent).
 * The size check happens here, before a single byte crosses the wire or reaches the decoder. Two
 * commands only: this runs on every cache hit.
 */
export const READ = `
local v = redis.pcall('GET', KEYS[1])
if not v then return nil end
local pttl = redis.call('PTTL', KEYS[1])
if type(v) ~= 'string' then return {pttl, -1} end
if string.len(v) > tonumber(ARGV[1]) then return {pttl, -2} end
return {pttl, v}
`;

/**
 * acquire: KEYS[1]=lock KEYS[2]=fence KEYS[3]=backoff; ARGV[1]=token ARGV[2]=lockTtl ('0' = fence only,
 * no lock) ARGV[3]=fence ttl.
 * → {1, fence} granted | {0, lock pttl} held by someone else | {2, backoff pttl} the loader failed
 * recently somewhere in the fleet: nobody may call it until the backoff lapses.
 * Lock and fence move in one atomic step.
 */
export const ACQUIRE = `${BUMP_FENCE}
if redis.call('EXISTS', KEYS[3]) == 1 then return {2, redis.call('PTTL', KEYS[3])} end
if ARGV[2] ~= '0' then
  if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return {0, redis.call('PTTL', KEYS[1])}
  end
end
return {1, bump_fence(KEYS[2], ARGV[3])}
`;

/**
 * write (fenced): KEYS[1]=value KEYS[2]=fence KEYS[3]=lock; ARGV[1]=token ARGV[2]=fence ARGV[3]=bytes
 * ARGV[4]=physical ttl ARGV[5]=channel ARGV[6]=message.
 * Accepts only if our fence is above the high-water mark (no newer write, set or delete was accepted)
 * and the fence hash exists. Releases our lock either way and announces an accepted write.
 * → 1 accepted | 0 rejected.
 */
export const WRITE = `
local ok = false
if redis.call('EXISTS', KEYS[2]) == 1 then
  ok = tonumber(ARGV[2]) > tonumber(redis.call('HGET', KEYS[2], 'w') or '0')
end
if ok then
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
  redis.call('HSET', KEYS[2], 'w', ARGV[2])
  if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[4]) then redis.call('PEXPIRE', KEYS[2], ARGV[4]) end
end
if redis.call('GET', KEYS[3]) == ARGV[1] then redis.call('DEL', KEYS[3]) end
if ok then
  redis.call('PUBLISH', ARGV[5], ARGV[6])
  return 1
end
return 0
`;

/** The negative control's write: WRITE without the fence check (tests only, see `unsafeUnfencedWrites`). */
export const WRITE_UNFENCED = WRITE.replace("ok = tonumber(ARGV[2]) > tonumber(redis.call('HGET', KEYS[2], 'w') or '0')", 'ok = true').replace(
  "if redis.call('EXISTS', KEYS[2]) == 1 then",
  'if true then',
);

/**
 * release: KEYS[1]=lock KEYS[2]=backoff; ARGV[1]=token ARGV[2]=channel ARGV[3]=message ('' = announce
 * nothing) ARGV[4]=backoff ms ('0' = none: set after a loader failure).
 * Deletes the lock only while it still holds our token: a release never frees another holder's lock.
 * → 1 released | 0 not ours (expired or taken over).
 */
export const RELEASE = `
local ok = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  ok = 1
end
if ARGV[4] ~= '0' then redis.call('SET', KEYS[2], '1', 'PX', ARGV[4]) end
if ARGV[3] ~= '' then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
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
 * token) cannot resurrect what was deleted.
 */
export const INVALIDATE = `${BUMP_FENCE}
local f = bump_fence(KEYS[2], ARGV[1])
redis.call('HSET', KEYS[2], 'w', f)
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
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

type Arg = string | Buffer | number;

/** The registered commands, as methods the rest of the library calls. */
export interface Scripts {
  read: (valueKey: string, maxBytes: number) => Promise<[number, Buffer | number] | null>;
  acquire: (lockKey: string, fenceKey: string, backoffKey: string, token: string, lockTtl: number, fenceTtl: number) => Promise<[number, number]>;
  write: (keys: [string, string, string], args: [string, string, Buffer, number, string, string]) => Promise<number>;
  /** Tests only: the unfenced write of the negative control. */
  writeUnfenced: (keys: [string, string, string], args: [string, string, Buffer, number, string, string]) => Promise<number>;
  release: (lockKey: string, backoffKey: string, token: string, channel: string, message: string, backoffMs: number) => Promise<number>;
  extend: (lockKey: string, fenceKey: string, token: string, ttl: number) => Promise<number>;
  invalidate: (valueKey: string, fenceKey: string, fenceTtl: number, channel: string, message: string) => Promise<number>;
  /** Redlock nodes only: take or re-own a lock key. */
  redlockAcquire: (lockKey: string, token: string, ttl: number) => Promise<number>;
}

// Versioned names: a script change gets a new name, so two library versions on one client never clash.
const NAMES = {
  read: ['sgReadV2', 1, READ],
  acquire: ['sgAcquireV2', 3, ACQUIRE],
  write: ['sgWriteV2', 3, WRITE],
  writeUnfenced: ['sgWriteUnfencedV2', 3, WRITE_UNFENCED],
  release: ['sgReleaseV2', 2, RELEASE],
  extend: ['sgExtendV1', 2, EXTEND],
  invalidate: ['sgInvalidateV2', 2, INVALIDATE],
  redlockAcquire: ['sgRedlockAcquireV1', 1, REDLOCK_ACQUIRE],
} as const;

type Command = (...args: Arg[]) => Promise<unknown>;

/** Registers the scripts on a client (idempotent) and returns typed callers. */
export function defineScripts(client: RedisClient): Scripts {
  const c = client as unknown as Record<string, Command | undefined>;
  for (const [name, keys, lua] of Object.values(NAMES)) {
    if (typeof c[name] !== 'function') client.defineCommand(name, { numberOfKeys: keys, lua });
  }
  const call = (name: string, ...args: Arg[]): Promise<unknown> => (c[name] as Command).apply(client, args);
  return {
    read: (k, max) => call(`${NAMES.read[0]}Buffer`, k, max) as Promise<[number, Buffer | number] | null>,
    acquire: (l, f, b, token, ttl, fttl) => call(NAMES.acquire[0], l, f, b, token, ttl, fttl) as Promise<[number, number]>,
    write: (keys, args) => call(NAMES.write[0], ...keys, ...args) as Promise<number>,
    writeUnfenced: (keys, args) => call(NAMES.writeUnfenced[0], ...keys, ...args) as Promise<number>,
    release: (l, b, token, ch, msg, backoff) => call(NAMES.release[0], l, b, token, ch, msg, backoff) as Promise<number>,
    extend: (l, f, token, ttl) => call(NAMES.extend[0], l, f, token, ttl) as Promise<number>,
    invalidate: (v, f, ttl, ch, msg) => call(NAMES.invalidate[0], v, f, ttl, ch, msg) as Promise<number>,
    redlockAcquire: (l, token, ttl) => call(NAMES.redlockAcquire[0], l, token, ttl) as Promise<number>,
  };
}
