/**
 * get() and getMany(): the fresh value or nothing, never a loader. L1 first, then the store; a fresh
 * value is a hit (counted and emitted as for getOrCompute), anything else a miss; a Redis failure
 * reads as the key's degraded copy when this process keeps one (degraded-memo.ts), else a miss, with a
 * `degraded` event either way. The L1 ticket is taken before each read is sent. Traced on the `get`
 * channel (telemetry.ts) while someone subscribes: one context per get() and per getMany().
 */
import { CacheClosedError } from './errors.js';
import { entryKeys } from './keys.js';
import { shownKey } from './namespace.js';
import { entryRead, readEntry } from './protocol/read.js';
import type { Runtime } from './runtime.js';
import type { Found } from './store.js';
import { getChannel, readTraced, type GetContext, type ReadOutcome } from './telemetry.js';

/** A key's answer and how it was reached. */
interface Read {
  readonly value: unknown;
  readonly outcome: ReadOutcome;
}

export function get(rt: Runtime, key: string): Promise<unknown> {
  return traced('get', [key], () => getOne(rt, key).then((read) => [read])).then((values) => values[0]);
}

export function getMany(rt: Runtime, keys: readonly string[]): Promise<unknown[]> {
  return traced('getMany', keys, () => getSome(rt, keys));
}

/**
 * Reads Redis cannot be asked for (a namespace whose generation it could not give): each key's
 * degraded copy or a miss, counted, evented and traced as the get() or getMany() they answer.
 */
export function degradedReads(rt: Runtime, keys: readonly string[], error: unknown, operation: GetContext['operation']): Promise<unknown[]> {
  return traced(operation, keys, () => Promise.resolve(keys.map((key) => degradedRead(rt, key, error))));
}

/** Runs one get()/getMany(), traced on the `get` channel while someone subscribes (one check otherwise). */
function traced(operation: GetContext['operation'], keys: readonly string[], run: () => Promise<Read[]>): Promise<unknown[]> {
  if (!readTraced()) return run().then((reads) => reads.map(valueOf));
  const shown = keys.map(shownKey);
  const namespace = shown[0]?.namespace;
  const context: GetContext =
    operation === 'get'
      ? { key: shown[0]?.key, ...(namespace === undefined ? {} : { namespace }), operation }
      : { key: undefined, keys: shown.map((s) => s.key), ...(namespace === undefined ? {} : { namespace }), operation };
  return getChannel.tracePromise(async () => {
    const reads = await run();
    if (operation === 'get') context.outcome = reads[0]?.outcome;
    else context.outcomes = reads.map((r) => r.outcome);
    return reads.map(valueOf);
  }, context);
}

const valueOf = (read: Read): unknown => read.value;

async function getOne(rt: Runtime, key: string): Promise<Read> {
  const l1 = rt.local.get(key);
  if (l1 && !l1.stale) return localHit(rt, key, l1.value);
  try {
    return answer(rt, await readEntry(rt.deps, key, entryKeys(rt.options.prefix, key)));
  } catch (error) {
    if (error instanceof CacheClosedError) throw error;
    return degradedRead(rt, key, error);
  }
}

/** L1, then one pipelined round trip per hash slot for the rest (one in all on a single Redis). */
async function getSome(rt: Runtime, keys: readonly string[]): Promise<Read[]> {
  const reads = new Array<Read>(keys.length);
  const remote: number[] = [];
  keys.forEach((key, i) => {
    const l1 = rt.local.get(key);
    if (l1 && !l1.stale) reads[i] = localHit(rt, key, l1.value);
    else remote.push(i);
  });
  if (remote.length === 0) return reads;
  const names = remote.map((i) => keys[i] as string);
  const tickets = names.map((key) => rt.local.begin(key));
  const sent = rt.options.clock.now();
  const { prefix } = rt.options;
  const replies = await rt.deps.store.readMany(rt.readBatch, names, names.map((key) => entryKeys(prefix, key).value));
  replies.forEach((reply, j) => {
    const key = names[j] as string;
    if (!reply.ok) {
      if (reply.error instanceof CacheClosedError) throw reply.error;
      reads[remote[j] as number] = degradedRead(rt, key, reply.error);
      return;
    }
    const found = entryRead(rt.deps, key, tickets[j] as number, sent, reply.found);
    reads[remote[j] as number] = answer(rt, found);
  });
  return reads;
}

/** A fresh value in L1: a local hit, as for getOrCompute. */
function localHit(rt: Runtime, key: string, value: unknown): Read {
  rt.telemetry.localHit();
  rt.emit('hit', { key, tier: 'local' });
  return { value, outcome: 'localHit' };
}

/** What a store read answers: its fresh value (a hit; entryRead emitted the event), else nothing (a miss). */
function answer(rt: Runtime, found: Found): Read {
  if (found.state !== 'fresh') {
    rt.telemetry.readMiss();
    return { value: undefined, outcome: 'miss' };
  }
  rt.telemetry.redisHit();
  return { value: found.value, outcome: 'hit' };
}

/**
 * A read Redis could not answer: a `degraded` event, then the key's degraded copy (counted in
 * `degraded`) if this process keeps one, else a miss (counted in `misses`).
 */
export function degradedRead(rt: Runtime, key: string, error: unknown): Read {
  rt.emit('degraded', { key, operation: 'read', error });
  // get() answers a fresh value or nothing: a copy past its fresh time is not one.
  const hit = rt.memo.get(key);
  const kept = hit?.state === 'fresh' ? hit : undefined;
  rt.telemetry.readDegraded(kept !== undefined);
  return kept === undefined ? { value: undefined, outcome: 'miss' } : { value: kept.value, outcome: 'degraded' };
}
