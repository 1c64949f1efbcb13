import { CacheClosedError, LoaderTimeoutError } from './errors.js';
import { validateEntryOptions, type Clock, type EntryOptions, type EntryOverrides } from './options.js';

/** What a loader receives. */
export interface LoaderContext<T = unknown> {
  readonly key: string;
  /**
   * Aborts when every caller sharing this rebuild aborted, the cache closed, the lock was lost (reason:
   * LockLostError) or `hardTimeout` passed (reason: LoaderTimeoutError). A loader that stops on it is
   * cancelled, not failed: no `loaderError`, no `failBackoff` (except after `hardTimeout`: a slow origin is a failure).
   */
  readonly signal: AbortSignal;
  /** The grant's fencing token, strictly increasing per key; `undefined` when Redis was unavailable (degraded). */
  readonly fencingToken: number | undefined;
  /** The stale value being refreshed, when this is a background refresh. */
  readonly staleValue: T | undefined;
  /**
   * Sets options for the entry this load writes, from what the loader found (cache a 404 for 5 s, a
   * product for an hour): any of `ttl`, `staleTtl`, `failSafeTtl`, `refreshAhead`, validated like the
   * call options of those names. Only this entry is affected, and every process reads it as written.
   * Several calls merge (the later value of a name wins). A bad value throws `InvalidOptionError` here
   * and fails the load for its callers with it, even if the loader catches it: nothing is written.
   */
  setOptions(options: EntryOptions): void;
  /**
   * Do not cache this result: the loader's return value still answers its callers (every caller that
   * shares this load in this process), nothing is written, and the lock is released at once, waking
   * waiters in other processes, which then find no value and take the lock in turn (each runs its
   * own loader, one at a time, like after a load that returned `undefined`). Overrides `setOptions`.
   */
  skip(): void;
}

/** A loader may return a value, a Promise, or any thenable (query builders such as Knex's). */
export type Loader<T> = (ctx: LoaderContext<T>) => T | PromiseLike<T>;

/**
 * How a loader run ended. `cancelled` means its signal aborted for a reason other than `hardTimeout`
 * (callers left, the cache closed, the lock was lost) and the loader then threw: that says nothing
 * about the origin, so it must not count as a failure anywhere (events, fleet-wide backoff).
 */
export type LoadResult =
  | { readonly kind: 'value'; readonly value: unknown; readonly loadMs: number; readonly entry: EntryControl }
  | { readonly kind: 'failed'; readonly error: unknown }
  | { readonly kind: 'cancelled'; readonly error: unknown }
  /** `ctx.setOptions` was given a bad value: the callers get this InvalidOptionError, never a fail-safe value. */
  | { readonly kind: 'invalid'; readonly error: unknown };

/** What the loader decided about its entry through its ctx. */
export interface EntryControl {
  /** `ctx.skip()` was called: answer the callers, write nothing. */
  readonly skipped: boolean;
  /** What `ctx.setOptions` set (merged), or undefined. */
  readonly overrides: EntryOverrides | undefined;
}

/** The loader's ctx decisions, gathered while it runs; read once it returned. */
class EntryRecorder implements EntryControl {
  skipped = false;
  overrides: EntryOverrides | undefined;
  /** The first bad `setOptions` call's error: it decides the run, whatever the loader did with it. */
  invalid: unknown;

  constructor(private readonly key: string) {}

  readonly setOptions = (options: EntryOptions): void => {
    try {
      const given = validateEntryOptions(options, this.key);
      this.overrides = this.overrides === undefined ? given : Object.freeze({ ...this.overrides, ...given });
    } catch (error) {
      this.invalid ??= error;
      throw error;
    }
  };

  readonly skip = (): void => {
    this.skipped = true;
  };
}

export interface LoadRequest {
  readonly key: string;
  readonly fencingToken: number | undefined;
  readonly staleValue: unknown;
  /** Every signal that should stop this loader besides `lifetime`; combined without AbortSignal.any (see `linkSignals`). */
  readonly signals: readonly AbortSignal[];
  /**
   * The cache's lifetime (aborts at close()); always stops the loader. Once it aborted, a run that did
   * not return a value is cancelled with CacheClosedError, whatever the loader rejected with: a loader
   * honouring `ctx.signal` rejects with its own AbortError, and a shutdown must not read as an origin
   * failure (no `loaderError`, no `refreshError`, no `failBackoff`) on any path.
   */
  readonly lifetime: AbortSignal;
  /** 0 = none. */
  readonly hardTimeout: number;
  readonly clock: Clock;
}

/** Runs a loader once; never throws (the outcome is the result). */
export async function runLoader(loader: Loader<unknown>, req: LoadRequest): Promise<LoadResult> {
  const timeout = req.hardTimeout > 0 ? new AbortController() : undefined;
  const inputs = [...req.signals, req.lifetime];
  if (timeout) inputs.push(timeout.signal);
  const linked = linkSignals(inputs);
  let timer: NodeJS.Timeout | undefined;
  const started = req.clock.now();
  // Stopped before it started (the caller left or the cache closed during the last await): run nothing.
  if (linked.signal.aborted) {
    linked.dispose();
    return { kind: 'cancelled', error: req.lifetime.aborted ? new CacheClosedError(req.key) : linked.signal.reason };
  }
  const entry = new EntryRecorder(req.key);
  try {
    const running = Promise.resolve().then(() =>
      loader({ key: req.key, signal: linked.signal, fencingToken: req.fencingToken, staleValue: req.staleValue, setOptions: entry.setOptions, skip: entry.skip }),
    );
    let value: unknown;
    if (timeout) {
      running.catch(() => undefined); // after a hard timeout nobody awaits it
      const expired = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          const err = new LoaderTimeoutError(req.key, req.hardTimeout);
          timeout.abort(err);
          reject(err);
        }, req.hardTimeout);
      });
      value = await Promise.race([running, expired]);
    } else {
      value = await running;
    }
    if (entry.invalid !== undefined) return { kind: 'invalid', error: entry.invalid };
    return { kind: 'value', value, loadMs: req.clock.now() - started, entry };
  } catch (error) {
    if (entry.invalid !== undefined) return { kind: 'invalid', error: entry.invalid };
    if (req.lifetime.aborted) return { kind: 'cancelled', error: new CacheClosedError(req.key) };
    const cancelled = linked.signal.aborted && !(linked.signal.reason instanceof LoaderTimeoutError);
    return { kind: cancelled ? 'cancelled' : 'failed', error };
  } finally {
    clearTimeout(timer);
    linked.dispose();
  }
}

/**
 * One signal that aborts when any input aborts (with that input's reason). Unlike `AbortSignal.any`,
 * `dispose()` detaches it from its inputs: on Node 20 `AbortSignal.any` over a long-lived signal (the
 * cache's lifetime) keeps every combined signal reachable from it forever (nodejs/node#55351), one per
 * loader run. Invariant: after dispose() no input references the combined signal.
 */
export function linkSignals(inputs: readonly AbortSignal[]): { readonly signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  const already = inputs.find((s) => s.aborted);
  if (already) {
    controller.abort(already.reason);
    return { signal: controller.signal, dispose: () => undefined };
  }
  const onAbort = function (this: AbortSignal): void {
    controller.abort(this.reason);
    dispose();
  };
  const dispose = (): void => {
    for (const s of inputs) s.removeEventListener('abort', onAbort);
  };
  for (const s of inputs) s.addEventListener('abort', onAbort, { once: true });
  return { signal: controller.signal, dispose };
}
