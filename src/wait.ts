import { randomBytes } from 'node:crypto';
import { eventsChannel } from './keys.js';
import type { RedisPort, SubscriberPort } from './client/port.js';
import { MAX_STALL_CREDIT } from './io.js';
import { systemClock, type Clock } from './options.js';

/**
 * Notification kinds on the shared channel:
 *   w written by a rebuild · s set() · d delete() · e loader failed · r released without a value ·
 *   u the loader's value could not be stored (waiters must not rebuild in turn; they reject) ·
 *   c a namespace was cleared (the key is its path; see namespace.ts) ·
 *   a the whole cache was cleared (cache.clear(); a kind of its own, so a process of an older version,
 *     which ignores kinds it does not know, is never counted as having dropped its L1) ·
 *   g tags were invalidated (deleteByTag or expireByTag; the key names the tags, their scope and an acknowledgement
 *     id: tags.ts). Wakes no waiter: it names no entry.
 * Every kind wakes waiters on the key (and tells them which kind woke them); w/s/d also drop other
 * processes' L1 copy.
 */
export type NoteKind = 'w' | 's' | 'd' | 'e' | 'r' | 'u' | 'c' | 'a' | 'g';
const KINDS = new Set<string>(['w', 's', 'd', 'e', 'r', 'u', 'c', 'a', 'g']);

/** How a `Waiter.next()` ended: the kind of note that woke it, its poll delay, or its caller's abort (or close). */
export type Wake = NoteKind | 'timeout' | 'aborted';

export interface Note {
  readonly kind: NoteKind;
  readonly origin: string;
  readonly key: string;
}

/** `<kind>|<origin>|<key>`; the key goes last, so it may contain '|'. */
export function formatNote(kind: NoteKind, origin: string, key: string): string {
  return `${kind}|${origin}|${key}`;
}

/** Parses a note; anything malformed (another publisher on our channel) is ignored. */
export function parseNote(message: string): Note | undefined {
  const a = message.indexOf('|');
  const b = a < 0 ? -1 : message.indexOf('|', a + 1);
  if (a !== 1 || b < 0) return undefined;
  const kind = message[0] as string;
  if (!KINDS.has(kind)) return undefined;
  return { kind: kind as NoteKind, origin: message.slice(a + 1, b), key: message.slice(b + 1) };
}

/**
 * In-process waiters by key. With single-flight there is at most one Redis-level waiter per key per
 * process, so notifications and polls scale with processes, not with callers.
 */
export class Waiters {
  /** Invariant: a key is present only while it has at least one registered waiter. */
  private readonly byKey = new Map<string, Set<Waiter>>();
  /** Set by wakeAll() (close()): from then on every wait, also one registered later, ends at once. */
  private closed = false;

  register(key: string): Waiter {
    const waiter = new Waiter(() => this.remove(key, waiter));
    if (this.closed) waiter.close();
    let set = this.byKey.get(key);
    if (!set) this.byKey.set(key, (set = new Set()));
    set.add(waiter);
    return waiter;
  }

  wake(key: string, kind: NoteKind): void {
    const set = this.byKey.get(key);
    if (set) for (const w of set) w.wake(kind);
  }

  /** Ends every wait (close()): they resolve 'aborted'. */
  wakeAll(): void {
    this.closed = true;
    for (const set of this.byKey.values()) for (const w of set) w.close();
  }

  get size(): number {
    return this.byKey.size;
  }

  private remove(key: string, waiter: Waiter): void {
    const set = this.byKey.get(key);
    if (!set) return;
    set.delete(waiter);
    if (set.size === 0) this.byKey.delete(key);
  }
}

/**
 * One caller's wait on a key. Registered before the lock attempt, so a notification that lands
 * between "lost the lock" and "started waiting" is remembered, not missed.
 */
export class Waiter {
  /** A wake that came while nobody was in next(): the latest one is kept (it describes the latest change). */
  private pending: Wake | undefined;
  private resolve: ((how: Wake) => void) | undefined;

  /** After close(): every next() resolves 'aborted' at once, so no wait (and no timer) outlives the cache. */
  private closed = false;

  constructor(readonly dispose: () => void) {}

  close(): void {
    this.closed = true;
    this.wake('aborted');
  }

  wake(how: Wake): void {
    if (this.resolve) this.resolve(how);
    else this.pending = how;
  }

  /**
   * Resolves with the kind of the note that woke it, 'timeout' after `ms` (the poll), or 'aborted'
   * when `signal` aborts — at once, without a timer, if it already has.
   */
  next(ms: number, signal: AbortSignal | undefined): Promise<Wake> {
    if (this.pending !== undefined) {
      const how = this.pending;
      this.pending = undefined;
      return Promise.resolve(how);
    }
    if (signal?.aborted || this.closed) return Promise.resolve('aborted');
    return new Promise((resolve) => {
      const done = (how: Wake): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.resolve = undefined;
        resolve(how);
      };
      const onAbort = (): void => done('aborted');
      const timer = setTimeout(() => done('timeout'), ms);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.resolve = done;
    });
  }
}

