import { LRUCache } from 'lru-cache';
import type { Clock, LocalTierOptions } from './options.js';

/**
 * The optional in-process L1. It only ever serves fresh entries: an entry is kept until the fresh
 * time Redis reported when it was read or written. Values are shared by reference among callers.
 */
export interface LocalTier {
  get(key: string): { value: unknown } | undefined;
  set(key: string, value: unknown, freshMs: number): void;
  delete(key: string): void;
  clear(): void;
  begin(key: string): number;
  fill(ticket: number, key: string, value: unknown, freshMs: number): void;
  invalidate(key: string): void;
}

interface Slot {
  readonly value: unknown;
  /** Monotonic ms after which the slot is not served. */
  readonly freshUntil: number;
}

export class LruTier implements LocalTier {
  private readonly lru: LRUCache<string, Slot>;

  constructor(options: LocalTierOptions, private readonly clock: Clock) {
    this.lru = new LRUCache<string, Slot>({ max: options.max });
  }

  get(key: string): { value: unknown } | undefined {
    const slot = this.lru.get(key);
    if (!slot) return undefined;
    if (this.clock.now() >= slot.freshUntil) {
      this.lru.delete(key);
      return undefined;
    }
    return slot;
  }

  set(key: string, value: unknown, freshMs: number): void {
    if (freshMs <= 0) return;
    this.lru.set(key, { value, freshUntil: this.clock.now() + freshMs });
  }

  delete(key: string): void {
    this.lru.delete(key);
  }

  clear(): void {
    this.lru.clear();
  }

  begin(_key: string): number {
    return 0;
  }

  fill(_ticket: number, key: string, value: unknown, freshMs: number): void {
    this.set(key, value, freshMs);
  }

  invalidate(key: string): void {
    this.delete(key);
  }
}

/** L1 switched off: costs a no-op call. */
export const NO_LOCAL_TIER: LocalTier = {
  get: () => undefined,
  set: () => undefined,
  delete: () => undefined,
  clear: () => undefined,
  begin: () => 0,
  fill: () => undefined,
  invalidate: () => undefined,
};
