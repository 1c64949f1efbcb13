/**
 * The node that owns a user key's entry, for the per-node circuit breaker (io.ts): on a Cluster the
 * master of the entry's slot, on a plain client one node. The client port answers it (client/port.ts).
 */
export type NodeOf = (key: string | undefined) => string;

/**
 * A command on a Redis key that is not one of an entry's (a namespace's generation counter, a tag
 * record): errors name `key` when it is about an entry (a tag record's check), else the `namespace`
 * (its path); `redisKey` is routed — the breaker charged is that of the node owning it.
 */
export interface OwnKey {
  readonly namespace: string;
  readonly redisKey: string;
  readonly key?: string | undefined;
}
