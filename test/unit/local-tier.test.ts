import { describe, expect, it } from 'vitest';
import { LruTier, NO_LOCAL_TIER } from '../../src/local-tier.js';

/** An injected monotonic clock: pure logic, no timers. */
function tier(max = 10, switches = {}) {
  let now = 0;
  const clock = { now: () => now };
  const t = new LruTier({ max }, clock, switches);
  t.resume(); // subscribed
  return { t, advance: (ms: number) => void (now += ms) };
}

describe('LruTier coherence', () => {
  it('a fill whose read began before an invalidation of its key is refused', () => {
    const { t } = tier();
    const ticket = t.begin('k');
    t.invalidate('k');
    t.fill(ticket, 'k', 'old', 1000);
    expect(t.get('k')).toBeUndefined();
  });

  it('a fill whose read began after the invalidation is kept', () => {
    const { t } = tier();
    t.invalidate('k');
    const ticket = t.begin('k');
    t.fill(ticket, 'k', 'new', 1000);
    expect(t.get('k')).toEqual({ value: 'new', freshUntil: 1000 });
  });

  it('a read begun before this process\'s own write finished cannot overwrite the written value, whatever order their continuations run in', () => {
    const { t } = tier();
    // A set: it invalidates, then a read of the key starts (its ticket is after the set's invalidation),
    // then the set's write is sent (ticket) and lands; the read carried the value the write replaced and
    // its fill runs last (its reply came first, its continuation had more steps).
    t.invalidate('k');
    const read = t.begin('k');
    const write = t.begin('k');
    t.written(write, 'k', 'written', 1000, true);
    t.fill(read, 'k', 'replaced', 1000);
    expect(t.get('k')?.value).toBe('written');
    // A read begun after the write finished fills as usual.
    t.fill(t.begin('k'), 'k', 'newer', 1000);
    expect(t.get('k')?.value).toBe('newer');
  });

  it('an invalidation of another key does not refuse the fill', () => {
    const { t } = tier();
    const ticket = t.begin('k');
    t.invalidate('other');
    t.fill(ticket, 'k', 'v', 1000);
    expect(t.get('k')?.value).toBe('v');
  });

  it('invalidate drops the key', () => {
    const { t } = tier();
    t.fill(t.begin('k'), 'k', 'v', 1000);
    t.invalidate('k');
    expect(t.get('k')).toBeUndefined();
  });

  it('a flush drops everything and refuses every fill begun before it', () => {
    const { t } = tier();
    t.fill(t.begin('a'), 'a', 1, 1000);
    const before = t.begin('b');
    t.flush();
    expect(t.get('a')).toBeUndefined();
    t.fill(before, 'b', 2, 1000);
    expect(t.get('b')).toBeUndefined();
    t.fill(t.begin('b'), 'b', 3, 1000);
    expect(t.get('b')?.value).toBe(3);
  });

  it('when the bounded invalidation memory forgets a key, older tickets are refused (conservative), newer ones kept', () => {
    const { t } = tier(1); // remembers 1024 invalidations
    const early = t.begin('k');
    t.invalidate('k');
    for (let i = 0; i < 1024; i++) t.invalidate(`other${i}`); // evicts k's record
    t.fill(early, 'k', 'stale', 1000);
    expect(t.get('k')).toBeUndefined();
    // The floor rose only to k's invalidation: a read begun after it is still kept.
    const later = t.begin('x');
    t.fill(later, 'x', 'fine', 1000);
    expect(t.get('x')?.value).toBe('fine');
  });

  it('the invalidation memory stays bounded', () => {
    const { t } = tier(1);
    for (let i = 0; i < 10_000; i++) t.invalidate(`k${i}`);
    expect((t as unknown as { invalidatedAt: { size: number } }).invalidatedAt.size).toBe(1024);
  });

  it('suspended (subscription down): flushes, serves nothing and fills nothing; resume flushes again and serves', () => {
    const { t } = tier();
    t.fill(t.begin('a'), 'a', 1, 1000);
    t.suspend();
    expect(t.get('a')).toBeUndefined();
    const whileDown = t.begin('b');
    t.fill(t.begin('c'), 'c', 3, 1000);
    t.resume();
    expect(t.get('c')).toBeUndefined();
    // A read begun while down may have missed a note sent while down: refused after resume too.
    t.fill(whileDown, 'b', 2, 1000);
    expect(t.get('b')).toBeUndefined();
    t.fill(t.begin('b'), 'b', 4, 1000);
    expect(t.get('b')?.value).toBe(4);
  });

  it('nothing is served or filled before the first resume (never subscribed yet)', () => {
    const t = new LruTier({ max: 10 }, { now: () => 0 });
    t.fill(t.begin('k'), 'k', 'v', 1000);
    expect(t.get('k')).toBeUndefined();
  });

  it('serves an entry only while fresh', () => {
    const { t, advance } = tier();
    t.fill(t.begin('k'), 'k', 'v', 100);
    advance(99);
    expect(t.get('k')?.value).toBe('v');
    advance(1);
    expect(t.get('k')).toBeUndefined();
  });

  it('the incoherent negative control fills regardless of tickets and subscription, and never flushes on down/up (as before coherence)', () => {
    const { t } = tier(10, { incoherent: true });
    t.fill(t.begin('kept'), 'kept', 1, 1000);
    const ticket = t.begin('k');
    t.invalidate('k');
    t.suspend();
    t.fill(ticket, 'k', 'old', 1000);
    expect(t.get('k')?.value).toBe('old');
    t.resume();
    expect(t.get('kept')?.value).toBe(1);
  });
});

describe('NO_LOCAL_TIER', () => {
  it('keeps nothing', () => {
    NO_LOCAL_TIER.resume();
    NO_LOCAL_TIER.fill(NO_LOCAL_TIER.begin('k'), 'k', 'v', 1000);
    expect(NO_LOCAL_TIER.get('k')).toBeUndefined();
  });
});
