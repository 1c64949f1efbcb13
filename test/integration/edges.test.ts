/**
 * The edges of one call's protocol (issue 8): aborted callers, cancelled loads, grant ownership when
 * user code throws, close() racing acquisitions, unstorable values. Real Redis throughout.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { getEventListeners } from 'node:events';
import { Redis } from 'ioredis';
import { createCache, GET_OR_COMPUTE_CHANNEL, type Cache, type CallOptions, type GetOrComputeContext, type LoaderContext } from '../../src/index.js';
import { entryKeys } from '../../src/keys.js';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { familyClient, useFamilyServer } from '../support/clients.js';
import { ageEntry, countCommands, deferred, heldRebuild, missedCall, nextEvent, refreshOutcomes, untilPttlAtMost, useRedis, keysOf, prefixOf } from '../support/harness.js';

const h = useRedis();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Collects unhandled rejections while `fn` runs and for a few event-loop turns after it. */
async function unhandledDuring(fn: () => Promise<void>): Promise<unknown[]> {
  const seen: unknown[] = [];
  const onUnhandled = (reason: unknown) => seen.push(reason);
  process.on('unhandledRejection', onUnhandled);
  try {
    await fn();
    await sleep(100);
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
  return seen;
}

describe('aborted callers', () => {
  it('an already-aborted signal rejects with ERR_ABORTED, runs no loader and leaves no unhandled rejection', async () => {
    const cache = h.cache();
    let runs = 0;
    const unhandled = await unhandledDuring(async () => {
      const calls = Array.from({ length: 20 }, (_, i) =>
        cache.getOrCompute(`cold${i % 4}`, () => (runs++, 'v'), { ttl: 60_000, signal: AbortSignal.abort(new Error('client left')), lock: i % 2 ? 'none' : 'single' }),
      );
      const results = await Promise.allSettled(calls);
      expect(results.every((r) => r.status === 'rejected' && (r.reason as { code?: string }).code === 'ERR_ABORTED')).toBe(true);
    });
    expect(unhandled).toEqual([]);
    expect(runs).toBe(0);
  });

  it('a flight whose only callers aborted is not joinable: the next caller gets its own rebuild', async () => {
    const cache = h.cache();
    const first = deferred<string>();
    let runs = 0;
    const ac = new AbortController();
    const started = deferred<void>();
    const abandoned = cache.getOrCompute('j', async (ctx) => {
      runs++;
      started.resolve();
      // Honours its signal: rejects once every caller left.
      return new Promise<string>((resolve, reject) => {
        ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason as Error), { once: true });
        void first.promise.then(resolve);
      });
    }, { ttl: 60_000, signal: ac.signal, lock: 'local' });
    await started.promise; // the flight is running its loader: it would be joinable but for the abort
    ac.abort();
    await expect(abandoned).rejects.toMatchObject({ code: 'ERR_ABORTED' });
    const later = await cache.getOrCompute('j', () => (runs++, 'fresh'), { ttl: 60_000, lock: 'local' });
    expect(later).toBe('fresh');
    expect(runs).toBe(2);
    first.resolve('too late');
  });
});

describe('cancellation is not a failure', () => {
  it('a loader that stops on ctx.signal after its callers aborted emits no loaderError and sets no failBackoff', async () => {
    const cache = h.cache({ defaults: { failBackoff: 60_000 } });
    const errors: unknown[] = [];
    cache.on('loaderError', (e) => errors.push(e.error));
    const ac = new AbortController();
    const started = deferred<void>();
    const call = cache.getOrCompute('c', (ctx) => {
      started.resolve();
      return new Promise<string>((_, reject) => ctx.signal.addEventListener('abort', () => reject(new Error('cancelled by signal')), { once: true }));
    }, { ttl: 60_000, signal: ac.signal });
    await started.promise;
    ac.abort();
    await expect(call).rejects.toMatchObject({ code: 'ERR_ABORTED' });
    await sleep(50); // let the rebuild finish its release
    expect(errors).toEqual([]);
    expect(await h.admin.exists(keysOf(cache, 'c').backoff)).toBe(0);
    // The next caller is not refused with ERR_BACKOFF: the origin never failed.
    expect(await cache.getOrCompute('c', () => 'next', 60_000)).toBe('next');
  });

  it('a loader failure still sets the fleet-wide backoff (the control for the test above)', async () => {
    const cache = h.cache({ defaults: { failBackoff: 60_000 } });
    await expect(cache.getOrCompute('f', () => Promise.reject(new Error('origin down')), 60_000)).rejects.toThrow('origin down');
    expect(await h.admin.exists(keysOf(cache, 'f').backoff)).toBe(1);
  });
});

describe('grant ownership', () => {
  it('listeners that throw never leak a grant: the lock is gone after the call, and the call settles', async () => {
    const a = h.cache();
    const b = createCache({ redis: h.client(), prefix: prefixOf(a), defaults: { pollInterval: 20 } });
    for (const c of [a, b]) for (const name of ['miss', 'waited', 'hit', 'computed'] as const) c.on(name, () => { throw new Error(`listener of ${name}`); });
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.message);
    process.on('warning', onWarning);
    try {
      // lockTtl 60 s: a leaked grant keeps the lock past the wait below, whether its watchdog still
      // extends it or not (and a stall while a holds it cannot lapse it and let b rebuild).
      const held = await heldRebuild<string>(a, 'l', { ttl: 60_000, lockTtl: 60_000 });
      const waiting = await missedCall(b, 'l', () => 'from-b', { ttl: 60_000, lockTtl: 60_000 });
      held.open('from-a');
      expect(await held.call).toBe('from-a');
      expect(await waiting.call).toBe('from-a');
      await vi.waitFor(async () => expect(await h.admin.exists(keysOf(a, 'l').lock)).toBe(0), { timeout: 5000 });
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings.some((m) => m.includes('listener'))).toBe(true);
    await b.close();
  });

  it('close() while an acquisition is in flight: no loader starts and the lock it was granted is released', async () => {
    const client = h.client();
    const cache = createCache({ redis: client, prefix: `close${process.pid}` });
    await cache.ready();
    let runs = 0;
    // Close the cache the moment the acquire script is on the wire (a real command to a real server).
    const original = client.sendCommand.bind(client);
    let closing: Promise<void> | undefined;
    client.sendCommand = (cmd, ...rest) => {
      const sent = original(cmd, ...rest);
      if (!closing && /^evalsha$|^eval$/i.test(cmd.name) && String(cmd.args[2]).includes(':l:')) closing = cache.close();
      return sent;
    };
    await expect(cache.getOrCompute('k', () => (runs++, 'v'), 60_000)).rejects.toMatchObject({ code: 'ERR_CLOSED' });
    await closing;
    expect(closing).toBeDefined();
    expect(runs).toBe(0);
    expect(await h.admin.exists(entryKeys(`close${process.pid}`, 'k').lock)).toBe(0);
  });
});

