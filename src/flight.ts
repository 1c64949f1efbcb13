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
  /** Callers still interested; when the last one aborts, the work's signal aborts. Only counts callers that can abort. */
  abortable: number;
  /** Callers that cannot abort (no signal) keep the work alive. */
  pinned: boolean;
  /** Callers that joined, bounded by maxWaitersPerKey. */
  callers: number;
}

/**
 * Single-flight (after golang.org/x/sync/singleflight): the first caller on a key starts the work,
 * later callers share its promise until it settles.
 */
export class SingleFlight implements Coalescer {
  /** Invariant: holds a key only while its flight's promise is unsettled. */
  private readonly flights = new Map<string, Flight>();

  /** @param maxCallers callers of one key beyond this get a fast TooManyWaitersError. */
  constructor(private readonly maxCallers = Number.POSITIVE_INFINITY) {}

  get size(): number {
    return this.flights.size;
  }

  run<T>(key: string, callerSignal: AbortSignal | undefined, work: Work<T>): Promise<T> {
    let flight = this.flights.get(key);
    if (!flight) {
      const controller = new AbortController();
      const promise = work(controller.signal).finally(() => {
        // Clean up only if the entry is still ours (a later flight may have replaced it).
        if (this.flights.get(key) === created) this.flights.delete(key);
      });
      const created: Flight = { promise, controller, abortable: 0, pinned: false, callers: 0 };
      flight = created;
      this.flights.set(key, created);
    }
    if (++flight.callers > this.maxCallers) return Promise.reject(new TooManyWaitersError(key, this.maxCallers));
    return follow(flight, key, callerSignal) as Promise<T>;
  }
}

/** No coalescing (lock mode `none`): every call does its own work. */
export class NoFlight implements Coalescer {
  run<T>(key: string, callerSignal: AbortSignal | undefined, work: Work<T>): Promise<T> {
    const controller = new AbortController();
    return follow({ promise: work(controller.signal), controller, abortable: 0, pinned: false, callers: 1 }, key, callerSignal) as Promise<T>;
  }
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
      const err = new AbortedError(key, signal.reason);
      if (flight.abortable === 0 && !flight.pinned) flight.controller.abort(err);
      reject(err);
    };
    if (signal.aborted) {
      onAbort();
      return;
    }
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
