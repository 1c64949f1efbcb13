/**
 * Adversarial review of refresh ahead (issue 10) on a real redis-server. Each test states a property
 * the issue or README promises; the ones that fail are defects (see the review report), the others held.
 */
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { createCache, InvalidOptionError, type Cache, type CallOptions, type LoaderContext } from '../../src/index.js';
import { readFileSync } from 'node:fs';
import { getEventListeners } from 'node:events';
import { decodeEntry } from '../../src/codec.js';
import { ageEntry, countCommands, deferred, nextEvent, useRedis, keysOf, prefixOf, refreshOutcomes, untilPttlAtMost as waitPttl } from '../support/harness.js';
import { startProxy, type Proxy } from '../support/proxy.js';

const h = useRedis();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const valueKey = (cache: Cache, key: string) => keysOf(cache, key).value;
let unique = 0;

const untilPttlAtMost = (cache: Cache, key: string, ms: number) => waitPttl(h.admin, cache, key, ms);
const untilGone = (cache: Cache, key: string) => untilPttlAtMost(cache, key, -2);

const outcomesOf = refreshOutcomes;

/** Counts runs and the most loaders running at once; runs after the first wait for `gate` if given. */
function counted(gate?: Promise<void>) {
  const state = { runs: 0, running: 0, most: 0, signals: [] as AbortSignal[] };
  const loader = async (ctx: LoaderContext) => {
    const run = ++state.runs;
    state.signals.push(ctx.signal);
    state.running++;
    state.most = Math.max(state.most, state.running);
    try {
      if (run > 1 && gate) await gate;
      return `v${run}`;
    } finally {
      state.running--;
    }
  };
  return { state, loader };
}

const proxies: Proxy[] = [];
const ownClients: Redis[] = [];
/** Caches built here on clients of their own (h.cache() closes its own): closed before their clients go. */
const ownCaches: Cache[] = [];
afterAll(async () => {
  await Promise.all(ownCaches.map((c) => c.close()));
  for (const c of ownClients) c.disconnect();
  await Promise.all(proxies.map((p) => p.close()));
});

/** A cache with L1 whose every connection (commands and subscriber) goes through a fresh proxy. */
async function l1CacheThroughProxy(prefix: string, delayDownMs = 0): Promise<{ cache: Cache; proxy: Proxy }> {
  const proxy = await startProxy({ host: '127.0.0.1', port: Number(new URL(h.url).port) });
  proxies.push(proxy);
  const u = new URL(h.url);
  u.hostname = '127.0.0.1';
  u.port = String(proxy.port);
  const client = new Redis(u.toString(), { maxRetriesPerRequest: 1 });
  client.on('error', () => undefined);
  ownClients.push(client);
  // Premise of the tests that delay replies by 400 ms: a slow reply, well under redisTimeout (stated, not the default).
  const cache = createCache({ redis: client, prefix, local: { max: 100 }, redisTimeout: 1000 });
  ownCaches.push(cache);
  await client.ping();
  expect(await cache.ready()).toBe(true);
  proxy.delay('down', delayDownMs);
  return { cache, proxy };
}

/** A cache with L1 on its own client, ready (L1 trusted once subscribed). */
async function l1Cache(options: Partial<Parameters<typeof createCache>[0]> = {}): Promise<Cache> {
  const client = h.client();
  const cache = createCache({ redis: client, prefix: `rv2-${process.pid}-${++unique}`, local: { max: 100 }, ...options });
  ownCaches.push(cache);
  await client.ping();
  expect(await cache.ready()).toBe(true);
  return cache;
}

