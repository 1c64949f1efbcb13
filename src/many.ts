import type { Batch } from './batch.js';
import { freshRemaining, refreshPolicyFor } from './entry.js';
import { AbortedError, CacheClosedError, InvalidOptionError } from './errors.js';
import { entryKeys, type EntryKeys } from './keys.js';
import { runLoader, type LoaderContext, type LoadResult } from './loader.js';
import { StoreLock, type ManyItem } from './lock/single.js';
import type { Grant, Locker } from './lock/types.js';
import type { ResolvedCall } from './options.js';
import { entryRead, Rebuild, refreshAheadOnHit, whileHeld, type RebuildDeps } from './rebuild.js';
import type { Found } from './store.js';

/** What `loadMany` receives besides the keys. */
export interface BatchLoaderContext {
  /** Aborts when the cache closes, the call's `signal` aborts, or `hardTimeout` passes. */
  readonly signal: AbortSignal;
  /** The fencing token of each key this call loads (its grant's), for loaders that fence their own writes. */
  readonly fencingTokens: ReadonlyMap<string, number | undefined>;
}

/**
 * Loads the keys this process won, in one call. Returns a Map: a key left out (or mapped to
 * `undefined`) is not found and not cached; a key mapped to an `Error` instance failed on its own
 * (only that key: its fail-safe value, `loaderError`, `failBackoff`). Throwing fails every key of the call.
 */
export type BatchLoader<T> = (missing: string[], ctx: BatchLoaderContext) => Map<string, T | Error> | PromiseLike<Map<string, T | Error>>;

/** What the batch needs of its cache. */
export interface ManyHost {
  readonly deps: RebuildDeps;
  readonly batch: Batch;
  readonly prefix: string;
  readonly maxValueBytes: number;
  /** Resolves (and validates) the call's options for one key. */
  resolveCall(key: string): ResolvedCall;
  /** One key through the ordinary getOrCompute path (stale, held by another process, Redis failing, backoff). */
  one(key: string, loader: (ctx: LoaderContext) => unknown): Promise<unknown>;
}

/**
 * getOrComputeMany, one story per batch:
 * 1. L1, then one pipelined read per hash slot for the rest; fresh values answer (refresh ahead per key);
 * 2. every miss tries its lock (all at once: one pipelined round trip per slot); a key whose lock another process holds, a stale key, a
 *    key whose read or acquire failed, goes the single-key way (waited for and woken like any waiter,
 *    served stale, degraded, backed off) with `loadMany([key])` as its loader if it must load after all;
 * 3. the keys won are re-read in one pipelined read per slot (someone may have written meanwhile);
 *    those still missing go to ONE `loadMany` call; each key is then written fenced and released on
 *    its own (its own outcome: written, not found, failed with its fail-safe value, …).
 * Resolves the values aligned with `keys`, once every key settled; rejects with the first failed
 * key's error (the others were still cached).
 */
