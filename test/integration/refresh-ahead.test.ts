/**
 * Refresh ahead (issue 10) on a real Redis: several caches on separate clients stand in for processes
 * where the process boundary is not essential (test/integration/refresh-ahead-fleet.test.ts forks them).
 */
import { createCache, type Cache, type CallOptions, type LoaderContext } from '../../src/index.js';
import { decodeEntry } from '../../src/codec.js';
import { entryKeys } from '../../src/keys.js';
import { resolveCallOptions } from '../../src/options.js';
import type { ProtocolDeps } from '../../src/protocol/deps.js';
import { refreshAheadOnHit } from '../../src/protocol/refresh.js';
import { describe, expect, it, vi } from 'vitest';
import { ageEntry, countCommands, deferred, nextEvent, useRedis, keysOf, prefixOf, refreshOutcomes, untilPttlAtMost as waitPttl } from '../support/harness.js';

const h = useRedis();
const valueKey = (cache: Cache, key: string) => keysOf(cache, key).value;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const untilPttlAtMost = (cache: Cache, key: string, ms: number) => waitPttl(h.admin, cache, key, ms);
/** Resolves once Redis dropped the entry. */
const untilGone = (cache: Cache, key: string) => untilPttlAtMost(cache, key, -2);

const refreshes = refreshOutcomes;

/** A loader that counts its runs and answers `v<run>`; `gate` (if given) holds every run after the first. */
function counted(gate?: Promise<void>) {
  const state = { runs: 0, staleSeen: [] as unknown[] };
  const loader = async (ctx: LoaderContext) => {
    const run = ++state.runs;
    state.staleSeen.push(ctx.staleValue);
    if (run > 1 && gate) await gate;
    return `v${run}`;
  };
  return { state, loader };
}

/**
 * The refresh point 1 s in, 19 s of fresh time after it: the hits, the refresh's re-read and its write
 * land while the entry is fresh, and a new entry is not past its own point, even on a loaded machine.
 */
const RA_TTL = 20_000;
const RA: CallOptions = { ttl: RA_TTL, refreshAhead: 0.05 };
/** Past the refresh point of an entry written with RA. */
const PAST_RA_POINT = 18_950;
/** For the tests that wait out the entry: the point 50 ms in, 950 ms of fresh time after it. */
const RA_EXPIRING: CallOptions = { ttl: 1000, refreshAhead: 0.05 };

describe('cost of a hit', () => {
  it('with refreshAhead on, a fresh hit before the refresh point is still one round trip and an L1 hit none', async () => {
    const writer = h.cache();
    await writer.set('k', 'v', 60_000);
    const client = h.client();
    const reader = createCache({ redis: client, prefix: prefixOf(writer), local: { max: 10 } });
    await client.ping();
    expect(await reader.ready()).toBe(true);
    const outcomes = refreshes(reader);
    const sent = countCommands(client);
    expect(await reader.getOrCompute('k', () => 'other', { ttl: 60_000, refreshAhead: 0.8 })).toBe('v');
    expect(sent.count).toBe(1);
    sent.reset();
    expect(await reader.getOrCompute('k', () => 'other', { ttl: 60_000, refreshAhead: 0.8 })).toBe('v');
    expect(sent.count).toBe(0);
    expect(outcomes).toEqual([]);
    await reader.close();
  });

  it('with refreshAhead off (the default), a hit past any refresh point is one round trip and starts nothing', async () => {
    const writer = h.cache();
    const client = h.client();
    const reader = createCache({ redis: client, prefix: prefixOf(writer) });
    await client.ping();
    await writer.set('k', 'v1', 20_000);
    // Past any refresh point without waiting for it: the entry is left 2 s of its 20 s ttl, as if
    // written 18 s ago (a reader counts an entry's age from the ttl and the freshUntil it carries).
    await ageEntry(h.admin, valueKey(writer, 'k'), 2000);
    const outcomes = refreshes(reader);
    const { state, loader } = counted();
    const sent = countCommands(client);
    expect(await reader.getOrCompute('k', loader, { ttl: 20_000 })).toBe('v1');
    await sleep(20);
    expect([sent.count, state.runs, outcomes]).toEqual([1, 0, []]);
    // The same hit with the option on does start the refresh (so the count above could have moved).
    const computed = nextEvent(reader, 'computed'); // listened to before the hit that starts the refresh
    expect(await reader.getOrCompute('k', loader, RA)).toBe('v1');
    await computed;
    expect(state.runs).toBe(1);
    await reader.close();
  });
});

