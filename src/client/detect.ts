import { IoredisPort, isIoredis, type IoredisClient } from './ioredis.js';
import { ClientNotConnectedError } from '../errors.js';
import { isClosedNodeRedis, isNodeRedis, NodeRedisPort, type NodeRedisClient } from './node-redis.js';
import type { RedisPort } from './port.js';

/** A client the cache accepts: ioredis `Redis`/`Cluster` (5, 6) or node-redis `createClient()`/`createCluster()` (5, 6). */
export type AnyRedisClient = IoredisClient | NodeRedisClient;

/** The families, tried in order; each test is structural (no client library is imported). */
const ADAPTERS: readonly { readonly is: (v: unknown) => boolean; readonly port: (v: never) => RedisPort }[] = [
  { is: isIoredis, port: (c: IoredisClient) => new IoredisPort(c) },
  { is: isNodeRedis, port: (c: NodeRedisClient) => new NodeRedisPort(c) },
];

export function isRedisClient(v: unknown): v is AnyRedisClient {
  return ADAPTERS.some((a) => a.is(v));
}

/** The port for a client `isRedisClient` accepted. */
export function portFor(client: AnyRedisClient): RedisPort {
  const adapter = ADAPTERS.find((a) => a.is(client));
  if (!adapter) throw new TypeError('not a supported Redis client');
  return adapter.port(client as never);
}

/**
 * Refuses, at createCache, a client that cannot reach Redis as given: a node-redis client neither open
 * nor opening (connect() never called, or closed). Every call would otherwise degrade for good.
 * `option` names where it was given (`redis`, `redlock.nodes[1]`).
 */
export function assertOpening(client: AnyRedisClient, option: string): void {
  if (isNodeRedis(client) && isClosedNodeRedis(client)) throw new ClientNotConnectedError(option, portFor(client).family);
}
