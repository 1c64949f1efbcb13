import { announceClear } from './clearing.js';
import { callOf, computeDegraded } from './compute.js';
import { CacheClosedError } from './errors.js';
import { assertSettable, invalidateTags } from './writes.js';
import type { KeyedOps, NamespaceHost } from './namespace.js';
import { degradedReads } from './reads.js';
import type { Runtime } from './runtime.js';

/**
 * What namespaces use of a cache: its operations on a view that allows their reserved keys (`ops`:
 * the cache itself with the reserved-keys guard), the generations, and the hooks of namespace.ts.
 */
export function namespaceHost(rt: Runtime, ops: KeyedOps): NamespaceHost {
  const guard = rt.reservedGuard;
  return {
    ops,
    generations: rt.generations,
    validateKey: (key: unknown): asserts key is string => rt.guard.usable(key),
    checkCall: (key, loader, ttlOrOptions) => void callOf(rt.guard, key, loader, ttlOrOptions, undefined),
    checkSet: (key, value, ttlOrOptions) => {
      rt.guard.call(key, ttlOrOptions);
      assertSettable(key, value);
    },
    degraded: (key, loader, ttlOrOptions, cause) => computeDegraded(rt, guard, key, loader, ttlOrOptions, cause),
    degradedReads: (keys, error, operation) => degradedReads(rt, keys, error, operation),
    invalidateDegraded: (key) => {
      rt.memo.invalidate(key);
      rt.forget(key);
    },
    invalidateTags: (path, tags, how) => {
      if (rt.closed) return Promise.reject(new CacheClosedError());
      return invalidateTags(rt, path, tags, how);
    },
    clear: (path) => {
      if (rt.closed) return Promise.reject(new CacheClosedError());
      return announceClear(rt, path, 'c');
    },
  };
}
