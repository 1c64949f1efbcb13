/**
 * The client family under test (family.ts, re-exported) and a per-file redis-server with clients of
 * any family on it.
 */
import { afterAll, beforeAll } from 'vitest';
import type { Cache, RedisClient } from '../../src/index.js';
import { familyClient, TEST_CLIENT, type ClientFamily, type TestClient } from './family.js';
import { startRedisServer, type RedisServer } from './redis-server.js';

export * from './family.js';

/**
 * A redis-server of this file's own (fault tests pause, kill and restart it), with clients of any
 * family on it and caches to close; everything is stopped in afterAll.
 */
export function useFamilyServer(): {
  readonly server: RedisServer;
  client(kind?: ClientFamily): RedisClient & TestClient;
  keep(cache: Cache): Cache;
  readonly clientCount: number;
} {
  let server: RedisServer | undefined;
  const disposals: (() => void)[] = [];
  const caches: Cache[] = [];
  beforeAll(async () => {
    server = await startRedisServer();
  });
  afterAll(async () => {
    await Promise.all(caches.map((c) => c.close()));
    for (const dispose of disposals) dispose();
    await server?.stop();
  });
  return {
    get server() {
      return server as RedisServer;
    },
    client(kind = TEST_CLIENT) {
      const { client, dispose } = familyClient((server as RedisServer).url, kind);
      disposals.push(dispose);
      return client;
    },
    keep(cache) {
      caches.push(cache);
      return cache;
    },
    get clientCount() {
      return disposals.length;
    },
  };
}