export async function computeMany(h: ManyHost, keys: readonly string[], loadMany: BatchLoader<unknown>, signal: AbortSignal | undefined): Promise<unknown[]> {
  const { deps: d } = h;
  const unique = [...new Set(keys)];
  const calls = new Map(unique.map((key) => [key, h.resolveCall(key)] as const));
  const callOf = (key: string): ResolvedCall => calls.get(key) as ResolvedCall;
  const answers = new Map<string, Promise<unknown>>();
  const single = (key: string) => (ctx: LoaderContext) => pick(loadMany([key], { signal: ctx.signal, fencingTokens: new Map([[key, ctx.fencingToken]]) }), key);

  const remote: string[] = [];
  for (const key of unique) {
    const l1 = d.local.get(key);
    if (l1 && !l1.stale && refreshPolicyFor(callOf(key).refreshAhead, l1.facts) === 0) {
      d.telemetry.localHit();
      answers.set(key, Promise.resolve(l1.value));
    }
    else if (l1) answers.set(key, h.one(key, single(key))); // stale, or due for refresh ahead: the single-key path knows
    else remote.push(key);
  }

  const misses: { key: string; keys: EntryKeys; found: Found }[] = [];
  const found = await readAll(h, remote);
  remote.forEach((key, i) => {
    const f = found[i];
    const call = callOf(key);
    if (f === undefined) answers.set(key, h.one(key, single(key))); // the read failed: degraded, per key
    else if (f.state === 'fresh') {
      if (refreshPolicyFor(call.refreshAhead, f) !== 0) {
        const keysOf = () => entryKeys(h.prefix, key);
        refreshAheadOnHit(d, key, keysOf, single(key), call, { value: f.value, freshUntil: d.clock.now() + freshRemaining(f.pttl, f.graceMs), facts: f });
      }
      d.telemetry.redisHit();
      answers.set(key, Promise.resolve(f.value));
    } else if (f.state === 'stale') answers.set(key, h.one(key, single(key)));
    else misses.push({ key, keys: entryKeys(h.prefix, key), found: f });
  });

  // Every miss's lock at once; a key not won (or whose acquire failed) goes the single-key way.
  const acquired = await acquireAll(h, misses.map((m) => ({ key: m.key, keys: m.keys, call: callOf(m.key) })));
  // Registered at once: a close() during the re-read below releases them while Redis is still
  // reachable (each Rebuild registers and drops its grant again; hold() is idempotent).
  // Once close() began, hold() still registers (close releases it) and Rebuild.rebuild refuses to load.
  for (const grant of acquired) if (grant) d.grants.hold(grant);
  const won: { key: string; keys: EntryKeys; found: Found; grant: Grant }[] = [];
  misses.forEach((m, i) => {
    const grant = acquired[i];
    if (grant) {
      d.telemetry.missed(); // the others go the single-key way, which counts them
      won.push({ ...m, grant });
    }
    else answers.set(m.key, h.one(m.key, single(m.key)));
  });

  if (won.length > 0) {
    // The re-read under the grants, one pipeline per slot; an exclusive grant that finds a fresh value loads nothing.
    let again: (Found | undefined)[];
    try {
      again = await readAll(h, won.map((w) => w.key));
    } catch (error) {
      // close() while the re-read was out: no rebuild will own these grants, so free them here, and
      // leave none of the other keys' answers unobserved.
      await Promise.all(won.map((w) => w.grant.release('cancelled').catch(() => undefined)));
      for (const p of answers.values()) p.catch(() => undefined);
      throw error;
    }
    const toLoad = won.filter((w, i) => !(w.grant.exclusive && again[i]?.state === 'fresh')).map((w) => w.key);
    const first = callOf(toLoad[0] ?? (won[0] as { key: string }).key);
    const tokens = new Map(won.map((w) => [w.key, w.grant.fence as number | undefined]));
    const loaded = toLoad.length === 0 ? undefined : loadOnce(d, loadMany, toLoad, tokens, first, signal);
    // Observed here: if close() stops every rebuild before it picks its value, nobody else reads it.
    loaded?.catch(() => undefined);
    won.forEach((w, i) => {
      const loader = (): Promise<unknown> => pick((loaded as Promise<Map<string, unknown>>), w.key);
      const rebuild = new Rebuild(d, w.key, w.keys, loader, callOf(w.key), { signal: d.lifetime }).keep(w.found);
      answers.set(w.key, whileHeld(d, w.key, w.keys, () => rebuild.rebuild(w.grant, undefined, undefined, () => again[i])));
    });
  }

  const settled = await settleAll(unique.map((key) => answers.get(key) as Promise<unknown>), signal, keys[0] ?? '');
  const byKey = new Map(unique.map((key, i) => [key, settled[i]]));
  return keys.map((key) => byKey.get(key));
}

/**
 * The misses' locks, taken together: the store's locks (modes single, local, none) in one pipelined
 * round trip per slot; Redlock's per key (each fans out to its own nodes). Null where the key was not
 * won or its acquisition failed (the single-key path then decides: wait, back off, degrade).
 */