/** What the Bus reports to its cache. */
export interface BusHandlers {
  onNote(note: Note): void;
  /** The channel is subscribed on the current connection (first time, and after every reconnect). */
  onUp(): void;
  /** The subscriber connection closed: notes may be missed until the next onUp(). */
  onDown(): void;
  /** A connection error or a refused SUBSCRIBE (the subscription keeps retrying). */
  onError(err: unknown): void;
}

/** SUBSCRIBE retry after a refusal: exponential from RETRY_BASE_MS, capped, jittered to [50 %, 100 %]. */
const RETRY_BASE_MS = 50;
const RETRY_CAP_MS = 2000;

/** The next retry delay after `failures` consecutive refusals, `random` in [0, 1). */
export function subscribeRetryDelay(failures: number, random: number): number {
  const ceiling = Math.min(RETRY_CAP_MS, RETRY_BASE_MS * 2 ** Math.min(failures, 16));
  return Math.round(ceiling * (0.5 + random / 2));
}

/**
 * The pub/sub side: one duplicated connection per cache, subscribed to one channel.
 * Waiters progress by polling when it is down; L1 is trusted only while it is up (see LocalTier).
 *
 * When is it up? ioredis (5.x, lib/redis/event_handler.ts) would re-send SUBSCRIBE by itself after a
 * reconnect, but only for channels a SUBSCRIBE *reply* registered (DataHandler adds the channel to
 * `condition.subscriber` on the reply); that re-subscribe's promise is internal and unhandled (a close
 * before its reply is an unhandled rejection), and no event says it completed. A first SUBSCRIBE that
 * failed (rejected by `maxRetriesPerRequest`, or at once with `enableOfflineQueue: false`) registered
 * nothing, so ioredis never re-sends it. Hence we own the subscription (the ioredis port turns
 * `autoResubscribe` off on its duplicate): we send our own SUBSCRIBE at start, on every 'ready'
 * (emitted on nextTick after readyHandler), and after each refusal (backoff). The channel is
 * subscribed on the current connection exactly when one of those resolves: replies come in order on
 * one socket, and a 'close' of that socket is handled after the replies it carried (so a later
 * onDown() follows, never precedes, the onUp() it invalidates). SUBSCRIBE to a channel already
 * subscribed is harmless (Redis just confirms it again).
 * Down is the subscriber's 'close' event (every closed or failed connection emits it), or a
 * heartbeat PING unanswered for a whole period: a silently dead socket (no FIN, no RST) emits no
 * 'close' until TCP gives up, and every note sent meanwhile is lost; the Bus then drops the
 * connection itself (ioredis reconnects), which turns "silently dead" into down within two periods.
 * A stall of this process is not that silence (as for the Io's timeouts, io.ts): a heartbeat tick
 * that runs more than a quarter period late gives the PING another period (up to MAX_STALL_CREDIT
 * periods in all), and the verdict waits past the poll phase that reads the replies that came in
 * meanwhile. After such a verdict `silentSince` says since when the connection had heard nothing: the
 * cache asks its Io whether the node answered anything else since then (a hung node, found without a
 * caller waiting on it).
 * That is ioredis's contract; the node-redis adapter (client/node-redis.ts) gives the same events.
 */
export class Bus {
  readonly channel: string;
  /** Identifies this cache instance in notes, so it can skip its own L1 invalidations. */
  readonly origin = randomBytes(6).toString('base64url');
  private subscriber: SubscriberPort | undefined;
  private handlers: BusHandlers | undefined;
  /** True between a SUBSCRIBE reply on the current connection and the next 'close'. */
  private up = false;
  private stopped = false;
  /** Counts closes; a SUBSCRIBE answers for the connection generation it was sent in. */
  private generation = 0;
  /** The generation with a SUBSCRIBE in flight, or -1. Invariant: at most one in flight per generation. */
  private inFlight = -1;
  /** Consecutive refusals, for the backoff; reset when a SUBSCRIBE holds. */
  private failures = 0;
  /** The pending retry (unref'd), or undefined. Invariant: at most one, and none once stopped. */
  private retryTimer: NodeJS.Timeout | undefined;
  /** The heartbeat (unref'd) while up. Invariant: set exactly while `up` and not stopped. */
  private heartbeat: NodeJS.Timeout | undefined;
  /** A heartbeat PING sent and not yet answered. */
  private unanswered = false;
  /** When the unanswered PING was sent, and when the heartbeat last ticked (clock ms). */
  private pingSent = 0;
  private lastTick = 0;
  /** When the subscriber last heard from Redis (a reply or a message; clock ms). */
  heardAt = Number.NEGATIVE_INFINITY;
  /**
   * Set when the heartbeat's verdict dropped the connection: since when it had heard nothing. A close
   * for any other reason leaves it undefined — a connection that ended says nothing of a hung node.
   */
  silentSince: number | undefined;
  /** ready() callers waiting for the next onUp(). */
  private readonly waitingForUp = new Set<(up: boolean) => void>();

