import type { Batch } from './batch.js';
import { freshRemaining, refreshPolicyFor } from './entry.js';
import type { Answer, Calls } from './call.js';
import { AbortedError, CacheClosedError, InvalidOptionError } from './errors.js';
import type { Stop } from './flight.js';
import { entryKeys, type EntryKeys } from './keys.js';
import { runLoader, type LoaderContext, type LoadResult } from './loader.js';
import { StoreLock, type ManyItem } from './lock/single.js';
import type { Grant, Locker } from './lock/types.js';
import { validateEntryOptions, type CallOptions, type EntryOptions, type ResolvedCall } from './options.js';
import type { Guard } from './guards.js';
import { getOrCompute } from './compute.js';
import type { Runtime } from './runtime.js';
import type { ProtocolDeps } from './protocol/deps.js';
import { entryRead } from './protocol/read.js';
import { doneOnReread } from './protocol/rebuild.js';
import type { Found } from './store.js';

/** What `loadMany` receives besides the keys. */
export interface BatchLoaderContext {
  /** Aborts when the cache closes, the call's `signal` aborts, or `hardTimeout` passes. */
  readonly signal: AbortSignal;
  /** The fencing token of each key this call loads (its grant's), for loaders that fence their own writes. */
  readonly fencingTokens: ReadonlyMap<string, number | undefined>;
  /**
   * Sets options for the entry of one key this call loads (`key`: one of `missing`), as a loader's
   * `ctx.setOptions` does for its own entry: any of `ttl`, `staleTtl`, `failSafeTtl`, `refreshAhead`
   * and `tags` (added to the call's `tags`), validated like the call options of those names. Several
   * calls for a key merge (the later value of a name wins). A bad value throws `InvalidOptionError`
   * here and fails that key (not the others) for its callers with it, even if the loader catches it:
   * nothing is written for it. A key this call does not load throws `InvalidOptionError` too.
   */
  readonly setOptions: (key: string, options: EntryOptions) => void;
}

/**
 * Loads the keys this process won, in one call. Returns a Map: a key left out (or mapped to
 * `undefined`) is not found and not cached; a key mapped to an `Error` instance failed on its own
 * (only that key: its fail-safe value, `loaderError`, `failBackoff`). Throwing fails every key of the call.
 */
export type BatchLoader<T> = (missing: string[], ctx: BatchLoaderContext) => Map<string, T | Error> | PromiseLike<Map<string, T | Error>>;

/** What the batch needs of its cache. */
export interface ManyHost {
  readonly deps: ProtocolDeps;
  readonly batch: Batch;
  /** `batch`, or its counterpart on the tracked reads connection (Runtime.readBatch). */
  readonly readBatch: Batch;
  readonly prefix: string;
  /** Every key's call: its flight, close guard and outcome. */
  readonly calls: Calls;
  /** Resolves (and validates) the call's options for one key. */
  resolveCall(key: string): ResolvedCall;
  /** One key through the ordinary getOrCompute path (stale, a failed read, due for refresh ahead). */
  one(key: string, loader: (ctx: LoaderContext) => unknown): Promise<unknown>;
}

/** A miss whose call this batch leads (no flight of this process had the key). */
interface Led {
  readonly key: string;
  readonly keys: EntryKeys;
  readonly call: ResolvedCall;
  readonly found: Found;
  /** Hands the call its way on: a grant won with the others' (and the re-read), or the single-key protocol. */
  readonly answer: (how: Answer) => void;
  /** The call's stop signal, once its flight started it (every caller gone, or close()). */
  stop: Stop | undefined;
}

