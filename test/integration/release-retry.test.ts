import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCache, type Cache, type RedisClient } from '../../src/index.js';
import { entryKeys } from '../../src/keys.js';
import { familyClient, nextReady, TEST_CLIENT } from '../support/clients.js';
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
const disposals: (() => void)[] = [];
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
  for (const dispose of disposals) dispose();
  await Promise.all([proxy, ...nodeProxies].map((p) => p.close()));
  await Promise.all([server, ...nodes].map((s) => s.stop()));
});

/** An ioredis client: the test's own raw reads. */
function client(url: string): Redis {
  const c = new Redis(url, { maxRetriesPerRequest: 1 });
  c.on('error', () => undefined);
  clients.push(c);
  return c;
}

/**
 * A client of the family under test (SG_TEST_CLIENT), for a cache or a redlock node. lossy: a command
 * lost with its connection stays lost (as across a failover), instead of being sent again after the
 * reconnect — which would release the lock for us and hide the property. ioredis resends such
 * commands unless autoResendUnfulfilledCommands is false; node-redis never does (a socket that closes
 * rejects every command it wrote and is waiting on; only unwritten ones wait for the reconnect).
 */
function cacheClient(url: string, lossy = false) {
  const { client: c, dispose } = familyClient(url, TEST_CLIENT, lossy ? { resendUnanswered: false } : {});
  disposals.push(dispose);
  return c;
}

/**
 * A cache on prefix 'rr'. The holder's has breakerThreshold 1: the write's timeout opens the breaker,
 * so the release is refused unsent. The waiter's has the default options: it never loses Redis, and
 * a breaker of its own opened by one slow reply on a loaded machine would send it down the degraded path.
 */
function cache(redis: RedisClient, role: 'holder' | 'waiter'): Cache {
  const c = createCache({ redis, prefix: 'rr', ...(role === 'holder' ? { breakerThreshold: 1, breakerCooldown: 60_000 } : {}) });
  caches.push(c);
  return c;
}

describe('a release Redis did not answer is sent again once the connection is back', () => {
  it('the holder\'s write and release fail on a cut connection; once it reconnects the waiter takes over before the lease lapses', { timeout: 20_000 }, async () => {
    const holderClient = cacheClient(asAppUser(proxy.url), true);
    const holder = cache(holderClient, 'holder');
    const waiter = cache(cacheClient(server.url), 'waiter');
    const admin = client(server.adminUrl);
    // Both subscribed before the rebuild (the waiter is woken by the release's note, not by polling).
    // ready() gives up after redisTimeout (1 s), which a loaded machine can exceed while the
    // subscriber connects (node-redis: a duplicate the cache connects itself): ask until it says yes.
    while (!(await holder.ready()));
    while (!(await waiter.ready()));
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
    const ready = nextReady(holderClient);
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
    const direct = cacheClient(nodes[0]!.url);
    const viaProxy = nodeProxies.map((p) => cacheClient(asAppUser(p.url), true));
    const store = cacheClient(server.url);
    const holder = createCache({ redis: store, prefix: 'rrl', lock: 'redlock', redlock: { nodes: [direct, ...viaProxy] } });
    caches.push(holder);
    const admins = nodes.map((n) => client(n.adminUrl));
    const lockKey = entryKeys('rrl', 'k').lock;
    // Every node and the store connected before the grant: a connection's set-up (node-redis: AUTH
    // and CLIENT SETINFO before any command) must not eat into the vote's or the fence's redisTimeout.
    await Promise.all([store, direct, ...viaProxy].map((c) => c.ping()));
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

    const back = viaProxy.map((c) => nextReady(c));
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
