import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createCache, type Cache, type CacheOptions } from '../../src/index.js';
import { entryKeys } from '../../src/keys.js';
import { familyClient } from '../support/clients.js';
import { deferred, heldRebuild, nextEvent } from '../support/harness.js';
import { startProxy, type Proxy } from '../support/proxy.js';
import { asAppUser, startRedisServer, type RedisServer } from '../support/redis-server.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const clients: Redis[] = [];
const disposals: (() => void)[] = [];
const caches: Cache[] = [];
const servers: RedisServer[] = [];
const proxies: Proxy[] = [];

function client(url: string): Redis {
  const c = new Redis(url, { maxRetriesPerRequest: 1 });
  c.on('error', () => undefined);
  clients.push(c);
  return c;
}
/** A client of the family under test (SG_TEST_CLIENT), for a cache or a redlock node. */
function cacheClient(url: string) {
  const { client: c, dispose } = familyClient(url);
  disposals.push(dispose);
  return c;
}
function cache(url: string, extra: Partial<CacheOptions> = {}): Cache {
  const c = createCache({ redis: cacheClient(url), prefix: 'nf', ...extra });
  caches.push(c);
  return c;
}

let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedisServer();
  servers.push(server);
  admin = client(server.adminUrl);
});
afterAll(async () => {
  await Promise.all(caches.map((c) => c.close()));
  for (const c of clients) c.disconnect();
  for (const dispose of disposals) dispose();
  await Promise.all(proxies.map((p) => p.close()));
  await Promise.all(servers.map((s) => s.stop()));
});

describe('through a TCP proxy', () => {
  it("the stale holder's write, delayed past the lock TTL, is rejected: the newer value stays", async () => {
    const proxy = await startProxy(server);
    proxies.push(proxy);
    const slow = cache(asAppUser(proxy.url), { redisTimeout: 5000 }); // the holder behind the proxy
    const fast = cache(server.url); // a holder with a direct connection
    await Promise.all([slow.ready(), fast.ready()]);
    const key = 'delayed-write';
    const gate = deferred<string>();
    const started = deferred<void>();
    const stale = slow.getOrCompute(key, () => (started.resolve(), gate.promise), { ttl: 60_000, lockTtl: 300 });
    await started.promise;
    proxy.delay('up', 1500); // everything slow sends from now on reaches Redis 1.5 s late
    gate.resolve('stale');
    await sleep(400); // slow's lock lapses: its watchdog extensions are stuck in the proxy
    expect(await fast.getOrCompute(key, () => 'newer', { ttl: 60_000, lockTtl: 300, waitTimeout: 10_000 })).toBe('newer');
    const rejected = nextEvent(slow, 'writeRejected');
    expect(await stale).toBe('stale');
    await rejected;
    proxy.delay('up', 0);
    expect(await fast.get(key)).toBe('newer');
  });

  it('a reply lost mid-acquire (server → client blackholed) leaves no orphan lock: the timed-out acquire is released by its token', async () => {
    const proxy = await startProxy(server);
    proxies.push(proxy);
    const c = cache(asAppUser(proxy.url), { redisTimeout: 200, prefix: 'lost-reply' });
    await c.get('warm');
    const keys = entryKeys('lost-reply', 'k');
    c.once('miss', () => proxy.blackhole('down', true)); // after the read's reply, before the acquire's
    expect(await c.getOrCompute('k', () => 'v', { ttl: 60_000, lockTtl: 60_000 })).toBe('v'); // degraded
    // The release by token (sent after the acquire on the same connection) runs; admin's connection
    // is another, so wait for it (lockTtl 60 s: an orphan lock would still be there).
    await vi.waitFor(async () => expect(await admin.exists(keys.lock)).toBe(0), { timeout: 5000 });
    proxy.blackhole('down', false);
  });

  it('connections reset mid-traffic: every call still settles with the right value', async () => {
    const proxy = await startProxy(server);
    proxies.push(proxy);
    const c = cache(asAppUser(proxy.url), { redisTimeout: 300, prefix: 'reset' });
    const calls = Array.from({ length: 100 }, (_, i) => c.getOrCompute(`r${i % 10}`, () => `v${i % 10}`, 60_000));
    setTimeout(() => proxy.reset(), 5);
    const results = await Promise.all(calls);
    results.forEach((v, i) => expect(v).toBe(`v${i % 10}`));
  });
});