describe('a hit past the refresh point', () => {
  it('returns the current value at once, and exactly one background refresh replaces it (no L1)', async () => {
    const cache = h.cache();
    const gate = deferred<void>();
    const { state, loader } = counted(gate.promise);
    const outcomes = refreshes(cache);
    expect(await cache.getOrCompute('k', loader, RA)).toBe('v1');
    await untilPttlAtMost(cache, 'k', PAST_RA_POINT);
    // Every contender starts before any is awaited; the refresh's loader stays blocked on its gate.
    const answers = await Promise.all(Array.from({ length: 20 }, () => cache.getOrCompute('k', loader, RA)));
    for (let i = 0; i < 5; i++) answers.push(await cache.getOrCompute('k', loader, RA));
    expect(answers).toEqual(Array(25).fill('v1'));
    expect(state.runs).toBe(2);
    expect(state.staleSeen[1]).toBe('v1'); // the loader is told which value it refreshes
    expect(outcomes).toEqual(['started', 'won']);
    const written = nextEvent(cache, 'computed');
    const opened = performance.now();
    gate.resolve();
    expect((await written).written).toBe(true);
    expect(await cache.getOrCompute('k', loader, RA)).toBe('v2');
    const pttl = await h.admin.pttl(valueKey(cache, 'k'));
    // A new entry with the whole ttl, written after the gate opened: no older than the time since then.
    expect(RA_TTL - pttl).toBeLessThanOrEqual(performance.now() - opened + 1);
    expect(state.runs).toBe(2);
  });

  it('from L1 too: an L1 hit past the point answers without Redis and starts the refresh', async () => {
    const client = h.client();
    const cache = createCache({ redis: client, prefix: `ra-l1-${process.pid}`, local: { max: 10 } });
    await client.ping();
    expect(await cache.ready()).toBe(true);
    const gate = deferred<void>();
    const { state, loader } = counted(gate.promise);
    const outcomes = refreshes(cache);
    expect(await cache.getOrCompute('k', loader, RA)).toBe('v1'); // own write fills L1
    await untilPttlAtMost(cache, 'k', PAST_RA_POINT);
    const hits: string[] = [];
    cache.on('hit', (e) => hits.push(e.tier));
    const sent = countCommands(client);
    const started = nextEvent(cache, 'refresh');
    expect(await cache.getOrCompute('k', loader, RA)).toBe('v1');
    expect(hits).toEqual(['local']);
    expect((await started).outcome).toBe('started');
    await nextEvent(cache, 'refresh'); // won
    expect(sent.count).toBeGreaterThan(0); // the background refresh's own traffic, after the answer
    expect(outcomes).toEqual(['started', 'won']);
    const written = nextEvent(cache, 'computed');
    gate.resolve();
    await written;
    sent.reset();
    expect(await cache.getOrCompute('k', loader, RA)).toBe('v2'); // the refresh's own write refilled L1
    expect(sent.count).toBe(0);
    expect(state.runs).toBe(2);
    await cache.close();
  });

  it('across caches on separate clients: one wins the lock and refreshes, the others lose and load nothing', async () => {
    const first = h.cache();
    const others = [h.cache({ prefix: prefixOf(first) }), h.cache({ prefix: prefixOf(first) })];
    const all = [first, ...others];
    const gate = deferred<void>();
    const { state, loader } = counted(gate.promise);
    const outcomes = all.map(refreshes);
    expect(await first.getOrCompute('k', loader, RA)).toBe('v1');
    await untilPttlAtMost(first, 'k', PAST_RA_POINT);
    const decided = all.map((c) => new Promise<void>((resolve) => c.on('refresh', (e) => e.outcome !== 'started' && resolve())));
    const answers = await Promise.all(all.map((c) => c.getOrCompute('k', loader, RA)));
    expect(answers).toEqual(['v1', 'v1', 'v1']);
    await Promise.all(decided);
    const written = new Promise<void>((resolve) => all.forEach((c) => c.on('computed', () => resolve())));
    gate.resolve();
    await written;
    expect(state.runs).toBe(2);
    expect(outcomes.flat().filter((o) => o === 'won')).toHaveLength(1);
    expect(outcomes.flat().filter((o) => o === 'lost')).toHaveLength(2);
    expect(await others[1]?.get('k')).toBe('v2');
  });

  it('a winner whose re-read finds the entry already refreshed (another fence) loads nothing', async () => {
    const a = h.cache();
    const b = h.cache({ prefix: prefixOf(a) });
    const { state, loader } = counted();
    const firstFill = nextEvent(a, 'computed');
    expect(await a.getOrCompute('k', loader, RA)).toBe('v1');
    const { fence } = await firstFill;
    await untilPttlAtMost(a, 'k', PAST_RA_POINT);
    // b refreshes first …
    const bWrote = nextEvent(b, 'computed');
    expect(await b.getOrCompute('k', loader, RA)).toBe('v1');
    expect((await bWrote).written).toBe(true);
    // … and a acts on the hit it made before that write (the entry of the first fence, past its point).
    const outcomes = refreshes(a);
    const deps = ((a as unknown as { rt: unknown }).rt as { deps: ProtocolDeps }).deps;
    const call = resolveCallOptions(((a as unknown as { rt: unknown }).rt as { options: { defaults: never } }).options.defaults, RA, 'k');
    refreshAheadOnHit(deps, 'k', () => entryKeys(prefixOf(a), 'k'), loader, call, { value: 'v1', freshUntil: performance.now() + 400, facts: { fence: fence as number, ttlMs: 1000, loadMs: 1 } });
    await deps.loads.pending('k'); // a's refresh, to its end
    expect(outcomes).toEqual(['started', 'won', 'already-refreshed']);
    expect(state.runs).toBe(2); // the first fill and b's refresh; none by a
    expect(await a.get('k')).toBe('v2');
  });
});