async function acquireAll(h: ManyHost, items: readonly ManyItem[]): Promise<(Grant | null)[]> {
  const { lockers } = h.deps;
  const out = new Array<Grant | null>(items.length).fill(null);
  const byLocker = new Map<Locker, number[]>();
  items.forEach((it, i) => {
    const locker = lockers[it.call.lock];
    const group = byLocker.get(locker);
    if (group) group.push(i);
    else byLocker.set(locker, [i]);
  });
  await Promise.all(
    [...byLocker].map(async ([locker, indices]) => {
      if (locker instanceof StoreLock) {
        const answers = await locker.acquireMany(h.batch, indices.map((i) => items[i] as ManyItem));
        indices.forEach((i, at) => {
          const answer = answers[at];
          if (answer && !(answer instanceof Error)) out[i] = answer;
        });
        return;
      }
      await Promise.all(indices.map(async (i) => {
        const { key, keys, call } = items[i] as ManyItem;
        out[i] = await locker.acquire(key, keys, call).catch(() => null);
      }));
    }),
  );
  return out;
}

/** Reads `keys` in one pipelined round trip per slot; undefined where the read failed. */
async function readAll(h: ManyHost, keys: readonly string[]): Promise<(Found | undefined)[]> {
  const { deps: d } = h;
  const tickets = keys.map((key) => d.local.begin(key));
  const sent = d.clock.now();
  const replies = await h.batch.run('read', keys, (scripts, i) => void scripts.read(entryKeys(h.prefix, keys[i] as string).value, h.maxValueBytes));
  return replies.map((reply, i) => {
    const key = keys[i] as string;
    if (!reply.ok) {
      if (reply.error instanceof CacheClosedError) throw reply.error;
      return undefined;
    }
    return entryRead(d, key, tickets[i] as number, sent, d.store.found(key, reply.value as [number, Buffer | number] | null));
  });
}

/** The one loadMany call of a batch, under the call's hardTimeout and signals; resolves its Map or rejects. */
async function loadOnce(d: RebuildDeps, loadMany: BatchLoader<unknown>, keys: string[], fencingTokens: ReadonlyMap<string, number | undefined>, call: ResolvedCall, signal: AbortSignal | undefined): Promise<Map<string, unknown>> {
  const result: LoadResult = await runLoader((ctx) => loadMany(keys, { signal: ctx.signal, fencingTokens }), {
    key: keys[0] as string,
    fencingToken: undefined,
    staleValue: undefined,
    signals: signal ? [signal] : [],
    lifetime: d.lifetime,
    hardTimeout: call.hardTimeout,
    clock: d.clock,
  });
  if (result.kind !== 'value') throw result.error;
  if (!(result.value instanceof Map)) throw new InvalidOptionError('loadMany', result.value, 'loadMany to return a Map<key, value>', keys[0]);
  return result.value as Map<string, unknown>;
}

/** One key's value from a batch result: a missing key is `undefined` (not cached), an Error value fails the key. */
async function pick(result: Map<string, unknown> | PromiseLike<Map<string, unknown>>, key: string): Promise<unknown> {
  const map = await result;
  if (!(map instanceof Map)) throw new InvalidOptionError('loadMany', map, 'loadMany to return a Map<key, value>', key);
  const value: unknown = map.get(key);
  if (value instanceof Error) throw value;
  return value;
}

/** Waits for every key (so no rejection is left unobserved); rejects with the first failure, or AbortedError when `signal` aborts first. */
async function settleAll(answers: Promise<unknown>[], signal: AbortSignal | undefined, key: string): Promise<unknown[]> {
  const all = Promise.allSettled(answers);
  let settled: PromiseSettledResult<unknown>[];
  if (!signal) settled = await all;
  else {
    if (signal.aborted) throw new AbortedError(key, signal.reason);
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<never>((_, reject) => {
      onAbort = () => reject(new AbortedError(key, signal.reason));
      signal.addEventListener('abort', onAbort, { once: true });
    });
    try {
      settled = await Promise.race([all, aborted]);
    } finally {
      if (onAbort) signal.removeEventListener('abort', onAbort);
    }
  }
  const failed = settled.find((s) => s.status === 'rejected');
  if (failed) throw failed.reason;
  return settled.map((s) => (s as PromiseFulfilledResult<unknown>).value);
}
