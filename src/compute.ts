/**
 * getOrCompute's entry: the call's checks, L1, then the key's call (call.ts), which runs the protocol
 * (protocol/) or joins this process's flight of the key. Traced on the getOrCompute channel while
 * someone subscribes; without a subscriber a call costs one check for it.
 */
import { AbortedError, InvalidOptionError, type RedisUnavailableError } from './errors.js';
import { refreshPolicyFor } from './entry.js';
import type { Guard } from './guards.js';
import { entryKeys } from './keys.js';
import type { LoaderContext } from './loader.js';
import { shownKey } from './namespace.js';
import type { CallOptions, ResolvedCall } from './options.js';
import type { Runtime } from './runtime.js';
import { getOrComputeChannel, traced, type GetOrComputeContext } from './telemetry.js';

type AnyLoader = (ctx: LoaderContext) => unknown;
type Options = number | CallOptions | undefined;

export function getOrCompute(rt: Runtime, guard: Guard, key: string, loader: AnyLoader, ttlOrOptions: Options): Promise<unknown> {
  if (!traced()) return compute(rt, guard, key, loader, ttlOrOptions, undefined);
  const context: GetOrComputeContext = { ...shownKey(key), lock: undefined };
  return getOrComputeChannel.tracePromise(() => compute(rt, guard, key, loader, ttlOrOptions, context), context);
}

/** A getOrCompute call's checks, before any Redis traffic: its options, its loader, its signal. */
export function callOf(guard: Guard, key: string, loader: unknown, ttlOrOptions: Options, trace: GetOrComputeContext | undefined): ResolvedCall {
  const call = guard.call(key, ttlOrOptions);
  if (trace) trace.lock = call.lock;
  if (typeof loader !== 'function') throw new InvalidOptionError('loader', loader, 'a function (ctx) => value | Promise<value>', key);
  if (call.signal?.aborted) throw new AbortedError(key, call.signal.reason);
  return call;
}

/**
 * Not an async function: the call's promise is the one its read or trip returns, not another wrapped
 * around it (an async function returning a promise adds a promise and two turns to every call). So a
 * check that throws is turned into a rejection here.
 */
function compute(rt: Runtime, guard: Guard, key: string, loader: AnyLoader, ttlOrOptions: Options, trace: GetOrComputeContext | undefined): Promise<unknown> {
  try {
    const call = callOf(guard, key, loader, ttlOrOptions, trace);
    // forceFresh serves nothing it finds, L1's copy included.
    const local = call.forceFresh === true ? undefined : fromLocal(rt, key, loader, call, trace);
    if (local) return Promise.resolve(local.value);
    return trace === undefined ? rt.calls.read(key, loader, call) : rt.calls.run(key, loader, call, trace);
  } catch (error) {
    // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- what the checks threw, unchanged
    return Promise.reject(error);
  }
}

/** L1's copy, when it answers: a fresh value (a hit, which may start a refresh ahead) or a stale one of the window. */
function fromLocal(rt: Runtime, key: string, loader: AnyLoader, call: ResolvedCall, trace: GetOrComputeContext | undefined): { value: unknown } | undefined {
  const l1 = rt.local.get(key);
  if (!l1) return undefined;
  if (l1.stale) {
    rt.telemetry.localStale();
    if (trace) trace.outcome = 'stale';
    rt.emit('stale', { key, reason: 'window' });
    return l1;
  }
  rt.telemetry.localHit();
  if (trace) trace.outcome = 'localHit';
  rt.emit('hit', { key, tier: 'local' });
  if (l1.facts && refreshPolicyFor(call.refreshAhead, l1.facts) !== 0) {
    rt.calls.refreshAhead(key, () => entryKeys(rt.options.prefix, key), loader, call, { value: l1.value, freshUntil: l1.freshUntil, facts: l1.facts });
  }
  return l1;
}

/**
 * A namespace call whose generation Redis could not give (namespace.ts): the loader runs on the
 * degraded path at once — the call's flight, the degraded memo, a `degraded` event — and nothing
 * is sent to Redis, since the entry's key depends on the generation. Traced like getOrCompute.
 */
export function computeDegraded(rt: Runtime, guard: Guard, key: string, loader: AnyLoader, ttlOrOptions: Options, cause: RedisUnavailableError): Promise<unknown> {
  const run = async (trace: GetOrComputeContext | undefined): Promise<unknown> => {
    const call = callOf(guard, key, loader, ttlOrOptions, trace);
    return rt.calls.run(key, loader, call, trace, (trip) => trip.answerDegraded(cause));
  };
  if (!traced()) return run(undefined);
  const context: GetOrComputeContext = { ...shownKey(key), lock: undefined };
  return getOrComputeChannel.tracePromise(() => run(context), context);
}
