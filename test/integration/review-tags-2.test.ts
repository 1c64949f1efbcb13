/**
 * Review of the tag feature (docs/tags.md), second pass: each test states a property the docs promise.
 * Real redis-server (test/support/harness.ts); two caches on one prefix are two processes.
 */
import { describe, expect, it } from 'vitest';
import { InvalidOptionError, type Cache, type CacheOptions } from '../../src/index.js';
import { countCommands, useRedis } from '../support/harness.js';

const h = useRedis();
let prefixes = 0;
function pair(options: Partial<CacheOptions> = {}): [Cache, Cache] {
  const prefix = `rtags2${process.pid}x${++prefixes}`;
  return [h.cache({ prefix, local: { max: 100 }, ...options }), h.cache({ prefix, local: { max: 100 } })];
}
async function ready(...caches: Cache[]): Promise<void> {
  await Promise.all(caches.map((c) => c.ready()));
}
function clientOf(c: Cache): Parameters<typeof countCommands>[0] {
  return (c as unknown as { rt: { options: { redis: Parameters<typeof countCommands>[0] } } }).rt.options.redis;
}

describe('bad tags on every entry point', () => {
  it('namespaced set(), getOrCompute() and getOrComputeMany() with bad tags are InvalidOptionError before any Redis traffic (the generation is not read first)', async () => {
    const [a] = pair();
    await ready(a);
    const sent = countCommands(clientOf(a));
    const bad: unknown[] = ['org:3', [''], [1], ['x'.repeat(257)], Array.from({ length: 33 }, (_, i) => `t${i}`), ['\uD800']];
    let n = 0;
    for (const tags of bad) {
      // A namespace never used: its generation is not cached, so reading it would be traffic.
      const ns = a.namespace(`fresh${++n}`);
      await expect(ns.set('k', 'v', { ttl: 1000, tags } as never)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'tags' });
      await expect(ns.getOrCompute('k', () => 'v', { ttl: 1000, tags } as never)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'tags' });
      await expect(ns.getOrComputeMany(['k'], async () => new Map(), { ttl: 1000, tags } as never)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'tags' });
    }
    expect(sent.count).toBe(0);
    expect(InvalidOptionError).toBeDefined();
  });
});
