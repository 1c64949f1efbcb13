import { randomBytes } from 'node:crypto';
import { eventsChannel } from './keys.js';
import type { RedisClient, SubscriberClient } from './redis-types.js';

/**
 * Notification kinds on the shared channel:
 *   w written by a rebuild · s set() · d delete() · e loader failed · r released without a value.
 * Every kind wakes waiters on the key; w/s/d also drop other processes' L1 copy.
 */
export type NoteKind = 'w' | 's' | 'd' | 'e' | 'r' | 'u';
const KINDS = new Set<string>(['w', 's', 'd', 'e', 'r', 'u']);

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

  register(key: string): Waiter {
    const waiter = new Waiter(() => this.remove(key, waiter));
    let set = this.byKey.get(key);
    if (!set) this.byKey.set(key, (set = new Set()));
    set.add(waiter);
    return waiter;
  }

  wake(key: string): void {
    const set = this.byKey.get(key);
    if (set) for (const w of set) w.wake();
  }

  wakeAll(): void {
    for (const set of this.byKey.values()) for (const w of set) w.wake();
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
  private pending = false;
  private resolve: ((how: 'notified' | 'timeout') => void) | undefined;

  constructor(readonly dispose: () => void) {}

  wake(): void {
    if (this.resolve) this.resolve('notified');
    else this.pending = true;
  }

  /** Resolves on a notification or after `ms` (the poll), whichever first; a caller abort resolves too. */
  next(ms: number, signal: AbortSignal | undefined): Promise<'notified' | 'timeout'> {
    if (this.pending) {
      this.pending = false;
      return Promise.resolve('notified');
    }
    return new Promise((resolve) => {
      const done = (how: 'notified' | 'timeout'): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.resolve = undefined;
        resolve(how);
      };
      const onAbort = (): void => done('timeout');
      const timer = setTimeout(() => done('timeout'), ms);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.resolve = done;
    });
  }
}

/**
 * The pub/sub side: one duplicated connection per cache, subscribed to one channel.
 * The subscriber is best effort: if it is down, waiters still progress by polling.
 */
export class Bus {
  readonly channel: string;
  /** Identifies this cache instance in notes, so it can skip its own L1 invalidations. */
  readonly origin = randomBytes(6).toString('base64url');
  private subscriber: SubscriberClient | undefined;
  /** Settles once the first SUBSCRIBE was answered (resolved either way: failures are reported, not thrown). */
  subscribed: Promise<void> = Promise.resolve();

  constructor(prefix: string) {
    this.channel = eventsChannel(prefix);
  }

  message(kind: NoteKind, key: string): string {
    return formatNote(kind, this.origin, key);
  }

  /** Duplicates the caller's client (the only connection we ever create) and subscribes. */
  start(client: RedisClient, onNote: (note: Note) => void, onError: (err: unknown) => void): void {
    const sub = client.duplicate() as SubscriberClient & { on(event: 'message', l: (c: string, m: string) => void): unknown };
    this.subscriber = sub;
    sub.on('error', onError);
    sub.on('message', (channel: string, message: string) => {
      if (channel !== this.channel) return;
      const note = parseNote(message);
      if (note) onNote(note);
    });
    // ioredis re-subscribes by itself after a reconnect.
    this.subscribed = sub.subscribe(this.channel).then(() => undefined, onError);
  }

  stop(): Promise<void> {
    const sub = this.subscriber;
    this.subscriber = undefined;
    // disconnect, not quit: quit waits for a reply that never comes while Redis is down.
    sub?.disconnect();
    return Promise.resolve();
  }
}
