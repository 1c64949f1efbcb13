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
