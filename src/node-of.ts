/**
 * The node that owns a user key's entry, for the per-node circuit breaker (io.ts): on a Cluster the
 * master of the entry's slot, on a plain client one node. The client port answers it (client/port.ts).
 */
export type NodeOf = (key: string | undefined) => string;
