/**
 * set(), delete(), deleteMany(), deleteByTag() and expireByTag(): explicit changes of entries. Each drops this process's copies
 * first (L1, the degraded memo), raises or uses the key's fence so no rebuild in flight can land an
 * older value after it, and ends with `forget`: a call starting after the change joins no flight begun
 * before it.
 */
import { CacheClosedError, InvalidOptionError } from './errors.js';
import { entryKeys, type EntryKeys } from './keys.js';
import type { Grant } from './lock/types.js';
import { writeTtl, type ResolvedCall } from './options.js';
import type { Runtime } from './runtime.js';
import type { Written } from './store.js';
import type { TagInvalidation } from './tags.js';

/** set()'s rule on its value, before any Redis traffic (a namespace's set() checks it before reading its generation). */
export function assertSettable(key: string, value: unknown): void {
  if (value === undefined) throw new InvalidOptionError('value', value, 'a value other than undefined (use delete() to remove)', key);
}

/** See Cache.set(). */
export async function set(rt: Runtime, key: string, value: unknown, call: ResolvedCall): Promise<void> {
  assertSettable(key, value);
  const keys = entryKeys(rt.options.prefix, key);
  rt.deps.store.assertStorable(key, value, call); // before any Redis traffic
  // The value is changing: this process's copy goes now, and comes back only if the fence accepts ours.
  rt.local.invalidate(key);
  rt.memo.invalidate(key);
  const heardAt = rt.heard.latest; // before the grant: a tag note heard after it keeps our copy out of L1
  const grant = (await rt.deps.fenceOnly.acquire(key, keys, call, { ignoreBackoff: true, operation: 'set' })) as Grant;
  let outcome: 'written' | 'empty' | 'cancelled' = 'empty';
  try {
    if (!rt.grants.hold(grant)) {
      outcome = 'cancelled';
      throw new CacheClosedError(key);
    }
    const written = await writeFenced(rt, key, keys, grant, value, call, heardAt);
    // Again once written: a subscription lost while the write was out handed L1's copies to the memo,
    // and one of them may be a value this set replaces.
    rt.memo.invalidate(key);
    outcome = 'written';
    if (written === 'fenceLost') await deleteInstead(rt, key, keys);
    rt.forget(key); // a call starting now must not join a rebuild begun before this set
  } finally {
    rt.grants.drop(grant);
    await grant.release(outcome);
  }
}

/** set()'s write under its fence-only grant, L1's copy of it, and the events of a refused write. */
async function writeFenced(rt: Runtime, key: string, keys: EntryKeys, grant: Grant, value: unknown, call: ResolvedCall, heardAt: number): Promise<Written> {
  const { clock } = rt.options;
  const ticket = rt.local.begin(key);
  const ttl = writeTtl(call);
  const sent = clock.now();
  rt.telemetry.ownWrite(key, grant.fence, 'set');
  const tags = call.tags !== undefined && call.tags.length > 0 ? call.tags : undefined;
  const written = await rt.deps.store.write(key, keys, grant, value, call, 0, 's', ttl, undefined, tags);
  // Redis started the entry's ttl between `sent` and now: L1's copy counts from `sent`.
  // As a load's write (protocol/write.ts): an expireByTag heard since the grant lets it land, not stay fresh here.
  const fresh = written === 'accepted' && !rt.heard.reachedSince(heardAt, key, tags);
  rt.local.written(ticket, key, value, ttl - (clock.now() - sent), fresh, { fence: grant.fence, ttlMs: ttl, loadMs: 0, tags });
  if (written !== 'accepted') {
    rt.telemetry.writeRejected();
    rt.emit('writeRejected', { key, fence: grant.fence });
  }
  return written;
}

/**
 * The fence was lost (evicted, deleted, a restart) since this set's token, and nothing was accepted
 * since: the store may still hold a value from before this call, which every process would go on
 * serving. Delete the entry as delete() does (a new token, the mark raised, a 'd' note to every L1):
 * nothing older than this set() survives it. A set() superseded by a newer write leaves that newer
 * value alone (deleting it would refuse, and so delete, every write in flight, over and over while
 * sets overlap).
 */
async function deleteInstead(rt: Runtime, key: string, keys: EntryKeys): Promise<void> {
  try {
    await rt.deps.store.invalidate(key, keys, rt.options.defaults.lockTtl);
  } finally {
    rt.local.deleted(key); // even if the delete failed: it may still be applied, and L1 must not outlive it
    rt.memo.invalidate(key);
  }
}

/** See Cache.delete(). */
export async function remove(rt: Runtime, key: string): Promise<void> {
  rt.local.invalidate(key);
  // Before anything is sent: even a delete that fails (Redis down) ends the degraded copy.
  rt.memo.invalidate(key);
  try {
    await rt.deps.store.invalidate(key, entryKeys(rt.options.prefix, key), rt.options.defaults.lockTtl);
    rt.forget(key); // a call starting now must not join a rebuild begun before this delete
  } finally {
    rt.local.deleted(key);
    rt.memo.invalidate(key); // again: L1's copies handed to the memo while the delete was out
  }
}

/** See Cache.deleteMany(): pipelined, one round trip per hash slot. */
export async function removeMany(rt: Runtime, keys: readonly string[]): Promise<void> {
  for (const key of keys) {
    rt.local.invalidate(key);
    rt.memo.invalidate(key); // as delete(): before anything is sent
  }
  const { prefix } = rt.options;
  const lockTtl = rt.options.defaults.lockTtl;
  try {
    const replies = await rt.batch.run('delete', keys, (scripts, i) => {
      const key = keys[i] as string;
      const k = entryKeys(prefix, key);
      void scripts.invalidate(k.value, k.fence, lockTtl, rt.notes.channel(k), rt.notes.message('d', key));
    }, (i) => entryKeys(prefix, keys[i] as string).value); // a delete changes state: replicaAck confirms each group
    const failed = replies.find((r) => !r.ok);
    keys.forEach((key, i) => {
      if (replies[i]?.ok) rt.forget(key); // calls starting now join no rebuild begun before the delete
    });
    if (failed && !failed.ok) throw failed.error;
  } finally {
    for (const key of keys) {
      rt.local.deleted(key);
      rt.memo.invalidate(key); // again, as delete()
    }
  }
}

/**
 * See Cache.deleteByTag() and expireByTag() (`scope` '') and the Namespace's (`scope` its path): this
 * process's copies go before anything is sent (even an invalidation that then fails ends them) and
 * again once it is done (a read that raced it); every other process drops its own on the note,
 * acknowledged. In a process, both kinds do the same: no copy tagged so answers as fresh any more.
 */
export async function invalidateTags(rt: Runtime, scope: string, tags: readonly string[], how: TagInvalidation): Promise<void> {
  if (rt.closed) throw new CacheClosedError();
  rt.tagsInvalidated(scope, tags);
  try {
    await rt.tags.invalidate(scope, tags, how);
  } finally {
    rt.tagsInvalidated(scope, tags);
  }
}
