import type { Batch } from './batch.js';
import type { RedisPort } from './client/port.js';
import { CacheClosedError, RedisUnavailableError } from './errors.js';
import type { Io } from './io.js';
import { entryKeys } from './keys.js';

/**
 * The cache's own clear(): every entry under the prefix (namespaces' included) is invalidated where it
 * lies, without a generation on plain keys (which would cost every call a lookup):
 * 1. every master is walked with SCAN (MATCH on value and fence keys, COUNT per step: Redis is never blocked;
 *    on a Cluster each master in parallel);
 * 2. each step's entries go out in pipelines of CHUNK (per slot) of `clearEntry` (the delete script
 *    without its note), one after the other: the fence's high-water mark rises past every grant issued so far and the value goes,
 *    so a rebuild holding an older grant cannot land its write afterwards;
 * 3. then ONE note for the whole clear (the caller sends it, acknowledged like a namespace clear),
 *    on which every process flushes its L1, degraded memo and flights.
 * Invariant: SCAN returns every key present from the walk's start to its end, so every value written
 * before clear() was called and still there at the end is invalidated, and every rebuild holding a
 * grant (its fence hash) then is refused its write. A value first written during the walk under a
 * grant taken after its fence was raised was loaded after clear() began: not an entry from before it.
 * Cost: SCAN visits every key of each master, the cache's or not (O(keys on the node), in steps),
 * plus one short script per entry. A reshard during the walk can move a key from a master not yet
 * walked to one already walked: it is then missed (SCAN's guarantee holds per node).
 */

/** Keys per SCAN step. */
const SCAN_COUNT = 1000;
/**
 * Entries per pipeline, one pipeline at a time per node: Redis runs a pipeline read in one go, so
 * 100 short scripts (~2 ms) is the longest other clients wait behind a clear; 1,000 at once held
 * them up to ~20–40 ms in `npm run bench:batch`.
 */
const CHUNK = 100;

/**
 * The SCAN pattern of the prefix's value and fence keys: `<prefix>:{<8 hex>}:[vf]:*`, the prefix's glob
 * characters escaped. Fences too: a key being rebuilt for the first time has a fence hash but no value
 * yet, and its rebuild must not land after the clear either.
 */
export function entryKeyPattern(prefix: string): string {
  return `${prefix.replace(/[*?[\]\\]/g, '\\$&')}:{????????}:[vf]:*`;
}

/**
 * The user key, value key and fence key of a value or fence key found by SCAN (keys.ts: the kind letter
 * sits at a fixed offset); the Redis keys come from `entryKeys`, the one place that lays them out.
 */
export function entryOfKey(prefix: string, redisKey: string): { readonly key: string; readonly value: string; readonly fence: string } | undefined {
  const kindAt = prefix.length + 12; // `<prefix>:{12345678}:` then the kind
  const kind = redisKey.slice(kindAt, kindAt + 2);
  if (!redisKey.startsWith(`${prefix}:{`) || (kind !== 'v:' && kind !== 'f:')) return undefined;
  const key = redisKey.slice(kindAt + 2);
  const { value, fence } = entryKeys(prefix, key);
  return { key, value, fence };
}

/**
 * Invalidates every entry under `prefix` on every master (steps 1 and 2). Rejects with
 * RedisUnavailableError (then some entries may be left), or CacheClosedError after close().
 */
export async function invalidateEverything(port: RedisPort, io: Io, batch: Batch, prefix: string, fenceTtl: number): Promise<void> {
  // One routed command first: a client still connecting (an ioredis Cluster before its slot map)
  // knows none or only some of its masters, and a walk over those would miss entries silently.
  const probe = `${prefix}:clear`;
  await io.run('clear', () => port.command(probe, ['EXISTS', probe]));
  const masters = port.eachNode('masters');
  if (masters.length === 0) throw new RedisUnavailableError('clear', new Error('the client knows no master to walk'));
  // SCAN's MATCH is no key argument: the client's own keyPrefix (ioredis) is not added to it for us.
  const { keyPrefix } = port;
  const pattern = entryKeyPattern(keyPrefix + prefix);
  await Promise.all(
    masters.map(async (node) => {
      let cursor = '0';
      do {
        const [next, found] = (await io.run('clear', () => node(['SCAN', cursor, 'MATCH', pattern, 'COUNT', SCAN_COUNT]))) as [string | number, string[]];
        cursor = String(next);
        // A step may name an entry twice (its value and its fence): once is enough.
        const byKey = new Map<string, { readonly key: string; readonly value: string; readonly fence: string }>();
        for (const redisKey of found) {
          if (!redisKey.startsWith(keyPrefix)) continue;
          const entry = entryOfKey(prefix, redisKey.slice(keyPrefix.length)); // the scripts get keyPrefix added back by the client
          if (entry) byKey.set(entry.key, entry);
        }
        const all = [...byKey.values()];
        for (let from = 0; from < all.length; from += CHUNK) {
          const entries = all.slice(from, from + CHUNK);
          const entryAt = (i: number): { readonly value: string; readonly fence: string } => entries[i] as (typeof entries)[number];
          const replies = await batch.run(
            'clear',
            entries.map((e) => e.key),
            (scripts, i) => void scripts.clearEntry(entryAt(i).value, entryAt(i).fence, fenceTtl),
            (i) => entryAt(i).value, // with replicaAck, each group is confirmed
          );
          const failed = replies.find((r) => !r.ok);
          if (failed && !failed.ok) throw failed.error instanceof RedisUnavailableError || failed.error instanceof CacheClosedError ? failed.error : new RedisUnavailableError('clear', failed.error);
        }
      } while (cursor !== '0');
    }),
  );
}

/**
 * How many subscribers a note on `channel` reaches. PUBLISH's own reply counts only those connected to
 * the node that ran it; on a Cluster a note reaches every node's subscribers, so they are counted on
 * every node (masters and replicas) with PUBSUB NUMSUB, each on its own: the counts of the nodes that
 * answered are kept, and a node that failed or did not answer within redisTimeout counts nothing (its
 * subscribers may still acknowledge; the clear does not wait for them). Undefined on a standalone
 * Redis (PUBLISH's reply is the count) and when no node answered (then PUBLISH's reply is used).
 */
export async function clusterReceivers(port: RedisPort, io: Io, channel: string): Promise<number | undefined> {
  if (!port.cluster) return undefined;
  const counts = await Promise.allSettled(
    port.eachNode('all').map(async (node) => {
      const reply = (await io.run('clear', () => node(['PUBSUB', 'NUMSUB', channel]))) as [string, number | string];
      const count = Number(reply[1]);
      if (!Number.isSafeInteger(count) || count < 0) throw new Error(`unexpected PUBSUB NUMSUB reply ${String(reply[1])}`);
      return count;
    }),
  );
  const answered = counts.flatMap((c) => (c.status === 'fulfilled' ? [c.value] : []));
  return answered.length === 0 ? undefined : answered.reduce((a, b) => a + b, 0);
}