describe('fencing across a Redis restart without persistence', () => {
  it('a token issued before the restart loses to one issued after it: the pre-restart holder\'s write is rejected', async () => {
    const s = await startRedisServer();
    servers.push(s);
    const a = cache(s.url, { prefix: 'restart' });
    const b = cache(s.url, { prefix: 'restart' });
    const gate = deferred<string>();
    let before = 0;
    const started = deferred<void>();
    const old = a.getOrCompute('k', (ctx) => ((before = ctx.fencingToken as number), started.resolve(), gate.promise), 60_000);
    await started.promise;
    await s.kill();
    await s.restart(); // empty: the fence counter is gone
    await Promise.all([untilAnswering(a), untilAnswering(b)]); // both clients reconnected
    let after = 0;
    expect(await b.getOrCompute('k', (ctx) => ((after = ctx.fencingToken as number), 'after'), { ttl: 60_000, waitTimeout: 10_000 })).toBe('after');
    expect(after).toBeGreaterThan(before);
    const rejected = nextEvent(a, 'writeRejected');
    gate.resolve('before');
    await old;
    await rejected;
    expect(await b.get('k')).toBe('after');
  });

  /** Kills and restarts `s` empty while `a` holds a rebuild of 'k'; resolves once both clients answer again. */
  async function restartUnder(s: RedisServer, a: Cache, b: Cache) {
    const held = await heldRebuild<string>(a, 'k', 60_000);
    await s.kill();
    await s.restart(); // empty: the fence hash is gone
    await Promise.all([untilAnswering(a), untilAnswering(b)]);
    return held;
  }
  /** Until a read on `c` reaches Redis (a read that fails is reported as `degraded` and reads as a miss). */
  async function untilAnswering(c: Cache) {
    let failed = false;
    const onDegraded = () => (failed = true);
    c.on('degraded', onDegraded);
    try {
      for (let i = 0; i < 100; i++) {
        failed = false;
        await c.get('probe');
        if (!failed) return;
        await sleep(50);
      }
      throw new Error('the client did not reconnect');
    } finally {
      c.off('degraded', onDegraded);
    }
  }

  it('unfavourable order: the pre-restart holder writes after a post-restart holder was granted but before it wrote — refused; the post-restart value lands', async () => {
    const s = await startRedisServer();
    servers.push(s);
    const a = cache(s.url, { prefix: 'restart-granted' });
    const b = cache(s.url, { prefix: 'restart-granted' });
    const before = await restartUnder(s, a, b);
    const after = await heldRebuild<string>(b, 'k', { ttl: 60_000, waitTimeout: 10_000 }); // granted, not written
    const computed = nextEvent(a, 'computed');
    before.open('before');
    expect(await before.call).toBe('before');
    expect((await computed).written).toBe(false);
    expect(await cache(s.url, { prefix: 'restart-granted' }).get('k')).toBeUndefined();
    after.open('after');
    expect(await after.call).toBe('after');
    expect(await cache(s.url, { prefix: 'restart-granted' }).get('k')).toBe('after');
  });

  it('reverse order: the pre-restart holder writes before anyone was granted after the restart — refused (no fence hash); the next rebuild lands', async () => {
    const s = await startRedisServer();
    servers.push(s);
    const a = cache(s.url, { prefix: 'restart-first' });
    const b = cache(s.url, { prefix: 'restart-first' });
    const before = await restartUnder(s, a, b);
    const computed = nextEvent(a, 'computed');
    before.open('before');
    expect(await before.call).toBe('before');
    expect((await computed).written).toBe(false);
    expect(await b.get('k')).toBeUndefined();
    expect(await b.getOrCompute('k', () => 'after', { ttl: 60_000, waitTimeout: 10_000 })).toBe('after');
    expect(await cache(s.url, { prefix: 'restart-first' }).get('k')).toBe('after');
  });
});

