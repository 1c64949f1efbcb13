/**
 * The fence rule (src/lock/scripts.ts, header): a write is accepted iff the fence hash exists and its
 * token is above the high-water mark `w`, which every accepted write, set, delete and every re-seed of
 * the hash raises. These tests lose the hash the ways production loses it — a TTL lapse while a holder
 * is paused, eviction (DEL as eviction would, and a real `allkeys-lru` run), and check that a value from
 * before the loss is never written or served, while a loss costs at most a duplicate rebuild.
 */
import { Redis, type Command } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCache, type Cache, type CacheOptions } from '../../src/index.js';
import { entryKeys, type EntryKeys } from '../../src/keys.js';
import { deferred, heldRebuild, nextEvent } from '../support/harness.js';
import { startRedisServer, type RedisServer } from '../support/redis-server.js';
import { Worker } from '../support/workers.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const clients: Redis[] = [];
const caches: Cache[] = [];
const workers: Worker[] = [];
let server: RedisServer;
let admin: Redis;

beforeAll(async () => {
  server = await startRedisServer();
  admin = client(server.adminUrl);
});
afterAll(async () => {
  await Promise.all(workers.map((w) => w.kill()));
  await Promise.all(caches.map((c) => c.close()));
  for (const c of clients) c.disconnect();
  await server.stop();
});

function client(url: string): Redis {
  const c = new Redis(url, { maxRetriesPerRequest: 1 });
  c.on('error', () => undefined);
  clients.push(c);
  return c;
}
async function cache(prefix: string, extra: Partial<CacheOptions> = {}, url = server.url): Promise<Cache> {
  const c = createCache({ redis: client(url), prefix, ...extra });
  caches.push(c);
  await c.ready();
  return c;
}
/** Resolves with the reply to the first script call `c` sends naming `lockKey` (the lock attempt). */
function lockAttemptAnswered(c: Redis, lockKey: string): Promise<unknown[]> {
  const sent = deferred<unknown[]>();
  const original = c.sendCommand.bind(c);
  c.sendCommand = ((command: Command, stream?: never) => {
    // evalsha, or eval after a NOSCRIPT: whichever is answered with a reply.
    if ((command.name === 'evalsha' || command.name === 'eval') && command.args.some((arg) => String(arg) === lockKey)) {
      command.promise.then(sent.resolve, () => undefined);
    }
    return original(command, stream);
  });
  return sent.promise;
}
/** A reader that never saw the key (its L1 is empty): what every other process would be served. */
async function freshRead(prefix: string, key: string): Promise<unknown> {
  const reader = await cache(prefix);
  return reader.get(key);
}

