import { describe, expect, it } from 'vitest';
import { CallShapes } from '../../src/options/shapes.js';
import { CALL_DEFAULTS, type ResolvedDefaults } from '../../src/options/schema.js';
import type { CallOptions } from '../../src/options.js';

const defaults = CALL_DEFAULTS as ResolvedDefaults;

/** The remembered shapes (private): id → Shape. */
const remembered = (shapes: CallShapes): Map<string, unknown> => (shapes as unknown as { shapes: Map<string, unknown> }).shapes;

describe('per-call options (signal, tags): one resolution per shape whatever their order', () => {
  it.each([
    ['signal before tags', (signal: AbortSignal, tags: string[]): CallOptions => ({ ttl: 1000, signal, tags })],
    ['tags before signal', (signal: AbortSignal, tags: string[]): CallOptions => ({ ttl: 1000, tags, signal })],
  ])('%s: a shape found again by its id (past the recent ones) is not resolved again', (_, options) => {
    const shapes = new CallShapes(defaults);
    shapes.resolve(options(new AbortController().signal, ['a']), 'k');
    const [[id, first]] = [...remembered(shapes).entries()] as [[string, unknown]];
    // More other shapes than are matched in place: the next call goes by the shape's id.
    for (let n = 0; n < 9; n++) shapes.resolve({ ttl: 2000 + n }, 'k');
    expect(shapes.resolve(options(new AbortController().signal, ['b']), 'k').tags).toEqual(['b']);
    expect(remembered(shapes).get(id)).toBe(first);
  });
});
