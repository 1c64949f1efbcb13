import { describe, expect, it } from 'vitest';
import * as scripts from '../../src/lock/scripts.js';
import { APP_COMMANDS } from '../support/acl.js';

/**
 * Scripts run with the caller's ACL permissions, so every command a script calls must be in the
 * README's least-privilege list (APP_COMMANDS). Read straight from the Lua source: a new command in a
 * script without a matching README/ACL entry fails here, not in production.
 */
describe('least-privilege ACL list', () => {
  const lua = Object.entries(scripts).filter((e): e is [string, string] => typeof e[1] === 'string');

  it('covers every script', () => {
    expect(lua.map(([name]) => name).sort()).toEqual(['ACQUIRE', 'EXTEND', 'INVALIDATE', 'READ', 'REDLOCK_ACQUIRE', 'RELEASE', 'WRITE', 'WRITE_UNFENCED']);
  });

  it.each(lua)('every command %s calls is granted', (_name, source) => {
    const called = [...source.matchAll(/redis\.p?call\('([A-Za-z]+)'/g)].map((m) => `+${(m[1] as string).toLowerCase()}`);
    expect(called.length).toBeGreaterThan(0);
    for (const command of called) expect(APP_COMMANDS).toContain(command);
  });
});
