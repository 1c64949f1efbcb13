import type { EventEmitter } from 'node:events';
import type { CacheEvents } from './events.js';
import { RESERVED_KEY_START, shownKey } from './namespace.js';

/** Emits a cache event; a throwing listener is reported, never propagated into the protocol. */
export type Emit = <E extends keyof CacheEvents>(name: E, ...payload: CacheEvents[E]) => void;

/**
 * The cache's emit. Listeners must not throw; one that does is reported as a process warning and
 * breaks neither the call (a throw between acquiring a grant and releasing it must not leak the grant)
 * nor the other listeners of the event. With no listener, an emit costs one count.
 */
export function safeEmitter(emitter: EventEmitter<CacheEvents>): Emit {
  return (name, ...args) => {
    if (emitter.listenerCount(name) === 0) return;
    // A namespace's internal key is shown as the caller's key and its namespace (namespace.ts).
    const first = args[0] as { key?: unknown } | undefined;
    const payload = typeof first?.key === 'string' && first.key.startsWith(RESERVED_KEY_START) ? [{ ...first, ...shownKey(first.key) }] : args;
    const report = (error: unknown): void =>
      process.emitWarning(`stampede-guard: a "${String(name)}" listener threw: ${error instanceof Error ? error.message : String(error)}`, { code: 'SG_LISTENER_THREW' });
    for (const listener of emitter.rawListeners(name) as ((...args: unknown[]) => unknown)[]) {
      try {
        const returned = listener.apply(emitter, payload);
        // An async listener's rejection is reported the same way, never left unhandled.
        if (returned instanceof Promise) returned.catch(report);
      } catch (error) {
        report(error);
      }
    }
  };
}
