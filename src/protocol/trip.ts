/**
 * One key's trip through the protocol, after L1 and the in-process flight — the story:
 * store → fresh (maybe a refresh ahead) / stale (a refresh in the background) → this process's own
 * background load, if one runs → lock or wait → re-read → loader → fenced write → release → notify.
 * Each step is a function in the module named for it (read, wait, rebuild, write, degraded, refresh);
 * the Trip holds what they share: the call, its stop signal, and how it is being answered.
 */
import { CacheClosedError, type RedisUnavailableError } from '../errors.js';
import type { CacheEvents } from '../events.js';
import type { Stop } from '../flight.js';
import type { EntryKeys } from '../keys.js';
import type { Loader } from '../loader.js';
import type { Grant } from '../lock/types.js';
import type { ResolvedCall } from '../options.js';
import type { Found } from '../store.js';
import type { Answered, Outcome } from '../telemetry.js';
import { degraded } from './degraded.js';
import type { ProtocolDeps } from './deps.js';
import { readEntry } from './read.js';
import { loadWithin, whileHeld, type DoneWhen } from './rebuild.js';
import { behindOwnLoad, lockOrWait } from './wait.js';

export type StaleReason = CacheEvents['stale'][0]['reason'];

export class Trip implements Answered {
  /** An expired value at hand, served if the loader fails, backs off or is slow (fail-safe). */
  fallback: { readonly value: unknown } | undefined;
  /** How this trip answers, updated as it goes; frozen into `outcome` when it settles (a rebuild past its soft timeout keeps going). */
  current: Outcome = 'hit';
  /** Set once when the trip settles: what every caller of its flight was answered with. */
  outcome: Outcome = 'hit';
  value: unknown;
  /** The first store read found no usable value. */
  missed = false;
  /** `forceFresh`: the fence of the entry this call bypassed; only a newer entry may answer its wait. */
  bypassed: number | undefined;
  /**
   * When this call found no usable value (monotonic ms): its one `waitTimeout` counts from here,
   * whatever it waits on first (this process's own background load, then the lock).
   */
  missedAt: number | undefined;
  /**
   * THE JOIN RULE (call.ts): every tag the value this trip answers with may carry — its call's, its
   * loader's, those of every entry it read — a superset, known for sure only once it settles.
   */
  carried: Set<string> | undefined;
  /** The last tag note this process had heard before the trip sent anything (tags.ts HeardTags). */
  readonly heardAt: number;

  constructor(
    readonly d: ProtocolDeps,
    readonly key: string,
    readonly keys: EntryKeys,
    readonly loader: Loader<unknown>,
    readonly call: ResolvedCall,
    /** Its signal aborts when every caller sharing this trip left, or the work was abandoned. */
    readonly stop: Stop,
    /** For a trip whose first read was sent before it was made (a batch's): the note heard before that read. */
    heardAt = d.heard.latest,
  ) {
    this.heardAt = heardAt;
    this.carries(call.tags);
  }

  /** The same call with another loader (a batch key won: its value comes from the batch's one loadMany). */
  withLoader(loader: Loader<unknown>): Trip {
    const trip = new Trip(this.d, this.key, this.keys, loader, this.call, this.stop, this.heardAt);
    trip.carries(this.carried);
    return trip;
  }

  /** The value this trip answers with may carry `tags` (THE JOIN RULE). */
  carries(tags: Iterable<string> | undefined): void {
    if (tags === undefined) return;
    for (const tag of tags) (this.carried ??= new Set()).add(tag);
  }

  /** What this trip read may be what it answers with: its tags count (THE JOIN RULE). Returns `found`. */
  saw<F extends Found | undefined>(found: F): F {
    if (found !== undefined && found.state !== 'miss') this.carries(found.tags);
    return found;
  }

  /** Read only off the hit path: a flight makes its signal on first use. */
  get signal(): AbortSignal {
    return this.stop.signal;
  }

  /** Runs the trip and resolves with itself: the value and how it was obtained, for every caller of the flight. */
  answer(): Promise<Answered> {
    return this.settle(this.run());
  }

  /**
   * A batch key this call's read found without a usable value (`found`) and whose lock the batch won
   * (`grant`) with other keys': the same miss, re-read, soft and hard timeouts, fenced write and
   * release as a single-key rebuild; `reread` is the re-read under the grant, sent with the others'.
   */
  answerWon(found: Found, grant: Grant, reread: () => Found | undefined): Promise<Answered> {
    this.missedWith(found);
    return this.settle(whileHeld(this.d, this.key, this.keys, () => loadWithin(this, grant, reread)));
  }