describe('no answer older than ttl, with L1', () => {
  it.each<[string, CallOptions]>([
    ['refreshAhead off', { ttl: 1000 }],
    ['refreshAhead 0.8', { ttl: 1000, refreshAhead: 0.8 }],
  ])('(%s) an L1 slot filled from a Redis read is never served after Redis expired the entry, even when the reply was slow', async (_name, opts) => {
    const prefix = `rv2-read-${process.pid}-${++unique}`;
    const writer = h.cache({ prefix });
    // The reader is set up before the entry's 1000 ms start, and has heard the set's note (a read racing it would not fill L1).
    const { cache: reader, proxy } = await l1CacheThroughProxy(prefix);
    const heard = nextEvent(reader, 'remoteChange');
    await writer.set('k', 'old', 1000);
    await heard;
    // Replies (server → client) arrive 400 ms late: Redis reported the PTTL 400 ms before L1 counts from it.
    proxy.delay('down', 400);
    expect(await reader.getOrCompute('k', () => 'new', opts)).toBe('old');
    proxy.delay('down', 0);
    await untilGone(writer, 'k'); // Redis dropped the entry: its ttl is over
    const answer = await reader.getOrCompute('k', () => 'new', opts);
    expect(answer).toBe('new'); // fails: L1 serves 'old' for up to one reply latency past expiry
  });

  it.each<[string, CallOptions]>([
    ['no jitter', { ttl: 1000 }],
    ['ttlJitter 0.5', { ttl: 1000, ttlJitter: 0.5 }],
  ])('(%s) an L1 copy of an own set() is never served after Redis expired it, even when the reply was slow', async (_name, opts) => {
    const prefix = `rv2-set-${process.pid}-${++unique}`;
    const { cache, proxy } = await l1CacheThroughProxy(prefix);
    const observer = h.cache({ prefix });
    proxy.delay('down', 400);
    await cache.set('k', 'old', opts);
    proxy.delay('down', 0);
    await untilGone(observer, 'k');
    expect(await cache.getOrCompute('k', () => 'new', opts)).toBe('new'); // fails: L1 still serves 'old'
  });
});

describe('never two loaders at once', () => {
  it('3 caches with L1, two of them 100 ms behind (notes and replies late), steady load: one refresh per entry, never two loaders at once, no miss', async () => {
    const prefix = `rv2-fleet-${process.pid}-${++unique}`;
    const caches = [await l1Cache({ prefix }), (await l1CacheThroughProxy(prefix, 100)).cache, (await l1CacheThroughProxy(prefix, 100)).cache];
    const refreshed: unknown[] = [];
    let running = 0;
    let most = 0;
    let runs = 0;
    const loader = async (ctx: LoaderContext) => {
      runs++;
      running++;
      most = Math.max(most, running);
      if (ctx.staleValue !== undefined) refreshed.push(ctx.staleValue);
      await sleep(50);
      running--;
      return `v${runs}`;
    };
    const misses: string[] = [];
    // A refresh every 300 ms or so, each with 2.7 s of fresh time to finish in (a peer's takes 3 late replies and its load).
    const opts: CallOptions = { ttl: 3000, refreshAhead: 0.1 };
    expect(await (caches[0] as Cache).getOrCompute('k', loader, opts)).toBe('v1');
    for (const c of caches) c.on('miss', (e) => misses.push(e.key));
    // Every cache calls concurrently, in rounds, until three refreshes have started (at most 1000 rounds).
    for (let round = 0; round < 1000 && refreshed.length < 3; round++) {
      await Promise.all(caches.map((c) => c.getOrCompute('k', loader, opts)));
      await sleep(10);
    }
    expect(refreshed.length).toBeGreaterThan(1);
    expect([most, misses, new Set(refreshed).size]).toEqual([1, [], refreshed.length]);
  });

  it("lock 'local': a foreground miss does not start a second loader while this process's early refresh still runs", async () => {
    const cache = h.cache();
    const gate = deferred<void>();
    const { state, loader } = counted(gate.promise);
    // The refresh point 50 ms in, 950 ms of fresh time after it for the hit and the refresh's re-read.
    const opts: CallOptions = { ttl: 1000, refreshAhead: 0.05, lock: 'local' };
    expect(await cache.getOrCompute('k', loader, opts)).toBe('v1');
    await untilPttlAtMost(cache, 'k', 950);
    expect(await cache.getOrCompute('k', loader, opts)).toBe('v1'); // starts the refresh (run 2, held)
    await vi.waitFor(() => expect(state.runs).toBe(2), { timeout: 5000 }); // its loader runs
    await untilGone(cache, 'k'); // the refresh outlived the entry: the next caller misses
    const missed = nextEvent(cache, 'miss');
    const foreground = cache.getOrCompute('k', loader, opts);
    await missed;
    await sleep(100); // time for a second loader to start, were one allowed
    const most = state.most;
    gate.resolve();
    await foreground;
    expect(most).toBe(1); // fails: 2 (the refresh and the foreground rebuild, one process)
  });

  it("lock 'single' (default): the same scenario waits for the refresh instead (held)", async () => {
    const cache = h.cache();
    const gate = deferred<void>();
    const { state, loader } = counted(gate.promise);
    const opts: CallOptions = { ttl: 1000, refreshAhead: 0.05 };
    expect(await cache.getOrCompute('k', loader, opts)).toBe('v1');
    await untilPttlAtMost(cache, 'k', 950);
    expect(await cache.getOrCompute('k', loader, opts)).toBe('v1');
    await vi.waitFor(() => expect(state.runs).toBe(2), { timeout: 5000 });
    await untilGone(cache, 'k');
    const missed = nextEvent(cache, 'miss');
    const foreground = cache.getOrCompute('k', loader, opts);
    await missed;
    await sleep(100);
    const most = state.most;
    gate.resolve();
    expect(await foreground).toBe('v2');
    expect([most, state.runs]).toEqual([1, 2]);
  });
});

