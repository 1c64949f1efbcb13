import { describe, expect, it } from 'vitest';
import { LruDegradedMemo, NO_DEGRADED_MEMO } from '../../src/degraded-memo.js';

/** An injected monotonic clock: pure logic, no timers. */
function memo(max = 10) {
  let now = 0;
  const m = new LruDegradedMemo(max, { now: () => now });
  return { m, advance: (ms: number) => void (now += ms), now: () => now };
}

describe('LruDegradedMemo', () => {
  it('is idle only while nothing is kept and no load is running; the no-op memo never claims to be', () => {
    const { m } = memo();
    expect(m.idle).toBe(true);
    const t = m.begin('k');
    expect(m.idle).toBe(false); // a load is running
    m.abandon(t);
    expect(m.idle).toBe(true);
    m.fill(m.begin('k'), 'v', 1000);
    expect(m.idle).toBe(false); // a value is kept
    m.invalidate('k');
    expect(m.idle).toBe(true);
    expect(NO_DEGRADED_MEMO.idle).toBe(false);
  });

  it('an L1 copy handed over (keep) is served for the fresh time it had left, never replaces a degraded value or a running load, and goes on invalidate and clear', () => {
    const { m, advance } = memo();
    m.keep('a', 'copy', 500);
    advance(499);
    expect(m.get('a')?.value).toBe('copy');
    advance(1);
    expect(m.get('a')).toBeUndefined();
    m.fill(m.begin('b'), 'degraded', 1000);
    m.keep('b', 'older copy', 1000);
    expect(m.get('b')?.value).toBe('degraded');
    const running = m.begin('c');
    m.keep('c', 'older copy', 1000);
    expect(m.get('c')).toBeUndefined();
    m.fill(running, 'loaded', 1000);
    expect(m.get('c')?.value).toBe('loaded');
    m.keep('d', 'copy', 1000);
    m.invalidate('d');
    expect(m.get('d')).toBeUndefined();
    m.keep('e', 'copy', 1000);
    m.clear();
    expect(m.get('e')).toBeUndefined();
    m.keep('f', 'expired', 0);
    expect(m.get('f')).toBeUndefined();
  });

  it('a degraded value is served for its ttl and not a millisecond longer', () => {
    const { m, advance } = memo();
    m.fill(m.begin('k'), 'v', 1000);
    advance(999);
    expect(m.get('k')?.value).toBe('v');
    advance(1);
    expect(m.get('k')).toBeUndefined();
  });

  it('a load that began before an invalidation of its key never fills (a delete while the loader ran)', () => {
    const { m } = memo();
    const ticket = m.begin('k');
    m.invalidate('k');
    m.fill(ticket, 'old', 1000);
    expect(m.get('k')).toBeUndefined();
  });

  it('a load that began after the invalidation fills; an invalidation of another key does not void it', () => {
    const { m } = memo();
    m.invalidate('k');
    const ticket = m.begin('k');
    m.invalidate('other');
    m.fill(ticket, 'new', 1000);
    expect(m.get('k')?.value).toBe('new');
  });

  it('invalidate drops the kept value', () => {
    const { m } = memo();
    m.fill(m.begin('k'), 'v', 1000);
    m.invalidate('k');
    expect(m.get('k')).toBeUndefined();
  });

  it('clear() (Redis answers again) drops every value and voids every load in progress', () => {
    const { m } = memo();
    m.fill(m.begin('a'), 'va', 1000);
    const running = m.begin('b');
    m.clear();
    m.fill(running, 'vb', 1000);
    expect(m.get('a')).toBeUndefined();
    expect(m.get('b')).toBeUndefined();
  });

  it('an abandoned load leaves nothing behind: a later invalidation has no ticket to void, a later load fills', () => {
    const { m } = memo();
    m.abandon(m.begin('k'));
    m.invalidate('k');
    m.fill(m.begin('k'), 'v', 1000);
    expect(m.get('k')?.value).toBe('v');
  });

  it('is bounded: past max keys the least recently used goes', () => {
    const { m } = memo(2);
    m.fill(m.begin('a'), 1, 1000);
    m.fill(m.begin('b'), 2, 1000);
    m.get('a');
    m.fill(m.begin('c'), 3, 1000);
    expect(m.get('b')).toBeUndefined();
    expect(m.get('a')?.value).toBe(1);
    expect(m.get('c')?.value).toBe(3);
  });

  it('a ttl of 0 keeps nothing', () => {
    const { m } = memo();
    m.fill(m.begin('k'), 'v', 0);
    expect(m.get('k')).toBeUndefined();
  });

  it('NO_DEGRADED_MEMO keeps nothing', () => {
    const m = NO_DEGRADED_MEMO;
    m.fill(m.begin('k'), 'v', 1000);
    expect(m.get('k')).toBeUndefined();
  });

  it('a read\'s copy (copy) is fresh, then stale, then kept within its windows, then gone; a later read replaces it', () => {
    const { m, advance, now } = memo();
    m.copy('r', 'v1', 100, 300, 1000, now());
    expect(m.get('r')).toEqual({ value: 'v1', state: 'fresh' });
    advance(100);
    expect(m.get('r')).toEqual({ value: 'v1', state: 'stale' });
    advance(200);
    expect(m.get('r')).toEqual({ value: 'v1', state: 'kept' });
    advance(700);
    expect(m.get('r')).toBeUndefined();
    m.copy('r', 'v2', 0, 0, 50, now());
    m.found('r'); // a read that found a value drops the old copy before copying the new one
    m.copy('r', 'v3', 10, 10, 50, now());
    expect(m.get('r')).toEqual({ value: 'v3', state: 'fresh' });
    m.copy('r', 'v4', 0, 0, 0, now()); // nothing left of its windows: not kept
    expect(m.get('r')?.value).toBe('v3');
  });

  it('a read\'s copy is refused when its key changed since the read was sent (a note overtook the reply, an own write answered first)', () => {
    const { m, advance, now } = memo();
    const sent = now();
    advance(5);
    m.invalidate('r'); // a change lands while the read is out
    advance(5);
    m.copy('r', 'old', 100, 100, 100, sent);
    expect(m.get('r')).toBeUndefined();
    m.copy('r', 'new', 100, 100, 100, now()); // a read sent after the change copies
    expect(m.get('r')?.value).toBe('new');
    const before = now();
    advance(1);
    m.clear(); // an outage ended: reads sent before it copy nothing either
    m.copy('x', 'old', 100, 100, 100, before);
    expect(m.get('x')).toBeUndefined();
  });

  it('missed (a read found no value) drops a copy but keeps a degraded value', () => {
    const { m, now } = memo();
    m.copy('c', 'copied', 100, 100, 100, now());
    m.keep('l', 'from L1', 100);
    m.fill(m.begin('d'), 'degraded', 100);
    for (const k of ['c', 'l', 'd']) m.missed(k);
    expect(m.get('c')).toBeUndefined();
    expect(m.get('l')).toBeUndefined();
    expect(m.get('d')).toEqual({ value: 'degraded', state: 'fresh' });
  });

  it('copies have an LRU of their own: any number of them never pushes a degraded value out; a degraded value answers before a copy', () => {
    const { m, now } = memo(2);
    m.fill(m.begin('d'), 'degraded', 100);
    for (let i = 0; i < 5; i++) m.keep(`k${i}`, i, 100);
    expect(m.get('d')?.value).toBe('degraded');
    expect(['k3', 'k4'].map((k) => m.get(k)?.value)).toEqual([3, 4]);
    expect(m.get('k0')).toBeUndefined();
    m.copy('d2', 'copy', 100, 100, 100, now());
    m.fill(m.begin('d2'), 'newer', 100);
    expect(m.get('d2')?.value).toBe('newer');
  });
});