  /**
   * Answers on the degraded path from the start, for `cause`, without a command to Redis: a namespace
   * whose generation Redis could not give (the entry's key is unknown, so the store cannot be asked).
   * No L1 copy: nothing reads L1 under a degraded-path key, so one would only push real entries out.
   */
  answerDegraded(cause: RedisUnavailableError): Promise<Answered> {
    return this.settle(degraded(this, 'read', cause, false));
  }

  private async settle(running: Promise<unknown>): Promise<Answered> {
    this.value = await running;
    this.outcome = this.current;
    return this;
  }

  /** The trip of a call whose store read (sent at `sent`) was made before it (Calls.read) and found no fresh value. */
  answerFound(found: Found, sent: number): Promise<Answered> {
    return this.settle(this.after(this.saw(found), sent));
  }

  /** The trip of a call whose store read, made before it (Calls.read), failed. */
  answerFailedRead(error: unknown): Promise<Answered> {
    return this.settle(degraded(this, 'read', error));
  }

  private async run(): Promise<unknown> {
    const sent = this.d.clock.now();
    let found: Found;
    try {
      found = this.saw(await readEntry(this.d, this.key, this.keys, sent, this.call.forceFresh !== true));
    } catch (error) {
      return degraded(this, 'read', error);
    }
    return this.after(found, sent);
  }

  /** What the trip does with its store read. */
  private async after(found: Found, sent: number): Promise<unknown> {
    // forceFresh serves nothing it read: the lock is taken and the loader run.
    if (this.call.forceFresh === true) return (this.missedWith(found), lockOrWait(this));
    if (found.state === 'fresh') {
      this.d.loads.refreshAheadOnFresh(this, found, sent);
      return found.value;
    }
    if (found.state === 'stale') {
      this.d.loads.refreshStale(this, found);
      return this.serveStale(found.value, 'window');
    }
    this.missedWith(found);
    const own = await behindOwnLoad(this);
    return own ? own.value : lockOrWait(this);
  }

  /**
   * The call found no usable value (`found`: a miss, or for `forceFresh` whatever was there): a
   * `miss`, the start of its wait, an expired value kept as the fail-safe fallback, and for
   * `forceFresh` the fence of the entry it bypassed.
   */
  missedWith(found: Found): void {
    this.d.emit('miss', { key: this.key });
    this.missed = true;
    this.missedAt ??= this.d.clock.now();
    this.saw(found);
    if (found.state === 'miss') return;
    if (this.call.forceFresh === true) this.bypassed = found.fence;
    if (found.state === 'kept' || (this.call.forceFresh === true && found.state === 'stale')) this.fallback = found;
  }

  /** When this trip's re-read under `grant` finds the work done: an exclusive grant's, a fresh value (newer than one bypassed). */
  doneWhen(grant: Grant): DoneWhen {
    return grant.exclusive ? { kind: 'fresh', bypassed: this.bypassed } : { kind: 'never' };
  }

  /** A value a waiter may answer with: any, unless `forceFresh` bypassed an entry; then only a newer one. */
  acceptable(found: Found): boolean {
    return found.state !== 'miss' && (this.bypassed === undefined || found.fence > this.bypassed);
  }

  /** Serves the fail-safe value when one is kept, else throws `error` (a loader's own error reaches its callers unchanged). */
  failSafe(error: unknown, reason: StaleReason): unknown {
    if (!this.fallback) throw error;
    return this.serveStale(this.fallback.value, reason);
  }

  /** Serves an expired value, flagged with a `stale` event naming why. */
  serveStale(value: unknown, reason: StaleReason): unknown {
    this.d.emit('stale', { key: this.key, reason });
    this.current = 'stale';
    return value;
  }

  assertRunning(): void {
    if (this.d.lifetime.aborted) throw new CacheClosedError(this.key);
    if (this.signal.aborted) throw this.stopped();
  }

  /** Why this trip stopped once its signal aborted (every caller left: nobody awaits this error). */
  stopped(): Error {
    return this.signal.reason instanceof Error ? this.signal.reason : new CacheClosedError(this.key);
  }
}