describe('signals', () => {
  // The retained-heap figure over 1,000,000 loader runs is measured in the benchmarks (npm run bench:heap);
  // this asserts the mechanism: each run's combined signal detaches from the long-lived lifetime signal.
  it('every loader run detaches its signal from the cache lifetime signal (nothing accumulates per run)', async () => {
    const cache = h.cache({ defaults: { hardTimeout: 60_000 } });
    const lifetime = ((cache as unknown as { rt: unknown }).rt as { lifetime: AbortController }).lifetime.signal;
    const fixed = getEventListeners(lifetime, 'abort').length; // the cache's own, one per coalescer
    for (let i = 0; i < 50; i++) await cache.getOrCompute(`s${i}`, () => i, 60_000);
    await expect(cache.getOrCompute('s-fail', () => Promise.reject(new Error('x')), 60_000)).rejects.toThrow('x');
    expect(getEventListeners(lifetime, 'abort')).toHaveLength(fixed);
  });
});

describe('unstorable values', () => {
  it('a loader value that can never be read back goes to its callers, nothing is written, and an unstorable event names why', async () => {
    const cache = h.cache();
    const fn = () => 'i am a function';
    const unstorable = nextEvent(cache, 'unstorable');
    const degraded: unknown[] = [];
    cache.on('degraded', (e) => degraded.push(e));
    const got = await cache.getOrCompute('fn', () => ({ fn }), 60_000);
    expect(got.fn).toBe(fn);
    expect((await unstorable).reason).toMatch(/function/);
    expect(await h.admin.exists(keysOf(cache, 'fn').value)).toBe(0);
    expect(await h.admin.exists(keysOf(cache, 'fn').lock)).toBe(0);
    expect(degraded).toEqual([]);
  });

  it('waiters in another process are told the value is unstorable instead of rebuilding in turn', async () => {
    const a = h.cache();
    const b = createCache({ redis: h.client(), prefix: prefixOf(a), defaults: { pollInterval: 3_600_000, waitTimeout: 3_600_000 } });
    await Promise.all([a.ready(), b.ready()]);
    const held = await heldRebuild<unknown>(a, 'u');
    let bRuns = 0;
    const waiting = await missedCall(b, 'u', () => (bRuns++, 'from-b'));
    held.open(Symbol('not storable'));
    await held.call;
    await expect(waiting.call).rejects.toMatchObject({ code: 'ERR_UNSTORABLE_VALUE', key: 'u' });
    expect(bRuns).toBe(0);
    await b.close();
  });

  it('set() of an unstorable value rejects with ERR_UNSTORABLE_VALUE and writes nothing', async () => {
    const cache = h.cache();
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    for (const value of [() => 1, /re/, cyclic, 'x'.repeat(2 * 1024 * 1024)]) {
      await expect(cache.set('bad', value, 60_000)).rejects.toMatchObject({ code: 'ERR_UNSTORABLE_VALUE' });
    }
    expect(await h.admin.exists(keysOf(cache, 'bad').value)).toBe(0);
  });
});

// ---------------------------------------------------------------- a batch key is a call like any other

/** Settles-or-not of `p`, readable synchronously after the turn it settled in. */
function track<T>(p: Promise<T>): { state: 'pending' | 'fulfilled' | 'rejected'; value?: T; error?: unknown } {
  const t: { state: 'pending' | 'fulfilled' | 'rejected'; value?: T; error?: unknown } = { state: 'pending' };
  p.then((v) => Object.assign(t, { state: 'fulfilled', value: v }), (e: unknown) => Object.assign(t, { state: 'rejected', error: e }));
  return t;
}

/** A loadMany that rejects once its signal aborts (an origin client that honours it), after `started` resolved. */
function honouring(started: { resolve: () => void }) {
  let calls = 0;
  const loadMany = (_missing: string[], ctx: { signal: AbortSignal }) => {
    calls++;
    started.resolve();
    return new Promise<Map<string, string>>((_, reject) => ctx.signal.addEventListener('abort', () => reject(new Error('origin call cancelled')), { once: true }));
  };
  return { loadMany, get calls() { return calls; } };
}

