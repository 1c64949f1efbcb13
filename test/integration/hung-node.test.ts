import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createCache, type Cache, type CacheOptions, type GetContext, type HealthChange, type RedisClient } from '../../src/index.js';
import { getChannel } from '../../src/telemetry.js';
import { NodeSuspect, RedisTimeout } from '../../src/errors.js';
import { familyClient, whenReady } from '../support/clients.js';
import { Redis } from 'ioredis';
import { keysOf, nextEvent, subscriptionDowns } from '../support/harness.js';
import { startRedisServer, type RedisServer } from '../support/redis-server.js';

/**
 * A hung Redis (the test's own redis-server, SIGSTOPped) is found by time, not by counting failures:
 * once an operation went unanswered for `redisTimeout` while the node answered nothing else, the node
 * is suspect, nothing more is queued behind it, and calls answer from memory (the degraded memo, L1)
 * on every entry point until it answers again. Counts and states only; how fast is bench/outage.ts.
 *
 * Premise of every test here: `redisTimeout: 300` (explicit, whatever the default), so a paused server
 * costs the first callers one short timeout; `breakerCooldown` long, so only the suspicion (not the
 * breaker's cooldown) decides what is sent.
 */
let server: RedisServer;
const disposals: (() => void)[] = [];
const caches: Cache[] = [];

beforeAll(async () => {
  server = await startRedisServer();
});
afterEach(async () => {
  server.resume(); // never leave it stopped, whatever the test did
  await Promise.all(caches.splice(0).map((c) => c.close()));
  for (const dispose of disposals.splice(0)) dispose();
});
afterAll(async () => {
  server.resume();
  await server.stop();
});

let prefixes = 0;
async function setup(options: Partial<CacheOptions> = {}, before: (redis: RedisClient) => void = () => undefined) {
  const { client: redis, dispose } = familyClient(server.url);
  disposals.push(dispose);
  await whenReady(redis);
  before(redis);
  const cache = createCache({ redis, prefix: `hung${++prefixes}`, redisTimeout: 300, breakerCooldown: 60_000, ...options });
  caches.push(cache);
  // The subscription is up (L1 is trusted only then), and the node is known.
  expect(await cache.ready()).toBe(true);
  const health: HealthChange[] = [];
  cache.on('health', (e) => health.push(e));
  const degraded: unknown[] = [];
  cache.on('degraded', (e) => {
    if (e.key !== undefined) degraded.push(e.error);
  });
  const runs = new Map<string, number>();
  const loader = (ctx: { key: string }) => {
    const n = (runs.get(ctx.key) ?? 0) + 1;
    runs.set(ctx.key, n);
    return `${ctx.key}#${n}`;
  };
  return { cache, health, degraded, runs, loader };
}

/** The cause of a degraded call's RedisUnavailableError: sent and unanswered (RedisTimeout), or not sent at all (NodeSuspect). */
const causeOf = (error: unknown): unknown => (error as { cause?: unknown }).cause;
const waitedOut = (errors: unknown[]) => errors.filter((e) => causeOf(e) instanceof RedisTimeout && !(causeOf(e) instanceof NodeSuspect)).length;
const notSent = (errors: unknown[]) => errors.filter((e) => causeOf(e) instanceof NodeSuspect).length;

/** Pauses the server for the duration of `body`; always continues it. */
async function whilePaused<T>(body: () => Promise<T>): Promise<T> {
  server.pause();
  try {
    return await body();
  } finally {
    server.resume();
  }
}

