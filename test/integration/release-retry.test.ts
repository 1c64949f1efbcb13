import { once } from 'node:events';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCache, type Cache } from '../../src/index.js';
import { entryKeys } from '../../src/keys.js';
import { heldRebuild, missedCall } from '../support/harness.js';
import { startProxy, type Proxy } from '../support/proxy.js';
import { asAppUser, startRedisServer, type RedisServer } from '../support/redis-server.js';

/**
 * Issue #13 §3: a holder whose write and release Redis did not answer (its connection cut while the
 * loader ran) releases again, by token, once its connection is back; the release's note wakes the
 * waiters, who take over at once — not after the lock's whole lease (60 s here; the test's own timeout
 * is 20 s, so a waiter left to wait out the lease fails it).
 */
let server: RedisServer;
let proxy: Proxy;
/** Redlock: three nodes, the last two reached through proxies. */
let nodes: RedisServer[];
let nodeProxies: Proxy[];
const clients: Redis[] = [];
const caches: Cache[] = [];

beforeAll(async () => {
  server = await startRedisServer();
  proxy = await startProxy(server);
  nodes = await Promise.all([0, 1, 2].map(() => startRedisServer()));
  nodeProxies = await Promise.all(nodes.slice(1).map((n) => startProxy(n)));
});
afterAll(async () => {
  await Promise.all(caches.map((c) => c.close()));
  for (const c of clients) c.disconnect();
  await Promise.all([proxy, ...nodeProxies].map((p) => p.close()));
  await Promise.all([server, ...nodes].map((s) => s.stop()));
});

function client(url: string, lossy = false): Redis {
  // lossy: a command lost with its connection stays lost (as across a failover), instead of ioredis
  // resending it after the reconnect — which would release the lock for us and hide the property.
  const c = new Redis(url, { maxRetriesPerRequest: 1, ...(lossy ? { autoResendUnfulfilledCommands: false } : {}) });
  c.on('error', () => undefined);
  clients.push(c);
  return c;
}

function cache(redis: Redis): Cache {
  // breakerThreshold 1: the write's timeout opens the breaker, so the release is refused unsent.
  const c = createCache({ redis, prefix: 'rr', redisTimeout: 200, breakerThreshold: 1, breakerCooldown: 60_000 });
  caches.push(c);
  return c;
}

describe('a release Redis did not answer is sent again once the connection is back', () => {
  it('the holder\'s write and release fail on a cut connection; once it reconnects the waiter takes over before the lease lapses', { timeout: 20_000 }, async () => {
    const holderClient = client(asAppUser(proxy.url), true);
    const holder = cache(holderClient);
    const waiter = cache(client(server.url));
    const admin = client(server.adminUrl);
    expect(await holder.ready()).toBe(true);
    expect(await waiter.ready()).toBe(true);
    const options = { ttl: 60_000, lockTtl: 60_000, waitTimeout: 60_000, pollInterval: 60_000 };

    const held = await heldRebuild<string>(holder, 'k', options);
    const lockKey = entryKeys('rr', 'k').lock;
    const holderToken = await admin.get(lockKey);
    expect(holderToken).not.toBeNull();
    const { call: waiting } = await missedCall(waiter, 'k', () => 'from-waiter', options);

    // The holder's connection goes dark: its write and release are never answered.
    proxy.blackhole('up', true);
    const degraded: string[] = [];
    holder.on('degraded', (e) => degraded.push(e.operation));
    held.open('from-holder');
    expect(await held.call).toBe('from-holder');
    expect(degraded).toContain('write');
    expect(await admin.get(lockKey)).toBe(holderToken); // still held: nothing reached Redis

    // The connection comes back (a fresh one: the dark one lost bytes).
    const ready = once(holderClient, 'ready');
    proxy.blackhole('up', false);
    proxy.reset();
    await ready;

    // The waiter is answered without waiting out the 60 s lease: it took over.
    expect(await waiting).toBe('from-waiter');
    expect(await admin.get(lockKey)).not.toBe(holderToken);
  });
});

describe('redlock: a release fewer than a quorum of nodes answered is sent again', () => {
  it('two of three nodes go dark during the release; once they are back and Redis answers, no node keeps the lock', { timeout: 20_000 }, async () => {
    const direct = client(nodes[0]!.url);
    const viaProxy = nodeProxies.map((p) => client(asAppUser(p.url), true));
    const holder = createCache({ redis: client(server.url), prefix: 'rrl', lock: 'redlock', redlock: { nodes: [direct, ...viaProxy] } });
    caches.push(holder);
    const admins = nodes.map((n) => client(n.adminUrl));
    const lockKey = entryKeys('rrl', 'k').lock;
    await Promise.all([direct, ...viaProxy].map((c) => c.ping())); // every node connected before the grant
    const held = await heldRebuild<string>(holder, 'k', { ttl: 60_000, lockTtl: 60_000 });
    // The grant resolves once a quorum (2 of 3) is ours; the third node's SET may still be on its way.
    // The property needs the lock on all three before the release, so wait for it to land.
    while ((await Promise.all(admins.map((a) => a.exists(lockKey)))).some((n) => n !== 1)) {
      await new Promise((r) => setTimeout(r, 10));
    }

    for (const p of nodeProxies) p.blackhole('up', true); // their release never reaches them
    held.open('v');
    expect(await held.call).toBe('v');
    expect(await admins[0]!.exists(lockKey)).toBe(0);
    expect(await admins[1]!.exists(lockKey)).toBe(1);

    const back = viaProxy.map((c) => once(c, 'ready'));
    for (const p of nodeProxies) {
      p.blackhole('up', false);
      p.reset();
    }
    await Promise.all(back);
    // Any answer from Redis sends the kept release again; it lands on the nodes before the 60 s lease.
    for (;;) {
      await holder.get('other');
      const held = await Promise.all(admins.map((a) => a.exists(lockKey)));
      if (held.every((n) => n === 0)) break;
      await new Promise((r) => setTimeout(r, 50));
    }
  });
});
