import { describe, expect, it } from 'vitest';
import { ReleaseRetries } from '../../src/lock/grant.js';

function retries() {
  let now = 0;
  const r = new ReleaseRetries({ now: () => now });
  return { r, advance: (ms: number) => void (now += ms) };
}

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('ReleaseRetries', () => {
  it('an answered retry is done: sent once, then forgotten', async () => {
    const { r } = retries();
    let sent = 0;
    r.add('a', 1000, async () => void sent++);
    r.flush();
    await tick();
    r.flush();
    expect(sent).toBe(1);
    expect(r.size).toBe(0);
  });

  it('an unanswered retry is kept for the next flush', async () => {
    const { r } = retries();
    let sent = 0;
    r.add('a', 1000, async () => {
      sent++;
      throw new Error('down');
    });
    r.flush();
    await tick();
    r.flush();
    await tick();
    expect(sent).toBe(2);
    expect(r.size).toBe(1);
  });

  it('at most one send per retry is in flight', () => {
    const { r } = retries();
    let sent = 0;
    r.add('a', 1000, () => (sent++, new Promise(() => undefined)));
    r.flush();
    r.flush();
    expect(sent).toBe(1);
  });

  it('a retry whose lease has lapsed is dropped unsent (the lock is gone by itself)', () => {
    const { r, advance } = retries();
    let sent = 0;
    r.add('a', 1000, async () => void sent++);
    advance(1000);
    r.flush();
    expect(sent).toBe(0);
    expect(r.size).toBe(0);
  });

  it('clear() forgets every retry', () => {
    const { r } = retries();
    r.add('a', 1000, async () => undefined);
    r.clear();
    expect(r.size).toBe(0);
  });
});
