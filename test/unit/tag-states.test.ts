/**
 * TagStates (src/tag-states.ts): which kept tag-record states may answer a tagged hit without reading
 * the records again. Each property here is one a kept state would break if it were missing: the age
 * bound (a record lost to eviction or a restart is announced by no note), the count bound (oldest out
 * first), the read ticket (a reply that may predate a note), trust (only while subscribed), and which
 * values are kept at all (a plain D only).
 */
import { describe, expect, it } from 'vitest';
import { TagStates } from '../../src/tag-states.js';

/** A clock the test moves by hand. */
function manualClock(start = 1_000): { now(): number; advance(ms: number): void } {
  let t = start;
  return { now: () => t, advance: (ms) => (t += ms) };
}

/** A trusted TagStates with `maxAgeMs` and `kept`, holding `states` (record → D) read just now. */
function holding(states: Record<string, string>, maxAgeMs = 1_000, kept = 100) {
  const clock = manualClock();
  const tagStates = new TagStates(clock, maxAgeMs, kept);
  tagStates.up();
  const records = Object.keys(states);
  tagStates.fill(tagStates.begin(), records, records.map((r) => states[r]));
  return { clock, tagStates };
}

describe('TagStates', () => {
  it('answers every record it holds, in order, and nothing when one record is missing', () => {
    const { tagStates } = holding({ a: '10', b: '20' });
    expect(tagStates.get(['b', 'a'])).toEqual(['20', '10']);
    expect(tagStates.get(['a', 'c'])).toBeUndefined();
  });

  it('a state past its age bound no longer answers (a record lost to eviction or a restart sends no note)', () => {
    const { clock, tagStates } = holding({ a: '10' }, 1_000);
    clock.advance(999);
    expect(tagStates.get(['a'])).toEqual(['10']);
    clock.advance(1);
    expect(tagStates.get(['a'])).toBeUndefined();
    // Gone, not just hidden: time going back (a test clock) does not bring it back.
    clock.advance(-500);
    expect(tagStates.get(['a'])).toBeUndefined();
  });

  it('keeps at most `kept` states, the oldest read going first; a record read again counts as new', () => {
    const clock = manualClock();
    const tagStates = new TagStates(clock, 60_000, 3);
    tagStates.up();
    for (const r of ['a', 'b', 'c']) tagStates.fill(tagStates.begin(), [r], ['1']);
    tagStates.fill(tagStates.begin(), ['a'], ['2']); // a is now the newest
    tagStates.fill(tagStates.begin(), ['d'], ['1']); // the oldest (b) goes
    expect(tagStates.get(['b'])).toBeUndefined();
    expect(tagStates.get(['a', 'c', 'd'])).toEqual(['2', '1', '1']);
  });

  it('a read whose ticket predates a drop or a flush keeps nothing (its reply may predate the note)', () => {
    const { tagStates } = holding({});
    const beforeDrop = tagStates.begin();
    tagStates.drop(['x']); // a note for another record: any note counts
    tagStates.fill(beforeDrop, ['a'], ['10']);
    expect(tagStates.get(['a'])).toBeUndefined();

    const beforeFlush = tagStates.begin();
    tagStates.up(); // a resubscription flushes
    tagStates.fill(beforeFlush, ['a'], ['10']);
    expect(tagStates.get(['a'])).toBeUndefined();

    tagStates.fill(tagStates.begin(), ['a'], ['10']);
    expect(tagStates.get(['a'])).toEqual(['10']);
  });

  it('a note drops the states of its records only', () => {
    const { tagStates } = holding({ a: '10', b: '20' });
    tagStates.drop(['a']);
    expect(tagStates.get(['a'])).toBeUndefined();
    expect(tagStates.get(['b'])).toEqual(['20']);
  });

  it('keeps and answers nothing while not subscribed, and starts from nothing when the subscription comes back', () => {
    const clock = manualClock();
    const tagStates = new TagStates(clock, 60_000, 100);
    tagStates.fill(tagStates.begin(), ['a'], ['10']); // never subscribed yet
    tagStates.up();
    expect(tagStates.get(['a'])).toBeUndefined();
    tagStates.fill(tagStates.begin(), ['a'], ['10']);
    tagStates.down();
    expect(tagStates.get(['a'])).toBeUndefined();
    tagStates.fill(tagStates.begin(), ['a'], ['10']); // a reply that arrives while unsubscribed
    expect(tagStates.get(['a'])).toBeUndefined();
    tagStates.up();
    expect(tagStates.get(['a'])).toBeUndefined();
  });

  it('keeps a plain D only: a missing record and one with an expireByTag time are read every time', () => {
    const { tagStates } = holding({ plain: '10', expired: '10 20' });
    tagStates.fill(tagStates.begin(), ['missing', 'empty'], [null, undefined]);
    expect(tagStates.get(['plain'])).toEqual(['10']);
    for (const r of ['expired', 'missing', 'empty']) expect(tagStates.get([r])).toBeUndefined();
  });

  it('an empty list of records is never answered from memory', () => {
    const { tagStates } = holding({ a: '10' });
    expect(tagStates.get([])).toBeUndefined();
  });
});