describe('only read keys are refreshed', () => {
  it('a key read only before its refresh point is never refreshed; it expires', async () => {
    const cache = h.cache();
    const { state, loader } = counted();
    const outcomes = refreshes(cache);
    // The point 900 ms in: the hit right after the fill is before it even on a loaded machine.
    const options: CallOptions = { ttl: 1000, refreshAhead: 0.9 };
    expect(await cache.getOrCompute('cold', loader, options)).toBe('v1');
    expect(await cache.getOrCompute('cold', loader, options)).toBe('v1'); // a hit before the point
    await untilGone(cache, 'cold');
    await sleep(50);
    expect(state.runs).toBe(1);
    expect(outcomes).toEqual([]);
  });
});

describe('a failing refresh', () => {
  const failing = () => {
    const state = { runs: 0 };
    const loader = async () => {
      state.runs++;
      if (state.runs > 1) throw new Error('origin down');
      return 'v1';
    };
    return { state, loader };
  };

  it('keeps serving the value until it expires, tries once (not on every hit), then the miss path runs the loader', async () => {
    const cache = h.cache();
    const { state, loader } = failing();
    const errors: unknown[] = [];
    cache.on('refreshError', (e) => errors.push(e.error));
    expect(await cache.getOrCompute('k', loader, RA_EXPIRING)).toBe('v1');
    await untilPttlAtMost(cache, 'k', 950);
    const answers: unknown[] = [];
    for (let i = 0; i < 8; i++) {
      answers.push(await cache.getOrCompute('k', loader, RA_EXPIRING));
      await sleep(15); // lets each background attempt finish before the next hit
    }
    expect(answers).toEqual(Array(8).fill('v1'));
    expect(state.runs).toBe(2); // the first fill and one early refresh, not one per hit
    expect(errors).toHaveLength(1);
    await untilGone(cache, 'k');
    const missed = nextEvent(cache, 'miss');
    await expect(cache.getOrCompute('k', async () => 'v-miss', RA_EXPIRING)).resolves.toBe('v-miss');
    await missed;
  });

  it('a process that lost the lock to a refresh that then fails tries again (it is not held off until expiry) and refreshes before the entry expires', async () => {
    const a = h.cache();
    const b = h.cache({ prefix: prefixOf(a) });
    // The refresh point 1 s in, 19 s of fresh time left after it: the steps below have room on a loaded machine.
    const options: CallOptions = { ttl: 20_000, refreshAhead: 0.05, pollInterval: 50 };
    expect(await a.getOrCompute('k', async () => 'v1', options)).toBe('v1');
    await untilPttlAtMost(a, 'k', 18_950);
    const gate = deferred<void>();
    const aWon = new Promise<void>((resolve) => a.on('refresh', (e) => e.outcome === 'won' && resolve()));
    const failed = nextEvent(a, 'refreshError');
    expect(await a.getOrCompute('k', async () => (await gate.promise, Promise.reject(new Error('origin down'))), options)).toBe('v1');
    await aWon;
    const bOutcomes = refreshes(b);
    const bLoader = async () => 'from-b';
    const bLost = new Promise<void>((resolve) => b.on('refresh', (e) => e.outcome === 'lost' && resolve()));
    expect(await b.getOrCompute('k', bLoader, options)).toBe('v1');
    await bLost;
    gate.resolve();
    await failed; // a's refresh failed and released the lock; a will not try this entry again
    // b keeps reading the entry; it must try again and refresh while the entry is still fresh.
    const bWrote = nextEvent(b, 'computed');
    while (!bOutcomes.includes('won') && (await h.admin.pttl(valueKey(a, 'k'))) > 0) {
      expect(await b.getOrCompute('k', bLoader, options)).toBe('v1');
      await sleep(20);
    }
    expect(bOutcomes.slice(0, 4)).toEqual(['started', 'lost', 'started', 'won']);
    expect((await bWrote).written).toBe(true);
    expect(await a.get('k')).toBe('from-b');
  });

  it('after its failed refresh of an entry, a process does not try that entry again, even on a later hit that counts the entry fresh for longer (each hit\'s estimate is a lower bound)', async () => {
    const cache = h.cache();
    const { state, loader } = failing();
    const errors: unknown[] = [];
    cache.on('refreshError', (e) => errors.push(e.error));
    const filled = nextEvent(cache, 'computed');
    // Fresh in Redis for 20 s: every hit below is of this one entry, and it is fresh when read.
    expect(await cache.getOrCompute('k', loader, { ttl: 20_000 })).toBe('v1');
    const { fence } = await filled;
    const outcomes = refreshes(cache);
    const deps = ((cache as unknown as { rt: unknown }).rt as { deps: ProtocolDeps }).deps;
    const call = resolveCallOptions(((cache as unknown as { rt: unknown }).rt as { options: { defaults: never } }).options.defaults, RA, 'k');
    const keys = () => entryKeys(prefixOf(cache), 'k');
    const facts = { fence: fence as number, ttlMs: 1000, loadMs: 1 };
    // A hit whose read was slow: it counts the entry fresh for 100 ms more (a lower bound of the truth),
    // past the refresh point; the refresh wins and its loader fails.
    const failed = nextEvent(cache, 'refreshError');
    refreshAheadOnHit(deps, 'k', keys, loader, call, { value: 'v1', freshUntil: performance.now() + 100, facts });
    await failed;
    await sleep(150);
    // A later hit of the same entry, read faster: it counts it fresh for 100 ms more from now.
    refreshAheadOnHit(deps, 'k', keys, loader, call, { value: 'v1', freshUntil: performance.now() + 100, facts });
    await sleep(50);
    expect(outcomes).toEqual(['started', 'won']);
    expect(state.runs).toBe(2); // the fill and the one early refresh
    expect(errors).toHaveLength(1);
  });

  it('an early refresh that failed while the entry was fresh does not stop the stale window\'s refresh of that entry', async () => {
    const cache = h.cache();
    const runs: string[] = [];
    // Run 2 (the early refresh) fails; the others answer.
    const loader = async () => {
      runs.push(runs.length === 1 ? 'failed' : `v${runs.length + 1}`);
      if (runs.length === 2) throw new Error('origin down');
      return `v${runs.length}`;
    };
    const options: CallOptions = { ...RA_EXPIRING, staleTtl: 10_000 };
    expect(await cache.getOrCompute('k', loader, options)).toBe('v1');
    await untilPttlAtMost(cache, 'k', 10_950); // past the refresh point (fresh for ≤ 950 ms more)
    const failed = nextEvent(cache, 'refreshError');
    expect(await cache.getOrCompute('k', loader, options)).toBe('v1');
    await failed;
    await untilPttlAtMost(cache, 'k', 9_990); // fresh time over: in the stale window
    const computed = nextEvent(cache, 'computed');
    expect(await cache.getOrCompute('k', loader, options)).toBe('v1'); // stale, served at once
    expect((await computed).written).toBe(true); // and refreshed behind it
    expect(runs).toHaveLength(3);
    expect(await cache.get('k')).toBe('v3');
  });

  it('with failSafeTtl: after expiry the miss path fails over to the kept value', async () => {
    const cache = h.cache();
    const { state, loader } = failing();
    const options: CallOptions = { ...RA_EXPIRING, failSafeTtl: 60_000 };
    expect(await cache.getOrCompute('k', loader, options)).toBe('v1');
    await untilPttlAtMost(cache, 'k', 60_950);
    // Listened to before the hit that starts the refresh: it may fail before the hit's await resumes.
    const failed = nextEvent(cache, 'refreshError');
    expect(await cache.getOrCompute('k', loader, options)).toBe('v1');
    await failed;
    await untilPttlAtMost(cache, 'k', 60_000); // its fresh time is over: only kept for fail-safe
    const stale = nextEvent(cache, 'stale');
    expect(await cache.getOrCompute('k', loader, options)).toBe('v1');
    expect((await stale).reason).toBe('loaderError');
    expect(state.runs).toBe(3); // the fill, the early refresh, the miss path's rebuild
  });
});