describe('getOrComputeMany keys are calls: the single-key edges hold per key', () => {
  it('a batch whose caller aborts while loadMany runs is a cancellation: no loaderError, no failBackoff, the next call is not backed off', async () => {
    const cache = h.cache({ defaults: { failBackoff: 60_000 } });
    const errors: unknown[] = [];
    cache.on('loaderError', (e) => errors.push(e.error));
    const started = deferred<void>();
    const origin = honouring(started);
    const ac = new AbortController();
    const batch = cache.getOrComputeMany(['a1', 'a2'], origin.loadMany, { ttl: 60_000, signal: ac.signal });
    await started.promise;
    ac.abort(new Error('client left'));
    await expect(batch).rejects.toMatchObject({ code: 'ERR_ABORTED' });
    await vi.waitFor(async () => expect(await h.admin.exists(keysOf(cache, 'a1').lock, keysOf(cache, 'a2').lock)).toBe(0));
    expect(errors).toEqual([]);
    expect(await h.admin.exists(keysOf(cache, 'a1').backoff, keysOf(cache, 'a2').backoff)).toBe(0);
    expect(await cache.getOrCompute('a1', () => 'next', 60_000)).toBe('next');
  });

  it('an already-aborted batch rejects with ERR_ABORTED before any Redis traffic: no loadMany, no lock, fence or backoff', async () => {
    const client = h.cacheClient();
    const cache = createCache({ redis: client, prefix: `aborted${process.pid}`, defaults: { failBackoff: 60_000 } });
    await client.ping();
    const sent = countCommands(client);
    let calls = 0;
    await expect(cache.getOrComputeMany(['b1', 'b2', 'b3'], () => (calls++, new Map()), { ttl: 60_000, signal: AbortSignal.abort() })).rejects.toMatchObject({ code: 'ERR_ABORTED' });
    expect(sent.count).toBe(0);
    expect(calls).toBe(0);
    const k = (key: string) => entryKeys(`aborted${process.pid}`, key);
    expect(await h.admin.exists(...['b1', 'b2', 'b3'].flatMap((key) => [k(key).lock, k(key).fence, k(key).backoff]))).toBe(0);
    await cache.close();
  });

  it('close() settles a batch whose loadMany ignores its signal: it rejects ERR_CLOSED, never pending', async () => {
    const cache = createCache({ redis: h.cacheClient(), prefix: `closebatch${process.pid}` });
    const started = deferred<void>();
    const batch = track(cache.getOrComputeMany(['c1', 'c2'], () => (started.resolve(), new Promise<Map<string, string>>(() => undefined)), 60_000));
    await started.promise;
    await cache.close();
    await new Promise((r) => setImmediate(r));
    expect(batch.state).toBe('rejected');
    expect(batch.error).toMatchObject({ code: 'ERR_CLOSED' });
  });

  it("one load per key per process under lock 'local': two concurrent batches and a getOrCompute of one cold key load it once", async () => {
    const cache = h.cache({ defaults: { lock: 'local' } });
    const gate = deferred<void>();
    let loads = 0;
    const loadMany = async (missing: string[]) => {
      loads += missing.length;
      await gate.promise;
      return new Map(missing.map((k) => [k, `v:${k}`]));
    };
    const calls = [
      cache.getOrComputeMany(['cold'], loadMany, 60_000),
      cache.getOrComputeMany(['cold'], loadMany, 60_000),
      cache.getOrCompute('cold', async () => (loads++, await gate.promise, 'v:cold'), 60_000),
    ];
    await vi.waitFor(() => expect(loads).toBeGreaterThan(0));
    gate.resolve();
    const got = await Promise.all(calls);
    expect(got).toEqual([['v:cold'], ['v:cold'], 'v:cold']);
    expect(loads).toBe(1);
    expect(cache.stats()).toMatchObject({ loaderRuns: 1, coalesced: 2, misses: 3 });
  });

  it("stats: a batch key that finds another process's write on its re-read under the grant counts as waited", async () => {
    const a = h.cache();
    const b = createCache({ redis: h.cacheClient(), prefix: prefixOf(a) });
    // b writes the key after a's read and before a's lock: a wins the lock and its re-read finds b's value.
    const single = ((a as unknown as { rt: unknown }).rt as { lockers: { single: { acquireMany: (...args: unknown[]) => Promise<unknown> } } }).lockers.single;
    const acquireMany = single.acquireMany.bind(single);
    single.acquireMany = async (...args: unknown[]) => {
      await b.set('w', 'from b', 60_000);
      return acquireMany(...args);
    };
    let loads = 0;
    expect(await a.getOrComputeMany(['w'], (m) => (loads++, new Map(m.map((k) => [k, 'from a']))), 60_000)).toEqual(['from b']);
    expect(loads).toBe(0);
    expect(a.stats()).toMatchObject({ misses: 1, waited: 1, loaderRuns: 0 });
    await b.close();
  });

  it("stats: a normal call behind this process's own forceFresh load is coalesced, not waited", async () => {
    const cache = h.cache({ defaults: { pollInterval: 20 } });
    const gate = deferred<string>();
    const started = deferred<void>();
    const forced = cache.getOrCompute('ff', () => (started.resolve(), gate.promise), { ttl: 60_000, forceFresh: true });
    await started.promise;
    const missed = nextEvent(cache, 'miss');
    const normal = cache.getOrCompute('ff', () => 'normal', 60_000);
    await missed;
    gate.resolve('forced');
    expect(await Promise.all([forced, normal])).toEqual(['forced', 'forced']);
    expect(cache.stats()).toMatchObject({ loaderRuns: 1, coalesced: 1, waited: 0 });
  });

  it('stats: a batch key answered by its fail-safe value counts in staleServed; a batch key that rejects counts in no answer counter', async () => {
    const cache = h.cache();
    await cache.set('fs', 'old', { ttl: 100, failSafeTtl: 60_000 });
    await untilPttlAtMost(h.admin, cache, 'fs', 60_000);
    const failing = (m: string[]) => new Map<string, string | Error>(m.map((k) => [k, new Error(`origin failed ${k}`)]));
    expect(await cache.getOrComputeMany(['fs'], failing, { ttl: 60_000, failSafeTtl: 60_000 })).toEqual(['old']);
    expect(cache.stats()).toMatchObject({ misses: 1, staleServed: 1 });
    await expect(cache.getOrComputeMany(['nofallback'], failing, 60_000)).rejects.toThrow('origin failed nofallback');
    expect(cache.stats()).toMatchObject({ misses: 1, staleServed: 1 });
  });

  it('options: softTimeout applies to the keys a batch loads (their fail-safe value answers once it passes)', async () => {
    const cache = h.cache();
    await cache.set('soft', 'old', { ttl: 100, failSafeTtl: 60_000 });
    await untilPttlAtMost(h.admin, cache, 'soft', 60_000);
    const reasons: string[] = [];
    cache.on('stale', (e) => reasons.push(e.reason));
    const started = deferred<void>();
    const origin = honouring(started);
    expect(await cache.getOrComputeMany(['soft'], origin.loadMany, { ttl: 60_000, failSafeTtl: 60_000, softTimeout: 50, hardTimeout: 3000 })).toEqual(['old']);
    expect(reasons).toEqual(['softTimeout']);
  });

  it('options: forceFresh loads a batch key that is fresh in the store', async () => {
    const cache = h.cache();
    await cache.set('fresh', 'old', 60_000);
    const loaded: string[][] = [];
    expect(await cache.getOrComputeMany(['fresh'], (m) => (loaded.push(m), new Map(m.map((k) => [k, 'new']))), { ttl: 60_000, forceFresh: true })).toEqual(['new']);
    expect(loaded).toEqual([['fresh']]);
    expect(await cache.get('fresh')).toBe('new');
  });

  it('events and tracing: a batch emits hit for an L1 hit and miss for a key it loads, and traces the keys it loads', async () => {
    const cache = h.cache({ local: { max: 100 } });
    await cache.ready();
    await cache.getOrCompute('l1', () => 'in l1', 60_000);
    const events: string[] = [];
    cache.on('hit', (e) => events.push(`hit:${e.key}:${e.tier}`));
    cache.on('miss', (e) => events.push(`miss:${e.key}`));
    const traced: string[] = [];
    const onStart = (ctx: unknown) => traced.push((ctx as GetOrComputeContext).key);
    subscribe(`tracing:${GET_OR_COMPUTE_CHANNEL}:start`, onStart);
    try {
      expect(await cache.getOrComputeMany(['l1', 'loaded'], (m) => new Map(m.map((k) => [k, `v:${k}`])), 60_000)).toEqual(['in l1', 'v:loaded']);
    } finally {
      unsubscribe(`tracing:${GET_OR_COMPUTE_CHANNEL}:start`, onStart);
    }
    expect(events.sort()).toEqual(['hit:l1:local', 'miss:loaded']);
    expect(traced).toContain('loaded');
  });

  it('a miss behind this process\'s own hung early refresh waits one waitTimeout in all: no second wait on the lock the refresh holds', async () => {
    const cache = h.cache({ defaults: { waitTimeout: 300, pollInterval: 3_600_000 } });
    await cache.getOrCompute('ra', () => 'v1', { ttl: 60_000 });
    // Make the entry due for an early refresh (its loader hangs, ignoring its signal), then lose the value without a note.
    const hung = deferred<void>();
    const refreshing = nextEvent(cache, 'refresh');
    await ageEntry(h.admin, keysOf(cache, 'ra').value, 1000);
    expect(await cache.getOrCompute('ra', () => (hung.resolve(), new Promise<string>(() => undefined)), { ttl: 60_000, refreshAhead: 0.5 })).toBe('v1');
    await refreshing;
    await hung.promise;
    await h.admin.del(keysOf(cache, 'ra').value);
    const single = ((cache as unknown as { rt: unknown }).rt as { lockers: { single: { acquire: (...args: unknown[]) => Promise<unknown> } } }).lockers.single;
    const acquire = single.acquire.bind(single);
    let attempts = 0;
    single.acquire = (...args: unknown[]) => (attempts++, acquire(...args));
    expect(await cache.getOrCompute('ra', () => 'computed', { ttl: 60_000 })).toBe('computed');
    // After the wait for the refresh used up waitTimeout: one lock attempt (refused: the refresh holds it), then compute.
    expect(attempts).toBe(1);
  });
});