  /** `heartbeatMs`: PING period while subscribed; 0 = no heartbeat. */
  constructor(
    prefix: string,
    private readonly heartbeatMs = 0,
    private readonly clock: Clock = systemClock,
  ) {
    this.channel = eventsChannel(prefix);
  }

  message(kind: NoteKind, key: string): string {
    return formatNote(kind, this.origin, key);
  }

  /** Duplicates the caller's client (the only connection we ever create) and subscribes, retrying until it holds. */
  start(port: RedisPort, handlers: BusHandlers): void {
    this.startOn(port.subscriber(), handlers);
  }

  /**
   * As start(), on `sub`: whatever its subscribe() holds is held the same way (answered per connection
   * generation, retried with backoff, the heartbeat on it). Server-assisted tracking holds its
   * `CLIENT TRACKING` so (tracking.ts).
   */
  startOn(sub: SubscriberPort, handlers: BusHandlers): void {
    this.subscriber = sub;
    this.handlers = handlers;
    sub.on('error', (err) => handlers.onError(err));
    sub.on('ready', () => this.attempt());
    sub.on('close', () => this.closed());
    this.attempt();
  }

  private readonly onMessage = (channel: string, message: string): void => {
    if (channel !== this.channel || this.stopped) return;
    this.heardAt = this.clock.now();
    const note = parseNote(message);
    if (note) this.handlers?.onNote(note);
  };

  /** True once subscribed (now, or within `timeoutMs`); false after `timeoutMs`, or once stopped. Never rejects. */
  ready(timeoutMs: number): Promise<boolean> {
    if (this.stopped || !this.subscriber) return Promise.resolve(false);
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

  stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.heartbeat);
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    for (const settle of [...this.waitingForUp]) settle(false);
    const sub = this.subscriber;
    this.subscriber = undefined;
    // Not QUIT: it waits for a reply that never comes while Redis is down.
    sub?.close();
    return Promise.resolve();
  }

  private attempt(): void {
    const sub = this.subscriber;
    if (!sub || this.stopped || this.inFlight === this.generation) return;
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    const generation = (this.inFlight = this.generation);
    sub.subscribe(this.channel, this.onMessage).then(
      () => {
        if (this.inFlight === generation) this.inFlight = -1;
        // Answered on a connection that has since closed: the attempt sent on 'ready' decides.
        if (this.stopped || generation !== this.generation) return;
        this.heardAt = this.clock.now();
        this.failures = 0;
        if (this.up) return;
        this.up = true;
        this.silentSince = undefined;
        this.beat();
        this.handlers?.onUp();
        for (const settle of [...this.waitingForUp]) settle(true);
      },
      (err: unknown) => {
        if (this.inFlight === generation) this.inFlight = -1;
        if (this.stopped) return;
        this.handlers?.onError(err);
        this.scheduleRetry();
      },
    );
  }

  private scheduleRetry(): void {
    if (this.retryTimer || this.stopped) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.attempt();
    }, subscribeRetryDelay(this.failures++, Math.random()));
    this.retryTimer.unref();
  }

  private beat(): void {
    if (this.heartbeatMs <= 0) return;
    const period = this.heartbeatMs;
    this.unanswered = false;
    this.lastTick = this.clock.now();
    const generation = this.generation;
    this.heartbeat = setInterval(() => {
      const sub = this.subscriber;
      if (!sub) return;
      const now = this.clock.now();
      const stalled = now - this.lastTick - period > period / 4;
      this.lastTick = now;
      if (this.unanswered) {
        // This process stalled: the PING's silence is not Redis's (until it outlasts the stall credit).
        if (stalled && now - this.pingSent < (1 + MAX_STALL_CREDIT) * period) return;
        // A whole period without an answer: treat the socket as dead (the client reconnects) — once
        // the poll phase has read any reply already in.
        setImmediate(() => {
          if (!this.unanswered || this.stopped || generation !== this.generation) return;
          this.silentSince = this.heardAt;
          sub.reconnect();
        });
        return;
      }
      this.unanswered = true;
      this.pingSent = now;
      sub.ping().then(
        () => {
          this.unanswered = false;
          this.heardAt = this.clock.now();
        },
        () => undefined,
      );
    }, period);
    this.heartbeat.unref();
  }

  private closed(): void {
    this.generation++;
    clearInterval(this.heartbeat);
    this.heartbeat = undefined;
    if (!this.up || this.stopped) return;
    this.up = false;
    this.handlers?.onDown();
  }
}
