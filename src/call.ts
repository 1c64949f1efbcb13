/**
 * One key's call, whatever entry point made it (getOrCompute, forceFresh, each key of
 * getOrComputeMany, a namespace's degraded call): its resolved options, its place in the in-process
 * flight (and through it the linked stop signal — every caller gone, or close() — and the close
 * guard that settles it with CacheClosedError), and its outcome, which `stats()` and the tracing
 * channel read. A rule about an edge is written here or below (flight.ts, rebuild.ts), never in an
 * entry point.
 */
import { entryKeys } from './keys.js';
import type { Loader } from './loader.js';
import { NoFlight, SingleFlight, type Coalescer, type Stop } from './flight.js';
import type { LockMode, ResolvedCall } from './options.js';
import { shownKey } from './namespace.js';
import { Rebuild, type RebuildDeps } from './rebuild.js';
import { getOrComputeChannel, traced, type Answered, type GetOrComputeContext, type Outcome } from './telemetry.js';

/** How a call is answered once it owns its flight: by default the whole protocol (Rebuild.answer). */
export type Answer = (trip: Rebuild) => Promise<Answered>;

export class Calls {
  private readonly coalescers: Readonly<Record<LockMode, Coalescer>>;
  /** Normal calls' flights (lock modes local, single, redlock). */
  private readonly flight: SingleFlight;
  /** The flights of `forceFresh` calls, apart from normal ones: they coalesce only with each other. */
  private readonly freshFlight: SingleFlight;

  constructor(
    private readonly d: RebuildDeps,
    private readonly prefix: string,
    maxCallers: number,
  ) {
    this.flight = new SingleFlight(maxCallers, d.lifetime);
    this.freshFlight = new SingleFlight(maxCallers, d.lifetime);
    this.coalescers = { none: new NoFlight(d.lifetime), local: this.flight, single: this.flight, redlock: this.flight };
  }

  /** Where a call coalesces: `forceFresh` only with other forceFresh calls (a normal trip may answer from the cache). */
  private coalescerOf(call: ResolvedCall): Coalescer {
    if (call.forceFresh !== true) return this.coalescers[call.lock];
    return call.lock === 'none' ? this.coalescers.none : this.freshFlight;
  }

  /** A call on `key` starting now would join a flight already running in this process. */
  joinable(key: string, call: ResolvedCall): boolean {
    return this.coalescerOf(call).has(key);
  }

  /**
   * Runs the call: joins the key's flight, or starts it with `answer` on this call's Rebuild; counts
   * and traces the outcome (the caller that ran the trip, or a joiner of it).
   */
  run(key: string, loader: Loader<unknown>, call: ResolvedCall, trace: GetOrComputeContext | undefined, answer: Answer = (trip) => trip.answer()): Promise<unknown> {
    if (trace === undefined && traced()) {
      const context: GetOrComputeContext = { ...shownKey(key), lock: call.lock };
      return getOrComputeChannel.tracePromise(() => this.trip(key, loader, call, context, answer), context);
    }
    return this.trip(key, loader, call, trace, answer);
  }

  private async trip(key: string, loader: Loader<unknown>, call: ResolvedCall, trace: GetOrComputeContext | undefined, answer: Answer): Promise<unknown> {
    const keys = entryKeys(this.prefix, key);
    let led = false; // this caller's work ran the trip (else it joined another caller's flight)
    const answered = await this.coalescerOf(call).run(key, call.signal, (stop: Stop) => {
      led = true;
      return answer(new Rebuild(this.d, key, keys, loader, call, stop));
    });
    const outcome = this.d.telemetry.caller(answered, led);
    if (trace) trace.outcome = outcome;
    return answered.value;
  }

  /** A call answered without a trip (a fresh hit a batch read): counted, and traced when someone listens. */
  answered(key: string, call: ResolvedCall, outcome: 'hit' | 'localHit', value: unknown): void {
    if (outcome === 'localHit') this.d.telemetry.localHit();
    else this.d.telemetry.redisHit();
    if (!traced()) return;
    const context: GetOrComputeContext = { ...shownKey(key), lock: call.lock, outcome: outcome satisfies Outcome };
    void getOrComputeChannel.tracePromise(() => Promise.resolve(value), context);
  }

  /** The key changed: calls starting now join no flight (normal or forceFresh) begun before the change. */
  forget(key: string): void {
    this.flight.forget(key);
    this.freshFlight.forget(key);
  }

  forgetAll(): void {
    this.flight.forgetAll();
    this.freshFlight.forgetAll();
  }
}
