/**
 * get() and getMany(): the fresh value or nothing, never a loader. L1 first, then the store; a fresh
 * value is a hit (counted and emitted as for getOrCompute), anything else a miss; a Redis failure
 * reads as a miss with a `degraded` event. The L1 ticket is taken before each read is sent.
 */
import { CacheClosedError } from './errors.js';
import { entryKeys } from './keys.js';
import { entryRead, readEntry } from './protocol/read.js';
import type { Runtime } from './runtime.js';
import type { Found } from './store.js';

export async function get(rt: Runtime, key: string): Promise<unknown> {
  const l1 = rt.local.get(key);
  if (l1 && !l1.stale) return localHit(rt, key, l1.value);
  try {
    return answer(rt, await readEntry(rt.deps, key, entryKeys(rt.options.prefix, key)));
  } catch (error) {
    if (error instanceof CacheClosedError) throw error;
    rt.emit('degraded', { key, operation: 'read', error });
    return undefined;
  }
}

/** L1, then one pipelined round trip per hash slot for the rest (one in all on a single Redis). */
export async function getMany(rt: Runtime, keys: readonly string[]): Promise<unknown[]> {
  const values = new Array<unknown>(keys.length);
  const remote: number[] = [];
  keys.forEach((key, i) => {
    const l1 = rt.local.get(key);
    if (l1 && !l1.stale) values[i] = localHit(rt, key, l1.value);
    else remote.push(i);
  });
  if (remote.length === 0) return values;
  const names = remote.map((i) => keys[i] as string);
  const tickets = names.map((key) => rt.local.begin(key));
  const sent = rt.options.clock.now();
  const { maxValueBytes, prefix } = rt.options;
  const replies = await rt.batch.run('read', names, (scripts, j) => void scripts.read(entryKeys(prefix, names[j] as string).value, maxValueBytes));
  replies.forEach((reply, j) => {
    const key = names[j] as string;
    if (!reply.ok) {
      if (reply.error instanceof CacheClosedError) throw reply.error;
      rt.emit('degraded', { key, operation: 'read', error: reply.error });
      return;
    }
    const found = entryRead(rt.deps, key, tickets[j] as number, sent, rt.deps.store.found(key, reply.value as [number, Buffer | number] | null));
    values[remote[j] as number] = answer(rt, found);
  });
  return values;
}

/** A fresh value in L1: a local hit, as for getOrCompute. */
function localHit(rt: Runtime, key: string, value: unknown): unknown {
  rt.telemetry.localHit();
  rt.emit('hit', { key, tier: 'local' });
  return value;
}

/** What a store read answers: its fresh value (a hit; entryRead emitted the event), else nothing (a miss). */
function answer(rt: Runtime, found: Found): unknown {
  if (found.state !== 'fresh') {
    rt.telemetry.readMiss();
    return undefined;
  }
  rt.telemetry.redisHit();
  return found.value;
}