// ---------------------------------------------------------------- every entry point × every edge

/** A load the matrix hands an entry point: resolves `v:<key>`, or honours / ignores its signal as asked. */
type Load = (key: string, signal: AbortSignal) => Promise<string>;

/** An entry point that runs a loader: one call of `key`, the caller's value back. */
interface LoadingEntry {
  readonly name: string;
  call(cache: Cache, key: string, load: Load, options: CallOptions): Promise<unknown>;
}

const LOADING: readonly LoadingEntry[] = [
  { name: 'getOrCompute', call: (c, key, load, o) => c.getOrCompute(key, (ctx) => load(key, ctx.signal), o) },
  {
    name: 'getOrComputeMany',
    call: async (c, key, load, o) =>
      (await c.getOrComputeMany([key], async (missing, ctx) => new Map(await Promise.all(missing.map(async (k) => [k, await load(k, ctx.signal)] as const))), o))[0],
  },
  { name: 'a namespaced call', call: (c, key, load, o) => c.namespace('ns').getOrCompute(key, (ctx) => load(key, ctx.signal), o) },
  { name: 'forceFresh', call: (c, key, load, o) => c.getOrCompute(key, (ctx) => load(key, ctx.signal), { ...o, forceFresh: true }) },
];

/** A tag cell's start: a cache, a loader counting its runs, and where the entry point's keys live (the namespace for a namespaced call). */
function taggedCell(entry: LoadingEntry) {
  const cache = h.cache();
  const counter = { loads: 0 };
  const load: Load = async (key) => (counter.loads++, `v${counter.loads}:${key}`);
  return { cache, load, counter, on: entry.name === 'a namespaced call' ? cache.namespace('ns') : cache };
}

/** The edges (RELIABILITY §O) as rows; each entry point above is a column, plus the two that run no caller's loader below. */
const EDGES = ['aborted caller', 'close()', 'one load per key per process', 'options', 'stats and events', 'replicaAck', 'deleteByTag', 'expireByTag'] as const;

/** The cells that cannot exist, and why: every other cell of EDGES × entry points is a test below. */
const NOT_APPLICABLE: Readonly<Record<string, string>> = {
  'aborted caller × get/getMany': 'get and getMany take no signal and run no loader',
  'one load per key per process × get/getMany': 'get and getMany never load',
  'replicaAck × get/getMany': 'get and getMany never write',
  'aborted caller × early refresh': 'the hit that starts it has its answer already; no caller signal reaches a background refresh',
};

const honouring_ = (started: () => void): Load => (key, signal) => {
  started();
  return new Promise((_, reject) => signal.addEventListener('abort', () => reject(new Error(`origin call for ${key} cancelled`)), { once: true }));
};
const ignoring = (started: () => void): Load => () => (started(), new Promise<string>(() => undefined));

