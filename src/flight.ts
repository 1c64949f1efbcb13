import { AbortedError, CacheClosedError, TooManyWaitersError } from './errors.js';

/** What tells work to stop: `signal` aborts when every interested caller left (or on close()). */
export interface Stop {
  readonly signal: AbortSignal;
}

/** Runs `work` for a key; `stop.signal` aborts when the work should stop (every interested caller left). */
export type Work<T> = (stop: Stop) => Promise<T>;

/**
 * A flight's stop signal, made on first use. A fresh hit never looks at it, and an AbortController
 * per call was a visible share of a hit's CPU (createAbortSignal and its listener ~4% in a profile of
 * 10 loops over 20 warm keys).
 */
class LazyStop implements Stop {
  private controller: AbortController | undefined;

  get signal(): AbortSignal {
    return (this.controller ??= new AbortController()).signal;
  }

  abort(reason: unknown): void {
    (this.controller ??= new AbortController()).abort(reason);
  }
}

/** In-process coalescing of concurrent calls on one key. */
export interface Coalescer {
  run<T>(key: string, callerSignal: AbortSignal | undefined, work: Work<T>): Promise<T>;
  /** A flight runs for `key` that a call starting now would join (NoFlight: never). */
  has(key: string): boolean;
  /**
   * The key's value changed (this process's set/delete completed, or another process's note): a call
   * starting from now must not join work begun before the change — it could only answer with a value
   * the change superseded. The detached work still answers the callers it already has.
   */
  forget(key: string): void;
}

interface Flight {
  readonly promise: Promise<unknown>;
  readonly stop: LazyStop;
  /** Removes the flight from its map if it is still the key's (called when it settles or is abandoned). */
  readonly abandon: () => void;
  /** Callers still interested that can abort; when the last one leaves (and none is pinned), the work's signal aborts. */
  abortable: number;
  /** A caller without a signal joined: the work can no longer be abandoned. */
  pinned: boolean;
  /** Callers that joined, bounded by maxWaitersPerKey. */
  callers: number;
}

const IGNORE = (): void => undefined;

/**
 * Settles every flight still running with CacheClosedError once `lifetime` aborts (close()), so close()
 * settles every call in progress even when a loader ignores its signal. Invariant: `pending` holds a
 * flight only while it runs — nothing per flight outlives it (a reaction on one long-lived promise per
 * flight would keep every flight's result reachable until close()).
 */
class Closing {
  /** The guards of running flights, linked (not a Set: see Guard). */
  private first: Guard | undefined;

  constructor(private readonly lifetime: AbortSignal) {
    lifetime.addEventListener('abort', () => {
      for (let guard = this.first; guard; guard = this.first) {
        this.unlink(guard);
        guard.close();
      }
    }, { once: true });
  }

  /**
   * `work`'s outcome, or CacheClosedError once close() ran first; `settled` runs once, just before
   * the returned promise settles either way (the flight leaves its map: one promise fewer per call
   * than a `.finally`).
   */
  guard<T>(key: string, work: Promise<T>, settled: () => void): Promise<T> {
    if (this.lifetime.aborted) {
      // Not synchronously: the flight is not in its map yet (start() is still returning it).
      queueMicrotask(settled);
      return Promise.reject(new CacheClosedError(key));
    }
    return new Promise<T>((resolve, reject) => {
      const guard: Guard = {
        close: () => {
          settled();
          reject(new CacheClosedError(key));
        },
        prev: undefined,
        next: this.first,
      };
      if (this.first) this.first.prev = guard;
      this.first = guard;
      work.then(
        (v) => {
          this.unlink(guard);
          settled();
          resolve(v);
        },
        (e: unknown) => {
          this.unlink(guard);
          settled();
          // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
          reject(e);
        },
      );
    });
  }

  /** Idempotent: a guard already unlinked (by close(), or its flight settled) is left alone. */
  private unlink(guard: Guard): void {
    if (guard.prev) guard.prev.next = guard.next;
    else if (this.first === guard) this.first = guard.next;
    else return;
    if (guard.next) guard.next.prev = guard.prev;
    guard.prev = guard.next = undefined;
  }
}