describe('a hung node is found by time: suspect after one unanswered redisTimeout, whatever the number of keys', () => {
  it('one hot key, 50 callers at once, then 30 in turn: one read waits redisTimeout, every later call is answered without a Redis read, one loader run', async () => {
    const { cache, health, degraded, runs, loader } = await setup();
    await whilePaused(async () => {
      const first = Array.from({ length: 50 }, () => cache.getOrCompute('hot', loader, 60_000));
      expect(new Set(await Promise.all(first))).toEqual(new Set(['hot#1']));
      for (let i = 0; i < 30; i++) expect(await cache.getOrCompute('hot', loader, 60_000)).toBe('hot#1');
      expect(cache.health()).toMatchObject({ healthy: false, nodes: [{ node: 'standalone', state: 'suspect' }] });
    });
    expect(runs.get('hot')).toBe(1);
    // The flight's one read timed out; the 30 calls in turn were not sent (they did not queue behind the hung node).
    expect(waitedOut(degraded)).toBe(1);
    expect(notSent(degraded)).toBe(30);
    expect(health.map((e) => e.state)).toEqual(['suspect']);
  });

  it('20 keys in flight when the node hangs count as ONE breaker failure: the breaker (threshold 2) stays closed, the node is suspect', async () => {
    const { cache, health, degraded, runs, loader } = await setup({ breakerThreshold: 2 });
    await whilePaused(async () => {
      const keys = Array.from({ length: 20 }, (_, i) => `k${i}`);
      const all = keys.map((k) => cache.getOrCompute(k, loader, 60_000));
      expect(await Promise.all(all)).toEqual(keys.map((k) => `${k}#1`));
      expect(cache.health().nodes.map((n) => n.state)).toEqual(['suspect']);
    });
    expect([...runs.values()].every((n) => n === 1)).toBe(true);
    expect(degraded).toHaveLength(20);
    expect(health.map((e) => e.state)).toEqual(['suspect']);
  });

  it('the node answering again (SIGCONT) ends the suspicion: a recovered event, degraded copies dropped, calls reach Redis', async () => {
    const { cache, health, runs, loader } = await setup();
    server.pause();
    try {
      expect(await cache.getOrCompute('k', loader, 60_000)).toBe('k#1');
      expect(cache.health().healthy).toBe(false);
    } finally {
      server.resume();
    }
    const recovered = await nextEvent(cache, 'health');
    expect(recovered).toMatchObject({ node: 'standalone', state: 'recovered' });
    expect(cache.health()).toEqual({ healthy: true, nodes: [{ node: 'standalone', state: 'healthy', forMs: 0, cause: undefined }] });
    // The degraded copy is gone: the store is the truth again (the loader runs, fenced, and writes).
    expect(await cache.getOrCompute('k', loader, 60_000)).toBe('k#2');
    expect(await cache.getOrCompute('k', loader, 60_000)).toBe('k#2');
    expect(runs.get('k')).toBe(2);
    expect(health.map((e) => e.state)).toEqual(['suspect', 'recovered']);
  });

  it('a stall of this process is not a hung node: calls answered after a blocked event loop longer than redisTimeout read Redis, the node stays healthy', async () => {
    const { cache, health, degraded, loader } = await setup();
    await cache.set('s', 'stored', 60_000);
    const calls = Array.from({ length: 10 }, () => cache.getOrCompute('s', loader, 60_000));
    // The read is sent (and in flight) before the stall.
    await new Promise((resolve) => setImmediate(resolve));
    const until = performance.now() + 450; // 1.5 × redisTimeout, within the stall credit (2 ×)
    while (performance.now() < until) {
      // this process stalls: the replies arrive meanwhile but cannot be read
    }
    expect(new Set(await Promise.all(calls))).toEqual(new Set(['stored']));
    expect(degraded).toEqual([]);
    expect(health).toEqual([]);
    expect(cache.health().healthy).toBe(true);
  });
});

describe('while the node is suspect, every entry point answers from memory first, without a Redis read', () => {
  it('getOrCompute, getOrComputeMany, get, getMany and a namespace answer from the degraded memo; forceFresh runs its loader (never memory) and refills it', async () => {
    const { cache, degraded, runs, loader } = await setup();
    const batches: string[][] = [];
    const loadMany = (missing: readonly string[]) => {
      batches.push([...missing]);
      return new Map(missing.map((k) => [k, loader({ key: k })]));
    };
    const ns = cache.namespace('n');
    await whilePaused(async () => {
      expect(await cache.getOrCompute('a', loader, 60_000)).toBe('a#1'); // the one read that waits redisTimeout
      expect(cache.health().nodes[0]?.state).toBe('suspect');
      expect(await cache.getOrCompute('a', loader, 60_000)).toBe('a#1');
      expect(await cache.getOrComputeMany(['a', 'b'], loadMany, 60_000)).toEqual(['a#1', 'b#1']);
      expect(await cache.getOrComputeMany(['a', 'b'], loadMany, 60_000)).toEqual(['a#1', 'b#1']);
      expect(await cache.get('a')).toBe('a#1');
      expect(await cache.getMany(['a', 'b', 'c'])).toEqual(['a#1', 'b#1', undefined]);
      expect(await ns.getOrCompute('x', loader, 60_000)).toBe('x#1');
      expect(await ns.getOrCompute('x', loader, 60_000)).toBe('x#1');
      expect(await ns.get('x')).toBe('x#1');
      expect(await ns.getMany(['x'])).toEqual(['x#1']);
      // forceFresh asks the origin: its loader runs (unfenced, unstored), and later calls get its value.
      expect(await cache.getOrCompute('a', loader, { ttl: 60_000, forceFresh: true })).toBe('a#2');
      expect(await cache.getOrCompute('a', loader, 60_000)).toBe('a#2');
    });
    expect(Object.fromEntries(runs)).toEqual({ a: 2, b: 1, x: 1 });
    expect(batches).toEqual([['b']]);
    // Only the first call's read was sent and waited out; every later Redis operation was refused at once.
    expect(waitedOut(degraded)).toBe(1);
    expect(notSent(degraded)).toBe(degraded.length - 1);
  });
});

