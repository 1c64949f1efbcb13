import { AbortedError, TooManyWaitersError } from './errors.js';

/** Runs `work` for a key; `signal` aborts when the work should stop (every interested caller left). */
export type Work<T> = (signal: AbortSignal) => Promise<T>;

/** In-process coalescing of concurrent calls on one key. */
export interface Coalescer {
  run<T>(key: string, callerSignal: AbortSignal | undefined, work: Work<T>): Promise<T>;
}

interface Flight {
  readonly promise: Promise<unknown>;
  readonly controller: AbortController;
  /** Callers still interested that can abort; when the last one leaves (and none is pinned), the work's signal aborts. */
  abortable: number;
  /** A caller without a signal joined: the work can no longer be abandoned. */
  pinned: boolean;
  /** Callers that joined, bounded by maxWaitersPerKey. */
  callers: number;
}

const IGNORE = (): void => undefined;

/**
 * Single-flight (after golang.org/x/sync/singleflight): the first caller on a key starts the work,
 * later callers share its promise until it settles.
 */
export class SingleFlight implements Coalescer {
  /**
   * Invariant: holds a key only while its flight's promise is unsettled AND the flight is still wanted
   * (some caller is pinned or has not aborted). An abandoned flight leaves the map at once, so a later
   * caller starts fresh work instead of joining work whose signal already aborted.
   */
  private readonly flights = new Map<string, Flight>();

  /** @param maxCallers callers of one key beyond this get a fast TooManyWaitersError. */
  constructor(private readonly maxCallers = Number.POSITIVE_INFINITY) {}

  get size(): number {
    return this.flights.size;
  }

  run<T>(key: string, callerSignal: AbortSignal | undefined, work: Work<T>): Promise<T> {
    // An already-aborted caller never starts (or joins) work: nothing is left running unobserved.
    if (callerSignal?.aborted) return Promise.reject(new AbortedError(key, callerSignal.reason));
    let flight = this.flights.get(key);
    if (!flight) {
      const created = start(work, () => {
        // Clean up only if the entry is still ours (a later flight may have replaced it).
        if (this.flights.get(key) === created) this.flights.delete(key);
      });
      flight = created;
      this.flights.set(key, created);
    }
    if (++flight.callers > this.maxCallers) {
      flight.callers--;
      return Promise.reject(new TooManyWaitersError(key, this.maxCallers));
    }
    return follow(flight, key, callerSignal) as Promise<T>;
  }
}

/** No coalescing (lock mode `none`): every call does its own work. */
export class NoFlight implements Coalescer {
  run<T>(key: string, callerSignal: AbortSignal | undefined, work: Work<T>): Promise<T> {
    if (callerSignal?.aborted) return Promise.reject(new AbortedError(key, callerSignal.reason));
    const flight = start(work, IGNORE);
    flight.callers = 1;
    return follow(flight, key, callerSignal) as Promise<T>;
  }
}

/** Starts the work. Its promise is always observed here, so abandoning it can never be an unhandled rejection. */
function start(work: Work<unknown>, abandon: () => void): Flight {
  const controller = new AbortController();
  controller.signal.addEventListener('abort', abandon, { once: true });
  const promise = Promise.resolve()
    .then(() => work(controller.signal))
    .finally(abandon);
  promise.catch(IGNORE);
  return { promise, controller, abortable: 0, pinned: false, callers: 0 };
}

function follow(flight: Flight, key: string, signal: AbortSignal | undefined): Promise<unknown> {
  if (!signal) {
    flight.pinned = true;
    return flight.promise;
  }
  flight.abortable++;
  return new Promise((resolve, reject) => {
    const onAbort = (): void => {
      flight.abortable--;
      flight.callers--;
      const err = new AbortedError(key, signal.reason);
      if (flight.abortable === 0 && !flight.pinned) flight.controller.abort(err);
      reject(err);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    flight.promise.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e instanceof Error ? e : new Error(String(e)));
      },
    );
  });
}
