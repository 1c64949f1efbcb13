/**
 * Clearing, announced: the cache's own clear() (the walk of clear.ts, then one note) and a namespace's
 * (a generation bump and its note); each resolves once every subscribed process acknowledged the note
 * (at most 2 × redisTimeout), so no process answers from what was cleared afterwards.
 */
import { randomBytes } from 'node:crypto';
import { invalidateEverything } from './clear.js';
import { CacheClosedError } from './errors.js';
import { clearNoteKey } from './namespace.js';
import type { Runtime } from './runtime.js';

/** The path of the cache's own clear() for its note and acknowledgements ('*' is no namespace name: never a namespace's path). */
const WHOLE_CACHE = '*';

/** See Cache.clear(): the walk (clear.ts), this process at once, then the note every other process acknowledges. */
export async function clearCache(rt: Runtime): Promise<void> {
  if (rt.closed) throw new CacheClosedError();
  await invalidateEverything(rt.port, rt.io, rt.batch, rt.options.prefix, rt.options.defaults.lockTtl);
  rt.clearedEverything(); // this process at once; the others on the note
  await announceClear(rt, WHOLE_CACHE, 'a');
}

/** A clear's note (`c`: a namespace path; `a`: the whole cache), then the wait for every subscriber's acknowledgement. */
export function announceClear(rt: Runtime, path: string, kind: 'c' | 'a'): Promise<void> {
  const id = randomBytes(9).toString('base64url');
  // The cache's own clear (kind 'a') confirmed its deletes already; its counter names no key space.
  return rt.generations.clear(path, id, rt.bus.message(kind, clearNoteKey(path, id)), kind === 'c');
}
