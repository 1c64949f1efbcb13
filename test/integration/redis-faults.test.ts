import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createCache, type Cache } from '../../src/index.js';
import { useFamilyServer, whenReady } from '../support/clients.js';
import { countCommands } from '../support/harness.js';

const files = useFamilyServer();

/**
 * redisTimeout 200 ms where every call meets the fault (each times out, so the tests stay short); the
 * default 1 s where a call must succeed (a stall of the loaded machine past 200 ms would fail it).
 */
function setup({ breakerCooldown = 300, redisTimeout = 200 }: { breakerCooldown?: number; redisTimeout?: number } = {}) {
  // The family under test (SG_TEST_CLIENT), with default options (ioredis: a bounded retry count).
  const redis = files.client();
  const cache = files.keep(createCache({ redis, prefix: `f${files.clientCount}`, redisTimeout, breakerThreshold: 3, breakerCooldown }));
  const degraded: string[] = [];
  cache.on('degraded', (e) => degraded.push(e.operation));
  return { redis, cache, degraded };
}

async function burst(cache: Cache, key: string, n: number) {
  let runs = 0;
  const loader = async () => {
    runs++;
    await new Promise((r) => setTimeout(r, 50));
    return `v-${key}`;
  };
  const results = await Promise.allSettled(Array.from({ length: n }, () => cache.getOrCompute(key, loader, 60_000)));
  return { results, runs };
}

/** Blocks this process's event loop for `ms` (a long GC pause, or synchronous work in the app). */
function stallThisProcess(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

describe('a stall of this process is not a Redis outage', () => {
  it('replies that arrived while the event loop was blocked past redisTimeout are read before any command is timed out: no call degrades, no loader runs', async () => {
    const { cache, degraded } = setup({ breakerCooldown: 60_000, redisTimeout: 1000 });
    const keys = Array.from({ length: 10 }, (_, i) => `stall${i}`);
    for (const k of keys) await cache.set(k, `v-${k}`, 60_000);
    let runs = 0;
    // Redis holds every reply for 500 ms (its answer says the pause has begun), so the reads are on
    // the wire (node-redis writes on setImmediate) and unanswered when this process stalls; Redis
    // answers during the stall, past none of the deadlines (1 s), and the replies wait in the socket.
    const admin = new Redis(files.server.adminUrl);
    admin.on('error', () => undefined);
    await admin.call('CLIENT', 'PAUSE', '500', 'ALL');
    const calls = keys.map((k) => cache.getOrCompute(k, () => (runs++, 'the loader ran'), 60_000));
    await new Promise((r) => setTimeout(r, 100));
    stallThisProcess(1500); // every deadline passes
    admin.disconnect();
    expect(await Promise.all(calls)).toEqual(keys.map((k) => `v-${k}`));
    expect(runs).toBe(0);
    expect(degraded).toEqual([]);
  });
});

describe('Redis unavailable: getOrCompute still answers with the loader, one run per key per process', () => {
  it('Redis hanging (SIGSTOP): every caller gets the value, the loader runs once, the call reports degraded; once the breaker is open nothing is sent', async () => {
    // A cooldown longer than the test: the open breaker must not let its probe through mid-test.
    const { cache, redis, degraded } = setup({ breakerCooldown: 60_000 });
    await redis.ping();
    files.server.pause();
    try {
      const { results, runs } = await burst(cache, 'hang', 20);
      expect(results.every((r) => r.status === 'fulfilled' && r.value === 'v-hang')).toBe(true);
      expect(runs).toBe(1);
      expect(degraded).toContain('read');
      // The breaker opens after repeated failures; calls then skip Redis entirely and still answer.
      await burst(cache, 'hang2', 1);
      await burst(cache, 'hang3', 1);
      // Counted on the real client: every command the cache sends (scripts included) goes through it.
      const sent = countCommands(redis);
      const again = await burst(cache, 'hang4', 5);
      expect(again.results.every((r) => r.status === 'fulfilled')).toBe(true);
      expect(again.runs).toBe(1);
      expect(sent.count).toBe(0);
    } finally {
      files.server.resume();
    }
  });

  it('Redis killed (connection refused): every caller gets the value, then the cache recovers after restart', async () => {
    const { cache, redis, degraded } = setup({ redisTimeout: 1000 });
    await redis.ping();
    await files.server.kill();
    const { results, runs } = await burst(cache, 'down', 20);
    expect(results.every((r) => r.status === 'fulfilled' && r.value === 'v-down')).toBe(true);
    expect(runs).toBe(1);
    expect(degraded.length).toBeGreaterThan(0);
    await files.server.restart();
    await whenReady(redis);
    // No wait for breakerCooldown: the client's 'ready' event closes the breaker at once.
    const computed = new Promise<string>((resolve) => cache.once('computed', (e) => resolve(String(e.lock))));
    await cache.getOrCompute('after', () => 'back', 60_000);
    expect(await computed).toBe('single');
    expect(await cache.get('after')).toBe('back');
  });

  it('get(), set() and delete() never hang while Redis is paused: get reads as a miss, set/delete reject with ERR_REDIS_UNAVAILABLE', async () => {
    const { cache, redis } = setup();
    await redis.ping();
    files.server.pause();
    try {
      expect(await cache.get('x')).toBeUndefined();
      await expect(cache.set('x', 1, 1000)).rejects.toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE' });
      await expect(cache.delete('x')).rejects.toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE' });
    } finally {
      files.server.resume();
    }
  });
});

describe("an error reply is reported as one, with Redis's own text, whatever the client family", () => {
  it("maxmemory 1 + noeviction: set() rejects with failure 'reply' (not 'connection') quoting the OOM text", async () => {
    const { cache } = setup({ redisTimeout: 1000 });
    const admin = new Redis(files.server.adminUrl);
    try {
      await cache.set('before', 'v', 60_000);
      await admin.config('SET', 'maxmemory-policy', 'noeviction');
      await admin.config('SET', 'maxmemory', '1');
      const err = await cache.set('k', 'v', 60_000).then(() => undefined, (e: unknown) => e);
      expect(err).toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE', operation: 'set', failure: 'reply', key: 'k' });
      expect((err as Error).message).toContain('OOM command not allowed');
    } finally {
      await admin.config('SET', 'maxmemory', '0');
      admin.disconnect();
    }
  });
});