describe('the fence survives its own loss: a value from before the loss is never written', () => {
  it('holder A, SIGSTOPped past its lease with a value read before a delete, cannot write it once the fence hash was lost and re-created by B', async () => {
    const prefix = 'reseed-worker';
    const key = 'k';
    const keys = entryKeys(prefix, key);
    const a = await Worker.start({ url: server.url, adminUrl: server.adminUrl, prefix });
    workers.push(a);
    const c = await cache(prefix);
    // A rebuilds a cold key (its loader reads the data the delete below invalidates) and is frozen
    // past its 300 ms lease.
    const id = a.call(key, 1, { ttl: 60_000, lockTtl: 300 }, { kind: 'gate', gate: 'a' });
    await a.loaderStarted(id);
    a.pause();
    await c.delete(key);
    await admin.del(keys.fence); // its TTL lapsed, or it was evicted
    await sleep(400); // A's lock lapses too: nothing extends it while A is stopped
    const b = await heldRebuild<string>(c, key, { ttl: 60_000, lockTtl: 60_000 }); // B re-creates the fence
    a.open('a', 'stale-from-A');
    a.resume();
    const [result] = await a.results(id);
    expect(result?.value).toBe('stale-from-A'); // A's own callers get what their loader returned…
    const computed = await a.next((e) => e.ev === 'cache' && e.name === 'computed');
    expect(computed.data?.written).toBe(false); // …but the fence refused it
    expect(await admin.exists(keys.value)).toBe(0);
    expect(await freshRead(prefix, key)).toBeUndefined();
    b.open('from-B');
    expect(await b.call).toBe('from-B');
    expect(await freshRead(prefix, key)).toBe('from-B');
  });

  it('fence-only grants (lock none): a rebuild granted before the fence hash was lost is refused once another grant re-created it', async () => {
    const prefix = 'reseed-none';
    const key = 'k';
    const keys = entryKeys(prefix, key);
    const a = await cache(prefix);
    const b = await cache(prefix);
    const older = await heldRebuild<string>(a, key, { ttl: 60_000, lock: 'none' });
    await b.delete(key);
    await admin.del(keys.fence);
    const newer = await heldRebuild<string>(b, key, { ttl: 60_000, lock: 'none' });
    const computed = nextEvent(a, 'computed');
    older.open('older');
    expect(await older.call).toBe('older');
    expect((await computed).written).toBe(false);
    expect(await freshRead(prefix, key)).toBeUndefined();
    newer.open('newer');
    await newer.call;
    expect(await freshRead(prefix, key)).toBe('newer');
  });

  it('a newer grant alone does not refuse an older write (the documented decision); a newer accepted write does', async () => {
    const prefix = 'grant-alone';
    const a = await cache(prefix);
    const b = await cache(prefix);
    /** Lets a held rebuild finish with `value`; resolves whether the fence accepted its write. */
    const finish = async (c: Cache, held: { call: Promise<string>; open: (v: string) => void }, value: string) => {
      const computed = nextEvent(c, 'computed');
      held.open(value);
      await held.call;
      return (await computed).written;
    };
    // Older writes first: accepted (the newer grant alone does not refuse it), then the newer one lands above it.
    let older = await heldRebuild<string>(a, 'k1', { ttl: 60_000, lock: 'none' });
    let newer = await heldRebuild<string>(b, 'k1', { ttl: 60_000, lock: 'none' });
    expect(await finish(a, older, 'older')).toBe(true);
    expect(await finish(b, newer, 'newer')).toBe(true);
    expect(await freshRead(prefix, 'k1')).toBe('newer');
    // Newer writes first: the older one is then refused.
    older = await heldRebuild<string>(a, 'k2', { ttl: 60_000, lock: 'none' });
    newer = await heldRebuild<string>(b, 'k2', { ttl: 60_000, lock: 'none' });
    expect(await finish(b, newer, 'newer')).toBe(true);
    expect(await finish(a, older, 'older')).toBe(false);
    expect(await freshRead(prefix, 'k2')).toBe('newer');
  });
});

describe('a rejected write wakes waiters at once', () => {
  it("the holder's refused write publishes note 'r': a waiter with a 10-minute poll takes over without polling", async () => {
    const prefix = 'reject-note';
    const key = 'k';
    const keys = entryKeys(prefix, key);
    const a = await cache(prefix);
    const wClient = client(server.url);
    const refused = lockAttemptAnswered(wClient, keys.lock);
    const w = createCache({ redis: wClient, prefix });
    caches.push(w);
    await w.ready();
    const b = await cache(prefix);
    const holder = await heldRebuild<string>(a, key, { ttl: 60_000, lock: 'single' });
    const waiterRan = deferred<void>();
    const waiting = w.getOrCompute(key, () => (waiterRan.resolve(), 'from-waiter'), { ttl: 60_000, lock: 'single', pollInterval: 600_000, waitTimeout: 600_000 });
    expect((await refused)[0]).toBe(0); // the waiter found the lock held: it now sleeps on its 10-minute poll
    await admin.del(keys.fence); // lost (lapsed or evicted) …
    const reseeder = await heldRebuild<string>(b, key, { ttl: 60_000, lock: 'none' }); // … and re-created, silently
    const computed = nextEvent(a, 'computed');
    holder.open('refused');
    await holder.call;
    expect((await computed).written).toBe(false);
    const woke = await Promise.race([waiterRan.promise.then(() => 'woken'), sleep(5000).then(() => 'still polling')]);
    expect(woke).toBe('woken');
    expect(await waiting).toBe('from-waiter');
    reseeder.open('late');
    await reseeder.call;
  });
});