describe('no answer older than ttl', () => {
  it.each([false, true])('while a slow refresh runs past expiry, a call after expiry waits for it instead of getting the old value (L1 %s)', async (withL1) => {
    const client = h.client();
    const cache = createCache({ redis: client, prefix: `ra-old-${process.pid}-${String(withL1)}`, ...(withL1 ? { local: { max: 10 } } : {}) });
    await client.ping();
    expect(await cache.ready()).toBe(true);
    const gate = deferred<void>();
    const { state, loader } = counted(gate.promise);
    const options = RA_EXPIRING;
    expect(await cache.getOrCompute('k', loader, options)).toBe('v1');
    await untilPttlAtMost(cache, 'k', 950);
    expect(await cache.getOrCompute('k', loader, options)).toBe('v1'); // starts the (blocked) refresh
    await vi.waitFor(() => expect(state.runs).toBe(2), { timeout: 5000 }); // its loader runs
    await untilGone(cache, 'k');
    const missed = nextEvent(cache, 'miss');
    const late = cache.getOrCompute('k', loader, options);
    // It does not get v1: it goes to the lock, which the refresh holds.
    expect(await Promise.race([late.then((value) => ({ value })), missed.then(() => 'missed')])).toBe('missed');
    gate.resolve();
    expect(await late).toBe('v2');
    await cache.close();
  });
});

