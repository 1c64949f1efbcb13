/**
 * The caller may be on ioredis 5 or 6 (peer range "^5 || ^6") or on node-redis 5 or 6 (package
 * `redis`, same range). The rest of the suite runs on one family at a time (SG_TEST_CLIENT, ioredis 5
 * by default); this file runs the core behaviours on each of the other versions, side by side: ioredis
 * 6 (alias `ioredis6`), node-redis 5 (alias `redis5`) and node-redis 6.
 */
import { describe, expect, it } from 'vitest';
import { createCache, type Cache, type CacheOptions } from '../../src/index.js';
import { useFamilyServer, type ClientFamily, type TestClient } from '../support/clients.js';
import { heldRebuild, missedCall, nextEvent } from '../support/harness.js';

const files = useFamilyServer();

const VERSIONS: [string, ClientFamily][] = [
  ['ioredis 6', 'ioredis6'],
  ['node-redis 5', 'node-redis5'],
  ['node-redis 6', 'node-redis'],
];

describe.each(VERSIONS)('with %s clients', (_name, family) => {
  let last: TestClient | undefined;
  function cache(extra: Partial<CacheOptions> = {}): Cache {
    const redis = files.client(family);
    last = redis;
    return files.keep(createCache({ redis, prefix: `v-${family}`, ...extra }));
  }

  it('one loader for a stampede from two instances; the loser is woken by pub/sub', async () => {
    const a = cache();
    const b = cache({ defaults: { pollInterval: 3_600_000, waitTimeout: 3_600_000 } });
    await Promise.all([a.ready(), b.ready()]);
    let runs = 0;
    const held = await heldRebuild<string>(a, 'k', 60_000, () => runs++);
    const waiting = await missedCall(b, 'k', () => (runs++, 'b'));
    held.open('a');
    expect([await held.call, await waiting.call]).toEqual(['a', 'a']);
    expect(runs).toBe(1);
  });

  it('stale serving, fenced set during a rebuild, and delete dropping another instance\'s L1', async () => {
    const a = cache({ local: { max: 10 } });
    const b = cache({ local: { max: 10 } });
    await Promise.all([a.ready(), b.ready()]);
    await a.getOrCompute('s', () => 'old', { ttl: 30, staleTtl: 60_000 });
    await new Promise((r) => setTimeout(r, 60));
    expect(await b.getOrCompute('s', () => 'new', { ttl: 60_000, staleTtl: 60_000 })).toBe('old');
    const held = await heldRebuild<string>(a, 'f');
    await b.set('f', 'newer', 60_000);
    held.open('older');
    await held.call;
    expect(await b.get('f')).toBe('newer');
    expect(await a.get('f')).toBe('newer');
    const dropped = nextEvent(a, 'remoteChange');
    await b.delete('f');
    await dropped;
    expect(await a.get('f')).toBeUndefined();
  });

  it('Redis paused: calls still answer through the loader; close() leaves the caller\'s client usable', async () => {
    const c = cache({ redisTimeout: 200 });
    await c.ready();
    files.server.pause();
    try {
      expect(await c.getOrCompute('p', () => 'local', 60_000)).toBe('local');
    } finally {
      files.server.resume();
    }
    await c.close();
    expect(await (last as TestClient).ping()).toBe('PONG');
  });
});
