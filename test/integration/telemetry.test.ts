import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createCache, GET_CHANNEL, GET_OR_COMPUTE_CHANNEL, type Cache, type CacheStats, type GetContext, type GetOrComputeContext } from '../../src/index.js';
import { entryKeys } from '../../src/keys.js';
import { getChannel, getOrComputeChannel } from '../../src/telemetry.js';
import { runsKey } from '../support/counting-loader.js';
import { deferred, heldRebuild, lockTakenOver, nextEvent, untilPttlAtMost, useRedis } from '../support/harness.js';
import { useWorkerFleet } from '../support/workers.js';

const h = useRedis();
const prefixOf = (cache: Cache) => ((cache as unknown as { rt: unknown }).rt as { options: { prefix: string } }).options.prefix;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The counters that moved since `before` (unchanged ones left out, so a test states every counter it expects). */
function moved(after: CacheStats, before: CacheStats): Partial<CacheStats> {
  const out: Partial<CacheStats> = {};
  for (const name of Object.keys(after) as (keyof CacheStats)[]) if (after[name] !== before[name]) out[name] = after[name] - before[name];
  return out;
}

/** A cache on a client whose server is gone: every Redis operation fails at once. */
function unreachableCache(): { cache: Cache; client: Redis } {
  const client = new Redis({ port: 1, lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null });
  client.on('error', () => undefined);
  return { cache: createCache({ redis: client, prefix: 'gone', redisTimeout: 200 }), client };
}