describe('L1 copies outlive the subscription loss while Redis is unavailable', () => {
  it('with L1: once the heartbeat counts the subscription down, the fresh L1 copies still answer (through the degraded memo), no loader runs', async () => {
    // The cache's subscriber is a duplicate of the caller's client: catch it, to hear it go down.
    let subscriber: { once(event: string, listener: () => void): unknown } | undefined;
    const { cache, runs, loader } = await setup({ local: { max: 100 } }, (redis) => {
      const c = redis as unknown as { duplicate: (...a: unknown[]) => typeof subscriber };
      const original = c.duplicate.bind(c);
      c.duplicate = (...a: unknown[]) => (subscriber = original(...a));
    });
    const keys = ['l0', 'l1', 'l2', 'l3', 'l4'];
    for (const k of keys) expect(await cache.getOrCompute(k, loader, 60_000)).toBe(`${k}#1`);
    const hits: string[] = [];
    cache.on('hit', (e) => hits.push(e.tier));
    await whilePaused(async () => {
      // The heartbeat counts the silent subscriber dead and drops it (ioredis 'close', node-redis 'end'): L1 is no longer trusted.
      await new Promise<void>((resolve) => {
        for (const event of ['close', 'end']) subscriber?.once(event, resolve);
      });
      await new Promise((resolve) => setImmediate(resolve));
      for (const k of keys) expect(await cache.getOrCompute(k, loader, 60_000)).toBe(`${k}#1`);
      expect(cache.health().nodes[0]?.state).toBe('suspect');
    });
    expect(keys.map((k) => runs.get(k))).toEqual([1, 1, 1, 1, 1]);
  });
});