describe('every entry point × every edge (table)', () => {
  it('the table covers the cross product: each cell is a test or says why it cannot exist', () => {
    const columns = [...LOADING.map((e) => e.name), 'get/getMany', 'early refresh'];
    const cells = EDGES.flatMap((edge) => columns.map((column) => `${edge} × ${column}`));
    const tested = [...EDGES.flatMap((edge) => LOADING.map((e) => `${edge} × ${e.name}`)), ...GET_CELLS, ...REFRESH_CELLS];
    expect(cells.filter((cell) => !tested.includes(cell) && NOT_APPLICABLE[cell] === undefined)).toEqual([]);
    expect(Object.keys(NOT_APPLICABLE).filter((cell) => tested.includes(cell))).toEqual([]);
  });

  describe.each(LOADING)('$name', (entry) => {
    it(`aborted caller × ${entry.name}: a cancellation (ERR_ABORTED, no loaderError, no failBackoff); already aborted: nothing runs, nothing sent`, async () => {
      const client = h.cacheClient();
      const cache = createCache({ redis: client, prefix: `mx${process.pid}a${entry.name.length}`, defaults: { failBackoff: 60_000 } });
      const errors: unknown[] = [];
      cache.on('loaderError', (e) => errors.push(e.error));
      const started = deferred<void>();
      const ac = new AbortController();
      const call = entry.call(cache, 'k', honouring_(() => started.resolve()), { ttl: 60_000, signal: ac.signal });
      await started.promise;
      ac.abort(new Error('client left'));
      await expect(call).rejects.toMatchObject({ code: 'ERR_ABORTED' });
      expect(await entry.call(cache, 'k', async (key) => `next:${key}`, { ttl: 60_000 })).toBe('next:k'); // not ERR_BACKOFF
      expect(errors).toEqual([]);
      await client.ping();
      const sent = countCommands(client);
      let runs = 0;
      await expect(entry.call(cache, 'k2', async () => (runs++, 'v'), { ttl: 60_000, signal: AbortSignal.abort() })).rejects.toMatchObject({ code: 'ERR_ABORTED' });
      expect({ runs, sent: sent.count }).toEqual({ runs: 0, sent: 0 });
      await cache.close();
    });

    it(`close() × ${entry.name}: a call whose load ignores its signal settles with ERR_CLOSED`, async () => {
      const cache = createCache({ redis: h.cacheClient(), prefix: `mx${process.pid}c${entry.name.length}` });
      const started = deferred<void>();
      const call = track(entry.call(cache, 'k', ignoring(() => started.resolve()), { ttl: 60_000 }));
      await started.promise;
      await cache.close();
      await new Promise((r) => setImmediate(r));
      expect(call).toMatchObject({ state: 'rejected', error: { code: 'ERR_CLOSED' } });
    });

    it(`one load per key per process × ${entry.name}: three calls of it and a getOrCompute started together load once`, async () => {
      const cache = h.cache();
      const gate = deferred<void>();
      let loads = 0;
      const load: Load = async (key) => (loads++, await gate.promise, `v:${key}`);
      const same = entry.name === 'a namespaced call' ? entry : LOADING[0] as LoadingEntry;
      const calls = [entry.call(cache, 'k', load, { ttl: 60_000 }), entry.call(cache, 'k', load, { ttl: 60_000 }), entry.call(cache, 'k', load, { ttl: 60_000 }), same.call(cache, 'k', load, { ttl: 60_000, pollInterval: 20 })];
      await vi.waitFor(() => expect(loads).toBeGreaterThan(0));
      gate.resolve();
      expect(await Promise.all(calls)).toEqual(['v:k', 'v:k', 'v:k', 'v:k']);
      expect(loads).toBe(1);
    });

    it(`options × ${entry.name}: a bad option is refused with ERR_INVALID_OPTION before any Redis traffic; ttl is honoured`, async () => {
      const client = h.cacheClient();
      const cache = createCache({ redis: client, prefix: `mx${process.pid}o${entry.name.length}` });
      await client.ping();
      const sent = countCommands(client);
      for (const bad of [{ ttl: -1 }, { ttl: 1000, bogus: 1 }, { ttl: 1000, softTimeout: 'soon' }]) {
        await expect(entry.call(cache, 'k', async () => 'v', bad as CallOptions)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION' });
      }
      expect(sent.count).toBe(0);
      const events: number[] = [];
      cache.on('computed', () => events.push(1));
      expect(await entry.call(cache, 'k', async () => 'v', { ttl: 5000 })).toBe('v');
      const stored = entry.name === 'a namespaced call' ? undefined : await h.admin.pttl(entryKeys(`mx${process.pid}o${entry.name.length}`, 'k').value);
      if (stored !== undefined) expect(stored > 0 && stored <= 5000).toBe(true);
      expect(events).toEqual([1]);
      await cache.close();
    });

    it(`stats and events × ${entry.name}: a cold call is a miss and a load, the next a hit, as for getOrCompute`, async () => {
      const cache = h.cache();
      const events: string[] = [];
      for (const name of ['miss', 'hit', 'computed', 'waited', 'stale'] as const) cache.on(name, () => events.push(name));
      expect(await entry.call(cache, 'k', async (key) => `v:${key}`, { ttl: 60_000 })).toBe('v:k');
      expect(cache.stats()).toMatchObject({ misses: 1, loaderRuns: 1, hits: 0, coalesced: 0, waited: 0 });
      expect(events).toEqual(['miss', 'computed']);
      events.length = 0;
      const second = await entry.call(cache, 'k', async () => 'reloaded', { ttl: 60_000 });
      if (entry.name === 'forceFresh') {
        expect(second).toBe('reloaded'); // never served from the cache: a miss and a load again
        expect(cache.stats()).toMatchObject({ misses: 2, loaderRuns: 2, hits: 0 });
        expect(events).toEqual(['miss', 'computed']);
      } else {
        expect(second).toBe('v:k');
        expect(cache.stats()).toMatchObject({ misses: 1, loaderRuns: 1, hits: 1 });
        expect(events).toEqual(['hit']);
      }
    });

    it(`deleteByTag × ${entry.name}: a tagged entry is gone once it resolves (the next call loads)`, async () => {
      const tagged: CallOptions = { ttl: 60_000, tags: ['org:3'] };
      const { cache, load, on } = taggedCell(entry);
      expect(await entry.call(cache, 'k', load, tagged)).toBe('v1:k');
      expect(await on.get('k')).toBe('v1:k');
      await on.deleteByTag('org:3');
      expect(await on.get('k')).toBeUndefined();
      expect(await entry.call(cache, 'k', load, tagged)).toBe('v2:k');
      // Each read that found the entry invalid counts (the get, then the call's own read).
      expect(cache.stats().tagInvalidations).toBeGreaterThanOrEqual(1);
    });

    it(`expireByTag × ${entry.name}: a tagged entry is no longer fresh once it resolves: served stale within its staleTtl while one rebuild runs (forceFresh: loads); staleTtl 0: the next call loads`, async () => {
      const tagged: CallOptions = { ttl: 60_000, staleTtl: 30_000, tags: ['org:3'] };
      const { cache, load, on, counter } = taggedCell(entry);
      expect(await entry.call(cache, 'k', load, tagged)).toBe('v1:k');
      expect(await entry.call(cache, 'z', load, { ttl: 60_000, tags: ['org:3'] })).toBe('v2:z');
      await on.expireByTag('org:3');
      expect(await on.get('k')).toBeUndefined();
      const stale: string[] = [];
      cache.on('stale', (e) => stale.push(e.reason));
      const rebuilt = new Promise<void>((resolve) => cache.on('computed', (e) => e.written && resolve()));
      if (entry.name === 'forceFresh') {
        expect(await entry.call(cache, 'k', load, tagged)).toBe('v3:k'); // never served from the cache
        expect(stale).toEqual([]);
      } else {
        expect(await entry.call(cache, 'k', load, tagged)).toBe('v1:k');
        expect(stale).toEqual(['window']);
        await rebuilt;
        expect(await on.get('k')).toBe('v3:k');
      }
      expect(counter.loads).toBe(3);
      expect(await entry.call(cache, 'z', load, { ttl: 60_000, tags: ['org:3'] })).toBe('v4:z');
      expect(stale.length).toBeLessThanOrEqual(1);
    });

    it(`replicaAck × ${entry.name}: a grant too few replicas confirmed is not trusted: the value answers degraded, nothing is stored`, async () => {
      const cache = ackCache();
      const degraded: string[] = [];
      cache.on('degraded', (e) => degraded.push(`${e.operation}:${(e.error as { failure?: string }).failure ?? '?'}`));
      expect(await entry.call(cache, 'k', async (key) => `v:${key}`, { ttl: 60_000 })).toBe('v:k');
      expect(degraded.length).toBeGreaterThan(0);
      expect(degraded.every((d) => d.endsWith(':replicaAck'))).toBe(true);
      expect(await cache.get('k')).toBeUndefined();
    });
  });

  it('deleteByTag × get/getMany: a tagged value is a miss once it resolves; others are still hits', async () => {
    const cache = h.cache();
    await cache.set('k', 'v', { ttl: 60_000, tags: ['org:3'] });
    await cache.set('j', 'w', { ttl: 60_000, tags: ['org:4'] });
    expect(await cache.getMany(['k', 'j'])).toEqual(['v', 'w']);
    await cache.deleteByTag('org:3');
    expect(await cache.get('k')).toBeUndefined();
    expect(await cache.getMany(['k', 'j'])).toEqual([undefined, 'w']);
    expect(await cache.has('k')).toBe(false);
  });

  it('expireByTag × get/getMany: a tagged value is a miss once it resolves (get answers fresh values only); others are still hits', async () => {
    const cache = h.cache();
    await cache.set('k', 'v', { ttl: 60_000, staleTtl: 30_000, tags: ['org:3'] });
    await cache.set('j', 'w', { ttl: 60_000, staleTtl: 30_000, tags: ['org:4'] });
    expect(await cache.getMany(['k', 'j'])).toEqual(['v', 'w']);
    await cache.expireByTag('org:3');
    expect(await cache.get('k')).toBeUndefined();
    expect(await cache.getMany(['k', 'j'])).toEqual([undefined, 'w']);
    expect(await cache.has('k')).toBe(false);
  });

  it('close() × get/getMany: a read in flight and every later one settle (ERR_CLOSED after close)', async () => {
    const cache = createCache({ redis: h.cacheClient(), prefix: `mx${process.pid}gc` });
    const reads = [track(cache.get('k')), track(cache.getMany(['k', 'j']))];
    await cache.close();
    await new Promise((r) => setImmediate(r));
    expect(reads.map((r) => r.state === 'pending')).toEqual([false, false]);
    await expect(cache.get('k')).rejects.toMatchObject({ code: 'ERR_CLOSED' });
    await expect(cache.getMany(['k'])).rejects.toMatchObject({ code: 'ERR_CLOSED' });
  });

  it('options × get/getMany: a bad key is refused with ERR_INVALID_KEY before any Redis traffic', async () => {
    const client = h.cacheClient();
    const cache = createCache({ redis: client, prefix: `mx${process.pid}go` });
    await client.ping();
    const sent = countCommands(client);
    await expect(cache.get(42 as never)).rejects.toMatchObject({ code: 'ERR_INVALID_KEY' });
    await expect(cache.getMany(['ok', '\ud800'])).rejects.toMatchObject({ code: 'ERR_INVALID_KEY' });
    expect(sent.count).toBe(0);
    await cache.close();
  });

  it('stats and events × get/getMany: a fresh value is a hit (hit event), none a miss, in stats() as for getOrCompute', async () => {
    const cache = h.cache();
    await cache.set('k', 'v', 60_000);
    const events: string[] = [];
    cache.on('hit', (e) => events.push(`hit:${e.key}`));
    expect(await cache.get('k')).toBe('v');
    expect(await cache.getMany(['k', 'none'])).toEqual(['v', undefined]);
    expect(await cache.get('none')).toBeUndefined();
    expect(cache.stats()).toMatchObject({ hits: 2, misses: 2, loaderRuns: 0 });
    expect(events).toEqual(['hit:k', 'hit:k']);
  });

  describe('early refresh', () => {
    /** A fresh entry past its refresh point: the next hit with refreshAhead starts a background refresh. */
    async function due(cache: Cache, key: string): Promise<void> {
      await cache.getOrCompute(key, () => 'v1', 60_000);
      await ageEntry(h.admin, keysOf(cache, key).value, 1000);
    }
    const RA: CallOptions = { ttl: 60_000, refreshAhead: 0.5 };

    it('deleteByTag × early refresh: a refresh granted before it writes nothing after it; later calls load anew', async () => {
      const cache = h.cache();
      await cache.getOrCompute('k', () => 'v1', { ttl: 60_000, tags: ['org:3'] });
      await ageEntry(h.admin, keysOf(cache, 'k').value, 1000);
      const started = deferred<void>();
      const late = deferred<string>();
      expect(await cache.getOrCompute('k', () => (started.resolve(), late.promise), { ...RA, tags: ['org:3'] })).toBe('v1');
      await started.promise; // the refresh holds its grant
      await cache.deleteByTag('org:3'); // abandons this process's refresh; another process's would be refused at its write
      late.resolve('refreshed-before');
      await new Promise((r) => setTimeout(r, 50));
      expect(await cache.get('k')).toBeUndefined();
      expect(await cache.getOrCompute('k', () => 'v2', { ...RA, tags: ['org:3'] })).toBe('v2');
      const raw = await h.admin.getBuffer(keysOf(cache, 'k').value);
      expect(raw?.includes('refreshed-before')).toBe(false);
    });

    it('expireByTag × early refresh: a refresh granted before it is abandoned; the entry is then served stale while one rebuild runs', async () => {
      const cache = h.cache();
      const tagged: CallOptions = { ...RA, staleTtl: 30_000, tags: ['org:3'] };
      await cache.getOrCompute('k', () => 'v1', tagged);
      await ageEntry(h.admin, keysOf(cache, 'k').value, 1000);
      const started = deferred<LoaderContext>();
      const late = deferred<string>();
      expect(await cache.getOrCompute('k', (ctx) => (started.resolve(ctx), late.promise), tagged)).toBe('v1');
      const ctx = await started.promise; // the refresh holds its grant
      await cache.expireByTag('org:3');
      expect(ctx.signal.aborted).toBe(true);
      late.resolve('refreshed-before');
      expect(await cache.get('k')).toBeUndefined();
      const rebuilt = new Promise<void>((resolve) => cache.on('computed', (e) => e.written && resolve()));
      expect(await cache.getOrCompute('k', () => 'v2', tagged)).toBe('v1'); // stale
      await rebuilt;
      expect(await cache.get('k')).toBe('v2');
    });

    it('close() × early refresh: a refresh whose loader ignores its signal ends with close(); nothing is written after', async () => {
      const cache = createCache({ redis: h.cacheClient(), prefix: `mx${process.pid}rc` });
      await due(cache, 'k');
      const started = deferred<void>();
      const late = deferred<string>();
      expect(await cache.getOrCompute('k', () => (started.resolve(), late.promise), RA)).toBe('v1');
      await started.promise;
      await cache.close();
      const background = ((cache as unknown as { rt: unknown }).rt as { deps: { loads: { pending(key: string): unknown } } }).deps.loads;
      expect(background.pending('k')).toBeUndefined();
      late.resolve('too late');
      await new Promise((r) => setTimeout(r, 50));
      const raw = await h.admin.getBuffer(keysOf(cache, 'k').value);
      expect(raw).not.toBeNull();
      expect(raw?.includes('too late')).toBe(false);
    });

    it('one load per key per process × early refresh: concurrent due hits, a getOrCompute and a batch start one refresh, one load', async () => {
      const cache = h.cache();
      await due(cache, 'k');
      let loads = 0;
      const gate = deferred<void>();
      const loading = deferred<void>();
      const load = async () => (loads++, loading.resolve(), await gate.promise, 'v2');
      // Whichever of the three hits starts the refresh (the batch may read first), its load is counted.
      const loadMany = async (m: string[]) => {
        await load();
        return new Map(m.map((key) => [key, 'v2']));
      };
      // Waited for by event, not by a polling window: on a busy machine the refresh's lock round trip
      // may take longer than vi.waitFor's second.
      const written = new Promise<void>((resolve) => cache.on('computed', (e) => e.written && resolve()));
      const hits = [cache.getOrCompute('k', load, RA), cache.getOrCompute('k', load, RA), cache.getOrComputeMany(['k'], loadMany, RA)];
      expect(await Promise.all(hits)).toEqual(['v1', 'v1', ['v1']]);
      await loading.promise;
      gate.resolve();
      await written;
      expect(await cache.get('k')).toBe('v2');
      expect(loads).toBe(1);
    });

    it("one load per key per process × early refresh: a due hit starts no refresh beside this process's own forceFresh load (lock 'local' grants a second one at once)", async () => {
      const cache = h.cache();
      await due(cache, 'k');
      const local: CallOptions = { ...RA, lock: 'local' };
      const outcomes = refreshOutcomes(cache);
      let loads = 0;
      const gate = deferred<void>();
      const loading = deferred<void>();
      const forced = cache.getOrCompute('k', async () => (loads++, loading.resolve(), await gate.promise, 'forced'), { ...local, forceFresh: true });
      await loading.promise;
      // A hit of the entry, past its refresh point, while the forceFresh load runs: served, and no refresh.
      expect(await cache.getOrCompute('k', async () => (loads++, 'refreshed'), local)).toBe('v1');
      await new Promise((r) => setTimeout(r, 50));
      gate.resolve();
      expect(await forced).toBe('forced');
      expect(await cache.get('k')).toBe('forced');
      expect({ loads, outcomes }).toEqual({ loads: 1, outcomes: [] });
    });

    it('options × early refresh: a bad refreshAhead is refused with ERR_INVALID_OPTION before any Redis traffic', async () => {
      const client = h.cacheClient();
      const cache = createCache({ redis: client, prefix: `mx${process.pid}ro` });
      await client.ping();
      const sent = countCommands(client);
      for (const refreshAhead of [1.5, -0.1, { beta: 0 }, 'soon']) {
        await expect(cache.getOrCompute('k', () => 'v', { ttl: 1000, refreshAhead } as CallOptions)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION' });
      }
      expect(sent.count).toBe(0);
      await cache.close();
    });

    it('stats and events × early refresh: started and won, one loader run, the hit counted as a hit', async () => {
      const cache = h.cache();
      await due(cache, 'k');
      const before = cache.stats();
      const outcomes = refreshOutcomes(cache);
      const computed = nextEvent(cache, 'computed');
      expect(await cache.getOrCompute('k', () => 'v2', RA)).toBe('v1');
      expect(cache.stats().hits - before.hits).toBe(1);
      expect(await computed).toMatchObject({ key: 'k', written: true });
      const after = cache.stats();
      expect({ loaderRuns: after.loaderRuns - before.loaderRuns, refreshStarted: after.refreshStarted, refreshWon: after.refreshWon }).toEqual({ loaderRuns: 1, refreshStarted: 1, refreshWon: 1 });
      expect(outcomes).toEqual(['started', 'won']);
    });

    it('replicaAck × early refresh: a refresh grant too few replicas confirmed loads and writes nothing (refreshError, failure replicaAck)', async () => {
      const cache = ackCache();
      // Seeded by a cache without replicaAck (the server has no replica to confirm anything).
      const seeding = ackCache(prefixOf(cache), false);
      await seeding.set('k', 'v1', 60_000);
      const admin = new Redis(ackServer.server.adminUrl);
      try {
        await ageEntry(admin, keysOf(cache, 'k').value, 1000);
        // The refresh's grant is not trusted: the attempt fails (a refreshError naming replicaAck) before any load.
        const failed = nextEvent(cache, 'refreshError');
        let loads = 0;
        expect(await cache.getOrCompute('k', () => (loads++, 'v2'), RA)).toBe('v1');
        expect((await failed).error).toMatchObject({ failure: 'replicaAck' });
        expect(loads).toBe(0);
        expect(await seeding.get('k')).toBe('v1');
      } finally {
        admin.disconnect();
      }
    });
  });
});

const GET_CELLS = ['close() × get/getMany', 'options × get/getMany', 'stats and events × get/getMany', 'deleteByTag × get/getMany', 'expireByTag × get/getMany'];
const REFRESH_CELLS = ['close() × early refresh', 'one load per key per process × early refresh', 'options × early refresh', 'stats and events × early refresh', 'replicaAck × early refresh', 'deleteByTag × early refresh', 'expireByTag × early refresh'];

/** A cache that asks one replica to confirm its grants and writes, on a server that has none (and as a user allowed WAIT). */
function ackCache(prefix = `ack${process.pid}x${Math.random().toString(36).slice(2)}`, ack = true): Cache {
  const { client, dispose } = familyClient(ackServer.server.adminUrl);
  ackDisposals.push(dispose);
  return ackServer.keep(createCache({ redis: client, prefix, ...(ack ? { replicaAck: { replicas: 1, timeout: 50 } } : {}) }));
}
const ackServer = useFamilyServer();
const ackDisposals: (() => void)[] = [];
afterAll(() => ackDisposals.forEach((dispose) => dispose()));

describe('L1 options', () => {
  it('createCache refuses an unknown L1 option, naming it, before any Redis traffic', () => {
    const client = h.cacheClient();
    const sent = countCommands(client);
    expect(() => createCache({ redis: client, local: { max: 10, bogus: 1 } as never })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'local.bogus' }));
    expect(sent.count).toBe(0);
  });
});

