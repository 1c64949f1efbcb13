import { slotTag } from './keys.js';
import type { RedisClient } from './redis-types.js';

/**
 * Which Redis node owns a user key's entry: the unit the circuit breaker keeps its state for (io.ts).
 * The one place that knows how a client routes keys, so it can move behind the client port later.
 * '' = the one node of a plain client (and operations with no key).
 */
export type NodeOf = (key: string | undefined) => string;

const ONE_NODE: NodeOf = () => '';

/**
 * A plain client has one node. On an ioredis `Cluster` the owner of a key is the master of its slot in
 * the client's own slot table (`cluster.slots[slot][0]`, "host:port"), which ioredis refreshes on
 * MOVED and on topology changes; a slot not (yet) in the table reads as one shared '?' node. Every
 * key of an entry hashes its `{tag}` (keys.ts), so the user key's tag alone decides the slot.
 */
export function nodeOf(client: RedisClient): NodeOf {
  if (client.isCluster !== true) return ONE_NODE;
  const table = client as unknown as { readonly slots?: readonly (readonly string[] | undefined)[] };
  return (key) => (key === undefined ? '' : (table.slots?.[clusterSlot(slotTag(key))]?.[0] ?? '?'));
}

/** The Redis Cluster hash slot of a hash-tag string: CRC16 (XMODEM: poly 0x1021, init 0) mod 16384. */
export function clusterSlot(tag: string): number {
  let crc = 0;
  for (const byte of Buffer.from(tag, 'utf8')) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc & 0x3fff;
}

/** A connection that can run a plain command: a `Redis` client, or one node of a Cluster. */
export interface CommandConnection {
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
}

/**
 * The connection that runs the commands for `redisKey`: the client itself for a plain client (one
 * connection, so a `WAIT` there counts the writes it sent before); on a Cluster, the client's
 * connection to the master owning the key's slot (a keyless command sent through the Cluster client
 * would go to a random node). Falls back to the client itself when the slot owner is not known yet.
 */
export function connectionOf(client: RedisClient, redisKey: string): CommandConnection {
  if (client.isCluster !== true) return client as unknown as CommandConnection;
  const cluster = client as unknown as {
    readonly slots?: readonly (readonly string[] | undefined)[];
    nodes(role: 'master'): { readonly options: { readonly host?: string; readonly port?: number } }[];
  };
  const open = redisKey.indexOf('{');
  const close = redisKey.indexOf('}', open + 1);
  const owner = cluster.slots?.[clusterSlot(open >= 0 && close > open + 1 ? redisKey.slice(open + 1, close) : redisKey)]?.[0];
  const node = cluster.nodes('master').find((n) => `${n.options.host}:${n.options.port}` === owner);
  return (node ?? client) as unknown as CommandConnection;
}