describe('eviction of fence, lock and value keys: at most a duplicate rebuild, never an older value over a newer one', () => {
  /**
   * A is granted first and holds; its lock and fence are lost; B rebuilds and writes 'newer'; the value
   * and fence are lost; R misses, is granted (re-creating the fence) and holds; A finally writes 'older'.
   * Readers must never see 'older' after they saw 'newer'.
   */
  async function scenario(prefix: string, lose: (keys: string[]) => Promise<void>, url = server.url) {
    const key = 'k';
    const keys: EntryKeys = entryKeys(prefix, key);
    const a = await cache(prefix, {}, url);
    const b = await cache(prefix, {}, url);
    const r = await cache(prefix, {}, url);
    const freshRead = async (p: string, k: string) => (await cache(p, {}, url)).get(k);
    let runs = 0;
    const count = () => void runs++;
    const older = await heldRebuild<string>(a, key, { ttl: 60_000, lockTtl: 60_000 }, count);
    await lose([keys.lock, keys.fence]);
    expect(await b.getOrCompute(key, () => (count(), 'newer'), { ttl: 60_000, lockTtl: 60_000 })).toBe('newer');
    const seen: unknown[] = [await freshRead(prefix, key)];
    await lose([keys.value, keys.fence]);
    const rebuilding = await heldRebuild<string>(r, key, { ttl: 60_000, lockTtl: 60_000 }, count);
    older.open('older');
    expect(await older.call).toBe('older');
    seen.push(await freshRead(prefix, key), await admin.exists(keys.value));
    rebuilding.open('rebuilt');
    await rebuilding.call;
    seen.push(await freshRead(prefix, key));
    return { seen, runs };
  }

  it('keys DELeted as eviction would: the older write is refused; one rebuild per loss', async () => {
    const { seen, runs } = await scenario('evict-del', async (lost) => void (await admin.del(...lost)));
    expect(seen).toEqual(['newer', undefined, 0, 'rebuilt']);
    expect(runs).toBe(3); // A, B after the first loss, R after the second: no more
  });

  it("a real eviction run (maxmemory + allkeys-lru): the older write is refused; one rebuild per loss", async () => {
    const evicting = await startRedisServer();
    const evictAdmin = client(evicting.adminUrl);
    const used = Number(/used_memory:(\d+)/.exec(await evictAdmin.info('memory'))?.[1]);
    await evictAdmin.config('SET', 'maxmemory', String(used + 4 * 1024 * 1024));
    await evictAdmin.config('SET', 'maxmemory-policy', 'allkeys-lru');
    const prefix = 'evict-lru';
    let filler = 0;
    let evictedRounds = 0;
    // Writes filler until every key in `lost` has been evicted by Redis itself.
    const evict = async (lost: string[]) => {
      for (let round = 0; round < 400; round++) {
        const p = evictAdmin.pipeline();
        for (let i = 0; i < 200; i++) p.set(`filler:${filler++}`, 'x'.repeat(4096));
        await p.exec();
        if ((await evictAdmin.exists(...lost)) === 0) {
          evictedRounds++;
          // Free the memory again, so nothing the scenario writes next is evicted (the LRU clock
          // ticks in seconds: keys written within one second are equally old to it).
          const unlink = evictAdmin.pipeline();
          for (let i = 0; i < filler; i++) unlink.unlink(`filler:${i}`);
          await unlink.exec();
          return;
        }
      }
      throw new Error(`allkeys-lru did not evict ${lost.join(', ')}`);
    };
    try {
      const { seen, runs } = await scenario(prefix, evict, evicting.url);
      expect(evictedRounds).toBe(2);
      expect(Number(/evicted_keys:(\d+)/.exec(await evictAdmin.info('stats'))?.[1])).toBeGreaterThan(0);
      expect(seen).toEqual(['newer', undefined, 0, 'rebuilt']);
      expect(runs).toBe(3);
    } finally {
      await evicting.stop();
    }
  });
});

