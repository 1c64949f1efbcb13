import { ReplicaAckShort } from './errors.js';
import type { Scripts } from './lock/scripts.js';
import type { ReplicaAckOptions } from './options.js';
import type { RedisPort } from './client/port.js';


/**
 * With `replicaAck` on, the scripts that create state a failover must not lose — a grant (its fence
 * token), an accepted write (its value and raised high-water mark), a delete (its raised mark) — are
 * each followed by `WAIT replicas timeout` on the connection that ran them (on a Cluster, the slot's
 * master), inside the same bounded Redis operation. Fewer acknowledgements reject with ReplicaAckShort:
 * the operation counts as failed (RedisUnavailableError, failure 'replicaAck'), and what was applied
 * on the primary is not trusted — a grant is released by its token and the call takes the degraded
 * path; a write's callers still get the loader's value, but L1 keeps nothing and waiters are told to
 * re-read; set() and delete() reject.
 *
 * Invariant: a fence token is used (handed to a loader, carried by a stored value) only after the
 * primary and `replicas` replicas hold it, so a replica promoted from among them issues larger ones.
 * Off: the scripts are returned unchanged (no cost).
 */
export function withReplicaAck(scripts: Scripts, port: RedisPort, ack: Readonly<ReplicaAckOptions> | undefined): Scripts {
  const confirm = replicaConfirm(port, ack);
  if (!confirm) return scripts;
  return {
    ...scripts,
    acquire: async (lockKey, ...rest) => {
      const answer = await scripts.acquire(lockKey, ...rest);
      if (answer[0] === 1) await confirm(lockKey);
      return answer;
    },
    acquireRead: async (lockKey, ...rest) => {
      const answer = await scripts.acquireRead(lockKey, ...rest);
      if (answer[0] === 1) await confirm(lockKey);
      return answer;
    },
    write: async (keys, args) => {
      const accepted = await scripts.write(keys, args);
      if (accepted === 1) await confirm(keys[0]);
      return accepted;
    },
    acquireTagged: async (lockKey, ...rest) => {
      const answer = await scripts.acquireTagged(lockKey, ...rest);
      if (answer[0] === 1) await confirm(lockKey);
      return answer;
    },
    acquireReadTagged: async (lockKey, ...rest) => {
      const answer = await scripts.acquireReadTagged(lockKey, ...rest);
      if (answer[0] === 1) await confirm(lockKey);
      return answer;
    },
    // A tagged write refused by a tag deleted the stored value: confirmed either way.
    writeTagged: async (keys, args, tags) => {
      const accepted = await scripts.writeTagged(keys, args, tags);
      await confirm(keys[0]);
      return accepted;
    },
    invalidate: async (valueKey, ...rest) => {
      const answer = await scripts.invalidate(valueKey, ...rest);
      await confirm(valueKey);
      return answer;
    },
  };
}

/**
 * `WAIT replicas timeout` on the connection of the node that owns `redisKey` (the one that ran the
 * commands it confirms); rejects with ReplicaAckShort when fewer replicas acknowledged. Undefined when
 * replicaAck is off. Batches (a pipeline of deletes, batch.ts) confirm with it too.
 */
export function replicaConfirm(port: RedisPort, ack: Readonly<ReplicaAckOptions> | undefined): ((redisKey: string) => Promise<void>) | undefined {
  if (!ack) return undefined;
  return async (redisKey) => {
    const acked = Number(await port.commandOnNodeOf(redisKey, ['WAIT', ack.replicas, ack.timeout]));
    if (acked < ack.replicas) throw new ReplicaAckShort(acked, ack.replicas, ack.timeout);
  };
}
