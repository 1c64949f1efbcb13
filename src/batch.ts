import { RedisUnavailableError } from './errors.js';
import type { Io } from './io.js';
import { hashSlot } from './keys.js';
import type { RedisPort } from './client/port.js';
import { defineScripts, type Scripts } from './lock/scripts.js';

/**
 * Many keys, one round trip per hash slot: the keys of a batch are grouped by slot on a Cluster (a
 * pipeline must stay within one slot's node), or all together on a single Redis, and each group is
 * sent as one pipeline (client/port.ts) of the same scripts a single-key call uses. Every group is
 * one `Io` operation (one timeout, one breaker count); groups go out in parallel.
 *
 * Invariant: a reply is never reordered against another key's: each command's answer is matched by
 * position within its own pipeline, and nothing relies on ordering between commands of one pipeline
 * (after SCRIPT FLUSH ioredis may re-run a script after the commands queued behind it).
 */

/** One key's answer in a batch: the script's reply, or why it has none. */
export type Reply = { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly error: unknown };

export class Batch {
  constructor(
    private readonly port: RedisPort,
    private readonly io: Io,
    /** replicaAck's WAIT (replica-ack.ts), for batches that change state; undefined when it is off. */
    private readonly confirm?: (redisKey: string) => Promise<void>,
  ) {}

  /**
   * Queues `send(scripts, i)` for every index of `keys` (grouped by slot) and answers each in place.
   * Never rejects: a group whose pipeline failed answers each of its keys with that failure (a
   * RedisUnavailableError naming `operation`), and a command's own error reply answers its key alone.
   */
  async run(
    operation: string,
    keys: readonly string[],
    send: (scripts: Scripts, index: number) => void,
    redisKeyOf?: (index: number) => string,
    /** Undoes a group's commands that may have been applied without an answer (a timeout, or applied after one): `Io.run`'s compensate, per group. */
    compensate?: (indices: readonly number[]) => void,
  ): Promise<Reply[]> {
    const replies = new Array<Reply>(keys.length);
    await Promise.all(
      this.groups(keys).map(async (group) => {
        const pipeline = this.port.pipeline();
        // The same typed script callers, queueing on the pipeline instead of sending.
        const queued = defineScripts(pipeline);
        for (const i of group) send(queued, i);
        try {
          const undo = compensate ? () => compensate(group) : undefined;
          const answers = await this.io.run(operation, () => this.exec(pipeline, redisKeyOf?.(group[0] as number)), keys[group[0] as number], undo);
          group.forEach((i, at) => {
            const [error, value] = answers?.[at] ?? [new Error('no reply in the pipeline'), undefined];
            replies[i] = error ? { ok: false, error: new RedisUnavailableError(operation, error, keys[i]) } : { ok: true, value };
          });
        } catch (error) {
          for (const i of group) replies[i] = { ok: false, error };
        }
      }),
    );
    return replies;
  }

  /**
   * Sends the pipeline; for a batch that changes state (`redisKey` given: a key of the group's node)
   * with replicaAck on, then WAITs on that node's connection, inside the same operation — as a
   * single-key delete does. Too few acknowledgements fail the whole group (failure 'replicaAck').
   */
  private async exec(pipeline: ReturnType<RedisPort['pipeline']>, redisKey: string | undefined): Promise<[Error | null, unknown][]> {
    const answers = await pipeline.exec();
    if (redisKey !== undefined && this.confirm) await this.confirm(redisKey);
    return answers;
  }

  /** Indices of `keys` by hash slot on a Cluster; one group on a single Redis. */
  private groups(keys: readonly string[]): number[][] {
    if (keys.length === 0) return [];
    const all = keys.map((_, i) => i);
    if (!this.port.cluster) return [all];
    const bySlot = new Map<number, number[]>();
    for (const i of all) {
      const slot = hashSlot(keys[i] as string);
      const group = bySlot.get(slot);
      if (group) group.push(i);
      else bySlot.set(slot, [i]);
    }
    return [...bySlot.values()];
  }
}
