/**
 * Server-assisted L1 invalidation (`local.invalidation: 'tracking'`, docs/tracking.md): the Redis
 * server tells this process which keys changed, for every key read on the cache's own reads
 * connection, whoever changed them. This module keeps tracking on across reconnections and turns the
 * server's invalidations into L1 drops; the connections are the port's (client/port.ts TrackingPort).
 *
 * When does tracking hold? From the reply to `CLIENT TRACKING on REDIRECT <id>` on the current reads
 * connection, `<id>` being the current listener connection, subscribed, until either connection
 * closes: reads sent on the reads connection after that reply are tracked (one connection, in order),
 * and their invalidations reach the listener. Every 'close' moves the generation on; a `track()`
 * answers only for the generation it was sent in (as the Bus's SUBSCRIBE does, wait.ts). While it does
 * not hold, L1 neither serves nor fills (the caller suspends it: `onDown`), and it starts over empty
 * when it holds again (`onUp`): invalidations sent meanwhile are lost.
 */
import type { TrackingPort } from './client/port.js';
import type { EntryFacts } from './entry.js';
import { LruTier, type LocalTier, type LruTierSwitches, type Ticket } from './local-tier.js';
import type { Clock, ResolvedLocal } from './options.js';
import { subscribeRetryDelay } from './wait.js';

export interface TrackingHandlers {
  /** Tracking holds (first time, and after every reconnection of either connection). */
  onUp(): void;
  /** Either connection closed: invalidations may be lost until the next onUp(). */
  onDown(): void;
  /** The server invalidated these Redis keys, or everything (null: a flush). */
  onInvalidate(keys: readonly string[] | null): void;
  /** A connection error or a refused CLIENT ID / SUBSCRIBE / CLIENT TRACKING (retried). */
  onError(err: unknown): void;
}

export class Tracking {
  /** True between a `track()` answered in the current generation and the next 'close'. */
  up = false;
  private stopped = false;
  private generation = 0;
  /** The generation with a `track()` in flight, or -1. */
  private inFlight = -1;
  private failures = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  /** ready() callers waiting for the next onUp(). */
  private readonly waitingForUp = new Set<(up: boolean) => void>();
  /** The heartbeat while up (unref'd). */
  private heartbeat: NodeJS.Timeout | undefined;

  constructor(
    readonly port: TrackingPort,
    private readonly handlers: TrackingHandlers,
    /** PING period on the listener while tracking holds (`redisTimeout`); 0 = none. */
    private readonly heartbeatMs = 0,
  ) {
    port.on('error', (err) => handlers.onError(err));
    port.on('ready', () => this.attempt());
    port.on('close', () => this.closed());
    port.onInvalidate((keys) => {
      if (!this.stopped) handlers.onInvalidate(keys);
    });
    this.attempt();
  }

  /** True once tracking holds (now, or within `timeoutMs`); false after `timeoutMs`, or once stopped. Never rejects. */
  ready(timeoutMs: number): Promise<boolean> {
    if (this.stopped) return Promise.resolve(false);
    if (this.up) return Promise.resolve(true);
    return new Promise((resolve) => {
      const settle = (up: boolean): void => {
        clearTimeout(timer);
        this.waitingForUp.delete(settle);
        resolve(up);
      };
      const timer = setTimeout(() => settle(false), timeoutMs);
      this.waitingForUp.add(settle);
    });
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    clearInterval(this.heartbeat);
    for (const settle of [...this.waitingForUp]) settle(false);
    this.port.close();
  }

