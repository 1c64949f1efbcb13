/**
 * has(), getMany() and deleteMany() (issue #11, part 2) on a real Redis. Two caches on two clients with
 * one prefix stand for two processes.
 */
import { describe, expect, it } from 'vitest';
import { createCache, InvalidKeyError, InvalidOptionError } from '../../src/index.js';
import { dropConnection } from '../support/clients.js';
import { heldRebuild, keysOf, nextEvent, prefixOf, useRedis } from '../support/harness.js';
import { countPipelines } from '../support/pipelines.js';

const h = useRedis();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));


describe('has', () => {
  it('is true only while a fresh value exists: not for a missing, stale, kept or deleted entry', async () => {
    const cache = h.cache();
    await cache.set('fresh', 0, 60_000);
    await cache.set('stale', 'x', { ttl: 20, staleTtl: 60_000 });
    await cache.set('kept', 'x', { ttl: 20, failSafeTtl: 60_000 });
    await cache.set('gone', 'x', 60_000);
    await cache.delete('gone');
    await sleep(60);
    expect(await cache.has('fresh')).toBe(true); // a falsy value is still a value
    expect(await cache.has('absent')).toBe(false);
    expect(await cache.has('stale')).toBe(false);
    expect(await cache.has('kept')).toBe(false);
    expect(await cache.has('gone')).toBe(false);
  });
});

describe('getMany', () => {
  it('returns the fresh values aligned with the keys, undefined for misses and expired entries, duplicates included', async () => {
    const cache = h.cache();
    await cache.set('a', { a: 1 }, 60_000);
    await cache.set('b', null, 60_000);
    await cache.set('old', 'stale', { ttl: 20, staleTtl: 60_000 });
    await sleep(60);
    expect(await cache.getMany(['a', 'missing', 'b', 'old', 'a', 'x{y}z'])).toEqual([{ a: 1 }, undefined, null, undefined, { a: 1 }, undefined]);
    expect(await cache.getMany([])).toEqual([]);
  });

  it('sends one pipeline for all keys on a single Redis, and none for keys L1 already has', async () => {
    const writer = h.cache();
    const keys = Array.from({ length: 200 }, (_, i) => `k${i}`);
    for (const k of keys.slice(0, 150)) await writer.set(k, k, 60_000);
    const client = h.cacheClient();
    const reader = createCache({ redis: client, prefix: prefixOf(writer), local: { max: 1000 } });
    expect(await reader.ready()).toBe(true);
    const pipelines = countPipelines(client);
    const first = await reader.getMany(keys);
    expect(first).toEqual(keys.map((k, i) => (i < 150 ? k : undefined)));
    expect(pipelines.count).toBe(1);
    // The hits filled L1: asking for them alone sends nothing.
    expect(await reader.getMany(keys.slice(0, 150))).toEqual(keys.slice(0, 150));
    expect(pipelines.count).toBe(1);
    await reader.close();
  });

  it('a read that was in flight across a delete never refills L1 with the deleted value', async () => {
    const writer = h.cache();
    await writer.set('r', 'before', 60_000);
    const reader = createCache({ redis: h.cacheClient(), prefix: prefixOf(writer), local: { max: 10 } });
    expect(await reader.ready()).toBe(true);
    const note = nextEvent(reader, 'remoteChange');
    const reading = reader.getMany(['r']);
    await writer.delete('r');
    await note;
    await reading; // may have seen 'before' (it was sent first), but must not keep it
    expect(await reader.getMany(['r'])).toEqual([undefined]);
    await reader.close();
  });

  it('a Redis failure reads as a miss with a degraded event per key; bad input is a typed error before any traffic', async () => {
    const client = h.cacheClient();
    const cache = createCache({ redis: client, prefix: `down${process.pid}` });
    await client.ping();
    dropConnection(client);
    const degraded: string[] = [];
    cache.on('degraded', (e) => e.operation === 'read' && degraded.push(e.key as string));
    expect(await cache.getMany(['p', 'q'])).toEqual([undefined, undefined]);
    expect(degraded.sort()).toEqual(['p', 'q']);
    await expect(cache.deleteMany(['p'])).rejects.toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE', key: 'p' });
    await expect(cache.getMany('p' as never)).rejects.toBeInstanceOf(InvalidOptionError);
    await expect(cache.getMany(['ok', ''])).rejects.toBeInstanceOf(InvalidKeyError);
    await expect(cache.deleteMany([1 as never])).rejects.toBeInstanceOf(InvalidKeyError);
    await cache.close();
  });
});

describe('deleteMany', () => {
  it('deletes every key, raises each fence (a rebuild in flight cannot bring its key back) and drops it from every process’s L1', async () => {
    const a = h.cache();
    const other = createCache({ redis: h.cacheClient(), prefix: prefixOf(a), local: { max: 100 } });
    expect(await other.ready()).toBe(true);
    await a.set('d1', 1, 60_000);
    await a.set('d2', 2, 60_000);
    expect(await other.getMany(['d1', 'd2'])).toEqual([1, 2]); // now in other's L1
    const held = await heldRebuild<string>(a, 'd3', 60_000);
    const deletedNotes: string[] = [];
    const bothNoted = new Promise<void>((resolve) =>
      other.on('remoteChange', (e) => {
        if (e.kind === 'deleted') deletedNotes.push(e.key);
        if (deletedNotes.length === 3) resolve();
      }),
    );
    await a.deleteMany(['d1', 'd2', 'd3']);
    await bothNoted;
    expect(deletedNotes.sort()).toEqual(['d1', 'd2', 'd3']);
    expect(await h.admin.exists(keysOf(a, 'd1').value, keysOf(a, 'd2').value)).toBe(0);
    expect(await other.getMany(['d1', 'd2'])).toEqual([undefined, undefined]);
    const computed = nextEvent(a, 'computed');
    held.open('pre-delete');
    await held.call;
    expect((await computed).written).toBe(false); // the fence refused the pre-delete rebuild
    expect(await a.get('d3')).toBeUndefined();
    await other.close();
  });
});
