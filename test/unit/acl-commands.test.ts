import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import * as scripts from '../../src/lock/scripts.js';
import { TAG_ACK, TAG_EXPIRE, TAG_INVALIDATE, TAG_STATES } from '../../src/tags.js';
import { APP_COMMANDS, IOREDIS_CLUSTER_COMMANDS, NODE_REDIS_CLUSTER_COMMANDS, TRACKING_COMMANDS } from '../support/acl.js';

/**
 * Scripts run with the caller's ACL permissions, so every command a script calls must be in the
 * least-privilege list of docs/operations.md (APP_COMMANDS). Read straight from the Lua source: a new command in a
 * script without a matching docs/ACL entry fails here, not in production.
 */
describe('least-privilege ACL list', () => {
  const lua = Object.entries(scripts).filter((e): e is [string, string] => typeof e[1] === 'string');
  // The tag records' own scripts (src/tags.ts) run with the same permissions.
  const all: [string, string][] = [...lua, ['TAG_STATES', TAG_STATES], ['TAG_INVALIDATE', TAG_INVALIDATE], ['TAG_EXPIRE', TAG_EXPIRE], ['TAG_ACK', TAG_ACK]];

  it('covers every script', () => {
    expect(lua.map(([name]) => name).sort()).toEqual(['ACQUIRE', 'ACQUIRE_READ', 'ACQUIRE_READ_TAGGED', 'ACQUIRE_TAGGED', 'CLEAR_ENTRY', 'EXTEND', 'INVALIDATE', 'READ', 'REDLOCK_ACQUIRE', 'RELEASE', 'TAG_ENSURE', 'TAG_GRANT_APART', 'WRITE', 'WRITE_TAGGED', 'WRITE_UNFENCED']);
  });

  it.each(all)('every command %s calls is granted', (_name, source) => {
    const called = [...source.matchAll(/redis\.p?call\('([A-Za-z]+)'/g)].map((m) => `+${(m[1] as string).toLowerCase()}`);
    expect(called.length).toBeGreaterThan(0);
    for (const command of called) expect(APP_COMMANDS).toContain(command);
  });
});

/**
 * The "## Least privilege" block of docs/operations.md (and its copy in the README) is what the ACL runs grant: its ACL SETUSER line lists
 * exactly APP_COMMANDS (the standalone user), and its "with an … Cluster client, also:" lines exactly
 * the extras the test Cluster's users get.
 */
describe.each([
  ['docs/operations.md', '## Least privilege'],
  ['README.md', '### Redis permissions'],
])("%s's least-privilege block", (file, heading) => {
  const page = readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8');
  const section = page.slice(page.indexOf(heading));
  const block = section.slice(section.indexOf('```') + 3, section.indexOf('```', section.indexOf('```') + 3));
  const lines = block.split('\n');
  const grants = (text: string) => text.split(/\s+/).filter((w) => w.startsWith('+'));
  const comment = (what: string) => grants(lines.find((l) => l.startsWith(`# with ${what}, also:`)) ?? '');

  it('grants the standalone user exactly APP_COMMANDS', () => {
    const setuser = lines.filter((l) => !l.startsWith('#')).join(' ');
    expect(setuser).toContain('ACL SETUSER');
    expect(grants(setuser)).toEqual(APP_COMMANDS);
  });

  it('adds exactly the Cluster extras the tests grant, per family', () => {
    expect(comment('an ioredis Cluster client')).toEqual(IOREDIS_CLUSTER_COMMANDS);
    expect(comment('a node-redis Cluster client')).toEqual(NODE_REDIS_CLUSTER_COMMANDS);
  });

  it("adds exactly the tracking extras the tests grant, and the invalidation channel", () => {
    expect(comment("local.invalidation 'tracking'")).toEqual(TRACKING_COMMANDS);
    expect(lines.find((l) => l.startsWith("# with local.invalidation 'tracking', also:"))).toContain('&__redis__:invalidate');
  });
});