describe("every key the library writes expires (README: volatile-* policies evict only the cache's keys)", () => {
  it('after a rebuild, a set(), a delete(), a refused write and a failed loader with backoff, every key under the prefix has a TTL', async () => {
    const prefix = 'all-expire';
    const c = await cache(prefix, { defaults: { failBackoff: 60_000 } });
    await c.getOrCompute('rebuilt', () => 'v', 60_000);
    await c.set('set', 'v', 60_000);
    await c.set('deleted', 'v', 60_000);
    await c.delete('deleted');
    await c.delete('never-written');
    await c.getOrCompute('failed', () => Promise.reject(new Error('x')), 60_000).catch(() => undefined);
    const older = await heldRebuild<string>(c, 'refused', { ttl: 60_000, lock: 'none' });
    await c.set('refused', 'newer', 60_000);
    older.open('older');
    await older.call;
    const keys = (await admin.keys(`${prefix}:*`)).sort();
    expect(keys.length).toBeGreaterThanOrEqual(10);
    const ttls = await Promise.all(keys.map(async (k) => [k, await admin.pttl(k)] as const));
    expect(ttls.filter(([, ttl]) => ttl <= 0)).toEqual([]);
  });
});

describe('set() is an explicit write', () => {
  it('works while a failBackoff is active (the backoff only stops loaders)', async () => {
    const c = await cache('set-backoff', { defaults: { failBackoff: 60_000 } });
    await expect(c.getOrCompute('k', () => Promise.reject(new Error('origin down')), 60_000)).rejects.toThrow('origin down');
    await expect(c.getOrCompute('k', () => 'v', 60_000)).rejects.toMatchObject({ code: 'ERR_BACKOFF' });
    await c.set('k', 'explicit', 60_000);
    expect(await freshRead('set-backoff', 'k')).toBe('explicit');
  });

  /** Runs `before` right before `setterClient` sends the set's write script (the one on both the value and the fence key), then sends it. */
  function beforeSetWrite(setterClient: Redis, keys: { value: string; fence: string }, before: () => Promise<unknown>): void {
    const original = setterClient.sendCommand.bind(setterClient);
    let done = false;
    setterClient.sendCommand = ((command: Command, stream?: never) => {
      const names = command.args.map(String);
      if (!done && (command.name === 'evalsha' || command.name === 'eval') && names.includes(keys.value) && names.includes(keys.fence)) {
        done = true;
        void before().then(() => original(command, stream), (err: unknown) => command.reject(err as Error));
        return command.promise;
      }
      return original(command, stream);
    });
  }
  // Seen in the soak campaign: a del-fence-lock fault landed between a set()'s grant and its write; the
  // fence refused the write, set() resolved, and every process served the older value for seconds.
  it("a set() whose fence hash is lost between its grant and its write leaves no older value anywhere: not in the store, not in another process's L1", async () => {
    const prefix = 'set-fence-lost';
    const keys = entryKeys(prefix, 'k');
    const setterClient = client(server.url);
    const setter = createCache({ redis: setterClient, prefix, local: { max: 100 } });
    caches.push(setter);
    await setter.ready();
    const other = await cache(prefix, { local: { max: 100 } });
    await other.getOrCompute('k', () => 'old', 60_000);
    expect(await setter.get('k')).toBe('old');
    expect(await other.get('k')).toBe('old'); // kept in its L1
    // The fence hash goes (as an eviction, a restart or a lapse would) right before the set's write is sent.
    beforeSetWrite(setterClient, keys, () => admin.del(keys.fence));
    const refused = nextEvent(setter, 'writeRejected');
    const dropped = nextEvent(other, 'remoteChange');
    await setter.set('k', 'new', 60_000);
    await refused; // the fault hit the set's write
    expect(await setter.get('k')).not.toBe('old');
    expect(await freshRead(prefix, 'k')).not.toBe('old');
    await dropped;
    expect(await other.get('k')).not.toBe('old');
  });



  /** A setter cache on a client of its own (to intercept its write) and another cache, key 'k' holding 'old'. */
  async function setterAndOther(prefix: string) {
    const keys = entryKeys(prefix, 'k');
    const setterClient = client(server.url);
    const setter = createCache({ redis: setterClient, prefix });
    caches.push(setter);
    const other = await cache(prefix);
    await other.set('k', 'old', 60_000);
    return { keys, setterClient, setter, other };
  }

  // Found by review: deleting on every refusal made overlapping set()s delete each other's values (each
  // delete refuses every write in flight, whose set() deletes again). Only a lost fence deletes.
  it('a set() superseded by a newer set() between its grant and its write leaves the newer value in place (no delete)', async () => {
    const prefix = 'set-superseded';
    const { keys, setterClient, setter, other } = await setterAndOther(prefix);
    beforeSetWrite(setterClient, keys, () => other.set('k', 'newer', 60_000));
    const refused = nextEvent(setter, 'writeRejected');
    await setter.set('k', 'mine', 60_000);
    await refused; // the newer set() landed between this set's token and its write
    expect(await freshRead(prefix, 'k')).toBe('newer');
    expect(await other.get('k')).toBe('newer');
  });

  it('a set() whose fence was lost and re-seeded by another grant before its write deletes the entry (nothing was accepted since the loss)', async () => {
    const prefix = 'set-reseeded';
    const { keys, setterClient, setter, other } = await setterAndOther(prefix);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let rebuild: Promise<unknown> | undefined;
    beforeSetWrite(setterClient, keys, async () => {
      await admin.del(keys.fence);
      // A forced rebuild elsewhere takes a grant: the fence is re-seeded above this set's token.
      let granted!: () => void;
      const started = new Promise<void>((r) => (granted = r));
      rebuild = other.getOrCompute('k', async () => (granted(), await gate, 'rebuilt'), { ttl: 60_000, forceFresh: true });
      await started;
    });
    const refused = nextEvent(setter, 'writeRejected');
    await setter.set('k', 'mine', 60_000);
    await refused;
    expect(await freshRead(prefix, 'k')).toBeUndefined(); // 'old' is gone: deleted, not left behind
    release();
    await rebuild;
    expect(await freshRead(prefix, 'k')).not.toBe('old');
  });

  it('rejects a value that could never be read back with ERR_UNSTORABLE_VALUE and writes nothing', async () => {
    const c = await cache('set-unstorable');
    const keys = entryKeys('set-unstorable', 'k');
    await expect(c.set('k', { at: /x+/ }, 60_000)).rejects.toMatchObject({ code: 'ERR_UNSTORABLE_VALUE', key: 'k', reason: 'type RegExp' });
    await expect(c.set('k', { f: () => 1 }, 60_000)).rejects.toMatchObject({ code: 'ERR_UNSTORABLE_VALUE', reason: 'function' });
    expect(await admin.exists(keys.value)).toBe(0);
    expect(await c.get('k')).toBeUndefined();
  });
});

