import { afterAll, describe, expect, it } from 'vitest';
import { createCache, type Cache, type CacheOptions } from '../../src/index.js';
import { familyClient } from '../support/clients.js';
import { deferred, heldRebuild, keysOf, missedCall, prefixOf, useRedis } from '../support/harness.js';
import { startProxy, type Proxy } from '../support/proxy.js';
import { asAppUser } from '../support/redis-server.js';

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

/** The connections holding at least one shard subscription: their id and the port Redis sees them from. */
async function shardSubscribedClients(): Promise<{ id: string; port: number }[]> {
  const lines = String(await h.admin.call('CLIENT', 'LIST', 'TYPE', 'pubsub')).split('\n').filter((l) => / ssub=[1-9]/.test(l));
  return lines.map((l) => ({ id: /id=(\d+)/.exec(l)?.[1] as string, port: Number(/addr=[^ ]*:(\d+) /.exec(l)?.[1]) }));
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
    const killed = (await shardSubscribedClients()).map((c) => c.id);
    expect(killed.length).toBeGreaterThan(0);
    for (const id of killed) await h.admin.call('CLIENT', 'KILL', 'ID', id);
    // Subscribed again on a new connection (node-redis may re-subscribe by itself before anyone could
    // see the count at 0, so the new connection's id is what shows it).
    await until(async () => (await shardSubscribedClients()).some((c) => !killed.includes(c.id)) && (await subscribers(wake)).shard === 1);
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

  it('with an ioredis client that has a keyPrefix, the waiter is still woken (the wake channel carries no client prefix)', async () => {
    // ioredis prefixes a sharded channel as a key; the scripts publish the channel as an argument.
    const a = h.cache({ redis: h.client({ keyPrefix: 'kp:' }), notes: 'sharded' });
    const b = h.cache({ redis: h.client({ keyPrefix: 'kp:' }), notes: 'sharded', prefix: prefixOf(a) });
    await h.admin.set(`kp:${keysOf(b, 'p').lock}`, 'someone-else', 'PX', 600_000);
    const { call } = await missedCall(b, 'p', () => 'from-b', WAIT_FOR_NOTE);
    await until(async () => (await subscribers(keysOf(b, 'p').wake)).shard === 1);
    await a.set('p', 'from-a', 60_000);
    expect(await call).toBe('from-a');
  });

  describe('a silently dead wake connection', () => {
    const proxies: Proxy[] = [];
    const disposals: (() => void)[] = [];
    const closing: Cache[] = [];
    afterAll(async () => {
      await Promise.all(closing.map((c) => c.close()));
      for (const dispose of disposals) dispose();
      await Promise.all(proxies.map((p) => p.close()));
    });

    /** A sharded cache whose connections go through a proxy, and its wake connection silenced (found by one wait). */
    async function silencedWake(options: Partial<CacheOptions> = {}) {
      const { hostname, port } = new URL(h.url);
      const proxy = await startProxy({ host: hostname, port: Number(port) });
      proxies.push(proxy);
      const { client, dispose } = familyClient(asAppUser(proxy.url));
      disposals.push(dispose);
      const a = h.cache({ notes: 'sharded' });
      const b = createCache({ redis: client, prefix: prefixOf(a), notes: 'sharded', ...options });
      closing.push(b);
      const events: string[] = [];
      b.on('degraded', (e) => events.push(`degraded:${e.operation}`));
      // One wait shows which connection is b's wake connection (the only one with a shard subscription).
      const { waiting } = await waitingBehindForeignLock(b, 'first', true);
      // Of the connections with a shard subscription, the one through this proxy is b's.
      const ports = (await shardSubscribedClients()).map((c) => c.port);
      await a.set('first', 1, 60_000);
      expect(await waiting).toBe(1);
      expect(ports.filter((port) => proxy.silence(port))).toHaveLength(1);
      return { a, b, events };
    }

    it('is found out: the unanswered SSUBSCRIBE is reported and the connection reconnected, so a later waiter is woken by a note', async () => {
      const { a, b, events } = await silencedWake({ redisTimeout: 500 });
      // This wait's SSUBSCRIBE goes unanswered; after redisTimeout the wake reconnects and subscribes again.
      await h.admin.set(keysOf(b, 'after').lock, 'someone-else', 'PX', 600_000);
      const later = b.getOrCompute('after', () => 'from-b', WAIT_FOR_NOTE);
      await until(async () => (await subscribers(keysOf(b, 'after').wake)).shard === 1);
      await a.set('after', 'from-a', 60_000);
      expect(await later).toBe('from-a');
      expect(events).toContain('degraded:subscribe');
    });

    it("does not hold up a call that never waits (lock 'none'): it settles before its SSUBSCRIBE times out", async () => {
      const { b, events } = await silencedWake({ redisTimeout: 2000 });
      const order: string[] = [];
      b.on('degraded', (e) => e.operation === 'subscribe' && order.push('subscribe timed out'));
      await b.getOrCompute('fenced-only', () => 'v', { ttl: 60_000, lock: 'none' }).then(() => order.push('call settled'));
      await until(async () => events.includes('degraded:subscribe'));
      // (node-redis also rejects the SSUBSCRIBEs the reconnect cut short: more 'subscribe' reports after.)
      expect(order[0]).toBe('call settled');
      expect(order).toContain('subscribe timed out');
    });
  });

  it("createCache refuses notes 'sharded' with L1 on notes, naming local (L1 under tracking is allowed: coherence-tracking.test.ts)", () => {
    expect(() => h.cache({ notes: 'sharded', local: { max: 10 } })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'local' }));
  });
});
