import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createCache, type Cache, type RedisClient } from '../../src/index.js';
import { familyClient, whenReady, type TestClient } from '../support/clients.js';
import { startRedisServer, type RedisServer } from '../support/redis-server.js';

/**
 * The degraded memo (issue #13 §4) on a real redis-server that is killed (connection refused) or
 * paused (hanging): a process runs at most one loader per key per ttl while Redis is unavailable,
 * never serves a degraded value older than a delete or set done through it, and drops every degraded
 * value once Redis answers again.
 */
let server: RedisServer;
/** Disposals of the caches' clients (of the family under test, SG_TEST_CLIENT). */
const clients: (() => void)[] = [];
const caches: Cache[] = [];

beforeAll(async () => {
  server = await startRedisServer();
});
afterEach(async () => {
  // Every test leaves a fresh server up for the next one.
  await server.kill();
  await server.restart();
  await Promise.all(caches.splice(0).map((c) => c.close()));
  for (const dispose of clients.splice(0)) dispose();
});
afterAll(async () => {
  await server.stop();
});

/** A monotonic clock the test can move forward (a ttl passing) without waiting for it. */
function skewedClock() {
  let skew = 0;
  return { clock: { now: () => performance.now() + skew }, advance: (ms: number) => void (skew += ms) };
}

/**
 * redisTimeout 200 ms unless `options` says otherwise: the calls meet a killed or paused server and time
 * out; a test with a call that must reach Redis (after a restart) takes the default 1 s, which a
 * stall of the loaded machine does not reach.
 */
async function setup(options: { degradedMemo?: number; redisTimeout?: number } = {}) {
  const { client: redis, dispose } = familyClient(server.url);
  clients.push(dispose);
  await redis.ping();
  const { clock, advance } = skewedClock();
  const cache = createCache({ redis, prefix: `dm${clients.length}`, redisTimeout: 200, breakerThreshold: 3, breakerCooldown: 60_000, clock, ...options });
  caches.push(cache);
  let runs = 0;
  const loader = () => `v${++runs}`;
  return { redis, cache, advance, loader, runs: () => runs };
}

async function restart(redis: RedisClient & TestClient) {
  await server.restart();
  await whenReady(redis);
}

describe('degraded memo: one loader per key per ttl per process while Redis is unavailable', () => {
  it('Redis killed: 20 calls in turn (no flight to share) run the loader once per ttl, with L1 off', async () => {
    const { cache, advance, loader, runs } = await setup();
    await server.kill();
    const seen: string[] = [];
    for (let i = 0; i < 20; i++) seen.push(await cache.getOrCompute('k', loader, 1000));
    expect(runs()).toBe(1);
    expect(new Set(seen)).toEqual(new Set(['v1']));
    expect(cache.stats().degraded).toBe(20);
    advance(1000); // the ttl passed
    expect(await cache.getOrCompute('k', loader, 1000)).toBe('v2');
    expect(runs()).toBe(2);
  });

  it('Redis hanging (SIGSTOP): calls in turn run the loader once per ttl', async () => {
    const { cache, loader, runs } = await setup();
    server.pause();
    for (let i = 0; i < 10; i++) expect(await cache.getOrCompute('k', loader, 60_000)).toBe('v1');
    expect(runs()).toBe(1);
  });

  it('degradedMemo: 0 turns it off: every call in turn runs its loader', async () => {
    const { cache, loader, runs } = await setup({ degradedMemo: 0 });
    await server.kill();
    for (let i = 0; i < 5; i++) await cache.getOrCompute('k', loader, 60_000);
    expect(runs()).toBe(5);
  });
});

describe('degraded memo: never older than a delete or set through this process', () => {
  it('a delete() that fails (Redis down) still ends the kept value: the next call runs the loader', async () => {
    const { cache, loader, runs } = await setup();
    await server.kill();
    expect(await cache.getOrCompute('k', loader, 60_000)).toBe('v1');
    await expect(cache.delete('k')).rejects.toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE' });
    expect(await cache.getOrCompute('k', loader, 60_000)).toBe('v2');
    expect(runs()).toBe(2);
  });

  it('a set() that fails (Redis down) ends the kept value too', async () => {
    const { cache, loader } = await setup();
    await server.kill();
    expect(await cache.getOrCompute('k', loader, 60_000)).toBe('v1');
    await expect(cache.set('k', 'mine', 60_000)).rejects.toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE' });
    expect(await cache.getOrCompute('k', loader, 60_000)).toBe('v2');
  });

  it('a delete() while a degraded loader runs: that loader\'s value is returned to its callers but never kept', async () => {
    const { cache } = await setup();
    await server.kill();
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let runs = 0;
    const slow = async () => {
      const n = ++runs;
      if (n === 1) await gate;
      return `v${n}`;
    };
    const first = cache.getOrCompute('k', slow, 60_000);
    while (runs === 0) await new Promise((r) => setTimeout(r, 5));
    await expect(cache.delete('k')).rejects.toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE' });
    release();
    expect(await first).toBe('v1');
    expect(await cache.getOrCompute('k', slow, 60_000)).toBe('v2');
  });
});

describe('degraded memo: dropped once Redis answers again', () => {
  it('outage, recovery (a newer value served from Redis), outage again: the first outage\'s value is never served', async () => {
    const { redis, cache, loader } = await setup({ redisTimeout: 1000 });
    await server.kill();
    expect(await cache.getOrCompute('k', loader, 60_000)).toBe('v1'); // degraded, kept
    await restart(redis);
    expect(await cache.getOrCompute('k', loader, 60_000)).toBe('v2'); // rebuilt under the lock, stored
    await server.kill();
    // Redis is down again and the store's v2 cannot be read: a new degraded load, never the older v1.
    expect(await cache.getOrCompute('k', loader, 60_000)).toBe('v3');
  });
});