describe('client port', () => {
  const server = useFamilyServer();
  // An effectful script answered NOSCRIPT may still have been lost (its EVAL fallback unsent): it must go as EVAL first.
  // (Reads may go EVALSHA first: ioredis's read costs one NOSCRIPT per read in flight after a restart, a known cost.)
  it('after a reconnect to a server that lost its scripts, no effectful script is sent as EVALSHA first (no NOSCRIPT reply)', async () => {
    const client = server.client();
    const cache = server.keep(createCache({ redis: client, prefix: 'scripts' }));
    await cache.getOrCompute('s1', () => 'v', 60_000);
    await cache.set('s1', 'w', 60_000);
    // A restart without persistence: the server comes back with no script cached.
    await server.server.kill();
    await server.server.restart();
    await vi.waitFor(() => client.ping(), { timeout: 10_000 });
    await cache.set('s2', 'v', 60_000); // a grant and a fenced write, nothing read
    const admin = new Redis(server.server.adminUrl);
    try {
      const stats = await admin.info('errorstats');
      expect(Number(/errorstat_NOSCRIPT:count=(\d+)/.exec(stats)?.[1] ?? 0)).toBe(0);
    } finally {
      admin.disconnect();
    }
  });
});

describe('call options resolved once per shape', () => {
  it('on a remembered shape, a bad option (new or mutated in) sends no Redis command, and an aborted signal still aborts', async () => {
    const client = h.cacheClient();
    const cache = createCache({ redis: client, prefix: `shape${process.pid}` });
    try {
      await cache.set('k', 'v', 60_000);
      const loader = vi.fn(() => 'loaded');
      const reused: CallOptions = { ttl: 60_000, lock: 'single' };
      // The shapes are remembered: with and without a signal.
      expect(await cache.getOrCompute('k', loader, reused)).toBe('v');
      expect(await cache.getOrCompute('k', loader, { ttl: 60_000, lock: 'single', signal: new AbortController().signal })).toBe('v');
      const sent = countCommands(client);
      await expect(cache.getOrCompute('k', loader, { ttl: 60_000, lock: 'bogus' as never })).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'lock', value: 'bogus' });
      reused.ttl = 0;
      await expect(cache.getOrCompute('k', loader, reused)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'ttl', value: 0 });
      await expect(cache.getOrCompute('k', loader, { ttl: 60_000, lock: 'single', signal: 'x' as never })).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'signal' });
      // An already-aborted signal on the remembered shape: refused before any traffic.
      await expect(cache.getOrCompute('k', loader, { ttl: 60_000, lock: 'single', signal: AbortSignal.abort(new Error('gone')) })).rejects.toMatchObject({ code: 'ERR_ABORTED' });
      expect(sent.count).toBe(0);
      // A signal aborting mid-call on the same shape: the caller leaves its hung load.
      const ac = new AbortController();
      const hung = cache.getOrCompute('cold', () => new Promise<string>(() => undefined), { ttl: 60_000, lock: 'single', signal: ac.signal });
      setTimeout(() => ac.abort(new Error('client left')), 50);
      await expect(hung).rejects.toMatchObject({ code: 'ERR_ABORTED' });
      expect(loader).not.toHaveBeenCalled();
    } finally {
      await cache.close();
    }
  });
});