  private attempt(): void {
    if (this.stopped || this.inFlight === this.generation) return;
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    const generation = (this.inFlight = this.generation);
    this.port.track().then(
      () => {
        if (this.inFlight === generation) this.inFlight = -1;
        // Answered on connections of which one has closed since: the attempt on its 'ready' decides.
        if (this.stopped || generation !== this.generation || this.up) return;
        this.failures = 0;
        this.up = true;
        this.beat();
        this.handlers.onUp();
        for (const settle of [...this.waitingForUp]) settle(true);
      },
      (err: unknown) => {
        if (this.inFlight === generation) this.inFlight = -1;
        if (this.stopped) return;
        this.handlers.onError(err);
        if (this.retryTimer) return;
        this.retryTimer = setTimeout(() => {
          this.retryTimer = undefined;
          this.attempt();
        }, subscribeRetryDelay(this.failures++, Math.random()));
        this.retryTimer.unref();
      },
    );
  }

  /**
   * A silently dead listener socket (no FIN, no RST) emits no 'close' until TCP gives up, and every
   * invalidation sent meanwhile is lost: a PING unanswered for a whole period drops the listener (a
   * 'close', L1 flushed) and it is made again. As the Bus's heartbeat (wait.ts), a tick that runs more
   * than a quarter period late (this process stalled) gives the PING one more period.
   */
  private beat(): void {
    if (this.heartbeatMs <= 0) return;
    const period = this.heartbeatMs;
    const generation = this.generation;
    let unanswered = false;
    let lastTick = performance.now();
    clearInterval(this.heartbeat);
    this.heartbeat = setInterval(() => {
      const now = performance.now();
      const stalled = now - lastTick - period > period / 4;
      lastTick = now;
      if (this.stopped || generation !== this.generation) return clearInterval(this.heartbeat);
      if (unanswered) {
        if (!stalled) setImmediate(() => unanswered && generation === this.generation && !this.stopped && this.port.reconnect());
        return;
      }
      unanswered = true;
      this.port.ping().then(
        () => (unanswered = false),
        () => undefined,
      );
    }, period);
    this.heartbeat.unref();
  }

  private closed(): void {
    this.generation++;
    clearInterval(this.heartbeat);
    if (!this.up || this.stopped) return;
    this.up = false;
    this.handlers.onDown();
  }
}

/**
 * L1 under tracking: the LRU tier, but a copy is kept only if the server tracks its key for this
 * process, i.e. it was read on the reads connection (the Store's reads: `fill`, `fillStale`). A value
 * this process wrote itself (`written`: the write went on the caller's connection, untracked), computed
 * while Redis was unavailable (`fill` without facts: never in the store), or read by a lock's
 * acquire-read on the caller's connection (`untracked()`) would never be invalidated by the server:
 * none is kept. Everything else (invalidations, flushes, suspend and resume) is the tier's own.
 */
export class TrackedTier extends LruTier {
  private readonly offReads: LocalTier;

  constructor(options: Pick<ResolvedLocal, 'max'>, clock: Clock, switches?: LruTierSwitches) {
    super(options, clock, switches);
    const nothing = (): void => undefined;
    // Fills refused; the rest is this tier's (a read's ticket, the invalidations it must respect).
    this.offReads = {
      get: (key) => this.get(key),
      begin: (key) => this.begin(key),
      fill: nothing,
      fillStale: nothing,
      invalidateTagged: (reaches) => this.invalidateTagged(reaches),
      invalidate: (key) => this.invalidate(key),
      written: (...a) => this.written(...a),
      deleted: (key) => this.deleted(key),
      flush: () => this.flush(),
      suspend: (keep) => this.suspend(keep),
      resume: () => this.resume(),
      untracked: () => this.offReads,
    };
  }

  override untracked(): LocalTier {
    return this.offReads;
  }

  override fill(ticket: Ticket, key: string, value: unknown, freshMs: number, facts?: EntryFacts, tags?: readonly string[]): void {
    if (facts !== undefined) super.fill(ticket, key, value, freshMs, facts, tags);
  }

  override written(ticket: Ticket, key: string, value: unknown, freshMs: number, _accepted: boolean, facts?: EntryFacts): void {
    // As a refused write: the key is dropped, and every read begun before now can no longer fill it.
    super.written(ticket, key, value, freshMs, false, facts);
  }
}