/** getOrComputeMany's entry, after the keys' checks: each key's call options, resolved as getOrCompute resolves them. */
export function getOrComputeMany(rt: Runtime, guard: Guard, keys: readonly string[], loadMany: BatchLoader<unknown>, ttlOrOptions: number | CallOptions | undefined): Promise<unknown[]> {
  if (typeof loadMany !== 'function') throw new InvalidOptionError('loadMany', loadMany, 'a function (missing, ctx) => Map<key, value>');
  if (keys.length === 0) guard.batchOptions(ttlOrOptions);
  const signal = typeof ttlOrOptions === 'object' ? ttlOrOptions.signal : undefined;
  const host: ManyHost = {
    deps: rt.deps,
    batch: rt.batch,
    readBatch: rt.readBatch,
    prefix: rt.options.prefix,
    calls: rt.calls,
    resolveCall: (key) => guard.call(key, ttlOrOptions),
    one: (key, loader) => getOrCompute(rt, guard, key, loader, ttlOrOptions),
  };
  return computeMany(host, keys, loadMany, signal);
}

/**
 * getOrComputeMany, one story per batch; every key is a call (call.ts) like a getOrCompute's:
 * 1. L1, then one pipelined read per hash slot for the rest; fresh values answer (refresh ahead per
 *    key); a stale key, a key whose read failed or one due for refresh goes the single-key way;
 * 2. each miss joins the key's flight if this process already runs one (another getOrCompute, another
 *    batch); the others' calls are led by this batch and their locks taken together (one pipelined
 *    round trip per slot); a key not won goes the single-key protocol inside its own call (waited for,
 *    backed off, degraded) with `loadMany([key])` as its loader if it must load after all;
 * 3. the keys won are re-read in one pipelined read per slot (someone may have written meanwhile);
 *    those still missing go to ONE `loadMany` call, whose signal aborts once every one of their calls
 *    stopped; each key is then written fenced and released in its own call (soft and hard timeouts,
 *    fail-safe, stats and events as a getOrCompute's).
 * Resolves the values aligned with `keys`, once every key settled; rejects with the first failed
 * key's error (the others were still cached).
 */
export async function computeMany(h: ManyHost, keys: readonly string[], loadMany: BatchLoader<unknown>, signal: AbortSignal | undefined): Promise<unknown[]> {
  const unique = [...new Set(keys)];
  const calls = new Map(unique.map((key) => [key, h.resolveCall(key)] as const));
  // Checked after the options (a bad option is still refused) and before anything is read or locked.
  if (signal?.aborted) throw new AbortedError(keys[0] ?? '', signal.reason);
  // Before the batch's read is sent: what it finds may be what a led call answers with (THE JOIN RULE, call.ts).
  const heardAt = h.deps.heard.latest;
  const run: BatchRun = { h, callOf: (key) => calls.get(key) as ResolvedCall, answers: observedAnswers(), single: singleLoader(loadMany), heardAt };
  const remote = answerFromL1(run, unique);
  const found = await readAll(h, remote, (key) => run.callOf(key).forceFresh !== true); // forceFresh serves none of what it reads
  const misses = answerFromReads(run, remote, found);
  // Checked again here, synchronously before the calls start: a flight started for an aborted caller never runs its work.
  if (signal?.aborted) throw new AbortedError(keys[0] ?? '', signal.reason);
  const led = startCalls(run, misses);
  if (led.length > 0) {
    try {
      await lockAndLoad(h, led, loadMany);
    } catch (error) {
      for (const entry of led) entry.answer(() => Promise.reject(asError(error))); // a call already handed on keeps its way
    }
  }
  const settled = await settleAll(unique.map((key) => run.answers.get(key) as Promise<unknown>), signal, keys[0] ?? '');
  const byKey = new Map(unique.map((key, i) => [key, settled[i]]));
  return keys.map((key) => byKey.get(key));
}

/** What the steps of one batch share: each key's options, each key's answer so far, and a key's own loader (`loadMany([key])`). */
interface BatchRun {
  readonly h: ManyHost;
  callOf(key: string): ResolvedCall;
  readonly answers: Map<string, Promise<unknown>>;
  single(key: string): (ctx: LoaderContext) => Promise<unknown>;
  /** The last tag note heard before the batch's read was sent. */
  readonly heardAt: number;
}

/**
 * Each key's answer is observed as soon as it exists: close() may reject one while this batch still
 * awaits Redis for the others (settleAll reads every outcome later; nothing is an unhandled rejection).
 */
