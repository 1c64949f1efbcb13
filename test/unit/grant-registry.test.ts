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

  it('hold() refuses once close() began; a grant held while close() awaits releases is released by close() before it resolves', async () => {
    const log: string[] = [];
    const first = deferred<void>();
    const late = deferred<void>();
    const r = new GrantRegistry();
    r.hold(grant('a', log, first.promise));
    let closed = false;
    const closing = r.close().then(() => (closed = true));
    const lateGrant = grant('late', log, late.promise);
    expect(r.hold(lateGrant)).toBe(false); // the caller starts no loader and releases it itself
    first.resolve();
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(log).toEqual(['a:cancelled', 'a:done', 'late:cancelled']); // close() took it in its next round
    expect(closed).toBe(false); // and waits for that release too
    const callers = lateGrant.release('cancelled'); // the caller's release is the same one: nothing runs twice
    late.resolve();
    await Promise.all([closing, callers]);
    expect(log).toEqual(['a:cancelled', 'a:done', 'late:cancelled', 'late:done']);
    expect(r.hold(grant('after', log))).toBe(false);
    expect(r.size).toBe(0); // a grant refused after close() is not kept: its caller releases it
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