describe('the edges of a suspicion (found by review)', () => {
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  type Sub = { once(event: string, listener: () => void): unknown };
  const catchSubscriber = (box: { sub?: Sub }) => (redis: RedisClient) => {
    const c = redis as unknown as { duplicate: (...a: unknown[]) => Sub };
    const original = c.duplicate.bind(c);
    c.duplicate = (...a: unknown[]) => (box.sub = original(...a));
  };
  const subscriberDown = (box: { sub?: Sub }) =>
    new Promise<void>((resolve) => {
      for (const event of ['close', 'end']) box.sub?.once(event, resolve);
    }).then(() => new Promise((r) => setImmediate(r)));

  it('a namespaced L1 copy answers through the memo after the subscription is lost, as a plain key does (get and getOrCompute, no loader)', async () => {
    const box: { sub?: Sub } = {};
    const { cache, runs, loader } = await setup({ local: { max: 100 } }, catchSubscriber(box));
    const ns = cache.namespace('n');
    expect(await cache.getOrCompute('p', loader, 60_000)).toBe('p#1');
    expect(await ns.getOrCompute('q', loader, 60_000)).toBe('q#1');
    await whilePaused(async () => {
      await subscriberDown(box);
      expect(await cache.getOrCompute('p', loader, 60_000)).toBe('p#1');
      expect(await ns.get('q')).toBe('q#1');
      expect(await ns.getOrCompute('q', loader, 60_000)).toBe('q#1');
    });
    expect(Object.fromEntries(runs)).toEqual({ p: 1, q: 1 });
  });

  it('a namespaced get/has/getMany whose generation Redis cannot give is traced once each on the get channel and counted', async () => {
    const { cache } = await setup();
    const seen: GetContext[] = [];
    const subscriber = { start() {}, end() {}, asyncStart() {}, error() {}, asyncEnd: (ctx: GetContext) => void seen.push({ ...ctx }) };
    getChannel.subscribe(subscriber);
    try {
      await whilePaused(async () => {
        expect(await cache.get('warm')).toBeUndefined(); // the hung read: the node is suspect
        seen.length = 0;
        const before = cache.stats();
        const ns = cache.namespace('fresh');
        await ns.get('k');
        await ns.has('k');
        await ns.getMany(['k', 'l']);
        expect(seen.map((c) => [c.operation, c.namespace, c.key ?? c.keys, c.outcome ?? c.outcomes])).toEqual([
          ['get', 'fresh', 'k', 'miss'],
          ['get', 'fresh', 'k', 'miss'],
          ['getMany', 'fresh', ['k', 'l'], ['miss', 'miss']],
        ]);
        expect(cache.stats().misses - before.misses).toBe(4);
      });
    } finally {
      getChannel.unsubscribe(subscriber);
    }
  });

  it('no health event after close(): a late reply to an operation given up on while suspect says nothing', async () => {
    const { cache, health, loader } = await setup();
    server.pause();
    expect(await cache.getOrCompute('a', loader, 60_000)).toBe('a#1');
    expect(cache.health().nodes[0]?.state).toBe('suspect');
    await cache.close();
    const before = health.length;
    server.resume();
    await nextEventOrIdle(cache);
    expect(health.slice(before)).toEqual([]);
  });

  it('replicaAck: a WAIT answered short is an answer, so writes queued behind one another on a live primary never make it suspect', async () => {
    const { cache, health, loader } = await setup({ replicaAck: { replicas: 1, timeout: 200 } });
    await Promise.allSettled([cache.getOrCompute('w0', loader, 60_000), cache.getOrCompute('w1', loader, 60_000)]);
    await cache.get('other');
    expect(health.filter((h) => h.state === 'suspect')).toEqual([]);
  });

  it('a suspicion that ends while the breaker stays open keeps the degraded copies: no key loads again until the breaker closes', async () => {
    const { cache, runs, loader } = await setup({ breakerThreshold: 1, breakerCooldown: 5_000 });
    server.pause();
    expect(await cache.getOrCompute('a', loader, 60_000)).toBe('a#1'); // the hung read: suspect, and the breaker opens
    expect(await cache.getOrCompute('a', loader, 60_000)).toBe('a#1'); // from the memo
    server.resume();
    // The probe's reply ends the suspicion (health() says 'open' throughout: the open breaker comes first).
    const node = () => [...(cache as unknown as { rt: { io: { nodes: Map<string, { suspect: boolean }> } } }).rt.io.nodes.values()][0];
    while (node()?.suspect !== false) await sleep(20);
    expect(cache.health().nodes[0]?.state).toBe('open');
    expect(await cache.getOrCompute('a', loader, 60_000)).toBe('a#1');
    expect(runs.get('a')).toBe(1);
  });
});

/** Lets a late reply arrive and be handled (a round trip on a fresh connection to the resumed server). */
async function nextEventOrIdle(_cache: Cache): Promise<void> {
  const { client, dispose } = familyClient(server.url);
  try {
    await whenReady(client);
  } finally {
    dispose();
  }
  await new Promise((r) => setTimeout(r, 50));
}

