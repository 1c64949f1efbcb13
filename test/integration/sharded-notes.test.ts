import { describe, expect, it } from 'vitest';
import type { Cache, CacheOptions } from '../../src/index.js';
import { deferred, heldRebuild, keysOf, missedCall, prefixOf, useRedis } from '../support/harness.js';

/**
 * `notes: 'sharded'` on one server: a key's notes go to its own wake channel, which a process holds
 * subscribed only while it waits on or rebuilds the key. (The Cluster side, where such a note stays in
 * its shard, is in cluster.test.ts.)
 */
const h = useRedis();

/** Waiting is all the second cache can do: its poll and its wait are an hour away, so only a note wakes it. */
const WAIT_FOR_NOTE = { ttl: 60_000, pollInterval: 3_600_000, waitTimeout: 3_600_000 };

/** Subscribers of `channel` as a shard channel (SSUBSCRIBE), and as a classic one (SUBSCRIBE). */
async function subscribers(channel: string): Promise<{ shard: number; classic: number }> {
  const [, shard] = (await h.admin.call('PUBSUB', 'SHARDNUMSUB', channel)) as [string, number];
  const [, classic] = (await h.admin.call('PUBSUB', 'NUMSUB', channel)) as [string, number];
  return { shard: Number(shard), classic: Number(classic) };
}

async function until(check: () => Promise<boolean>): Promise<void> {
  while (!(await check())) await new Promise((r) => setTimeout(r, 10));
}

/** Two caches of one prefix (two processes, as far as notes go). */
function pair(options: Partial<CacheOptions>): [Cache, Cache] {
  const a = h.cache(options);
  return [a, h.cache({ ...options, prefix: prefixOf(a) })];
}

/** `b` waits on `key` behind a lock someone else holds; resolves once it is subscribed to the key's channel (sharded). */
async function waitingBehindForeignLock(b: Cache, key: string, sharded: boolean) {
  await h.admin.set(keysOf(b, key).lock, 'someone-else', 'PX', 600_000);
  const { call } = await missedCall(b, key, () => 'from-b', WAIT_FOR_NOTE);
  if (sharded) await until(async () => (await subscribers(keysOf(b, key).wake)).shard === 1);
  return { waiting: call }; // wrapped: an async function returning the call itself would wait for it
}

describe("notes: 'sharded'", () => {
  it("a waiter is woken by another process's set() on the key's own channel; the broadcast channel carries no key note", async () => {
    const [a, b] = pair({ notes: 'sharded' });
    await Promise.all([a.ready(), b.ready()]);
    const broadcast: string[] = [];
    const listener = h.adminClient();
    listener.on('message', (_channel: string, message: string) => broadcast.push(message));
    await listener.subscribe(`${prefixOf(a)}:events`);
    const { waiting } = await waitingBehindForeignLock(b, 'k', true);
    await a.set('k', 'from-a', 60_000);
    expect(await waiting).toBe('from-a');
    // Everything published on the broadcast channel before the sentinel has arrived by the time it does.
    await h.admin.publish(`${prefixOf(a)}:events`, 'sentinel');
    await until(async () => broadcast.includes('sentinel'));
    expect(broadcast).toEqual(['sentinel']);
  });

  it("the holder's write wakes the waiter: the rebuild's notes go to the key's channel too", async () => {
    const [a, b] = pair({ notes: 'sharded' });
    const held = await heldRebuild<string>(a, 'w', WAIT_FOR_NOTE);
    const { call } = await missedCall(b, 'w', () => 'from-b', WAIT_FOR_NOTE);
    // b lost the lock (a holds it) once it is subscribed: its attempt follows the subscription.
    await until(async () => (await subscribers(keysOf(b, 'w').wake)).shard === 2);
    held.open('from-a');
    expect(await held.call).toBe('from-a');
    expect(await call).toBe('from-a');
  });

  it.each(['broadcast', 'sharded'] as const)('notes %s: a process hears of a key it does not wait on only with broadcast notes', async (notes) => {
    const [a, b] = pair({ notes });
    await Promise.all([a.ready(), b.ready()]);
    const heard: string[] = [];
    b.on('remoteChange', (e) => heard.push(e.key));
    const { waiting } = await waitingBehindForeignLock(b, 'mine', notes === 'sharded');
    await a.set('other', 1, 60_000);
    // Both notes leave the one server in this order, and b's connections read them in order.
    await a.set('mine', 2, 60_000);
    expect(await waiting).toBe(2);
    expect(heard).toEqual(notes === 'sharded' ? ['mine'] : ['other', 'mine']);
  });

  it('no subscription outlives the wait or the rebuild that held it', async () => {
    const [a, b] = pair({ notes: 'sharded' });
    const gate = deferred<string>();
    const calls = [a, b, a, b].map((c) => c.getOrCompute('gone', () => gate.promise, { ttl: 60_000, waitTimeout: 60_000 }));
    await until(async () => (await subscribers(keysOf(a, 'gone').wake)).shard === 2);
    gate.resolve('v');
    expect(await Promise.all(calls)).toEqual(['v', 'v', 'v', 'v']);
    await until(async () => (await subscribers(keysOf(a, 'gone').wake)).shard === 0);
    expect(await subscribers(keysOf(a, 'gone').wake)).toEqual({ shard: 0, classic: 0 });
  });

  it('a lost wake subscription is taken again: the waiter still hears the set() made after its connection was killed', async () => {
    const [a, b] = pair({ notes: 'sharded' });
    const { waiting } = await waitingBehindForeignLock(b, 'lost', true);
    const wake = keysOf(b, 'lost').wake;
    // Kill every connection subscribed to shard channels (only b's wake connection here).
    const clients = String(await h.admin.call('CLIENT', 'LIST', 'TYPE', 'pubsub'));
    const ids = clients.split('\n').filter((l) => / ssub=[1-9]/.test(l)).map((l) => /id=(\d+)/.exec(l)?.[1]);
    expect(ids.length).toBeGreaterThan(0);
    for (const id of ids) await h.admin.call('CLIENT', 'KILL', 'ID', String(id));
    await until(async () => (await subscribers(wake)).shard === 0);
    await until(async () => (await subscribers(wake)).shard === 1);
    await a.set('lost', 'after', 60_000);
    expect(await waiting).toBe('after');
  });

  it('a delete made elsewhere while this process rebuilds the key is heard: a caller arriving after it does not join that rebuild', async () => {
    const [a, b] = pair({ notes: 'sharded' });
    const held = await heldRebuild<string>(a, 'r', WAIT_FOR_NOTE);
    const heard = new Promise<string>((resolve) => a.on('remoteChange', (e) => resolve(`${e.kind}:${e.key}`)));
    await b.delete('r');
    expect(await heard).toBe('deleted:r');
    const later = a.getOrCompute('r', () => 'after-delete', WAIT_FOR_NOTE);
    held.open('before-delete');
    expect(await held.call).toBe('before-delete');
    // Its write was refused by the fence; the later caller ran its own loader once the lock was free.
    expect(await later).toBe('after-delete');
  });

  it("createCache refuses notes 'sharded' with L1 on, naming local", () => {
    expect(() => h.cache({ notes: 'sharded', local: { max: 10 } })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'local' }));
  });
});
