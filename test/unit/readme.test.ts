import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { DEFAULTS } from '../../src/options.js';

/** The README's options table must say what DEFAULTS says: defaults stated twice drift apart otherwise. */
describe('README options table', () => {
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const rows = new Map<string, string>();
  for (const m of readme.matchAll(/^\| `(\w+)` \| (?:cache|call|redlock) \| ([^|]+) \|/gm)) rows.set(m[1] as string, (m[2] as string).trim());

  it.each(Object.entries(DEFAULTS))('lists %s with its default %o', (name, value) => {
    const shown = rows.get(name);
    expect(shown, `README has no row for ${name}`).toBeDefined();
    expect(shown).toBe(typeof value === 'string' ? `\`'${value}'\`` : `\`${String(value)}\``);
  });
});
