import { randomBytes } from 'node:crypto';
import { LockLostError, OriginBackoffError } from '../errors.js';
import type { Io } from '../io.js';
import type { EntryKeys } from '../keys.js';
import { watchdogInterval, type Clock, type LockMode, type ResolvedCall } from '../options.js';
import type { Bus } from '../wait.js';
import type { Scripts } from './scripts.js';
import type { Grant, Locker, ReleaseNote } from './types.js';

export function newToken(): string {
  return randomBytes(16).toString('base64url'); // 128 random bits per grant
}

export interface LockDeps {
  readonly io: Io;
  readonly scripts: Scripts;
  readonly bus: Bus;
  readonly clock: Clock;
  readonly onLost: (key: string, err: LockLostError) => void;
}

/**
 * `single`: `SET lock token NX PX lockTtl` plus a fence increment, in one script on the store.
 * With `exclusive = false` the same class issues fence-only grants (modes `none` and `local`):
 * no lock key, but the write is still fenced and a watchdog keeps the fence alive for slow loaders.
 */
export class StoreLock implements Locker {
  constructor(
    private readonly deps: LockDeps,
    private readonly mode: LockMode,
    private readonly exclusive: boolean,
  ) {}

  async acquire(key: string, keys: EntryKeys, call: ResolvedCall): Promise<Grant | null> {
    const token = this.exclusive ? newToken() : '';
    const lockTtl = this.exclusive ? call.lockTtl : 0;
    const { io, scripts, bus } = this.deps;
    const started = this.deps.clock.now();
    const [granted, fenceOrPttl] = await io.run(
      'acquire',
      () => scripts.acquire(keys.lock, keys.fence, keys.backoff, token, lockTtl, call.lockTtl),
      key,
      // A timed-out acquire may still be applied (now or later): free that orphan by its token.
      this.exclusive ? () => void scripts.release(keys.lock, keys.backoff, token, bus.channel, '', 0).catch(() => undefined) : undefined,
    );
    if (granted === 2) throw new OriginBackoffError(key, fenceOrPttl);
    if (granted !== 1) return null;
    return new StoreGrant(this.deps, key, keys, token, fenceOrPttl, this.mode, this.exclusive, call.lockTtl, call.failBackoff, started);
  }
}

class StoreGrant implements Grant {
  readonly signal: AbortSignal;
  private readonly controller = new AbortController();
  private readonly timer: NodeJS.Timeout;
  private released = false;
  /** Monotonic time until which the lock is known to be ours (start of the last successful extend + ttl). */
  private validUntil: number;

  constructor(
    private readonly deps: LockDeps,
    private readonly key: string,
    private readonly keys: EntryKeys,
    readonly token: string,
    readonly fence: number,
    readonly mode: LockMode,
    readonly exclusive: boolean,
    private readonly ttl: number,
    /** Fleet-wide backoff set on release after a loader failure (0 = none). */
    private readonly backoffMs: number,
    acquiredAt: number,
  ) {
    this.signal = this.controller.signal;
    this.validUntil = acquiredAt + ttl;
    this.timer = setInterval(() => void this.extend(), watchdogInterval(ttl));
    this.timer.unref();
  }

  private async extend(): Promise<void> {
    const sentAt = this.deps.clock.now();
    try {
      const ok = await this.deps.io.run('extend', () => this.deps.scripts.extend(this.keys.lock, this.keys.fence, this.token, this.ttl), this.key);
      if (this.released) return;
      if (ok === 1) this.validUntil = sentAt + this.ttl;
      else this.lose(new Error('extension refused: the lock holds another token or none'));
    } catch (err) {
      // Unknown outcome: keep the grant until its last known validity runs out.
      if (!this.released && this.deps.clock.now() >= this.validUntil) this.lose(err);
    }
  }

  private lose(cause: unknown): void {
    clearInterval(this.timer);
    if (this.controller.signal.aborted) return;
    const err = new LockLostError(this.key, cause);
    this.controller.abort(err);
    this.deps.onLost(this.key, err);
  }

  markReleased(): void {
    this.released = true;
    clearInterval(this.timer);
  }

  async release(note: ReleaseNote): Promise<void> {
    if (this.released) return;
    this.markReleased();
    if (!this.exclusive && note === '') return;
    await releaseInStore(this.deps, this.key, this.keys, this.token, note, note === 'e' ? this.backoffMs : 0);
  }
}

/** The store side of a release: compare-and-delete our lock, set the failure backoff, announce. Never throws. */
export async function releaseInStore(deps: LockDeps, key: string, keys: EntryKeys, token: string, note: ReleaseNote, backoffMs: number): Promise<void> {
  const { io, scripts, bus } = deps;
  const message = note === '' ? '' : bus.message(note, key);
  await io.run('release', () => scripts.release(keys.lock, keys.backoff, token, bus.channel, message, backoffMs), key).catch(() => undefined);
}
