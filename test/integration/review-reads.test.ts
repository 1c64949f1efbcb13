/**
 * Review of 1ff6bc7 (the shared read as a map; close() stopping reads through Io.stopReads): probes
 * across entry points for close() while a read is out, and the shared-read map's cleanup.
 */
import { describe, expect, it } from 'vitest';
import type { CacheOptions } from '../../src/index.js';
import { useRedis } from '../support/harness.js';
import { heldPair } from '../support/holding-client.js';

const h = useRedis();
let n = 0;

const warmPair = (options: Partial<CacheOptions> = {}) => heldPair(h.url, `rvr${process.pid}x${++n}`, options);

const settledSoon = async <T>(p: Promise<T>): Promise<PromiseSettledResult<T> | 'pending'> => {
  const out: { r: PromiseSettledResult<T> | 'pending' } = { r: 'pending' };
  p.then(
    (value) => (out.r = { status: 'fulfilled', value }),
    (reason: unknown) => (out.r = { status: 'rejected', reason }),
  );
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
  return out.r;
};

/** The shared reads out (Calls.reads, private): white-box, for the leak checks. */
const readsOf = (cache: unknown): Map<string, unknown> => (cache as { rt: { calls: { reads: Map<string, unknown> } } }).rt.calls.reads;

const status = (r: PromiseSettledResult<unknown> | 'pending') => (r === 'pending' ? 'pending' : r.status === 'rejected' ? (r.reason as { code?: string }).code : 'fulfilled');

describe('close() while a read of each entry point is out', () => {
  it('get(), getMany(), getOrComputeMany() and a namespaced getOrCompute reject with ERR_CLOSED at once; no loader, no degraded event', async () => {
    const { a, b, held, done } = await warmPair();
    const degraded: unknown[] = [];
    a.on('degraded', (e) => degraded.push(e));
    let loads = 0;
    try {
      await b.set('k', 'v', 60_000);
      await b.set('m', 'v', 60_000);
      const ns = a.namespace('nsr');
      await ns.getOrCompute('warm', () => 'x', 60_000); // the generation is known now
      held.hold();
      const get = a.get('k');
      const many = a.getMany(['k', 'm']);
      const com = a.getOrComputeMany(['k', 'm'], (keys) => (loads++, new Map(keys.map((key) => [key, 'loaded'] as const))), 60_000);
      const one = a.getOrCompute('k', () => (loads++, 'loaded'), 60_000);
      const nsCall = ns.getOrCompute('k', () => (loads++, 'loaded'), 60_000);
      await new Promise((r) => setTimeout(r, 30));
      const closing = a.close();
      const early = await Promise.all([get, many, com, one, nsCall].map((p) => settledSoon<unknown>(p)));
      held.release();
      await closing;
      await new Promise((r) => setTimeout(r, 30));
      expect({ early: early.map(status), loads, degraded: degraded.length }).toEqual({ early: ['ERR_CLOSED', 'ERR_CLOSED', 'ERR_CLOSED', 'ERR_CLOSED', 'ERR_CLOSED'], loads: 0, degraded: 0 });
    } finally {
      held.release();
      await done();
    }
  });

  it('a namespaced getOrCompute whose generation read is out rejects with ERR_CLOSED at once and runs no loader (no degraded path)', async () => {
    const { a, held, done } = await warmPair();
    const degraded: unknown[] = [];
    a.on('degraded', (e) => degraded.push(e));
    let loads = 0;
    try {
      const ns = a.namespace('fresh-ns');
      held.holdNext('evalsha');
      const call = ns.getOrCompute('k', () => (loads++, 'loaded'), 60_000);
      await new Promise((r) => setTimeout(r, 30));
      const closing = a.close();
      const early = await settledSoon(call);
      held.release();
      await closing;
      await new Promise((r) => setTimeout(r, 30));
      expect({ early: status(early), loads, degraded: degraded.length }).toEqual({ early: 'ERR_CLOSED', loads: 0, degraded: 0 });
    } finally {
      held.release();
      await done();
    }
  });
});

describe('the shared-read map', () => {
  it('is empty once every call settled: shared, detached by a delete, and a new read after it', async () => {
    const { a, b, held, done } = await warmPair();
    try {
      await b.set('k', 'v', 60_000);
      held.hold();
      const first = [a.getOrCompute('k', () => 'loaded', 60_000), a.getOrCompute('k', () => 'loaded', 60_000)];
      await new Promise((r) => setTimeout(r, 20));
      await b.set('k', 'v2', 60_000); // a note: the read out is detached
      await new Promise((r) => setTimeout(r, 50));
      const during = readsOf(a).size;
      const after = [a.getOrCompute('k', () => 'loaded', 60_000), a.getOrCompute('k', () => 'loaded', 60_000)];
      const sizeWithNew = readsOf(a).size;
      held.release();
      const values = await Promise.all([...first, ...after]);
      expect({ during, sizeWithNew, values: values.slice(2), left: readsOf(a).size }).toEqual({ during: 0, sizeWithNew: 1, values: ['v2', 'v2'], left: 0 });
    } finally {
      held.release();
      await done();
    }
  });

  it('is empty after a read failed (Redis error) and after close()', async () => {
    const { a, b, held, done } = await warmPair({ redisTimeout: 100 });
    try {
      await b.set('k', 'v', 60_000);
      held.hold();
      const calls = [a.getOrCompute('k', () => 'loaded', 60_000), a.getOrCompute('k', () => 'loaded', 60_000)];
      await new Promise((r) => setTimeout(r, 250)); // the read times out
      const results = await Promise.allSettled(calls);
      const afterTimeout = readsOf(a).size;
      const c = a.getOrCompute('k2', () => 'loaded', 60_000);
      await new Promise((r) => setTimeout(r, 10));
      const closing = a.close();
      await Promise.allSettled([c]);
      held.release();
      await closing;
      expect({ statuses: results.map((r) => r.status), afterTimeout, afterClose: readsOf(a).size }).toEqual({ statuses: ['fulfilled', 'fulfilled'], afterTimeout: 0, afterClose: 0 });
    } finally {
      held.release();
      await done();
    }
  });
});

