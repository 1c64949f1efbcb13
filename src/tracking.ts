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
import type { SubscriberPort, TrackingPort } from './client/port.js';
import type { EntryFacts } from './entry.js';
import { LruTier, type LocalTier, type LruTierSwitches, type Ticket } from './local-tier.js';
import type { Clock, ResolvedLocal } from './options.js';
import { Bus } from './wait.js';

export interface TrackingHandlers {
  /** Tracking holds (first time, and after every reconnection of either connection). */
  onUp(): void;
  /** Either connection closed (or its heartbeat went unanswered): invalidations may be lost until the next onUp(). */
  onDown(): void;
  /** The server invalidated these Redis keys, or everything (null: a flush). */
  onInvalidate(keys: readonly string[] | null): void;
  /** A connection error or a refused CLIENT ID / SUBSCRIBE / CLIENT TRACKING (retried). */
  onError(err: unknown): void;
}

/**
 * Holds tracking on as the Bus holds its subscription (wait.ts: answered per connection generation,
 * retried with backoff, and a heartbeat on the listener, which finds a silently dead socket within two
 * periods and drops it): `CLIENT TRACKING` is what gets "subscribed". Returns the holder (`ready()`,
 * `stop()`). `heartbeatMs`: `redisTimeout`.
 */
export function holdTracking(port: TrackingPort, heartbeatMs: number, clock: Clock, handlers: TrackingHandlers): Bus {
  const hold = new Bus('tracking', heartbeatMs, clock);
  let stopped = false;
  port.onInvalidate((keys) => {
    if (!stopped) handlers.onInvalidate(keys);
  });
  const tracked: SubscriberPort = {
    subscribe: () => port.track(),
    on: (event: 'ready' | 'close' | 'error', listener: (err: unknown) => void) => port.on(event as 'error', listener),
    ping: () => port.ping(),
    reconnect: () => port.reconnect(),
    close: () => {
      stopped = true;
      port.close();
    },
  };
  hold.startOn(tracked, { onNote: () => undefined, onUp: () => handlers.onUp(), onDown: () => handlers.onDown(), onError: (err) => handlers.onError(err) });
  return hold;
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