function observedAnswers(): Map<string, Promise<unknown>> {
  const answers = new Map<string, Promise<unknown>>();
  const setAnswer = answers.set.bind(answers);
  answers.set = (key, p) => {
    p.catch(() => undefined);
    return setAnswer(key, p);
  };
  return answers;
}

/** A key's loader when it goes the single-key way: the batch's loadMany, asked for that key alone. */
const singleLoader = (loadMany: BatchLoader<unknown>) => (key: string) => (ctx: LoaderContext) => pick(loadMany([key], singleKeyContext(key, ctx)), key);

/** `loadMany([key])`'s ctx inside that key's own load (`ctx`): its setOptions is the load's own. */
export function singleKeyContext(key: string, ctx: Pick<LoaderContext, 'signal' | 'fencingToken' | 'setOptions'>): BatchLoaderContext {
  return {
    signal: ctx.signal,
    fencingTokens: new Map([[key, ctx.fencingToken]]),
    setOptions: (k, options) => {
      if (k !== key) throw notLoaded(k);
      ctx.setOptions(options);
    },
  };
}

const notLoaded = (key: unknown): InvalidOptionError =>
  new InvalidOptionError('ctx.setOptions', key, 'a key this loadMany call loads (one of `missing`)', typeof key === 'string' ? key : undefined);

/**
 * What one loadMany call set per key through `ctx.setOptions(key, options)`. Each key's own load
 * (its trip's loader, once the call settled) replays it through its own ctx.setOptions, so a key's
 * options and tags take the single-key path from there: its write, THE TAG RULE judging its tags
 * against its grant, THE JOIN RULE, and a bad value failing that key alone.
 */
class KeyedOptions {
  /** Per key: each valid call's options (validated copies), and the first bad one's, as given. */
  private readonly given = new Map<string, { valid: EntryOptions[]; invalid?: { options: unknown; error: unknown } }>();

  constructor(private readonly keys: ReadonlySet<string>) {}

  readonly setOptions = (key: string, options: EntryOptions): void => {
    if (!this.keys.has(key)) throw notLoaded(key);
    let given = this.given.get(key);
    if (given === undefined) this.given.set(key, (given = { valid: [] }));
    try {
      given.valid.push(validateEntryOptions(options, key));
    } catch (error) {
      given.invalid ??= { options, error };
      throw error;
    }
  };

  /** Hands `key`'s options to its own load's ctx; a bad one throws there (the load is then refused as invalid). */
  replay(key: string, ctx: LoaderContext): void {
    const given = this.given.get(key);
    if (given === undefined) return;
    for (const options of given.valid) ctx.setOptions(options);
    if (given.invalid === undefined) return;
    ctx.setOptions(given.invalid.options as EntryOptions); // throws again: the key's load is invalid
    throw given.invalid.error; // the options changed since (mutated): still a failure of that key
  }
}

/** L1 answers its fresh keys (not due for refresh ahead); a stale or due key goes the single-key way. Returns the keys to read. */
function answerFromL1(run: BatchRun, unique: readonly string[]): string[] {
  const { h, answers } = run;
  const remote: string[] = [];
  for (const key of unique) {
    const call = run.callOf(key);
    const l1 = call.forceFresh === true ? undefined : h.deps.local.get(key);
    if (l1 && !l1.stale && refreshPolicyFor(call.refreshAhead, l1.facts) === 0) {
      h.deps.emit('hit', { key, tier: 'local' });
      h.calls.answered(key, call, 'localHit', l1.value);
      answers.set(key, Promise.resolve(l1.value));
    } else if (l1) answers.set(key, h.one(key, run.single(key))); // stale, or due for refresh ahead: the single-key path knows
    else remote.push(key);
  }
  return remote;
}

