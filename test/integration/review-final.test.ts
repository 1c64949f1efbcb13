/**
 * Review of the L1 stale-window change and cache.stats()/tracing: reproductions, real Redis throughout.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { createCache, GET_OR_COMPUTE_CHANNEL, type Cache, type CallOptions, type GetOrComputeContext } from '../../src/index.js';
import { describe, expect, it, vi } from 'vitest';
import { nextEvent, useRedis } from '../support/harness.js';

const h = useRedis();
const prefixOf = (cache: Cache) => ((cache as unknown as { rt: unknown }).rt as { options: { prefix: string } }).options.prefix;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const never = () => new Promise<string>(() => undefined);

async function staleReader(key: string, options: CallOptions): Promise<{ writer: Cache; reader: Cache }> {
  const writer = h.cache();
  await writer.getOrCompute(key, () => 'v1', options);
  await sleep(80);
  const reader = createCache({ redis: h.client(), prefix: prefixOf(writer), local: { max: 10 } });
  expect(await reader.ready()).toBe(true);
  expect(await writer.ready()).toBe(true);
  // The reader's own refresh fails at once (its lock is released): only the stale L1 copy remains.
  const failed = nextEvent(reader, 'refreshError');
  expect(await reader.getOrCompute(key, () => Promise.reject(new Error('origin down')), options)).toBe('v1');
  await failed;
  return { writer, reader };
}

describe('stale L1 copy', () => {
  it("another process's delete drops the stale L1 copy", async () => {
    const options: CallOptions = { ttl: 50, staleTtl: 60_000, pollInterval: 3_600_000 };
    const { writer, reader } = await staleReader('d', options);
    const heard = nextEvent(reader, 'remoteChange');
    await writer.delete('d');
    await heard;
    expect(await reader.getOrCompute('d', () => 'v2', options)).toBe('v2');
    await reader.close();
  });
  it("this process's own delete drops the stale L1 copy", async () => {
    const options: CallOptions = { ttl: 50, staleTtl: 60_000, pollInterval: 3_600_000 };
    const { reader } = await staleReader('od', options);
    await reader.delete('od');
    expect(await reader.getOrCompute('od', () => 'v2', options)).toBe('v2');
    await reader.close();
  });
  it("this process's own set replaces the stale L1 copy", async () => {
    const options: CallOptions = { ttl: 50, staleTtl: 60_000, pollInterval: 3_600_000 };
    const { reader } = await staleReader('os', options);
    await reader.set('os', 'v2', 60_000);
    expect(await reader.getOrCompute('os', never, options)).toBe('v2');
    await reader.close();
  });
});

describe('stats and tracing', () => {
  it('a stale value served from L1 counts once in staleServed and is traced with outcome stale', async () => {
    const options: CallOptions = { ttl: 50, staleTtl: 60_000, pollInterval: 3_600_000 };
    const { reader } = await staleReader('t', options);
    const before = reader.stats();
    const seen: GetOrComputeContext[] = [];
    const onEnd = (ctx: unknown) => seen.push(ctx as GetOrComputeContext);
    subscribe(`tracing:${GET_OR_COMPUTE_CHANNEL}:asyncEnd`, onEnd);
    try {
      expect(await reader.getOrCompute('t', never, options)).toBe('v1');
    } finally {
      unsubscribe(`tracing:${GET_OR_COMPUTE_CHANNEL}:asyncEnd`, onEnd);
    }
    const after = reader.stats();
    expect(after.staleServed - before.staleServed).toBe(1);
    expect(after.misses - before.misses).toBe(0);
    expect(seen.map((c) => c.outcome)).toEqual(['stale']);
    await reader.close();
  });
});

describe('lost-lock hold-off', () => {
  it("when the refresh winner's loader fails, the loser refreshes once pollInterval has passed", async () => {
    const options: CallOptions = { ttl: 50, staleTtl: 60_000, pollInterval: 300 };
    const a = h.cache();
    await a.getOrCompute('w', () => 'v1', options);
    await sleep(80);
    let fail!: () => void;
    // The stale answer comes at once; the refresh's loader starts after its lock is granted.
    const refreshing = new Promise<void>((started) => {
      void a
        .getOrCompute('w', () => new Promise<string>((_, rej) => ((fail = () => rej(new Error('boom'))), started())), options)
        .then((v) => expect(v).toBe('v1'));
    });
    const aFailed = nextEvent(a, 'refreshError');
    await refreshing; // a holds the refresh lock, its loader running
    const b = createCache({ redis: h.client(), prefix: prefixOf(a) });
    let bRuns = 0;
    expect(await b.getOrCompute('w', () => (bRuns++, 'from-b'), options)).toBe('v1'); // lost: held off
    fail();
    await aFailed;
    await sleep(400); // past b's hold-off
    await b.getOrCompute('w', () => (bRuns++, 'from-b'), options); // stale at once; the refresh runs in the background
    await vi.waitFor(() => expect(bRuns).toBe(1), { timeout: 5000 });
    await b.close();
  });
});

describe('a miss behind this process\'s stale-window refresh', () => {
  it("after another process's delete, a call is not held past waitTimeout by this process's still-running stale refresh", async () => {
    const options: CallOptions = { ttl: 50, staleTtl: 60_000, pollInterval: 3_600_000, waitTimeout: 200 };
    const writer = h.cache();
    await writer.getOrCompute('h', () => 'v1', options);
    await sleep(80);
    const reader = createCache({ redis: h.client(), prefix: prefixOf(writer) });
    expect(await reader.ready()).toBe(true);
    // The reader serves stale and refreshes in the background; that loader hangs (hardTimeout 0, the default).
    expect(await reader.getOrCompute('h', never, options)).toBe('v1');
    const heard = nextEvent(reader, 'remoteChange');
    await writer.delete('h'); // the refresh's write can no longer land: the fence moved
    await heard;
    const TIMED_OUT = Symbol('still pending');
    const call = reader.getOrCompute('h', () => 'v2', options).catch((e: unknown) => e);
    // 10x waitTimeout: the call must have settled (a value, or WaitTimeoutError) long before.
    const first = await Promise.race([call, sleep(2_000).then(() => TIMED_OUT)]);
    expect(first).not.toBe(TIMED_OUT);
    await reader.close();
  });
});


describe('stats: waited means another process', () => {
  it("a caller answered by this process's own set() (found on the re-read under its grant) is not counted as waited for another process", async () => {
    const cache = h.cache();
    let runs = 0;
    // Both start before either is awaited: the set's write lands between the call's miss and its re-read.
    const call = cache.getOrCompute('own', () => (runs++, 'loaded'), 60_000);
    const set = cache.set('own', 'set-value', 60_000);
    const [value] = await Promise.all([call, set]);
    const s = cache.stats();
    expect({ value, runs }).toEqual({ value: 'set-value', runs: 0 }); // the interleaving this test is about
    expect(s.waited).toBe(0);
  });
});
