import { CacheClosedError, InvalidKeyError, InvalidOptionError } from './errors.js';
import { validateKey } from './keys.js';
import { RESERVED_KEY_START } from './namespace.js';
import { CallShapes } from './options/shapes.js';
import { resolveCallOptions, type CallOptions, type ResolvedCache, type ResolvedCall } from './options.js';
import { mergeCallOptions } from './options/resolve.js';

/**
 * A call's options, resolved once per bare ttl or per options object's shape (options/shapes.ts) and
 * refused (`InvalidOptionError`) before any Redis traffic.
 */
export class CallResolver {
  /** Per bare ttl; undefined when the lock policy is a function of the key (then resolved per call). */
  private readonly byTtl: Map<number, ResolvedCall> | undefined;
  private readonly shapes: CallShapes;

  constructor(private readonly options: ResolvedCache) {
    this.byTtl = typeof options.defaults.lock === 'function' ? undefined : new Map();
    this.shapes = new CallShapes(options.defaults);
  }

  resolve(key: string, ttlOrOptions: number | CallOptions | undefined): ResolvedCall {
    if (typeof ttlOrOptions === 'number') {
      const known = this.byTtl?.get(ttlOrOptions);
      if (known) return known;
    }
    const call = typeof ttlOrOptions === 'object' && ttlOrOptions !== null ? this.shapes.resolve(ttlOrOptions, key) : resolveCallOptions(this.options.defaults, ttlOrOptions, key);
    if (call.lock === 'redlock' && !this.options.redlock) throw new InvalidOptionError('lock', 'redlock', 'redlock nodes configured: createCache({ redlock: { nodes } })', key);
    if (typeof ttlOrOptions === 'number' && this.byTtl && this.byTtl.size < 256) this.byTtl.set(ttlOrOptions, call);
    return call;
  }
}

/**
 * The checks every entry point makes before any Redis traffic: a valid key (and, outside the
 * namespaces' own view, not one of their reserved keys), an open cache, resolvable options.
 */
export class Guard {
  constructor(
    private readonly options: ResolvedCache,
    private readonly resolver: CallResolver,
    private readonly isClosed: () => boolean,
    /** True only on the namespaces' internal view of the cache: keys starting with `\0` are theirs. */
    private readonly reservedKeys: boolean,
  ) {}

  usable(key: unknown): asserts key is string {
    validateKey(key, this.options.maxKeyLength);
    if (!this.reservedKeys && key.startsWith(RESERVED_KEY_START)) throw new InvalidKeyError(key, 'keys starting with U+0000 are reserved for namespaces (cache.namespace())');
    if (this.isClosed()) throw new CacheClosedError(key);
  }

  /** The cache is not closed (an operation that takes no key). */
  open(): void {
    if (this.isClosed()) throw new CacheClosedError();
  }

  /** A batch's keys: an array of valid keys. */
  keys(keys: unknown): asserts keys is readonly string[] {
    if (!Array.isArray(keys)) throw new InvalidOptionError('keys', keys, 'an array of cache keys');
    for (const key of keys as unknown[]) this.usable(key);
    this.open();
  }

  call(key: string, ttlOrOptions: number | CallOptions | undefined): ResolvedCall {
    this.usable(key);
    return this.resolver.resolve(key, ttlOrOptions);
  }

  /**
   * A batch's options when it has no key (an empty batch): refused (InvalidOptionError) as a key's call
   * would refuse them, so bad options never pass for want of a key. A lock policy function is not called.
   */
  batchOptions(ttlOrOptions: number | CallOptions | undefined): void {
    mergeCallOptions(this.options.defaults, ttlOrOptions, undefined);
  }
}