describe('cache.stats()', () => {
  it('starts at zero with exactly the documented names, and is a copy', () => {
    const cache = h.cache();
    const s = cache.stats();
    expect(s).toEqual({ hits: 0, localHits: 0, staleServed: 0, misses: 0, loaderRuns: 0, coalesced: 0, waited: 0, lockLost: 0, writeRejected: 0, degraded: 0, refreshStarted: 0, refreshWon: 0, refreshLost: 0, tagInvalidations: 0 });
    s.hits = 99;
    expect(cache.stats().hits).toBe(0);
  });

  it('a cold stampede of 10 callers in one process: 1 loader run, 9 coalesced, 10 misses; then 4 concurrent Redis hits count 4 hits', async () => {
    const cache = h.cache();
    let runs = 0;
    const loader = async () => (runs++, await sleep(50), 'v');
    const cold = Array.from({ length: 10 }, () => cache.getOrCompute('cold', loader, 60_000));
    expect(await Promise.all(cold)).toEqual(Array(10).fill('v'));
    expect(runs).toBe(1);
    expect(moved(cache.stats(), zero())).toEqual({ misses: 10, loaderRuns: 1, coalesced: 9 });
    const before = cache.stats();
    // Four callers share one flight (one read): each caller is counted.
    expect(await Promise.all(Array.from({ length: 4 }, () => cache.getOrCompute('cold', loader, 60_000)))).toEqual(Array(4).fill('v'));
    expect(moved(cache.stats(), before)).toEqual({ hits: 4 });
  });

  it('L1 hits count in hits and localHits', async () => {
    const cache = h.cache({ local: { max: 10 } });
    expect(await cache.ready()).toBe(true);
    await cache.getOrCompute('l1', () => 'v', 60_000); // computed, fills L1
    const before = cache.stats();
    for (let i = 0; i < 3; i++) expect(await cache.getOrCompute('l1', () => 'x', 60_000)).toBe('v');
    expect(moved(cache.stats(), before)).toEqual({ hits: 3, localHits: 3 });
  });

  it('a stale window: every caller served the stale value counts in staleServed; the one background refresh in loaderRuns', async () => {
    const cache = h.cache();
    await cache.getOrCompute('st', () => 'v1', { ttl: 50, staleTtl: 60_000 });
    await sleep(120);
    const before = cache.stats();
    const refreshed = nextEvent(cache, 'computed');
    const answers = await Promise.all(Array.from({ length: 3 }, () => cache.getOrCompute('st', () => 'v2', { ttl: 60_000, staleTtl: 60_000 })));
    expect(answers).toEqual(['v1', 'v1', 'v1']);
    await refreshed;
    expect(moved(cache.stats(), before)).toEqual({ staleServed: 3, loaderRuns: 1 });
  });

  it("callers answered by another cache's (process's) load count in waited, and the loader in that cache's loaderRuns", async () => {
    const a = h.cache();
    const b = createCache({ redis: h.client(), prefix: prefixOf(a) });
    expect(await b.ready()).toBe(true);
    const held = await heldRebuild<string>(a, 'w');
    const missed = nextEvent(b, 'miss');
    const waiting = Array.from({ length: 3 }, () => b.getOrCompute('w', () => 'b-loaded', { ttl: 60_000, waitTimeout: 30_000 }));
    await missed;
    held.open('a-loaded');
    expect(await held.call).toBe('a-loaded');
    expect(await Promise.all(waiting)).toEqual(['a-loaded', 'a-loaded', 'a-loaded']);
    expect(moved(a.stats(), zero())).toEqual({ misses: 1, loaderRuns: 1 });
    expect(moved(b.stats(), zero())).toEqual({ misses: 3, waited: 3 });
    await b.close();
  });

  it('a caller that missed, then took the lock just after another process wrote, counts in waited (answered by the re-read, no loader)', async () => {
    const client = h.client();
    const a = createCache({ redis: client, prefix: `tk${process.pid}` });
    // b shares a's connection: b's read is sent before a's write and b's acquire after it, so b misses,
    // then wins the lock a's write released, and its re-read finds a's value.
    const b = createCache({ redis: client, prefix: `tk${process.pid}` });
    try {
      const held = await heldRebuild<string>(a, 'tk');
      const bWaits: unknown[] = [];
      b.on('waited', (e) => bWaits.push(e));
      let bRuns = 0;
      held.open('from-a');
      const answer = b.getOrCompute('tk', () => (bRuns++, 'from-b'), 60_000);
      expect([await held.call, await answer]).toEqual(['from-a', 'from-a']);
      expect({ bRuns, bWaits }).toEqual({ bRuns: 0, bWaits: [] }); // it never waited on the lock: the re-read answered
      expect(moved(b.stats(), zero())).toEqual({ misses: 1, waited: 1 });
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('early refreshes count in refreshStarted, then refreshWon (the winner, its loader in loaderRuns) or refreshLost (the other cache)', async () => {
    const a = h.cache();
    const b = createCache({ redis: h.client(), prefix: prefixOf(a) });
    try {
      expect(await b.ready()).toBe(true);
      // The refresh point 500 ms in, 9.5 s of fresh time after it for both hits and the refresh's re-read.
      const options = { ttl: 10_000, refreshAhead: 0.05 };
      const gate = deferred<void>();
      let runs = 0;
      const loader = async () => (++runs > 1 && (await gate.promise), `v${runs}`);
      expect(await a.getOrCompute('ra', loader, options)).toBe('v1');
      await untilPttlAtMost(h.admin, a, 'ra', 9_450);
      const before = [a.stats(), b.stats()] as const;
      const decided = [a, b].map((c) => new Promise<void>((resolve) => c.on('refresh', (e) => e.outcome !== 'started' && resolve())));
      // Both hits are sent before either is awaited: one cache wins the lock, the other loses it.
      expect(await Promise.all([a.getOrCompute('ra', loader, options), b.getOrCompute('ra', loader, options)])).toEqual(['v1', 'v1']);
      await Promise.all(decided);
      const written = new Promise<void>((resolve) => [a, b].forEach((c) => c.on('computed', () => resolve())));
      gate.resolve();
      await written;
      const deltas = [moved(a.stats(), before[0]), moved(b.stats(), before[1])];
      const won = { hits: 1, refreshStarted: 1, refreshWon: 1, loaderRuns: 1 };
      const lost = { hits: 1, refreshStarted: 1, refreshLost: 1 };
      expect([[won, lost], [lost, won]]).toContainEqual(deltas);
    } finally {
      await b.close();
    }
  });

  it('getOrComputeMany counts each key like a call: fresh hits (from L1 in localHits too), misses, and a loader run per key its load answered', async () => {
    const a = h.cache({ local: { max: 10 } });
    expect(await a.ready()).toBe(true);
    const b = h.cache({ prefix: prefixOf(a) });
    const heard = nextEvent(a, 'remoteChange');
    await b.set('inRedis', 'r', 60_000); // not in a's L1
    await heard; // (a read racing the set's note would rightly not fill L1)
    const before = a.stats();
    const loadMany = async (missing: string[]) => new Map(missing.map((k) => [k, `v:${k}`]));
    expect(await a.getOrComputeMany(['inRedis', 'm1', 'm2'], loadMany, 60_000)).toEqual(['r', 'v:m1', 'v:m2']);
    expect(moved(a.stats(), before)).toEqual({ hits: 1, misses: 2, loaderRuns: 2 });
    const again = a.stats();
    // Now all three are in a's L1.
    expect(await a.getOrComputeMany(['inRedis', 'm1', 'm2'], loadMany, 60_000)).toEqual(['r', 'v:m1', 'v:m2']);
    expect(moved(a.stats(), again)).toEqual({ hits: 3, localHits: 3 });
  });

  it('a lost lock counts in lockLost', async () => {
    const cache = h.cache();
    const { call } = await lockTakenOver(cache, 'lost', entryKeys(prefixOf(cache), 'lost').lock, h.admin);
    await expect(call).rejects.toMatchObject({ code: 'ERR_LOCK_LOST' });
    // A rejected call is in no answer counter.
    expect(moved(cache.stats(), zero())).toEqual({ loaderRuns: 1, lockLost: 1 });
  });

  it('a write the fence refuses counts in writeRejected (a rebuild overtaken by a delete)', async () => {
    const cache = h.cache();
    const held = await heldRebuild<string>(cache, 'r');
    await cache.delete('r');
    held.open('old');
    expect(await held.call).toBe('old');
    expect(moved(cache.stats(), zero())).toEqual({ misses: 1, loaderRuns: 1, writeRejected: 1 });
  });

  it('a set() the fence refuses counts in writeRejected (a delete sent right behind it on the same connection)', async () => {
    const cache = h.cache();
    await Promise.all([cache.set('s', 'first', 60_000), cache.delete('s')]);
    expect(moved(cache.stats(), zero())).toEqual({ writeRejected: 1 });
  });

  it('Redis unreachable: every caller answered on the degraded path counts in degraded; one loader, the joiners coalesced', async () => {
    const { cache, client } = unreachableCache();
    try {
      let runs = 0;
      const answers = await Promise.all(Array.from({ length: 3 }, () => cache.getOrCompute('d', async () => (runs++, await sleep(20), 'local'), 60_000)));
      expect(answers).toEqual(['local', 'local', 'local']);
      expect(runs).toBe(1);
      expect(moved(cache.stats(), zero())).toEqual({ loaderRuns: 1, coalesced: 2, degraded: 3 });
    } finally {
      await cache.close();
      client.disconnect();
    }
  });
  it('get/getMany/has on a Redis that fails: a key no degraded copy answers counts in misses; one this process computed degraded counts in degraded and answers it', async () => {
    const { cache, client } = unreachableCache();
    try {
      expect(await cache.getOrCompute('kept', () => 'local', 60_000)).toBe('local');
      const before = cache.stats();
      expect(await cache.get('kept')).toBe('local');
      expect(await cache.get('none')).toBeUndefined();
      expect(await cache.getMany(['kept', 'none'])).toEqual(['local', undefined]);
      expect(await cache.has('none')).toBe(false);
      expect(moved(cache.stats(), before)).toEqual({ degraded: 2, misses: 3 });
    } finally {
      await cache.close();
      client.disconnect();
    }
  });
});

describe(`diagnostics_channel TracingChannel "${GET_CHANNEL}"`, () => {
  type Seen = { phase: string; ctx: Omit<GetContext, 'result' | 'error'> };
  const trace = async (run: () => Promise<unknown>): Promise<Seen[]> => {
    const seen: Seen[] = [];
    const record = (phase: string) => (ctx: GetContext) => {
      const { result: _r, error: _e, ...rest } = ctx;
      seen.push({ phase, ctx: structuredClone(rest) });
    };
    const handlers = { start: record('start'), end: record('end'), asyncStart: record('asyncStart'), asyncEnd: record('asyncEnd'), error: record('error') };
    getChannel.subscribe(handlers);
    try {
      await run();
    } finally {
      getChannel.unsubscribe(handlers);
    }
    return seen.filter((s) => s.phase === 'start' || s.phase === 'asyncEnd');
  };

  it("get, has and getMany are traced with each key's outcome: localHit, hit, miss (namespaced keys as the caller gave them)", async () => {
    const cache = h.cache({ local: { max: 10 } });
    expect(await cache.ready()).toBe(true);
    await cache.set('a', 1, 60_000);
    const other = createCache({ redis: h.client(), prefix: prefixOf(cache) });
    try {
      expect(await trace(() => cache.get('a'))).toEqual([
        { phase: 'start', ctx: { key: 'a', operation: 'get' } },
        { phase: 'asyncEnd', ctx: { key: 'a', operation: 'get', outcome: 'localHit' } },
      ]);
      expect((await trace(() => other.has('a'))).at(-1)).toEqual({ phase: 'asyncEnd', ctx: { key: 'a', operation: 'get', outcome: 'hit' } });
      expect((await trace(() => other.getMany(['a', 'b']))).at(-1)).toEqual({ phase: 'asyncEnd', ctx: { key: undefined, keys: ['a', 'b'], operation: 'getMany', outcomes: ['hit', 'miss'] } });
      const users = other.namespace('users');
      expect((await trace(() => users.get('x'))).at(-1)).toEqual({ phase: 'asyncEnd', ctx: { key: 'x', namespace: 'users', operation: 'get', outcome: 'miss' } });
    } finally {
      await other.close();
    }
  });
});

function zero(): CacheStats {
  return { hits: 0, localHits: 0, staleServed: 0, misses: 0, loaderRuns: 0, coalesced: 0, waited: 0, lockLost: 0, writeRejected: 0, degraded: 0, refreshStarted: 0, refreshWon: 0, refreshLost: 0, tagInvalidations: 0 };
}

describe(`diagnostics_channel TracingChannel "${GET_OR_COMPUTE_CHANNEL}"`, () => {
  type Seen = { phase: string; key: string; lock: string | undefined; outcome: string | undefined; error?: unknown };
  const seen: Seen[] = [];
  const record = (phase: string) => (ctx: GetOrComputeContext) => seen.push({ phase, key: ctx.key, lock: ctx.lock, outcome: ctx.outcome, ...(phase === 'error' ? { error: ctx.error } : {}) });
  const handlers = { start: record('start'), end: record('end'), asyncStart: record('asyncStart'), asyncEnd: record('asyncEnd'), error: record('error') };
  const trace = async (run: () => Promise<unknown>): Promise<Seen[]> => {
    seen.length = 0;
    getOrComputeChannel.subscribe(handlers);
    try {
      await run().catch(() => undefined);
    } finally {
      getOrComputeChannel.unsubscribe(handlers);
    }
    return seen.filter((s) => s.phase !== 'end'); // `end` is the synchronous part returning the promise
  };
  const finished = (key: string, lock: string, outcome: string): Seen[] => [
    { phase: 'start', key, lock: undefined, outcome: undefined },
    { phase: 'asyncStart', key, lock, outcome },
    { phase: 'asyncEnd', key, lock, outcome },
  ];

  it('each path ends with its outcome: computed, coalesced, hit, localHit, stale, waited, degraded', async () => {
    const cache = h.cache({ local: { max: 10 } });
    expect(await cache.ready()).toBe(true);
    expect(await trace(() => cache.getOrCompute('c', () => 'v', 60_000))).toEqual(finished('c', 'single', 'computed'));

    const slow = async () => (await sleep(30), 'v');
    const joined = await trace(() => Promise.all([cache.getOrCompute('j', slow, 60_000), cache.getOrCompute('j', slow, 60_000)]));
    expect(joined.filter((s) => s.phase === 'asyncEnd').map((s) => s.outcome).sort()).toEqual(['coalesced', 'computed']);

    expect(await trace(() => cache.getOrCompute('c', () => 'x', 60_000))).toEqual(finished('c', 'single', 'localHit'));
    const other = createCache({ redis: h.client(), prefix: prefixOf(cache) });
    expect(await trace(() => other.getOrCompute('c', () => 'x', { ttl: 60_000, lock: 'local' }))).toEqual(finished('c', 'local', 'hit'));

    await other.getOrCompute('s', () => 'v1', { ttl: 50, staleTtl: 60_000 });
    await sleep(120);
    expect(await trace(() => other.getOrCompute('s', () => 'v2', { ttl: 50, staleTtl: 60_000 }))).toEqual(finished('s', 'single', 'stale'));

    const held = await heldRebuild<string>(cache, 'w');
    const missed = nextEvent(other, 'miss');
    const traced = trace(() => other.getOrCompute('w', () => 'b', { ttl: 60_000, waitTimeout: 30_000 }));
    await missed;
    held.open('a');
    await held.call;
    expect(await traced).toEqual(finished('w', 'single', 'waited'));
    await other.close();

    const { cache: gone, client } = unreachableCache();
    try {
      expect(await trace(() => gone.getOrCompute('d', () => 'local', { ttl: 60_000, lock: 'none' }))).toEqual(finished('d', 'none', 'degraded'));
    } finally {
      await gone.close();
      client.disconnect();
    }
  });

  it('a rejected call publishes start and error (with the error, no outcome); invalid options too', async () => {
    const cache = h.cache();
    const boom = new Error('boom');
    const events = await trace(() => cache.getOrCompute('e', () => Promise.reject(boom), 60_000));
    expect(events.map((e) => e.phase)).toEqual(['start', 'error', 'asyncStart', 'asyncEnd']);
    expect(events[1]).toEqual({ phase: 'error', key: 'e', lock: 'single', outcome: undefined, error: boom });
    const invalid = await trace(() => cache.getOrCompute('e', () => 'v', -1));
    expect(invalid[1]).toMatchObject({ phase: 'error', key: 'e', lock: undefined, error: { code: 'ERR_INVALID_OPTION' } });
  });

  it('a subscriber to one sub-channel alone (diagnostics_channel.subscribe) receives it', async () => {
    const cache = h.cache();
    const ends: GetOrComputeContext[] = [];
    const onEnd = (ctx: unknown) => ends.push(ctx as GetOrComputeContext);
    subscribe(`tracing:${GET_OR_COMPUTE_CHANNEL}:asyncEnd`, onEnd);
    try {
      await cache.getOrCompute('one', () => 'v', 60_000);
    } finally {
      unsubscribe(`tracing:${GET_OR_COMPUTE_CHANNEL}:asyncEnd`, onEnd);
    }
    expect(ends).toMatchObject([{ key: 'one', lock: 'single', outcome: 'computed', result: 'v' }]);
  });

  it('with nobody subscribed, a call builds no context and publishes nothing (tracePromise is never entered)', async () => {
    const cache = h.cache();
    // An own property over the prototype's method, deleted afterwards: the real channel still does the work.
    const original = getOrComputeChannel.tracePromise.bind(getOrComputeChannel);
    let entered = 0;
    getOrComputeChannel.tracePromise = ((...args: Parameters<typeof original>) => {
      entered++;
      return original(...args);
    }) as typeof original;
    try {
      await trace(async () => undefined); // subscribe then unsubscribe: back to nobody
      expect(getOrComputeChannel.start.hasSubscribers).toBe(false);
      await cache.getOrCompute('quiet', () => 'v', 60_000);
      await cache.getOrCompute('quiet', () => 'v', 60_000);
      expect(entered).toBe(0);
      await trace(() => cache.getOrCompute('quiet', () => 'v', 60_000));
      expect(entered).toBe(1); // the probe itself works
    } finally {
      delete (getOrComputeChannel as { tracePromise?: unknown }).tracePromise;
    }
  });
});

describe('a cold stampede across 4 processes × 25 callers', () => {
  const PROCESSES = 4;
  const CALLERS = 25;
  const fleet = useWorkerFleet(PROCESSES);

  it('loaderRuns sums to 1 and coalesced + waited to N·P − 1 (every other caller was a rebuild saved); every caller missed', async () => {
    const { workers, admin } = fleet;
    const key = `stats:cold:${process.pid}`;
    // Every worker starts all of its callers before the parent awaits any result.
    const ids = workers.map((w) => w.call(key, CALLERS, { ttl: 60_000, lock: 'single', waitTimeout: 30_000 }, { kind: 'sleep', ms: 500 }));
    const results = (await Promise.all(workers.map((w, i) => w.results(ids[i] as number)))).flat();
    expect(results.every((r) => r.ok)).toBe(true);
    expect(Number(await admin.get(runsKey(key)))).toBe(1);
    const stats = await Promise.all(workers.map((w) => w.stats()));
    const sum = (name: keyof CacheStats) => stats.reduce((n, s) => n + s[name], 0);
    expect({ loaderRuns: sum('loaderRuns'), saved: sum('coalesced') + sum('waited'), misses: sum('misses'), hits: sum('hits') }).toEqual({
      loaderRuns: 1,
      saved: PROCESSES * CALLERS - 1,
      misses: PROCESSES * CALLERS,
      hits: 0,
    });
    // The process that ran the loader coalesced its other callers; the others waited.
    const winner = stats.find((s) => s.loaderRuns === 1) as CacheStats;
    expect(winner).toMatchObject({ coalesced: CALLERS - 1, waited: 0 });
    for (const s of stats.filter((x) => x !== winner)) expect(s).toMatchObject({ coalesced: 0, waited: CALLERS });
    console.log('stats of a cold stampede, per process:', JSON.stringify(stats));
  });
});
