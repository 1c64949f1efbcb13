/**
 * Review of the shared store read (Calls.read) and the plain read: edges the read made before any trip
 * must still keep (close(), maxWaitersPerKey) and ioredis client shapes (keyPrefix).
 */
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createCache, type CacheOptions } from '../../src/index.js';
import { deferred, useRedis } from '../support/harness.js';
import { heldPair } from '../support/holding-client.js';

const h = useRedis();
let n = 0;

const warmPair = (options: Partial<CacheOptions> = {}) => heldPair(h.url, `rvs${process.pid}x${++n}`, options);

const settledSoon = async <T>(p: Promise<T>): Promise<PromiseSettledResult<T> | 'pending'> => {
  const out: { r: PromiseSettledResult<T> | 'pending' } = { r: 'pending' };
  p.then(
    (value) => (out.r = { status: 'fulfilled', value }),
    (reason: unknown) => (out.r = { status: 'rejected', reason }),
  );
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
  return out.r;
};

describe('close() and a getOrCompute whose store read is out', () => {
  it('rejects it with CacheClosedError at once, even while close() releases a held lock and the read reply arrives meanwhile', async () => {
    const { a, b, held, done } = await warmPair();
    try {
      await b.set('k', 'v', 60_000);
      // A rebuild in progress: its grant is held, so close() awaits its release before it closes Io.
      const gate = deferred<string>();
      const rebuilding = a.getOrCompute('slow', () => gate.promise, 60_000);
      rebuilding.catch(() => undefined);
      await new Promise((r) => setTimeout(r, 50));
      held.hold();
      const call = a.getOrCompute('k', () => 'loaded', 60_000); // its GETRANGE ran; its reply is held
      await new Promise((r) => setTimeout(r, 30));
      held.holdAll(); // the release close() sends is answered late
      const closing = a.close();
      const early = await settledSoon(call);
      held.release(); // the reply arrives after close() was called
      const result = await Promise.allSettled([call]);
      held.releaseAll();
      await closing;
      gate.resolve('late');
      // docs/failure-behaviour.md: "every call in progress (getOrCompute, ...) rejects with CacheClosedError at once"
      expect({ beforeTheReply: early === 'pending' ? 'pending' : early.status, settled: result[0] }).toMatchObject({ beforeTheReply: 'rejected', settled: { status: 'rejected', reason: { code: 'ERR_CLOSED' } } });
    } finally {
      held.release();
      held.releaseAll();
      await done();
    }
  });
});

describe('maxWaitersPerKey and the shared read', () => {
  it('past maxWaitersPerKey, callers of a warm key whose read is out get ERR_TOO_MANY_WAITERS at once', async () => {
    const { a, b, held, done } = await warmPair({ maxWaitersPerKey: 2 });
    try {
      await b.set('hot', 'v', 60_000);
      held.hold();
      const calls = Array.from({ length: 5 }, () => a.getOrCompute('hot', () => 'loaded', 60_000));
      const before = await Promise.all(calls.map((c) => settledSoon(c)));
      held.release();
      const results = await Promise.allSettled(calls);
      expect(before.filter((r) => r !== 'pending' && r.status === 'rejected')).toHaveLength(3); // at once, before the read answered
      expect(results.filter((r) => r.status === 'rejected' && (r.reason as { code?: string }).code === 'ERR_TOO_MANY_WAITERS')).toHaveLength(3);
    } finally {
      held.release();
      await done();
    }
  });
});

describe('plain reads on a client with keyPrefix', () => {
  it('concurrent plain reads read the prefixed keys', async () => {
    const client = new Redis(h.url, { keyPrefix: 'kp:' });
    const other = new Redis(h.url, { keyPrefix: 'kp:' });
    const prefix = `rvk${process.pid}x${++n}`;
    const a = createCache({ redis: client, prefix });
    const b = createCache({ redis: other, prefix });
    try {
      expect(await a.ready()).toBe(true);
      await b.set('warm', 'w', 60_000);
      expect(await a.getOrCompute('warm', () => 'loaded', 60_000)).toBe('w');
      await b.set('x', 'X', 60_000);
      await b.set('y', 'Y', 60_000);
      let runs = 0;
      const answers = await Promise.all(['x', 'y', 'x'].map((k) => a.getOrCompute(k, () => (runs++, 'loaded'), 60_000)));
      expect(answers).toEqual(['X', 'Y', 'X']);
      expect(runs).toBe(0);
      expect(a.stats()).toMatchObject({ misses: 0, degraded: 0 });
    } finally {
      await a.close();
      await b.close();
      client.disconnect();
      other.disconnect();
    }
  });
});

describe('plain reads and an ACL without +getrange', () => {
  it('concurrent plain reads, refused (NOPERM), fall back to the script: every call answered, nothing degraded', async () => {
    await h.admin.call('ACL', 'SETUSER', 'rvnogetrange', 'on', '>pw', '~*', '&*', '+@all', '-getrange');
    const u = new URL(h.url.replace(/\/\/[^@]*@/, '//'));
    u.username = 'rvnogetrange';
    u.password = 'pw';
    const client = new Redis(u.toString());
    const other = new Redis(h.url);
    const prefix = `rvn${process.pid}x${++n}`;
    const a = createCache({ redis: client, prefix });
    const b = createCache({ redis: other, prefix });
    const degraded: string[] = [];
    a.on('degraded', (e) => degraded.push(e.operation));
    try {
      await b.set('warm', 'w', 60_000);
      expect(await a.getOrCompute('warm', () => 'loaded', 60_000)).toBe('w'); // the script: samples the clock
      await b.set('x', 'X', 60_000);
      await b.set('y', 'Y', 60_000);
      let runs = 0;
      const answers = await Promise.all(['x', 'y', 'warm'].map((k) => a.getOrCompute(k, () => (runs++, 'loaded'), 60_000)));
      expect(answers).toEqual(['X', 'Y', 'w']);
      expect(await Promise.all(['x', 'y'].map((k) => a.getOrCompute(k, () => (runs++, 'loaded'), 60_000)))).toEqual(['X', 'Y']);
      expect({ runs, degraded }).toEqual({ runs: 0, degraded: [] });
    } finally {
      await a.close();
      await b.close();
      client.disconnect();
      other.disconnect();
    }
  });
});