describe('XFetch ({ beta })', () => {
  it('uses the loader time kept in the entry: a set() entry (0 ms) is not refreshed by the formula (only at the 0.9 backstop), a loaded one is', async () => {
    const cache = h.cache();
    const outcomes = refreshes(cache);
    // ttl 10 s: the set() entry's backstop is 9 s away, so the hits below come long before it.
    const options: CallOptions = { ttl: 10_000, refreshAhead: { beta: 10_000 } };
    await cache.set('set', 'v', 10_000);
    const slow = async () => (await sleep(30), 'v1');
    expect(await cache.getOrCompute('loaded', slow, options)).toBe('v1');
    // −loadMs × 10 000 × ln(rand) ≥ the ≤ 10 000 ms of fresh time left unless rand > e^(−10 000 / 300 000) ≈ 0.967:
    // five hits all missing it is ~4e-8.
    for (let i = 0; i < 5; i++) expect(await cache.getOrCompute('set', () => 'x', options)).toBe('v');
    expect(outcomes).toEqual([]);
    for (let i = 0; i < 5 && outcomes.length === 0; i++) expect(await cache.getOrCompute('loaded', slow, options)).toBe('v1');
    expect(outcomes[0]).toBe('started');
  });
});

describe('ttlJitter', () => {
  it('draws each write\'s ttl from ttl × (1 − jitter … 1), keeps it in the entry, and L1 never outlives it', async () => {
    const client = h.client();
    const cache = createCache({ redis: client, prefix: `ra-jit-${process.pid}`, local: { max: 100 } });
    await client.ping();
    expect(await cache.ready()).toBe(true);
    const options: CallOptions = { ttl: 10_000, ttlJitter: 0.5 };
    await Promise.all(Array.from({ length: 25 }, (_, i) => cache.set(`s${i}`, i, options)));
    await Promise.all(Array.from({ length: 25 }, (_, i) => cache.getOrCompute(`g${i}`, () => i, options)));
    const keys = [...Array.from({ length: 25 }, (_, i) => `s${i}`), ...Array.from({ length: 25 }, (_, i) => `g${i}`)];
    const ttls: number[] = [];
    const lru = ((cache as unknown as { rt: unknown }).rt as { local: { lru: { get(k: string): { freshUntil: number } | undefined } } }).local.lru;
    for (const key of keys) {
      const vk = valueKey(cache, key);
      const [pttl, bytes] = await Promise.all([h.admin.pttl(vk), h.admin.getBuffer(vk)]);
      const { ttlMs } = decodeEntry(bytes as Buffer);
      ttls.push(ttlMs as number);
      expect(ttlMs).toBeGreaterThanOrEqual(5000);
      expect(ttlMs).toBeLessThanOrEqual(10_000);
      expect(pttl).toBeLessThanOrEqual(ttlMs as number); // the physical TTL is the drawn one
      const slot = lru.get(key);
      expect(slot).toBeDefined();
      expect((slot as { freshUntil: number }).freshUntil - performance.now()).toBeLessThanOrEqual(ttlMs as number);
    }
    // 50 uniform draws over 5 s all within one 1 s band: probability below 1e-30.
    expect(Math.max(...ttls) - Math.min(...ttls)).toBeGreaterThan(1000);
    await cache.close();
  });
});

