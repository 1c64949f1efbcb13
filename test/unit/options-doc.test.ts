import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { DEFAULTS } from '../../src/options.js';
import { CACHE_FIELDS, CALL_FIELDS, LOCAL_FIELDS, REDLOCK_FIELDS } from '../../src/options/schema.js';

/**
 * The options table of docs/options.md must say what the schema says: every option at its level, each default
 * as DEFAULTS has it, and no row for an option that does not exist. Stated twice, they drift otherwise.
 */
describe('docs/options.md options table', () => {
  const page = readFileSync(new URL('../../docs/options.md', import.meta.url), 'utf8');
  /** `name` → [level, default column] */
  const rows = new Map<string, [string, string]>();
  for (const m of page.matchAll(/^\| `(\w+)` \| (cache|call|redlock|local) \| ([^|]+) \|/gm)) rows.set(m[1] as string, [m[2] as string, (m[3] as string).trim()]);

  it.each(Object.entries(DEFAULTS))('lists %s with its default %o', (name, value) => {
    const shown = rows.get(name);
    expect(shown, `docs/options.md has no row for ${name}`).toBeDefined();
    expect(shown?.[1]).toBe(typeof value === 'string' ? `\`'${value}'\`` : `\`${String(value)}\``);
  });

  // A cache-level option that is also a call option (`lock`) is documented once, at call level.
  const levels = [
    ...Object.keys(CACHE_FIELDS).filter((n) => !Object.hasOwn(CALL_FIELDS, n)).map((n) => [n, 'cache'] as const),
    ...Object.keys(CALL_FIELDS).map((n) => [n, 'call'] as const),
    ...Object.keys(REDLOCK_FIELDS).map((n) => [n, 'redlock'] as const),
    ...Object.keys(LOCAL_FIELDS).map((n) => [n, 'local'] as const),
  ];
  it.each(levels)('lists the schema option %s at level %s', (name, level) => {
    expect(rows.get(name)?.[0], `docs/options.md row for ${name}`).toBe(level);
  });

  it('has no row for an option the schema does not have', () => {
    expect([...rows.keys()].filter((name) => !levels.some(([n]) => n === name))).toEqual([]);
  });
});
