import { describe, expect, it } from 'vitest';
import { GrantRegistry, ReleaseOnce } from '../../src/lock/grant.js';
import type { Grant, ReleaseOutcome, ReleaseResult } from '../../src/lock/types.js';
import { deferred } from '../support/harness.js';

/** A grant that records its releases; each release settles when the test says so. */
function grant(name: string, log: string[], gate?: Promise<void>): Grant {
  const once = new ReleaseOnce();
  return {
    fence: 1,
    token: name,
    mode: 'single',
    exclusive: true,
    signal: new AbortController().signal,
    markReleased: () => undefined,
    release: (outcome: ReleaseOutcome) =>
      once.run(async () => {
        log.push(`${name}:${outcome}`);
        await gate;
        log.push(`${name}:done`);
        return 'released';
      }),
  };
}

describe('GrantRegistry', () => {
  it("close() releases every held grant with 'cancelled' and resolves only once each release settled", async () => {
    const log: string[] = [];
    const gate = deferred<void>();
    const r = new GrantRegistry();
    expect(r.hold(grant('a', log, gate.promise))).toBe(true);
    expect(r.hold(grant('b', log, gate.promise))).toBe(true);
    let closed = false;
    const closing = r.close().then(() => (closed = true));
    await Promise.resolve();
    expect(log).toEqual(['a:cancelled', 'b:cancelled']);
    expect(closed).toBe(false);
    gate.resolve();
    await closing;
    expect(log).toEqual(['a:cancelled', 'b:cancelled', 'a:done', 'b:done']);
    expect(r.size).toBe(0);
  });

  it('hold() refuses once close() began, also while it awaits releases', async () => {
    const log: string[] = [];
    const gate = deferred<void>();
    const r = new GrantRegistry();
    r.hold(grant('a', log, gate.promise));
    const closing = r.close();
    expect(r.hold(grant('late', log))).toBe(false); // the caller releases it itself with 'cancelled'
    gate.resolve();
    await closing;
    expect(r.hold(grant('later', log))).toBe(false);
    expect(log).toEqual(['a:cancelled', 'a:done']);
  });

  it('a dropped grant is not released by close(); a second close() awaits the first and releases nothing again', async () => {
    const log: string[] = [];
    const r = new GrantRegistry();
    const a = grant('a', log);
    r.hold(a);
    r.hold(grant('b', log));
    r.drop(a);
    const first = r.close();
    const second = r.close();
    expect(second).toBe(first);
    await second;
    expect(log).toEqual(['b:cancelled', 'b:done']);
  });
});

describe('ReleaseOnce', () => {
  it('runs the release once: a second call returns the first result and runs nothing', async () => {
    const once = new ReleaseOnce();
    let runs = 0;
    const first = once.run(async () => (++runs, 'not-ours'));
    const second = once.run(async () => (++runs, 'released'));
    expect(await first).toBe('not-ours');
    expect(await second).toBe('not-ours');
    expect(runs).toBe(1);
  });

  it("never throws: a release that throws (sync or async) reads as 'unknown'", async () => {
    const sync = new ReleaseOnce();
    const result: ReleaseResult = await sync.run(() => {
      throw new Error('boom');
    });
    expect(result).toBe('unknown');
    const async_ = new ReleaseOnce();
    expect(await async_.run(async () => Promise.reject(new Error('boom')))).toBe('unknown');
  });
});
