import type { ShardSubscriberPort } from './client/port.js';
import { RedisTimeout, RedisUnavailableError } from './errors.js';
import type { EntryKeys } from './keys.js';
import { parseNote, type Bus, type Note, type NoteKind } from './wait.js';

/**
 * Where a key's notes go (`notes`), and the per-key wake channels of `notes: 'sharded'`.
 *
 * With `'broadcast'` every note goes to the cache's one channel and every process hears it (the Bus).
 * With `'sharded'` a key's notes go to its own channel in its hash slot (keys.ts `wake`; SPUBLISH by the
 * channel rule, lock/scripts.ts), and a process subscribes to it only while it waits on or rebuilds
 * the key (a *hold*): a process handles the notes of its own keys, not of every key, and on a Cluster a
 * note never leaves its shard.
 *
 * Why a waiter stays correct: the hold is taken, and its subscription awaited (bounded), before the
 * first lock attempt. A holder's write or release after that attempt is heard; one before it is found
 * by what follows the attempt (a won lock re-reads, a lost one means a holder still to announce). A
 * subscription that cannot be had, or is lost, leaves the waiters polling (`pollInterval`), as while
 * the Bus is down; a loss also wakes them to re-read at once.
 */
export interface NoteRoute {
  /** The channel the scripts announce `keys`' changes on. */
  channel(keys: EntryKeys): string;
  /** A note of `kind` on `key` from this cache instance. */
  message(kind: NoteKind, key: string): string;
}

/** One hold of a key's wake channel. */
export interface WakeHold {
  /** Settles once the channel is subscribed, or could not be within `redisTimeout`; never rejects. */
  readonly ready: Promise<unknown>;
  /** Ends this hold (idempotent); the channel is unsubscribed when its last hold ends. */
  release(): void;
}

export interface WakeChannels extends NoteRoute {
  /** Holds `keys`' wake channel subscribed until the hold is released. */
  hold(key: string, keys: EntryKeys): WakeHold;
  /** Drops the wake connection(s); holds after this are no-ops. */
  close(): void;
}

const NO_HOLD: WakeHold = Object.freeze({ ready: Promise.resolve(), release: () => undefined });

/** `notes: 'broadcast'`: every note on the Bus's channel, which every process holds anyway; a hold is a no-op. */
export function broadcastNotes(bus: Bus): WakeChannels {
  return {
    channel: () => bus.channel,
    message: (kind, key) => bus.message(kind, key),
    hold: () => NO_HOLD,
    close: () => undefined,
  };
}

/** What the sharded wake channels report to their cache. */
export interface WakeHandlers {
  /** A note on a held channel (handled like a Bus note). */
  onNote(note: Note): void;
  /** The subscription of `key`'s channel may have been lost: notes may have been missed (waiters should re-read). */
  onLost(key: string): void;
  /** A SSUBSCRIBE refused or not answered in time (the waiters poll). */
  onError(error: unknown): void;
}

/**
 * One subscribed channel and its holds.
 * Invariant: in `held` exactly while `count > 0`; `ok` is false once its latest subscribe failed or
 * went unanswered (the next hold tries again), undefined while it is in flight, true once it held.
 * `attempt` numbers its subscribes: only the latest one's answer sets `ok` (an older one may answer late).
 */
interface Held {
  readonly key: string;
  count: number;
  ready: Promise<void>;
  ok: boolean | undefined;
  attempt: number;
}

/** Settled at once: what a hold waits on while the wake connection is suspected dead. */
const SETTLED: Promise<void> = Promise.resolve();



/** `notes: 'sharded'`. */
export class ShardedWake implements WakeChannels {
  private readonly held = new Map<string, Held>();
  private closed = false;
  /**
   * False from a SSUBSCRIBE that went unanswered for redisTimeout (a silently dead socket: the port is
   * told to reconnect) until one is answered: meanwhile holds do not wait for their subscription (the
   * waiters poll), so a dead wake connection costs no miss a redisTimeout.
   */
  private answering = true;

  constructor(
    private readonly bus: Bus,
    private readonly port: ShardSubscriberPort,
    /** Bounds the wait for a SSUBSCRIBE: `redisTimeout`. */
    private readonly timeoutMs: number,
    private readonly handlers: WakeHandlers,
  ) {
    port.onMessage((channel, message) => {
      // A message for a channel released meanwhile: nobody here waits on that key any more.
      if (this.closed || !this.held.has(channel)) return;
      const note = parseNote(message);
      if (note) handlers.onNote(note);
    });
    port.onLost(() => this.lost());
  }

  channel(keys: EntryKeys): string {
    return keys.wake;
  }

  message(kind: NoteKind, key: string): string {
    return this.bus.message(kind, key);
  }

  hold(key: string, keys: EntryKeys): WakeHold {
    if (this.closed) return NO_HOLD;
    const channel = keys.wake;
    let entry = this.held.get(channel);
    if (!entry) {
      entry = { key, count: 0, ready: SETTLED, ok: undefined, attempt: 0 };
      this.held.set(channel, entry);
      this.subscribe(channel, entry);
    } else if (entry.ok === false) {
      this.subscribe(channel, entry);
    }
    entry.count++;
    const held = entry;
    let released = false;
    return {
      ready: this.answering ? held.ready : SETTLED,
      release: () => {
        if (released) return;
        released = true;
        // Only if the entry is still ours (a close() or a later entry for the channel may have replaced it).
        if (--held.count > 0 || this.held.get(channel) !== held) return;
        this.held.delete(channel);
        if (!this.closed) void this.port.unsubscribe(channel);
      },
    };
  }

  close(): void {
    this.closed = true;
    this.held.clear();
    this.port.close();
  }

  /** Sends SSUBSCRIBE; `entry.ready` settles when it is answered or after `timeoutMs`, whichever is first. */
  private subscribe(channel: string, entry: Held): void {
    entry.ok = undefined;
    const attempt = ++entry.attempt;
    const latest = (): boolean => entry.attempt === attempt;
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        resolve();
        if (this.closed || !latest() || entry.ok !== undefined) return;
        entry.ok = false;
        this.unanswered(entry.key);
      }, this.timeoutMs);
      timer.unref();
    });
    const answered = this.port.subscribe(channel).then(
      () => {
        this.answering = true;
        if (latest()) entry.ok = true;
      },
      (error: unknown) => {
        if (latest()) entry.ok = false;
        if (!this.closed) this.handlers.onError(error);
      },
    );
    entry.ready = Promise.race([answered, bound]).finally(() => clearTimeout(timer));
  }

  /**
   * A SSUBSCRIBE went unanswered for redisTimeout while the connection counts as open: a silently dead
   * socket (no FIN, no RST) stays so until TCP gives up. Reported, and the port reconnects (every
   * subscription is then lost and taken again: `lost()`). Once per suspicion: until a subscribe is answered.
   */
  private unanswered(key: string): void {
    if (!this.answering) return;
    this.answering = false;
    this.handlers.onError(new RedisUnavailableError('subscribe', new RedisTimeout(this.timeoutMs), key));
    this.port.reconnect();
  }

  /** Subscriptions may be gone: subscribe every held channel again and wake its waiters to re-read. */
  private lost(): void {
    if (this.closed) return;
    for (const [channel, entry] of this.held) {
      this.subscribe(channel, entry);
      this.handlers.onLost(entry.key);
    }
  }
}
