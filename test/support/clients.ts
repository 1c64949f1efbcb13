/**
 * The client family the cache is tested on. `SG_TEST_CLIENT` picks it for the whole run:
 *   ioredis (default, v5) · ioredis6 (the `ioredis6` alias) · node-redis (the `redis` package, v6) ·
 *   node-redis5 (the `redis5` alias, v5).
 * Only the cache's own client changes: tests keep ioredis for their raw reads and fault injection
 * (`h.admin`, `h.client()`), so the assertions read Redis the same way whatever the cache runs on.
 */
import { Redis } from 'ioredis';
import { Redis as Redis6 } from 'ioredis6';
import { createClient } from 'redis';
import { createClient as createClient5 } from 'redis5';
import { afterAll, beforeAll } from 'vitest';
import type { Cache, RedisClient } from '../../src/index.js';
import { startRedisServer, type RedisServer } from './redis-server.js';

export type ClientFamily = 'ioredis' | 'ioredis6' | 'node-redis' | 'node-redis5';
const FAMILIES: readonly ClientFamily[] = ['ioredis', 'ioredis6', 'node-redis', 'node-redis5'];

function family(): ClientFamily {
  const given = process.env.SG_TEST_CLIENT ?? 'ioredis';
  if ((FAMILIES as readonly string[]).includes(given)) return given as ClientFamily;
  throw new Error(`SG_TEST_CLIENT=${given}: expected one of ${FAMILIES.join(', ')}`);
}

export const TEST_CLIENT: ClientFamily = family();

/** What tests do with a cache's client of either family (both answer these the same way). */
export interface TestClient {
  ping(): Promise<string>;
  listenerCount(event: string): number;
  sendCommand(...args: never[]): unknown;
}

/** How a test's client differs from the default one, said once for both families. */
export interface FamilyOptions {
  /** false: commands fail while disconnected (ioredis enableOfflineQueue: false, node-redis disableOfflineQueue). */
  offlineQueue?: boolean;
  /** TLS socket options (ioredis `tls`, node-redis `socket` with `tls: true`). */
  tls?: { ca?: Buffer; servername?: string; rejectUnauthorized?: boolean };
  /** A fixed wait between reconnection attempts (ioredis retryStrategy, node-redis reconnectStrategy). */
  retryDelay?: number;
  /** false: not connected (ioredis lazyConnect; node-redis connect() not called). */
  connect?: boolean;
}

/** A client of `kind`, connecting (node-redis: connect() already called, commands queue until ready), plus its disposal. */
export function familyClient(
  url: string,
  kind: ClientFamily = TEST_CLIENT,
  options: FamilyOptions = {},
): { client: RedisClient & TestClient; dispose: () => void } {
  const { offlineQueue = true, tls, retryDelay, connect = true } = options;
  if (kind === 'ioredis' || kind === 'ioredis6') {
    // A bounded retry count: the cache's own redisTimeout bounds every call anyway.
    const o = {
      maxRetriesPerRequest: 1,
      enableOfflineQueue: offlineQueue,
      lazyConnect: !connect,
      ...(tls ? { tls } : {}),
      ...(retryDelay !== undefined ? { retryStrategy: () => retryDelay } : {}),
    };
    const c = kind === 'ioredis' ? new Redis(url, o) : new Redis6(url, o);
    c.on('error', () => undefined); // the caller's client: its connection errors are the caller's to log
    return { client: c, dispose: () => c.disconnect() };
  }
  const socket = {
    ...(tls ? { tls: true as const, ...tls } : {}),
    ...(retryDelay !== undefined ? { reconnectStrategy: () => retryDelay } : {}),
  };
  const o = { url, disableOfflineQueue: !offlineQueue, socket };
  const c = kind === 'node-redis' ? createClient(o) : createClient5(o);
  c.on('error', () => undefined);
  // The caller connects a node-redis client; connect() opens it at once (commands queue until ready).
  if (connect) c.connect().catch(() => undefined);
  return {
    client: c,
    dispose: () => {
      if (c.isOpen) c.destroy();
    },
  };
}

/** Closes a client's connection for good, as a crash of its socket would (ioredis disconnect(), node-redis destroy()). */
export function dropConnection(client: TestClient): void {
  const c = client as unknown as { disconnect?: () => void; destroy?: () => void; isOpen?: boolean };
  if (typeof c.destroy === 'function') {
    if (c.isOpen !== false) c.destroy();
  } else c.disconnect?.();
}

/**
 * Sends the cache's pub/sub connection (its one duplicate()) to `url` instead: what `client.duplicate()`
 * would return, on another address (ioredis: connecting already; node-redis: unconnected, the cache
 * connects it). Returns a disposal for the subscriber made.
 */
export function subscribeVia(client: TestClient, url: string, kind: ClientFamily = TEST_CLIENT): () => void {
  let made: { client: RedisClient & TestClient; dispose: () => void } | undefined;
  (client as unknown as { duplicate: () => unknown }).duplicate = () => {
    if (kind === 'ioredis' || kind === 'ioredis6') {
      made = familyClient(url, kind);
      return made.client;
    }
    const c = kind === 'node-redis' ? createClient({ url }) : createClient5({ url });
    made = { client: c, dispose: () => dropConnection(c) };
    return c;
  };
  return () => made?.dispose();
}

/** Resolves once `client` (either family) is connected and ready for commands. */
export async function whenReady(client: TestClient): Promise<void> {
  const c = client as unknown as { status?: string; isReady?: boolean; once(event: 'ready', listener: () => void): unknown };
  if (c.status === 'ready' || c.isReady === true) return;
  await new Promise<void>((resolve) => c.once('ready', resolve));
}

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