describe('a hot key is never missed after the first fill', () => {
  it('a transient Redis stall during the refresh does not give the entry up until it expires (L1 hit triggers)', async () => {
    const cache = await l1Cache({ redisTimeout: 300 });
    const { loader } = counted();
    const opts: CallOptions = { ttl: 4000, refreshAhead: 0.5 };
    const misses: string[] = [];
    expect(await cache.getOrCompute('k', loader, opts)).toBe('v1');
    cache.on('miss', (e) => misses.push(e.key));
    await untilPttlAtMost(cache, 'k', 1900);
    // Redis stalls for 1 s (longer than redisTimeout, so the refresh's lock acquire surely times out):
    // CLIENT PAUSE ALL holds every client's commands, and its reply says the stall has begun.
    const stall = h.adminClient();
    await stall.call('CLIENT', 'PAUSE', '1000', 'ALL');
    const stalled = stall.ping(); // answered once the stall is over
    // The next hit is an L1 hit (no Redis).
    const failed = nextEvent(cache, 'refreshError');
    expect(await cache.getOrCompute('k', loader, opts)).toBe('v1');
    await failed; // the acquire timed out: no origin call was made
    await stalled;
    // Steady load until well past the entry's expiry (about 900 ms of fresh time were left).
    for (let i = 0; i < 60; i++) {
      await cache.getOrCompute('k', loader, opts);
      await sleep(25);
    }
    expect(misses).toEqual([]); // fails: the process never retried, the entry expired, a caller missed
  });

  it('with refreshAhead { beta }, a hot key whose entry was written by set() (loadMs 0) is refreshed before it expires', async () => {
    const cache = h.cache();
    const { loader } = counted();
    // ttl 3 s: past the 0.9 backstop the refresh (acquire, re-read, load, write) has 300 ms before the entry expires.
    const opts: CallOptions = { ttl: 3000, refreshAhead: { beta: 1 } };
    await cache.set('k', 'seeded', opts);
    const pastExpiry = performance.now() + 1.1 * 3000; // the seeded entry was written before this clock reading
    const misses: string[] = [];
    cache.on('miss', (e) => misses.push(e.key));
    while (performance.now() < pastExpiry) {
      await cache.getOrCompute('k', loader, opts);
      await sleep(20);
    }
    expect(misses).toEqual([]); // fails: loadMs 0 makes XFetch never due; the key expires under load
  });
});

/**
 * A filled entry past its refresh point whose early refresh is running now: its loader (run 2) is
 * blocked until `gate.resolve()`; `computed` is the refresh's write event.
 */
async function refreshRunning(cache: Cache) {
  const gate = deferred<void>();
  const inLoader = deferred<void>();
  const { state, loader } = counted(gate.promise);
  const tracked = async (ctx: LoaderContext) => {
    if (state.runs === 1) inLoader.resolve();
    return loader(ctx);
  };
  // The refresh point 500 ms in, 9.5 s of fresh time after it: the hit and the refresh's re-read find it fresh.
  const opts: CallOptions = { ttl: 10_000, refreshAhead: 0.05 };
  expect(await cache.getOrCompute('k', tracked, opts)).toBe('v1');
  await untilPttlAtMost(cache, 'k', 9_450);
  // How the refresh ended: abandoned (the key changed while it ran), or its write accepted or not.
  const computed = new Promise<'abandoned' | 'written' | 'refused'>((resolve) => {
    cache.on('refresh', (e) => e.outcome === 'abandoned' && resolve('abandoned'));
    cache.on('computed', (e) => resolve(e.written ? 'written' : 'refused'));
  });
  expect(await cache.getOrCompute('k', tracked, opts)).toBe('v1');
  await inLoader.promise;
  return { gate, computed, state };
}