/** The store's answers: fresh values answer (refresh ahead per key); a failed read or a stale key goes the single-key way. Returns the misses. */
function answerFromReads(run: BatchRun, remote: readonly string[], found: readonly (Found | undefined)[]): Miss[] {
  const { h, answers } = run;
  const misses: Miss[] = [];
  remote.forEach((key, i) => {
    const f = found[i];
    const call = run.callOf(key);
    if (f === undefined) answers.set(key, h.one(key, run.single(key))); // the read failed: degraded, per key
    else if (call.forceFresh === true || f.state === 'miss' || f.state === 'kept') misses.push({ key, call, found: f });
    else if (f.state === 'fresh') {
      if (refreshPolicyFor(call.refreshAhead, f) !== 0) {
        const keysOf = () => entryKeys(h.prefix, key);
        h.calls.refreshAhead(key, keysOf, run.single(key), call, { value: f.value, freshUntil: h.deps.clock.now() + freshRemaining(f.pttl, f.graceMs), facts: f });
      }
      h.calls.answered(key, call, 'hit', f.value);
      answers.set(key, Promise.resolve(f.value));
    } else answers.set(key, h.one(key, run.single(key)));
  });
  return misses;
}

/** A key the batch must load (or wait for). */
interface Miss {
  readonly key: string;
  readonly call: ResolvedCall;
  readonly found: Found;
}

/** Each miss is a call: it joins this process's flight of the key if one runs, else this batch leads it. Returns the led ones. */
function startCalls(run: BatchRun, misses: readonly Miss[]): Led[] {
  const { h, answers } = run;
  const led: Led[] = [];
  for (const m of misses) {
    if (h.calls.joinable(m.key, m.call)) {
      answers.set(m.key, h.calls.run(m.key, run.single(m.key), m.call, undefined));
      continue;
    }
    const how = deferred<Answer>();
    const entry: Led = { key: m.key, keys: entryKeys(h.prefix, m.key), call: m.call, found: m.found, answer: how.resolve, stop: undefined };
    led.push(entry);
    answers.set(m.key, h.calls.run(m.key, run.single(m.key), m.call, undefined, async (trip) => {
      entry.stop = trip.stop;
      return (await how.promise)(trip);
    }, run.heardAt));
  }
  return led;
}

/**
 * The led calls' locks, taken together; the keys won re-read together and loaded by one `loadMany`;
 * every led call is handed its way on (never left waiting, whatever throws).
 */
async function lockAndLoad(h: ManyHost, led: readonly Led[], loadMany: BatchLoader<unknown>): Promise<void> {
  const { deps: d } = h;
  const acquired = await acquireAll(h, led);
  // Registered at once: a close() during the re-read below releases them while Redis is still
  // reachable (each trip's rebuild registers and drops its grant again; hold() is idempotent).
  for (const grant of acquired) if (grant) d.grants.hold(grant);
  const won: { entry: Led; grant: Grant }[] = [];
  led.forEach((entry, i) => {
    const grant = acquired[i];
    if (grant) won.push({ entry, grant });
    else entry.answer((trip) => trip.answer()); // lost or failed: the single-key protocol, inside this call
  });
  if (won.length === 0) return;
  let again: (Found | undefined)[];
  try {
    again = await readAll(h, won.map((w) => w.entry.key), (key) => won.find((w) => w.entry.key === key)?.entry.call.forceFresh !== true);
  } catch (error) {
    // close() while the re-read was out: no rebuild will own these grants, so free them here.
    await Promise.all(won.map((w) => w.grant.release('cancelled').catch(() => undefined)));
    for (const w of won) w.entry.answer(() => Promise.reject(asError(error)));
    return;
  }
  // An exclusive grant whose re-read finds the work done loads nothing (the rule of rebuild()).
  const toLoad = won.filter((w, i) => !(w.grant.exclusive && doneOnReread(again[i], { kind: 'fresh', bypassed: bypassedBy(w.entry) })));
  const tokens = new Map(won.map((w) => [w.entry.key, w.grant.fence as number | undefined]));
  const keyed = new KeyedOptions(new Set(toLoad.map((w) => w.entry.key)));
  const loaded = toLoad.length === 0 ? undefined : loadOnce(d, loadMany, toLoad.map((w) => w.entry.key), { fencingTokens: tokens, setOptions: keyed.setOptions }, (toLoad[0] as { entry: Led }).entry.call, toLoad.map((w) => w.entry.stop));
  // Observed here: if close() stops every rebuild before it picks its value, nobody else reads it.
  loaded?.catch(() => undefined);
  won.forEach((w, i) => {
    const { key } = w.entry;
    // Replayed in `finally`: a bad setOptions for this key decides its load even if loadMany then threw (as for a single loader).
    const loader = async (ctx: LoaderContext): Promise<unknown> => {
      try {
        return await pick(loaded as Promise<Map<string, unknown>>, key);
      } finally {
        keyed.replay(key, ctx);
      }
    };
    w.entry.answer((trip) => trip.withLoader(loader).answerWon(w.entry.found, w.grant, () => again[i]));
  });
}

