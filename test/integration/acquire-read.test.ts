/**
 * The store lock's grant reads the entry in the same step (acquireRead, src/lock/scripts.ts), so a
 * won miss's re-read ("someone may have just written") costs no round trip of its own: on a real
 * Redis, what the grant reads is what the read script answers, and the rebuild serves it.
 */
import { describe, expect, it } from 'vitest';
import { createCache } from '../../src/index.js';
import { Io } from '../../src/io.js';
import { entryKeys } from '../../src/keys.js';
import { portFor } from '../../src/client/detect.js';
import { defineScripts } from '../../src/lock/scripts.js';
import { StoreLock, type LockDeps } from '../../src/lock/single.js';
import { resolveCacheOptions, resolveCallOptions, systemClock } from '../../src/options.js';
import { Store } from '../../src/store.js';
import { NodeClocks } from '../../src/node-clock.js';
import { Bus } from '../../src/wait.js';
import { broadcastNotes } from '../../src/wake.js';
import { slotTag } from '../../src/keys.js';
import { countCommands, deferred, nextEvent, prefixOf, useRedis } from '../support/harness.js';
import { sleep } from '../support/schedule.js';

const h = useRedis();
let prefixes = 0;

/** A store lock and a store on a fresh prefix, on a client of the family under test; `cap`: maxValueBytes. */
function setup(cap = 1 << 20) {
  const prefix = `acqread${++prefixes}`;
  const client = h.cacheClient();
  const io = new Io(1000, 5, 1000, systemClock);
  const deps: LockDeps = { io, scripts: defineScripts(portFor(client)), notes: broadcastNotes(new Bus(prefix)), clock: systemClock, onLost: () => undefined };
  const call = resolveCallOptions(resolveCacheOptions({ redis: client }).defaults, { ttl: 60_000, lockTtl: 10_000 }, 'k');
  const decodeErrors: string[] = [];
  const store = new Store(io, deps.scripts, deps.notes, cap, { decodeError: (_key, reason) => decodeErrors.push(reason) }, new NodeClocks(systemClock, () => 'standalone'));
  return { prefix, deps, call, store, decodeErrors, keys: (key: string) => entryKeys(prefix, key), single: new StoreLock(deps, 'single', true), local: new StoreLock(deps, 'local', false) };
}

describe('a grant that reads the entry with it', () => {
  it('reads exactly what the read script answers: an entry, nothing, and an entry over the cap (no bytes sent)', async () => {
    const s = setup(64);
    const writer = createCache({ redis: h.cacheClient(), prefix: s.prefix });
    await writer.set('small', 'v', 60_000);
    await writer.set('big', 'x'.repeat(200), 60_000);
    for (const key of ['small', 'absent', 'big']) {
      const k = s.keys(key);
      const grant = await s.single.acquire(key, k, s.call, { readUpTo: 64 });
      if (!grant) throw new Error('not granted');
      const withGrant = grant.takeRead?.();
      const read = await s.deps.scripts.read(k.value, 64);
      // PTTL moves between the two reads (by a few ms here); the lock's own lease (lockTtl 10 s) would be far off.
      expect(withGrant === null).toBe(read === null);
      if (withGrant && read) {
        expect(withGrant[1]).toEqual(read[1]);
        expect(Math.abs(withGrant[0] - read[0])).toBeLessThan(1000);
      }
      expect(grant.takeRead?.()).toBeUndefined(); // handed over once: the grant keeps no bytes
      await grant.release('empty');
    }
    // As the rebuild decodes it: the same Found as a read, the cap's refusal reported as a read's is.
    const small = await s.single.acquire('small', s.keys('small'), s.call, { readUpTo: 64 });
    expect(s.store.found('small', small?.takeRead?.() ?? null)).toMatchObject({ state: 'fresh', value: 'v' });
    const big = await s.single.acquire('big', s.keys('big'), s.call, { readUpTo: 64 });
    const bigRead = big?.takeRead?.();
    expect(bigRead?.[1]).toBe(-2);
    expect(s.store.found('big', bigRead ?? null)).toEqual({ state: 'miss' });
    expect(s.decodeErrors).toEqual(['larger than maxValueBytes (64)']);
    await Promise.all([small?.release('empty'), big?.release('empty')]);
    await writer.close();
  });

  it('hands over no read for a fence-only grant or when not asked; a refused attempt is no grant', async () => {
    const s = setup();
    const writer = createCache({ redis: h.cacheClient(), prefix: s.prefix });
    await writer.set('k', 'v', 60_000);
    const holder = await s.single.acquire('k', s.keys('k'), s.call, { readUpTo: 1 << 20 });
    expect(holder?.takeRead?.()).not.toBeUndefined();
    expect(await s.single.acquire('k', s.keys('k'), s.call, { readUpTo: 1 << 20 })).toBeNull();
    await holder?.release('empty');
    const fenceOnly = await s.local.acquire('k', s.keys('k'), s.call, { readUpTo: 1 << 20 });
    expect(fenceOnly?.takeRead?.()).toBeUndefined();
    await fenceOnly?.release('empty');
    const plain = await s.single.acquire('k', s.keys('k'), s.call);
    expect(plain?.takeRead?.()).toBeUndefined();
    await plain?.release('empty');
    await writer.close();
  });
});

