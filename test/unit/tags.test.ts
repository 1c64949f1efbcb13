/** The read side of THE TAG RULE (src/tags.ts judge): what a tagged entry's records say of it. */
import { describe, expect, it } from 'vitest';
import { judge } from '../../src/tags.js';

const G = 1_000_000_000; // the entry's grant, µs
const NOW = G + 5_000_000; // 5 s after it

describe('judge', () => {
  it.each([
    ['every record deleted before the grant', [`${G - 10}`, `${G - 1}`], { kind: 'valid' }],
    ['a record missing (unknown means invalid)', [`${G - 10}`, null], { kind: 'invalid' }],
    ['a record deleted at the grant', [`${G}`], { kind: 'invalid' }],
    ['a record deleted after the grant, expired too', [`${G + 1} ${G + 2}`], { kind: 'invalid' }],
    ['expired before the grant', [`${G - 10} ${G - 5}`], { kind: 'valid' }],
    ['expired 2 s after the grant: stale for 3 s', [`${G - 10} ${G + 2_000_000}`], { kind: 'expired', agoMs: 3000 }],
    ['two expired after it: stale since the earlier', [`${G - 10} ${G + 4_000_000}`, `${G - 10} ${G + 1_000_000}`], { kind: 'expired', agoMs: 4000 }],
    ['a malformed record', ['x'], { kind: 'invalid' }],
  ])('%s', (_name, states, verdict) => {
    expect(judge(states, G, NOW)).toEqual(verdict);
  });
});