describe('refresh racing delete(), set() and close() (held)', () => {
  it('a refresh whose loader runs across a delete() never brings the key back', async () => {
    const cache = h.cache();
    const { gate, computed } = await refreshRunning(cache);
    await cache.delete('k');
    gate.resolve();
    expect(await computed).toBe('abandoned'); // (were it not, the fence would refuse its write)
    expect(await h.admin.exists(valueKey(cache, 'k'))).toBe(0);
    expect(await cache.get('k')).toBeUndefined();
  });

  it('a refresh whose loader runs across a set() leaves the set value', async () => {
    const cache = h.cache();
    const { gate, computed } = await refreshRunning(cache);
    await cache.set('k', 'explicit', 60_000);
    gate.resolve();
    expect(await computed).toBe('abandoned'); // (were it not, the fence would refuse its write)
    expect(await cache.get('k')).toBe('explicit');
  });

  it('close() during a refresh: the loader is aborted, nothing is written, no unhandled rejection', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (e: unknown) => unhandled.push(e);
    process.on('unhandledRejection', onUnhandled);
    try {
      const cache = h.cache();
      const observer = h.cache({ prefix: prefixOf(cache) });
      const { gate, state } = await refreshRunning(cache);
      const before = await h.admin.getBuffer(valueKey(cache, 'k'));
      await cache.close();
      expect(state.signals[1]?.aborted).toBe(true);
      gate.resolve();
      await sleep(100);
      expect(await h.admin.getBuffer(valueKey(cache, 'k'))).toEqual(before);
      expect(await observer.get('k')).toBe('v1');
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});

describe('cost with the option off and validation (held)', () => {
  it('refreshAhead off: a Redis hit is one command, an L1 hit none, and no refresh event', async () => {
    const client = h.client();
    const cache = createCache({ redis: client, prefix: `rv2-cost-${process.pid}`, local: { max: 10 } });
    ownCaches.push(cache);
    await client.ping();
    expect(await cache.ready()).toBe(true);
    const writer = h.cache({ prefix: `rv2-cost-${process.pid}` });
    await writer.set('k', 'v', 20_000);
    // Far past any refresh point without waiting for it: the entry is left 2 s of its 20 s ttl, as if
    // written 18 s ago (a reader counts an entry's age from the ttl and the freshUntil it carries).
    await ageEntry(h.admin, valueKey(writer, 'k'), 2000);
    const outcomes = outcomesOf(cache);
    const sent = countCommands(client);
    expect(await cache.getOrCompute('k', () => 'x', 20_000)).toBe('v');
    expect(sent.count).toBe(1);
    sent.reset();
    expect(await cache.getOrCompute('k', () => 'x', 20_000)).toBe('v');
    expect(sent.count).toBe(0);
    expect(outcomes).toEqual([]);
  });

  it.each<[string, unknown, string]>([
    ['refreshAhead', 1, 'refreshAhead'],
    ['refreshAhead', -0.1, 'refreshAhead'],
    ['refreshAhead', Number.NaN, 'refreshAhead'],
    ['refreshAhead', '0.5', 'refreshAhead'],
    ['refreshAhead', null, 'refreshAhead'],
    ['refreshAhead', [0.5], 'refreshAhead'],
    ['refreshAhead', { beta: 0 }, 'refreshAhead.beta'],
    ['refreshAhead', { beta: Number.POSITIVE_INFINITY }, 'refreshAhead.beta'],
    ['refreshAhead', { beta: 1, extra: 1 }, 'refreshAhead.extra'],
    ['ttlJitter', 1, 'ttlJitter'],
    ['ttlJitter', -0.01, 'ttlJitter'],
    ['ttlJitter', '0.1', 'ttlJitter'],
    ['ttlJitter', Number.NaN, 'ttlJitter'],
  ])('%s = %o is an InvalidOptionError naming %s, its value and type', async (name, value, option) => {
    const cache = h.cache();
    const call = cache.getOrCompute('k', () => 'v', { ttl: 1000, [name]: value });
    const error = await call.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect((error as InvalidOptionError).code).toBe('ERR_INVALID_OPTION');
    expect((error as InvalidOptionError).option).toBe(option);
    expect(() => createCache({ redis: h.client(), defaults: { [name]: value } })).toThrow(InvalidOptionError);
    expect((error as Error).message).toContain(option);
    expect((error as Error).message).toMatch(/\((number|string|null|array|object)\)/); // the value's type
  });
});

describe('failing refresh, older formats, leaks (held)', () => {
  it.each<[string, number, (processes: number) => number]>([
    ['without failBackoff: at most one per process', 0, (n) => n],
    ['with failBackoff: one across the fleet', 60_000, () => 1],
  ])('a failing refresh (%s): served until expiry, bounded early origin calls per entry; no unhandled rejection', async (_name, failBackoff, earlyCalls) => {
    const unhandled: unknown[] = [];
    const onUnhandled = (e: unknown) => unhandled.push(e);
    process.on('unhandledRejection', onUnhandled);
    try {
      const caches = [h.cache()];
      caches.push(h.cache({ prefix: prefixOf(caches[0] as Cache) }), h.cache({ prefix: prefixOf(caches[0] as Cache) }));
      const [a] = caches as [Cache, Cache, Cache];
      let runs = 0;
      let failing = false;
      const loader = () => {
        runs++;
        if (failing) throw new Error('origin down');
        return `v${runs}`;
      };
      // The refresh point 50 ms in, then rounds for 700 ms.
      const opts: CallOptions = { ttl: 1000, refreshAhead: 0.05, failBackoff };
      expect(await a.getOrCompute('k', loader, opts)).toBe('v1');
      failing = true;
      await untilPttlAtMost(a, 'k', 950);
      const answers: unknown[] = [];
      // Stop 250 ms short of the expiry (a slow round on a loaded machine would otherwise land after it and
      // take the miss path, which the end of the test checks separately), then let the entry expire.
      while ((await h.admin.pttl(valueKey(a, 'k'))) > 250) {
        answers.push(...(await Promise.all(caches.map((c) => c.getOrCompute('k', loader, opts)))));
        await sleep(10);
      }
      while ((await h.admin.exists(valueKey(a, 'k'))) === 1) await sleep(5);
      expect(new Set(answers)).toEqual(new Set(['v1']));
      expect(runs).toBeGreaterThan(1); // the refresh was tried
      expect(runs).toBeLessThanOrEqual(1 + earlyCalls(caches.length));
      if (failBackoff === 0) {
        const before = runs;
        failing = false;
        expect(await a.getOrCompute('k', loader, opts)).toBe(`v${before + 1}`); // the miss path, in the foreground
      }
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it.each(['v1', 'v2'])('a %s entry (golden fixture) is read, refreshed ahead with the caller ttl, and rewritten as v3', async (version) => {
    const cache = h.cache();
    const bytes = readFileSync(new URL(`../fixtures/entries/${version}-string.bin`, import.meta.url));
    const old = decodeEntry(bytes);
    expect(old.ttlMs).toBeUndefined();
    // Fresh while PTTL > graceMs: 10 s of fresh time, past the 0.05 point once PTTL <= graceMs + 9_500.
    await h.admin.set(valueKey(cache, 'k'), bytes, 'PX', 10_000 + old.graceMs);
    const opts: CallOptions = { ttl: 10_000, refreshAhead: 0.05 };
    expect(await cache.getOrCompute('k', () => 'fresh', opts)).toEqual(old.value);
    await untilPttlAtMost(cache, 'k', old.graceMs + 9_450);
    const computed = nextEvent(cache, 'computed');
    expect(await cache.getOrCompute('k', () => 'fresh', opts)).toEqual(old.value);
    expect((await computed).written).toBe(true);
    const now = decodeEntry((await h.admin.getBuffer(valueKey(cache, 'k'))) as Buffer);
    expect([now.value, now.ttlMs]).toEqual(['fresh', 10_000]);
  });

  it('many refreshes add no listener to the lifetime signal and leave no background work', async () => {
    const cache = await l1Cache();
    const lifetime = ((cache as unknown as { rt: unknown }).rt as { lifetime: AbortController }).lifetime.signal;
    const background = ((cache as unknown as { rt: unknown }).rt as { calls: { backgroundFlight: { size: number } } }).calls.backgroundFlight;
    const base = getEventListeners(lifetime, 'abort').length;
    const opts: CallOptions = { ttl: 200, refreshAhead: 0.1 };
    let runs = 0;
    for (let i = 0; i < 60; i++) {
      await cache.getOrCompute('k', () => ++runs, opts);
      await sleep(5);
    }
    expect(runs).toBeGreaterThan(5); // refreshes did run
    // Once the last refresh has settled: no listener added, no work left (a leak never gets there).
    await vi.waitFor(() => expect([getEventListeners(lifetime, 'abort').length, background.size]).toEqual([base, 0]), { timeout: 5000 });
  });
});