describe('close() between a shared read answering and its callers being answered', () => {
  it('a getOrCompute whose read answered but is not yet answered itself rejects with ERR_CLOSED when close() begins (as on c45b5be, and as a flight settles)', async () => {
    const { a, b, done } = await warmPair();
    try {
      await b.set('k', 'v', 60_000);
      let closing: Promise<void> | undefined;
      // 'hit' is emitted synchronously as the read's answer is taken in, before the call is answered.
      a.on('hit', (e) => {
        if (e.key === 'k' && closing === undefined) closing = a.close();
      });
      const calls = [a.getOrCompute('k', () => 'loaded', 60_000), a.getOrCompute('k', () => 'loaded', 60_000)];
      const results = await Promise.allSettled(calls);
      await closing;
      expect({ closed: closing !== undefined, results: results.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as { code?: string }).code)) }).toEqual({ closed: true, results: ['ERR_CLOSED', 'ERR_CLOSED'] });
    } finally {
      await done();
    }
  });
});

describe('close() while an early refresh started by a shared read re-reads under its grant', () => {
  it('runs no loader, reports no refreshError or loaderError, and the lock is free for another process at once', async () => {
    const { a, b, held, done } = await warmPair();
    const events: string[] = [];
    for (const name of ['refreshError', 'loaderError', 'degraded', 'computed'] as const) a.on(name, () => events.push(name));
    let loads = 0;
    try {
      await b.set('k', 'v', 1000);
      await new Promise((r) => setTimeout(r, 100)); // past the refresh point of refreshAhead 0.05
      const hit = a.getOrCompute('k', () => (loads++, 'refreshed'), { ttl: 1000, refreshAhead: 0.05 });
      expect(await hit).toBe('v');
      held.holdNext('getrange'); // the refresh's re-read under its grant (its acquire is out now)
      await new Promise((r) => setTimeout(r, 50));
      const holding = held.holding();
      await a.close();
      held.release();
      await new Promise((r) => setTimeout(r, 50));
      // Another process takes the lock at once (released by close()), so it loads now.
      const other = await b.getOrCompute('k', () => 'b-loaded', { ttl: 1000, forceFresh: true, waitTimeout: 200 });
      expect({ holding, loads, events, other }).toEqual({ holding: true, loads: 0, events: [], other: 'b-loaded' });
    } finally {
      held.release();
      await done();
    }
  });
});

describe('changes that detach a read out', () => {
  it('another process\'s clear() and expireByTag each leave no read out to join', async () => {
    const { a, b, held, done } = await warmPair();
    try {
      await b.set('k', 'v', 60_000);
      held.hold();
      const detached: number[] = [];
      const calls: Promise<unknown>[] = [];
      for (const change of [() => b.clear(), () => b.expireByTag('t')]) {
        calls.push(a.getOrCompute('k', () => 'loaded', 60_000));
        const before = readsOf(a).get('k');
        await change();
        await new Promise((r) => setTimeout(r, 50));
        detached.push(before !== undefined && readsOf(a).get('k') !== before ? 1 : 0);
      }
      held.release();
      await Promise.allSettled(calls);
      expect({ detached, left: readsOf(a).size }).toEqual({ detached: [1, 1], left: 0 });
    } finally {
      held.release();
      await done();
    }
  });
});

describe('close() from a health listener while a shared read is timing out', () => {
  it('its callers reject with ERR_CLOSED and no degraded event is reported (the read is abandoned by stopReads, not failed)', async () => {
    const { a, b, held, done } = await warmPair({ redisTimeout: 100, breakerThreshold: 1 });
    const events: string[] = [];
    let closing: Promise<void> | undefined;
    try {
      await b.set('k', 'v', 60_000);
      // The node's health changes as the read goes unanswered: close() from there.
      a.on('health', () => {
        closing ??= a.close();
      });
      a.on('degraded', () => events.push(closing === undefined ? 'degraded' : 'degraded after close()'));
      held.hold();
      const calls = [a.getOrCompute('k', () => 'loaded', 60_000), a.getOrCompute('k', () => 'loaded', 60_000)];
      const results = await Promise.allSettled(calls);
      held.release();
      await closing;
      await new Promise((r) => setTimeout(r, 20));
      expect({ closed: closing !== undefined, results: results.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as { code?: string }).code)), events }).toEqual({ closed: true, results: ['ERR_CLOSED', 'ERR_CLOSED'], events: [] });
    } finally {
      held.release();
      await done();
    }
  });
});
