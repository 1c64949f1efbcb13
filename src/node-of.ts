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