describe('what a failed set() or delete() says', () => {
  it("a blackholed Redis: set() and delete() reject as 'timeout' under their own operation name; once the node is suspect, at once, as 'timeout' saying it was not sent", async () => {
    const proxy = await startProxy(server);
    proxies.push(proxy);
    const c = cache(asAppUser(proxy.url), { redisTimeout: 150, breakerThreshold: 2, breakerCooldown: 60_000, prefix: 'says' });
    await c.ready();
    proxy.blackhole('up', true);
    try {
      const failure = (p: Promise<unknown>) => p.then(() => undefined, (e: unknown) => e as { code: string; operation: string; failure: string; message: string });
      const set = await failure(c.set('k', 'v', 60_000));
      expect(set).toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE', operation: 'set', failure: 'timeout', key: 'k' });
      expect(set?.message).toMatch(/^Redis set for "k" timed out: no reply within 150 ms; raise "redisTimeout"/);
      // The node answered nothing for redisTimeout: suspect, so nothing more is sent to it (not a breaker count).
      const del = await failure(c.delete('k'));
      expect(del).toMatchObject({ operation: 'delete', failure: 'timeout' });
      expect(del?.message).toMatch(/^Redis delete for "k" timed out: not sent: node "standalone" has answered nothing for \d+ ms/);
      const skipped = await failure(c.set('k', 'v', 60_000));
      expect(skipped).toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE', operation: 'set', failure: 'timeout' });
      expect(c.health().nodes).toMatchObject([{ node: 'standalone', state: 'suspect', cause: 'no reply within 150 ms' }]);
    } finally {
      proxy.blackhole('up', false);
    }
  });
});

describe('error replies', () => {
  it('READONLY (the store is a replica): calls still answer through the loader, reported as degraded', async () => {
    const replica = await startRedisServer(['--replicaof', '127.0.0.1', String(server.port)]);
    servers.push(replica);
    const c = cache(replica.url, { prefix: 'ro' });
    const ops: string[] = [];
    c.on('degraded', (e) => ops.push(`${e.operation}:${String((e.error as { cause?: Error }).cause?.message).slice(0, 8)}`));
    expect(await c.getOrCompute('k', () => 'v', 60_000)).toBe('v');
    expect(ops.some((o) => o.includes('READONLY'))).toBe(true);
  });

  it('MISCONF (writes stopped after a failed background save): calls still answer, reported as degraded', async () => {
    const { mkdtempSync, rmSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const dir = mkdtempSync(`${tmpdir()}/sg-misconf-`);
    // MISCONF needs save points configured and a failed save: the data dir vanishes under the server.
    const s = await startRedisServer(['--dir', dir, '--save', '3600 1', '--stop-writes-on-bgsave-error', 'yes']);
    servers.push(s);
    const r = client(s.adminUrl);
    rmSync(dir, { recursive: true, force: true });
    await r.bgsave().catch(() => undefined);
    for (let i = 0; i < 50 && !(await r.info('persistence')).includes('rdb_last_bgsave_status:err'); i++) await sleep(50);
    const c = cache(s.url, { prefix: 'misconf' });
    const ops: string[] = [];
    c.on('degraded', (e) => ops.push(String((e.error as { cause?: Error }).cause?.message)));
    expect(await c.getOrCompute('k', () => 'v', 60_000)).toBe('v');
    expect(ops.some((o) => o.startsWith('MISCONF'))).toBe(true);
  });
});

describe('redlock with a majority of nodes paused', () => {
  it("3 of 5 nodes frozen (SIGSTOP): the acquisition gives up after one per-node timeout and runs under onNoQuorum ('local')", async () => {
    const nodes = await Promise.all(Array.from({ length: 5 }, () => startRedisServer()));
    servers.push(...nodes);
    const c = cache(server.url, { prefix: 'rl-paused', redlock: { nodes: nodes.map((n) => cacheClient(n.url)), nodeTimeout: 100 } });
    for (const n of nodes.slice(0, 3)) n.pause();
    try {
      const ran = nextEvent(c, 'computed');
      expect(await c.getOrCompute('k', () => 'v', { ttl: 60_000, lock: 'redlock' })).toBe('v');
      expect((await ran).lock).toBe('local');
    } finally {
      for (const n of nodes.slice(0, 3)) n.resume();
    }
  });
});