/** forceFresh: the fence of the entry the call bypassed (only a newer one means the work is done). */
const bypassedBy = (entry: Led): number | undefined => (entry.call.forceFresh === true && entry.found.state !== 'miss' ? entry.found.fence : undefined);

const asError = (error: unknown): Error => (error instanceof Error ? error : new Error(String(error)));

function deferred<T>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
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
async function readAll(h: ManyHost, keys: readonly string[], serves: (key: string) => boolean = () => true): Promise<(Found | undefined)[]> {
  const { deps: d } = h;
  const tickets = keys.map((key) => d.local.begin(key));
  const sent = d.clock.now();
  const replies = await d.store.readMany(h.readBatch, keys, keys.map((key) => entryKeys(h.prefix, key).value));
  return replies.map((reply, i) => {
    const key = keys[i] as string;
    if (!reply.ok) {
      if (reply.error instanceof CacheClosedError) throw reply.error;
      return undefined;
    }
    return entryRead(d, key, tickets[i] as number, sent, reply.found, serves(key));
  });
}

/**
 * The one loadMany call of a batch, under the call's hardTimeout; its signal aborts on close(), or once
 * every call it loads for stopped (their callers all left): then it is a cancellation, not a failure.
 * Resolves its Map or rejects.
 */
async function loadOnce(d: ProtocolDeps, loadMany: BatchLoader<unknown>, keys: string[], ctx: Omit<BatchLoaderContext, 'signal'>, call: ResolvedCall, stops: readonly (Stop | undefined)[]): Promise<Map<string, unknown>> {
  const everyStopped = allAborted(stops.map((s) => s?.signal));
  try {
    const result: LoadResult = await runLoader((run) => loadMany(keys, { signal: run.signal, fencingTokens: ctx.fencingTokens, setOptions: ctx.setOptions }), {
      key: keys[0] as string,
      fencingToken: undefined,
      staleValue: undefined,
      signals: [everyStopped.signal],
      lifetime: d.lifetime,
      hardTimeout: call.hardTimeout,
      clock: d.clock,
    });
    if (result.kind !== 'value') throw result.error;
    if (!(result.value instanceof Map)) throw new InvalidOptionError('loadMany', result.value, 'loadMany to return a Map<key, value>', keys[0]);
    return result.value as Map<string, unknown>;
  } finally {
    everyStopped.dispose();
  }
}

/** A signal that aborts once every one of `signals` aborted (an undefined one counts as aborted); dispose() detaches it. */
function allAborted(signals: readonly (AbortSignal | undefined)[]): { readonly signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  let running = 0;
  const onAbort = function (this: AbortSignal): void {
    if (--running === 0) controller.abort(this.reason);
  };
  const live = signals.filter((s): s is AbortSignal => s !== undefined && !s.aborted);
  if (live.length === 0) controller.abort(signals.find((s) => s?.aborted)?.reason);
  for (const s of live) {
    running++;
    s.addEventListener('abort', onAbort, { once: true });
  }
  return { signal: controller.signal, dispose: () => live.forEach((s) => s.removeEventListener('abort', onAbort)) };
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
