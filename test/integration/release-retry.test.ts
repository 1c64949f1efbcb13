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
const clients: Redis[] = [];
const caches: Cache[] = [];

beforeAll(async () => {
  server = await startRedisServer();
  proxy = await startProxy(server);
});
afterAll(async () => {
  await Promise.all(caches.map((c) => c.close()));
  for (const c of clients) c.disconnect();
  await proxy.close();
  await server.stop();
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
