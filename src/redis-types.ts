import type { AnyRedisClient } from './client/detect.js';

export type { IoredisClient } from './client/ioredis.js';
export type { NodeRedisClient } from './client/node-redis.js';

/**
 * The client you pass as `redis` (and as `redlock.nodes`): an ioredis `Redis` or `Cluster` (ioredis 5
 * or 6), or a node-redis client from `createClient()` or `createCluster()` (package `redis`, 5 or 6),
 * connected by you. Structural on purpose: your client's version is yours, so the library never
 * imports its classes, and needs only the one you have installed.
 */
export type RedisClient = AnyRedisClient;
