/**
 * Call options resolved once per shape. A shape is what an options object says, read afresh on every
 * call: its own enumerable names in order, with their values, less the signal's value (a web handler
 * passes a new signal, and a new object literal, per request). Two calls whose objects say the same
 * thing share one validated, merged, frozen resolution; the signal is checked and attached per call.
 *
 * Why not by object identity: handlers write the options inline, so every call brings a new object.
 * Why not resolve per call: validating, merging over the defaults and freezing a ~16-field object per
 * call, and the garbage it leaves while the call waits on Redis, cost more on a hit than the hit itself
 * spends in this library (measured with bench:hit's `ours-options` variant).
 */
import { abortSignal, tagList } from './fields.js';
import { lockModeFor } from './effective.js';
import type { CallOptions, LockMode } from './public.js';
import { mergeCallOptions, withLockFor, type MergedCall } from './resolve.js';
import { CALL_FIELDS, type ResolvedCall, type ResolvedDefaults } from './schema.js';

/** How many shapes one cache remembers: callers write a handful; one that makes shapes without end evicts its own. */
export const MAX_SHAPES = 256;
/** How many shapes are matched by comparing values in place before an id is built (a handler's few literals). */
const MAX_RECENT = 8;

/**
 * The options read per call, never remembered with a shape: their presence is part of the shape, their
 * value is checked and attached per call. A signal is new per request; a tags array is usually built
 * per request too (`[\`user:${id}\`]`), and an array can be mutated in place.
 */
const PER_CALL = {
  signal: (value: unknown, key: string) => abortSignal(value, 'signal', key),
  tags: (value: unknown, key: string) => tagList(value, 'tags', key),
} as const;
type PerCall = keyof typeof PER_CALL;
const perCall = (name: string): name is PerCall => name === 'signal' || name === 'tags';

/**
 * The shape's id: each own enumerable option name (all known ones) and its primitive value, strings
 * length-prefixed so no value can spell another shape's id, then the per-call options given (their
 * presence only). `undefined` when the object cannot be remembered by its values: an unknown name (the
 * full resolution refuses it), or a value that is not a primitive (a lock function or a `refreshAhead`
 * object given per call: resolved per call instead, since equal-looking functions and objects can
 * differ, and one may be mutated in place).
 */
function shapeId(input: object): string | undefined {
  let id = '';
  let signal = false;
  let tags = false;
  for (const name of Object.keys(input)) {
    if (!Object.hasOwn(CALL_FIELDS, name)) return undefined;
    const value = (input as Record<string, unknown>)[name];
    switch (typeof value) {
      case 'undefined':
        // Absent, as validation reads it.
        break;
      default:
        // A per-call option: its presence is in the shape (last, whatever its place), never its value.
        if (name === 'signal') signal = true;
        else if (name === 'tags') tags = true;
        else if (typeof value === 'number' || typeof value === 'boolean') id += `${name}=${value};`;
        else if (typeof value === 'string') id += `${name}"${value.length}:${value};`;
        else return undefined;
    }
  }
  // In PER_CALL's order, whatever the object's: the same id as slowResolve files the shape under.
  return `${id}${signal ? 'signal;' : ''}${tags ? 'tags;' : ''}`;
}

/** The options object as read now, without its per-call options: what a shape is resolved from. */
function withoutPerCall(input: object): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const name of Object.keys(input)) if (!perCall(name)) out[name] = (input as Record<string, unknown>)[name];
  return out;
}

class Shape {
  /** One frozen resolution per lock mode the policy has picked (one, unless the policy is a function of the key). */
  private readonly byMode: Partial<Record<LockMode, ResolvedCall>> = {};
  private readonly fixed: ResolvedCall | undefined;

  constructor(
    private readonly merged: MergedCall,
    /** The per-call options this shape's objects give (none: a call gets the frozen resolution itself). */
    readonly perCall: readonly PerCall[],
  ) {
    this.fixed = typeof merged.lock === 'function' ? undefined : withLockFor(merged, '');
  }

  /** The resolution for `key`: a lock policy that is a function is asked on every call, never remembered per key. */
  forKey(key: string): ResolvedCall {
    if (this.fixed) return this.fixed;
    const mode = lockModeFor(this.merged.lock, key);
    return (this.byMode[mode] ??= Object.freeze({ ...this.merged, lock: mode }));
  }
}

export class CallShapes {
  /** Insertion order is eviction order: the oldest shape goes first once MAX_SHAPES are held. */
  private readonly shapes = new Map<string, Shape>();
  /** The newest shapes first, at most MAX_RECENT: each the exact names and values one object had. */
  private readonly recent: { readonly names: readonly string[]; readonly values: readonly unknown[]; readonly shape: Shape }[] = [];

  constructor(
    private readonly defaults: ResolvedDefaults,
    private readonly max = MAX_SHAPES,
  ) {}

  /** How many shapes are remembered (tests). */
  get size(): number {
    return this.shapes.size;
  }

  /** One call's options object, resolved: validated (`InvalidOptionError`) before any Redis traffic. */
  resolve(input: CallOptions, key: string): ResolvedCall {
    const names = Object.keys(input);
    const shape = this.recentMatch(input, names) ?? this.slowResolve(input, names, key);
    const call = shape.forKey(key);
    if (shape.perCall.length === 0) return call;
    const own: { signal?: AbortSignal; tags?: readonly string[] } = {};
    for (const name of shape.perCall) (own as Record<PerCall, unknown>)[name] = PER_CALL[name](input[name], key);
    return Object.freeze({ ...call, ...own });
  }

  /**
   * The shape an object says exactly what a recently seen one said: the same names in the same order,
   * each value `===` (the signal's presence only). Building an id costs a string and its hash per call,
   * more than a hot key's coalesced hit spends elsewhere; this compare allocates only the names array.
   */
  private recentMatch(input: CallOptions, names: readonly string[]): Shape | undefined {
    const values = input as Record<string, unknown>;
    next: for (const seen of this.recent) {
      if (seen.names.length !== names.length) continue;
      for (let i = 0; i < names.length; i++) {
        const name = names[i] as string;
        if (seen.names[i] !== name) continue next;
        const value = values[name];
        if (perCall(name) ? (value !== undefined) !== seen.values[i] : value !== seen.values[i]) continue next;
      }
      return seen.shape;
    }
    return undefined;
  }

  private slowResolve(input: CallOptions, names: readonly string[], key: string): Shape {
    const id = shapeId(input);
    const known = id === undefined ? undefined : this.shapes.get(id);
    if (known !== undefined) return known;
    // Resolved from one reading of the object, and remembered under that reading's id (a getter
    // that answers differently on a second read cannot file one shape under another's id).
    const read = withoutPerCall(input);
    const given = (Object.keys(PER_CALL) as PerCall[]).filter((name) => Object.hasOwn(input, name) && input[name] !== undefined);
    const shape = new Shape(mergeCallOptions(this.defaults, read, key), given);
    const readId = id === undefined ? undefined : shapeId(read);
    if (readId === undefined) return shape;
    this.remember(readId + given.map((name) => `${name};`).join(''), shape);
    // The recent entry holds that same reading: its values, and for a per-call option whether it was given.
    this.recent.unshift({ names, values: names.map((name) => (perCall(name) ? given.includes(name) : read[name])), shape });
    if (this.recent.length > MAX_RECENT) this.recent.pop();
    return shape;
  }

  private remember(id: string, shape: Shape): void {
    if (this.shapes.size >= this.max) this.shapes.delete(this.shapes.keys().next().value as string);
    this.shapes.set(id, shape);
  }
}
