/**
 * The client port's pure parts, on real client objects that never connect: which adapter a client
 * gets, what is refused, the TLS check on both families' option shapes, and the slot mapping.
 */
import calculateSlot from 'cluster-key-slot';
import { Cluster, Redis } from 'ioredis';
import { Cluster as Cluster6, Redis as Redis6 } from 'ioredis6';
import { createClient, createCluster } from 'redis';
import { createClient as createClient5, createCluster as createCluster5 } from 'redis5';
import { afterAll, describe, expect, it } from 'vitest';
import { isRedisClient, portFor } from '../../src/client/detect.js';
import { slotOf } from '../../src/client/slot.js';
import { resolveCacheOptions } from '../../src/options.js';

const ioredis: Redis[] = [];
afterAll(() => {
  for (const c of ioredis) c.disconnect();
});
function lazy<T extends Redis>(c: T): T {
  ioredis.push(c);
  return c;
}
const rootNodes = [{ url: 'redis://127.0.0.1:1' }];

describe('portFor: one adapter per family, detected structurally', () => {
  it.each<[string, () => unknown, string]>([
    ['ioredis 5 Redis', () => lazy(new Redis({ lazyConnect: true })), 'ioredis'],
    ['ioredis 6 Redis', () => lazy(new Redis6({ lazyConnect: true }) as unknown as Redis), 'ioredis'],
    ['ioredis 5 Cluster', () => new Cluster([], { lazyConnect: true }), 'ioredis'],
    ['ioredis 6 Cluster', () => new Cluster6([], { lazyConnect: true }), 'ioredis'],
    ['node-redis 6 createClient', () => createClient(), 'node-redis'],
    ['node-redis 5 createClient', () => createClient5(), 'node-redis'],
    ['node-redis 6 createCluster', () => createCluster({ rootNodes }), 'node-redis cluster'],
    ['node-redis 5 createCluster', () => createCluster5({ rootNodes }), 'node-redis cluster'],
  ])('%s -> %s', (_name, make, family) => {
    const client = make();
    expect(isRedisClient(client)).toBe(true);
    expect(portFor(client as never).family).toBe(family);
  });

  it.each<[string, unknown]>([
    ['null', null],
    ['a plain object', {}],
    ['a Map', new Map()],
    ['only duplicate()', { duplicate: () => undefined }],
    ['sendCommand without scriptLoad', { sendCommand: () => undefined, duplicate: () => undefined }],
  ])('refuses %s with a typed error naming the option and both families', (_name, value) => {
    expect(isRedisClient(value)).toBe(false);
    expect(() => resolveCacheOptions({ redis: value as never })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'redis', message: expect.stringMatching(/ioredis.*node-redis/) as unknown }) as Error,
    );
  });

  it('a standalone client is one node', () => {
    expect(portFor(createClient()).nodeOf('any')).toBe(portFor(createClient()).nodeOf('other'));
    expect(portFor(lazy(new Redis({ lazyConnect: true }))).nodeOf('any')).toBe('standalone');
  });
});

describe('skipsTlsVerification on each family\'s option shape', () => {
  it.each<[string, () => unknown, boolean]>([
    ['ioredis, tls verified', () => lazy(new Redis({ lazyConnect: true, tls: {} })), false],
    ['ioredis, rejectUnauthorized: false', () => lazy(new Redis({ lazyConnect: true, tls: { rejectUnauthorized: false } })), true],
    ['ioredis Cluster, redisOptions.tls rejectUnauthorized: false', () => new Cluster([], { lazyConnect: true, redisOptions: { tls: { rejectUnauthorized: false } } }), true],
    ['node-redis, no tls', () => createClient(), false],
    ['node-redis, tls verified', () => createClient({ socket: { tls: true } }), false],
    ['node-redis, tls with rejectUnauthorized: false', () => createClient({ socket: { tls: true, rejectUnauthorized: false } }), true],
    ['node-redis Cluster, defaults.socket rejectUnauthorized: false', () => createCluster({ rootNodes, defaults: { socket: { tls: true, rejectUnauthorized: false } } }), true],
  ])('%s -> %s', (_name, make, skips) => {
    const client = make();
    expect(portFor(client as never).skipsTlsVerification).toBe(skips);
    if (skips) expect(() => resolveCacheOptions({ redis: client as never })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }) as Error);
  });
});

describe('slotOf matches Redis Cluster\'s key -> slot rule', () => {
  // Not 'foo{}{bar}': Redis hashes that whole key (an empty first tag), cluster-key-slot hashes '{bar'.
  // Brace keys are checked against the server's own CLUSTER KEYSLOT in cluster.test.ts.
  const keys = ['', 'a', 'foo', '{user1000}.following', 'foo{{bar}}zap', 'foo{bar}{zap}', '{', '}', '}abc', 'a{b}c', '😀{}', '\r\n{', 'sg:{Ab3}:v'];
  it.each(keys)('%j', (key) => {
    expect(slotOf(key)).toBe(calculateSlot(key));
  });
});