describe('a key changed during its early refresh', () => {
  // ttl 20 s with the point 1 s in: the entry stays fresh through every step on a loaded machine.
  // waitTimeout 60 s: a caller held up by the refresh's lock would wait past the test's own timeout.
  const options: CallOptions = { ttl: 20_000, refreshAhead: 0.05, waitTimeout: 60_000, pollInterval: 60_000 };

  /** `refresher` holds an early refresh of `k` whose loader never ends on its own (it ignores ctx.signal). */
  async function stuckRefresh(refresher: Cache) {
    expect(await refresher.getOrCompute('k', async () => 'v1', options)).toBe('v1');
    await untilPttlAtMost(refresher, 'k', 18_950);
    const started = deferred<LoaderContext>();
    const never = new Promise<string>(() => undefined);
    const won = new Promise<void>((resolve) => refresher.on('refresh', (e) => e.outcome === 'won' && resolve()));
    expect(await refresher.getOrCompute('k', (ctx) => (started.resolve(ctx), never), options)).toBe('v1');
    await won;
    return { ctx: await started.promise };
  }

  it('a delete abandons it: its loader is signalled, its lock released, and callers here and in another process load at once instead of waiting for it', { timeout: 20_000 }, async () => {
    const a = h.cache();
    const b = h.cache({ prefix: prefixOf(a) });
    expect(await b.ready()).toBe(true);
    const { ctx } = await stuckRefresh(a);
    const outcomes = refreshes(a);
    const abandoned = nextEvent(a, 'refresh');
    await a.delete('k');
    expect((await abandoned).outcome).toBe('abandoned');
    expect(ctx.signal.aborted).toBe(true);
    // Started together: neither may wait for the stuck loader (it never ends).
    const [here, there] = await Promise.all([a.getOrCompute('k', async () => 'a-after', options), b.getOrCompute('k', async () => 'b-after', options)]);
    // One of them took the lock and loaded; the other was woken by its write.
    expect(here).toBe(there);
    expect(['a-after', 'b-after']).toContain(here);
    expect(await h.admin.exists(keysOf(a, 'k').lock)).toBe(0);
    expect(outcomes).toEqual(['abandoned']);
  });

  it('another process\'s delete abandons it (its note), so that process\'s callers take the lock at once', { timeout: 20_000 }, async () => {
    const a = h.cache();
    const b = h.cache({ prefix: prefixOf(a) });
    expect(await a.ready()).toBe(true);
    expect(await b.ready()).toBe(true);
    const { ctx } = await stuckRefresh(a);
    const abandoned = nextEvent(a, 'refresh');
    await b.delete('k');
    expect((await abandoned).outcome).toBe('abandoned');
    expect(ctx.signal.aborted).toBe(true);
    expect(await b.getOrCompute('k', async () => 'b-after', options)).toBe('b-after');
    expect(await a.getOrCompute('k', async () => 'a-after', options)).toBe('b-after');
  });

  it('abandoned as the cache closes: no refreshError (the abandonment is no failure of the origin)', { timeout: 20_000 }, async () => {
    const a = h.cache();
    const { ctx } = await stuckRefresh(a);
    const errors: unknown[] = [];
    a.on('refreshError', (e) => errors.push(e.error));
    await a.delete('k');
    await a.close();
    await sleep(20); // the abandoned work settles in the microtasks after the abort
    expect(ctx.signal.aborted).toBe(true);
    expect(errors).toEqual([]);
  });

  it('a set abandons it, and the set value stays (the refresh writes nothing)', { timeout: 20_000 }, async () => {
    const a = h.cache();
    const { ctx } = await stuckRefresh(a);
    const abandoned = nextEvent(a, 'refresh');
    await a.set('k', 'set-value', 20_000);
    expect((await abandoned).outcome).toBe('abandoned');
    expect(ctx.signal.aborted).toBe(true);
    expect(await h.admin.exists(keysOf(a, 'k').lock)).toBe(0);
    expect(await a.get('k')).toBe('set-value');
  });
});