describe('a won miss', () => {
  it('costs three commands: the read, the grant with its re-read, the fenced write', async () => {
    const client = h.cacheClient();
    const cache = createCache({ redis: client, prefix: `acqread${++prefixes}` });
    await cache.ready();
    expect(await cache.getOrCompute('warm', () => 'w', 60_000)).toBe('w'); // connections and scripts in place
    const sent = countCommands(client);
    expect(await cache.getOrCompute('cold', () => 'v', 60_000)).toBe('v');
    expect(sent.count).toBe(3);
    await cache.close();
  });

  it('a value written between its miss and its grant is served from the grant\'s read, the loader never runs', async () => {
    // ioredis whatever the family under test: its sendCommand lets the acquire wait for another cache's set().
    const client = h.client();
    const a = createCache({ redis: client, prefix: `acqread${++prefixes}` });
    const b = createCache({ redis: h.cacheClient(), prefix: prefixOf(a) });
    await a.ready();
    // a's own connection ready too (a command queued offline would pass
    // through sendCommand twice, once queued and once flushed, and be counted twice below).
    await client.ping();
    const original = client.sendCommand.bind(client);
    let reads = 0;
    client.sendCommand = (cmd, ...rest) => {
      const firstKey = String(cmd.args[2]);
      if (/^evalsha$|^eval$/i.test(cmd.name) && firstKey.includes(':v:')) reads++;
      if (/^evalsha$|^eval$/i.test(cmd.name) && firstKey.includes(':l:') && firstKey.endsWith(':k')) {
        // b writes after a's miss and before a's acquire is sent.
        void b.set('k', 'from-b', 60_000).then(() => original(cmd, ...rest));
        return cmd.promise;
      }
      return original(cmd, ...rest);
    };
    let loads = 0;
    expect(await a.getOrCompute('k', () => (loads++, 'from-a'), 60_000)).toBe('from-b');
    expect(loads).toBe(0);
    expect(reads).toBe(1); // a's first read only: the re-read came with the grant
    await a.close();
    await b.close();
  });

  it('a delete heard while its grant (with the read) is in flight keeps the value read out of L1', async () => {
    // ioredis whatever the family under test, to hold the grant's reply back (as above).
    const client = h.client();
    const a = createCache({ redis: client, prefix: `acqread${++prefixes}`, local: { max: 100 } });
    const b = createCache({ redis: h.cacheClient(), prefix: prefixOf(a) });
    await a.ready();
    // a's own connection ready too (a command queued offline would pass
    // through sendCommand twice, once queued and once flushed, and be counted twice below).
    await client.ping();
    const reply = deferred<void>();
    const original = client.sendCommand.bind(client);
    let held = false;
    client.sendCommand = (cmd, ...rest) => {
      const firstKey = String(cmd.args[2]);
      if (!held && /^evalsha$|^eval$/i.test(cmd.name) && firstKey.includes(':l:') && firstKey.endsWith(':k')) {
        held = true;
        // b writes v1 before a's acquire is sent; a's reply (granted, with v1) is held until b's delete was heard.
        const resolve = cmd.resolve.bind(cmd);
        cmd.resolve = (value) => void reply.promise.then(() => resolve(value));
        void b.set('k', 'v1', 60_000).then(() => original(cmd, ...rest));
        return cmd.promise;
      }
      return original(cmd, ...rest);
    };
    const lockKey = `${prefixOf(a)}:{${slotTag('k')}}:l:k`;
    const first = a.getOrCompute('k', () => 'loaded', 60_000);
    while ((await h.admin.exists(lockKey)) === 0) await sleep(2); // the grant (and its read of v1) ran in Redis
    const heard = nextEvent(a, 'remoteChange');
    await b.delete('k');
    expect(await heard).toMatchObject({ key: 'k', kind: 'deleted' });
    reply.resolve();
    expect(await first).toBe('v1'); // the call overlapped the delete: its answer may predate it
    // A call after the delete must not be answered from L1 with v1 (the ticket predates the delete).
    expect(await a.getOrCompute('k', () => 'v2', 60_000)).toBe('v2');
    await a.close();
    await b.close();
  });
});