describe('what memory holds for an outage, and when the node counts as hung', () => {
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  type Sub = { once(event: string, listener: () => void): unknown };
  const catchSubscriber = (box: { sub?: Sub }) => (redis: RedisClient) => {
    const c = redis as unknown as { duplicate: (...a: unknown[]) => Sub };
    const original = c.duplicate.bind(c);
    c.duplicate = (...a: unknown[]) => (box.sub = original(...a));
  };
  const subscriberDown = (box: { sub?: Sub }) =>
    new Promise<void>((resolve) => {
      for (const event of ['close', 'end']) box.sub?.once(event, resolve);
    }).then(() => new Promise((r) => setImmediate(r)));
  type Inside = { rt: { bus: { heardAt: number }; io: { nodes: Map<string, { lastAnswer: number }> } } };
  /** Until the subscriber has heard from Redis after the cache's last answered operation (its heartbeat PING answered since). */
  const subscriberHeardLast = async (cache: Cache) => {
    const rt = (cache as unknown as Inside).rt;
    while (rt.bus.heardAt <= (rt.io.nodes.get('standalone')?.lastAnswer ?? Number.NEGATIVE_INFINITY)) await sleep(20);
  };

  it('a value read with a stale window answers at once, as stale, while the node is suspect past its fresh time; only calls that allow stale get it', async () => {
    const { cache, runs, loader } = await setup();
    const stale: string[] = [];
    cache.on('stale', (e) => stale.push(`${e.key}:${e.reason}`));
    const opts = { ttl: 200, staleTtl: 60_000 };
    const loadMany = (missing: readonly string[]) => new Map(missing.map((k) => [k, loader({ key: k })]));
    const ns = cache.namespace('n');
    expect(await cache.getOrCompute('s', loader, opts)).toBe('s#1');
    expect(await cache.getOrCompute('s', loader, opts)).toBe('s#1'); // read from Redis: fresh, with a stale window
    expect(await ns.getOrCompute('t', loader, opts)).toBe('t#1');
    expect(await ns.getOrCompute('t', loader, opts)).toBe('t#1');
    await whilePaused(async () => {
      // The hung read takes redisTimeout (300 ms > ttl): the copy is past its fresh time, in its stale window.
      expect(await cache.getOrCompute('s', loader, opts)).toBe('s#1');
      expect(await cache.getOrCompute('s', loader, opts)).toBe('s#1');
      expect(await cache.getOrComputeMany(['s'], loadMany, opts)).toEqual(['s#1']);
      expect(await ns.getOrCompute('t', loader, opts)).toBe('t#1');
      expect(await cache.get('s')).toBeUndefined(); // get() answers fresh values only
      expect(await cache.getMany(['s'])).toEqual([undefined]);
      expect(await cache.getOrCompute('s', loader, 200)).toBe('s#2'); // a call without staleTtl: its loader runs
    });
    expect(stale).toEqual(['s:window', 's:window', 's:window', 't:window']);
    expect(Object.fromEntries(runs)).toEqual({ s: 2, t: 1 });
  });

  it('a value read with a fail-safe window is the fallback of a failing degraded loader while the node is suspect', async () => {
    const { cache, loader } = await setup();
    const stale: string[] = [];
    cache.on('stale', (e) => stale.push(`${e.key}:${e.reason}`));
    const opts = { ttl: 200, failSafeTtl: 60_000 };
    expect(await cache.getOrCompute('f', loader, opts)).toBe('f#1');
    expect(await cache.getOrCompute('f', loader, opts)).toBe('f#1'); // read from Redis: fresh, with a fail-safe window
    const failing = () => Promise.reject(new Error('origin down'));
    await whilePaused(async () => {
      expect(await cache.getOrCompute('f', failing, opts)).toBe('f#1');
      await expect(cache.getOrCompute('f', failing, 200)).rejects.toThrow('origin down'); // no failSafeTtl: the loader's error
      // A loader that works runs (a fail-safe value is a fallback, not an answer), and its value is kept.
      expect(await cache.getOrCompute('f', loader, opts)).toBe('f#2');
      expect(await cache.getOrCompute('f', failing, opts)).toBe('f#2');
    });
    expect(stale).toEqual(['f:loaderError']);
  });

  it('a read that finds the key gone drops the copy of it: an outage after a delete nobody announced does not bring the old value back', async () => {
    const { cache, runs, loader } = await setup();
    const opts = { ttl: 60_000, staleTtl: 60_000 };
    expect(await cache.getOrCompute('d', loader, opts)).toBe('d#1');
    expect(await cache.get('d')).toBe('d#1'); // read from Redis: copied
    const admin = new Redis(server.adminUrl);
    try {
      await admin.del(keysOf(cache, 'd').value); // gone without a note (an eviction, a delete from outside)
    } finally {
      admin.disconnect();
    }
    expect(await cache.get('d')).toBeUndefined(); // the read that finds it gone
    await whilePaused(async () => {
      expect(await cache.getOrCompute('d', loader, opts)).toBe('d#2');
    });
    expect(runs.get('d')).toBe(2);
  });

  it('the subscriber finding the node silent makes it suspect: with L1 handed to the memo, not one call waits out a read', async () => {
    const box: { sub?: Sub } = {};
    const { cache, health, degraded, runs, loader } = await setup({ local: { max: 100 } }, catchSubscriber(box));
    const keys = ['h0', 'h1', 'h2'];
    for (const k of keys) expect(await cache.getOrCompute(k, loader, 60_000)).toBe(`${k}#1`);
    await subscriberHeardLast(cache); // L1 answers everything: the main connection is quiet
    await whilePaused(async () => {
      await subscriberDown(box);
      expect(cache.health().nodes[0]?.state).toBe('suspect'); // before any call
      for (const k of keys) expect(await cache.getOrCompute(k, loader, 60_000)).toBe(`${k}#1`);
      expect(await cache.getOrCompute('new', loader, 60_000)).toBe('new#1');
    });
    expect(keys.map((k) => runs.get(k))).toEqual([1, 1, 1]);
    expect(waitedOut(degraded)).toBe(0);
    expect(notSent(degraded)).toBe(4);
    expect(health.map((e) => e.state)).toEqual(['suspect']);
  });

  it('a subscriber connection killed on a live server is no sign of a hung node: nothing is suspect, calls read Redis', async () => {
    const { cache, health, degraded, loader } = await setup({ local: { max: 100 } });
    expect(await cache.getOrCompute('k', loader, 60_000)).toBe('k#1');
    await subscriberHeardLast(cache); // the main connection is quieter than the subscriber
    const downs = subscriptionDowns(cache);
    const admin = new Redis(server.adminUrl);
    try {
      await admin.client('KILL', 'TYPE', 'pubsub');
    } finally {
      admin.disconnect();
    }
    while (downs.count === 0) await sleep(10); // the cache saw its subscription go down
    expect(cache.health().healthy).toBe(true);
    expect(await cache.get('k')).toBe('k#1'); // read from Redis (L1 is not trusted until re-subscribed)
    expect(health).toEqual([]);
    expect(degraded).toEqual([]);
  });

  it('a stall of this process across a heartbeat PING is not silence: the subscription stays up and the node healthy', async () => {
    const { cache, health } = await setup({ local: { max: 100 } });
    const downs = subscriptionDowns(cache);
    await subscriberHeardLast(cache);
    // The next heartbeat PING is sent, then (in the check phase of the same turn, before its reply can be
    // read) this process stalls 1.5 periods: the heartbeat's next tick runs late, with the reply unread.
    const bus = (cache as unknown as { rt: { bus: { subscriber: { ping: () => Promise<unknown> } } } }).rt.bus;
    const sub = bus.subscriber;
    const ping = sub.ping.bind(sub);
    let stalled = 0;
    sub.ping = () => {
      if (stalled++ === 0) {
        setImmediate(() => {
          const until = performance.now() + 450;
          while (performance.now() < until) {
            // blocked
          }
        });
      }
      return ping();
    };
    while (stalled < 3) await sleep(50); // two more heartbeats after the stalled one
    expect(downs.count).toBe(0);
    expect(health).toEqual([]);
    expect(cache.health().healthy).toBe(true);
  });

  it('a suspect node has one probe outstanding at a time, however long it stays silent', async () => {
    const { cache, loader } = await setup();
    // Count the probes the cache sends (the Io's probe function).
    const io = (cache as unknown as { rt: { io: { probe: (target: unknown) => Promise<unknown> } } }).rt.io;
    const probe = io.probe.bind(io);
    let probes = 0;
    io.probe = (target) => (probes++, probe(target));
    server.pause();
    try {
      expect(await cache.getOrCompute('p', loader, 60_000)).toBe('p#1');
      expect(cache.health().nodes[0]?.state).toBe('suspect');
      await sleep(5 * 300); // five redisTimeouts of silence
    } finally {
      server.resume();
    }
    expect(await nextEvent(cache, 'health')).toMatchObject({ state: 'recovered' });
    expect(probes).toBe(1);
  });

  it('copies handed from a large L1 never push a degraded value out of the memo; the most recently used copies are kept', async () => {
    const box: { sub?: Sub } = {};
    const { cache, runs, loader } = await setup({ local: { max: 10 }, degradedMemo: 3 }, catchSubscriber(box));
    const keys = Array.from({ length: 10 }, (_, i) => `m${i}`);
    for (const k of keys) expect(await cache.getOrCompute(k, loader, 60_000)).toBe(`${k}#1`);
    // A degraded value while the subscription holds: Redis refuses writes (OOM), the lock cannot be taken.
    const admin = new Redis(server.adminUrl);
    try {
      await admin.config('SET', 'maxmemory', '1');
      expect(await cache.getOrCompute('dv', loader, 60_000)).toBe('dv#1');
      await admin.config('SET', 'maxmemory', '0');
    } finally {
      admin.disconnect();
    }
    // L1 (10 slots) ends up without dv: m1..m9 used again, then m10 pushes dv out.
    for (const k of keys.slice(1)) expect(await cache.getOrCompute(k, loader, 60_000)).toBe(`${k}#1`);
    expect(await cache.getOrCompute('m10', loader, 60_000)).toBe('m10#1');
    await whilePaused(async () => {
      await subscriberDown(box); // L1's 10 copies handed to a memo of 3
      expect(await cache.getOrCompute('dv', loader, 60_000)).toBe('dv#1');
      for (const k of ['m8', 'm9', 'm10']) expect(await cache.getOrCompute(k, loader, 60_000)).toBe(`${k}#1`);
    });
    expect(runs.get('dv')).toBe(1);
    expect(['m8', 'm9', 'm10'].map((k) => runs.get(k))).toEqual([1, 1, 1]);
  });
});