describe('error replies carry Redis\'s own text', () => {
  it("maxmemory tiny + noeviction: set() rejects with ERR_REDIS_UNAVAILABLE, operation 'set', an error reply (not a timeout) quoting the OOM text", async () => {
    const full = await startRedisServer();
    const fullAdmin = client(full.adminUrl);
    try {
      const c = await cache('oom', {}, full.url);
      await c.set('stored', 'before', 60_000);
      await fullAdmin.config('SET', 'maxmemory-policy', 'noeviction');
      await fullAdmin.config('SET', 'maxmemory', '1');
      // README "maxmemory-policy": reads still answer; a rebuild answers its callers but stores nothing.
      expect(await (await cache('oom', {}, full.url)).get('stored')).toBe('before');
      const degraded = nextEvent(c, 'degraded');
      expect(await c.getOrCompute('cold', () => 'computed', 60_000)).toBe('computed');
      expect((await degraded).error).toMatchObject({ failure: 'reply' });
      expect(await fullAdmin.exists(entryKeys('oom', 'cold').value)).toBe(0);
      const err = await c.set('k', 'v', 60_000).then(() => undefined, (e: unknown) => e);
      expect(err).toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE', operation: 'set', failure: 'reply', key: 'k' });
      expect((err as Error).message).toContain('OOM command not allowed');
      expect((err as Error).message).not.toMatch(/timed out/);
      expect(((err as Error).cause as Error).message).toContain('OOM command not allowed');
    } finally {
      await fullAdmin.config('SET', 'maxmemory', '0').catch(() => undefined);
      await full.stop();
    }
  });
});