/**
 * A running flight's link in Closing's list. A list through the entries, not a Set held by the
 * long-lived Closing: a Set's add and delete per flight cost microseconds of GC each (measured with
 * io.ts's in-flight operations, which had the same shape: ~4 µs per operation).
 */
interface Guard {
  readonly close: () => void;
  prev: Guard | undefined;
  next: Guard | undefined;
}

const closing = (lifetime: AbortSignal | undefined): Closing | undefined => (lifetime ? new Closing(lifetime) : undefined);

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

  private readonly closed: Closing | undefined;

  /**
   * @param maxCallers callers of one key beyond this get a fast TooManyWaitersError.
   * @param lifetime aborts on close(): every call in progress then rejects with CacheClosedError.
   */
  constructor(
    private readonly maxCallers = Number.POSITIVE_INFINITY,
    lifetime?: AbortSignal,
  ) {
    this.closed = closing(lifetime);
  }

  forget(key: string): void {
    this.flights.delete(key);
  }

  has(key: string): boolean {
    return this.flights.has(key);
  }

  /** The key's flight in progress, if any (settles; its rejection is observed here already). */
  pending(key: string): Promise<unknown> | undefined {
    return this.flights.get(key)?.promise;
  }

  /** The key's flight is the one `stop` belongs to. */
  owns(key: string, stop: Stop | undefined): boolean {
    return stop !== undefined && this.flights.get(key)?.stop === stop;
  }

  /** Aborts the signal of the key's flight with `reason`; the flight stays until its work settles. */
  abort(key: string, reason: unknown): void {
    const flight = this.flights.get(key);
    if (flight && !flight.stop.signal.aborted) flight.stop.abort(reason);
  }

  /** abort() for every key. */
  abortAll(reason: (key: string) => unknown): void {
    for (const key of [...this.flights.keys()]) this.abort(key, reason(key));
  }

  /** Every key changed (the cache's clear()): calls starting now join no flight begun before. */
  forgetAll(): void {
    this.flights.clear();
  }

  get size(): number {
    return this.flights.size;
  }

  run<T>(key: string, callerSignal: AbortSignal | undefined, work: Work<T>): Promise<T> {
    // An already-aborted caller never starts (or joins) work: nothing is left running unobserved.
    if (callerSignal?.aborted) return Promise.reject(new AbortedError(key, callerSignal.reason));
    let flight = this.flights.get(key);
    if (!flight) {
      const created = start(key, work, this.closed, () => {
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
  private readonly closed: Closing | undefined;

  constructor(lifetime?: AbortSignal) {
    this.closed = closing(lifetime);
  }

  forget(): void {
    // Nothing is shared, nothing to detach.
  }

  has(): boolean {
    return false;
  }

  run<T>(key: string, callerSignal: AbortSignal | undefined, work: Work<T>): Promise<T> {
    if (callerSignal?.aborted) return Promise.reject(new AbortedError(key, callerSignal.reason));
    const flight = start(key, work, this.closed, IGNORE);
    flight.callers = 1;
    return follow(flight, key, callerSignal) as Promise<T>;
  }
}

/** Starts the work. Its promise is always observed here, so abandoning it can never be an unhandled rejection. */
function start(key: string, work: Work<unknown>, closed: Closing | undefined, abandon: () => void): Flight {
  const stop = new LazyStop();
  const working = Promise.resolve().then(() => work(stop));
  // `promise` is observed here too, for a flight whose callers all left.
  const promise = closed ? closed.guard(key, working, abandon) : working.finally(abandon);
  working.catch(IGNORE); // a guard made after close() never observes `working`
  promise.catch(IGNORE);
  return { promise, stop, abandon, abortable: 0, pinned: false, callers: 0 };
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
      if (flight.abortable === 0 && !flight.pinned) {
        flight.stop.abort(err);
        flight.abandon(); // not joinable any more: a later caller starts fresh work
      }
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
        // The loader's own rejection reaches its callers unchanged, Error or not.
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
        reject(e);
      },
    );
  });
}