describe('Redlock nodes are found hung by time too', () => {
  let nodes: RedisServer[] = [];
  beforeAll(async () => {
    nodes = await Promise.all(Array.from({ length: 3 }, () => startRedisServer()));
  });
  afterAll(async () => {
    for (const n of nodes) n.resume();
    await Promise.all(nodes.map((n) => n.stop()));
  });
  /** Redis's count of script calls so far on `node` (INFO commandstats, as the admin user). */
  const scriptCalls = async (node: RedisServer) => {
    const admin = new Redis(node.adminUrl);
    try {
      const info = await admin.info('commandstats');
      return ['eval', 'evalsha'].reduce((sum, c) => sum + Number(new RegExp(`cmdstat_${c}:calls=(\\d+)`).exec(info)?.[1] ?? 0), 0);
    } finally {
      admin.disconnect();
    }
  };

  it('a hung majority: the first acquire waits one nodeTimeout, later ones send nothing to the hung nodes; health() lists every Redlock node', async () => {
    const clients = nodes.map((n) => {
      const { client, dispose } = familyClient(n.url);
      disposals.push(dispose);
      return client;
    });
    await Promise.all(clients.map((c) => whenReady(c)));
    const { cache, health, runs, loader } = await setup({ lock: 'redlock', redlock: { nodes: clients, nodeTimeout: 300 } });
    expect(await cache.getOrCompute('r', loader, 60_000)).toBe('r#1'); // every node answers
    expect(cache.health()).toMatchObject({ healthy: true, nodes: [{ node: 'standalone' }, { node: 'redlock[0]' }, { node: 'redlock[1]' }, { node: 'redlock[2]' }] });
    const hung = [nodes[1], nodes[2]] as RedisServer[];
    const before = await Promise.all(hung.map(scriptCalls));
    for (const n of hung) n.pause();
    try {
      // No quorum (onNoQuorum 'local'): each key's loader runs under the local lock, fenced, stored.
      for (let i = 0; i < 5; i++) expect(await cache.getOrCompute(`q${i}`, loader, 60_000)).toBe(`q${i}#1`);
      expect(cache.health().nodes.map((n) => `${n.node}:${n.state}`)).toEqual(['standalone:healthy', 'redlock[0]:healthy', 'redlock[1]:suspect', 'redlock[2]:suspect']);
    } finally {
      for (const n of hung) n.resume();
    }
    // Each hung node got the first acquire's vote and its undo by token (sent at the timeout, and again
    // once the late reply came), and nothing for the four acquires after it.
    const after = await Promise.all(hung.map(scriptCalls));
    for (const [i, n] of after.entries()) expect(n - (before[i] as number)).toBeLessThanOrEqual(3);
    expect([...runs.values()].every((n) => n === 1)).toBe(true);
    expect(health.filter((h) => h.state === 'suspect').map((h) => h.node).sort()).toEqual(['redlock[1]', 'redlock[2]']);
  });
});
