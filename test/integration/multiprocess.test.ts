import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TEST_CLIENT } from '../support/clients.js';
import { maxActiveKey, runsKey } from '../support/counting-loader.js';
import { startRedisServer, type RedisServer } from '../support/redis-server.js';
import { startWorkers, type Worker } from '../support/workers.js';

const PROCESSES = 4;
const CALLERS = 50;

let server: RedisServer;
let admin: Redis;
let workers: Worker[];

beforeAll(async () => {
  server = await startRedisServer();
  admin = new Redis(server.adminUrl);
  workers = await startWorkers(PROCESSES, { url: server.url, adminUrl: server.adminUrl });
});

afterAll(async () => {
  await Promise.all(workers.map((w) => w.stop()));
  admin.disconnect();
  await server.stop();
});

describe('the client family under test (SG_TEST_CLIENT)', () => {
  it("every worker's cache runs on it (the workers inherit the env; their counters stay on ioredis)", () => {
    expect(workers.map((w) => w.family)).toEqual(Array(PROCESSES).fill(TEST_CLIENT.startsWith('ioredis') ? 'ioredis' : 'node-redis'));
  });
});

async function stampede(key: string, lock: 'none' | 'local' | 'single') {
  // Every worker starts all of its callers before the parent awaits any result.
  const ids = workers.map((w) => w.call(key, CALLERS, { ttl: 60_000, lock, waitTimeout: 30_000 }, { kind: 'sleep', ms: 300 }));
  const results = (await Promise.all(workers.map((w, i) => w.results(ids[i] as number)))).flat();
  const runs = Number(await admin.get(runsKey(key)));
  const maxConcurrent = Number(await admin.get(maxActiveKey(key)));
  return { results, runs, maxConcurrent };
}

describe(`stampede on a cold key: ${PROCESSES} processes × ${CALLERS} concurrent callers, 300 ms loader`, () => {
  it("lock 'single': the loader runs exactly once across all processes, and every caller gets its value", async () => {
    const { results, runs, maxConcurrent } = await stampede('cold:single', 'single');
    expect(results).toHaveLength(PROCESSES * CALLERS);
    expect(results.every((r) => r.ok)).toBe(true);
    expect(runs).toBe(1);
    expect(maxConcurrent).toBe(1);
    const values = new Set(results.map((r) => JSON.stringify(r.value)));
    expect(values.size).toBe(1);
  });

  it("lock 'local': at most one run per process", async () => {
    const { results, runs } = await stampede('cold:local', 'local');
    expect(results.every((r) => r.ok)).toBe(true);
    expect(runs).toBeGreaterThanOrEqual(1);
    expect(runs).toBeLessThanOrEqual(PROCESSES);
  });

  it("lock 'none': one run per call (plain cache-aside)", async () => {
    const { results, runs } = await stampede('cold:none', 'none');
    expect(results.every((r) => r.ok)).toBe(true);
    expect(runs).toBe(PROCESSES * CALLERS);
  });
});

describe('stale window across processes', () => {
  /**
   * Serves a stale key to every caller of every process while the refresh loader is held on a gate,
   * then lets the refresh finish and counts loader runs over the whole window: until every process
   * reads the new value fresh (after which nobody serves stale, so nobody starts a refresh), plus a
   * quiet period for a late duplicate's start to be counted. A duplicate refresh anywhere in the
   * window is counted, whether it started before or after the first.
   */
  async function staleRefresh(key: string, lock: 'single' | 'local') {
    // Seeded with a 100 ms fresh time; the refresh writes with a minute's, so it stays fresh afterwards.
    const opts = { ttl: 60_000, staleTtl: 60_000, waitTimeout: 30_000, lock };
    const seed = (workers[0] as Worker).call(key, 1, { ...opts, ttl: 100 }, { kind: 'sleep', ms: 1, value: 'old' });
    await (workers[0] as Worker).results(seed);
    await new Promise((r) => setTimeout(r, 200)); // fresh time over: the entry is stale now
    await admin.del(runsKey(key));
    const ids = workers.map((w) => w.call(key, CALLERS, opts, { kind: 'gate', gate: `refresh:${key}` }));
    const results = (await Promise.all(workers.map((w, i) => w.results(ids[i] as number)))).flat();
    const started = workers.map((w, i) => w.loaderStarted(ids[i] as number));
    // 'single': one refresh has begun somewhere; 'local': each process has begun its own.
    await (lock === 'single' ? Promise.race(started) : Promise.all(started));
    for (const w of workers) w.open(`refresh:${key}`, 'new');
    for (const w of workers) {
      for (;;) {
        const probe = w.call(key, 1, opts, { kind: 'sleep', ms: 1, value: 'probe-must-not-run' });
        const [r] = await w.results(probe);
        if (r?.value === 'new') break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }
    await new Promise((r) => setTimeout(r, 300));
    return { results, runs: Number(await admin.get(runsKey(key))) };
  }

  it('every caller in every process gets the stale value at once, and exactly one process refreshes it (runs counted over the whole window)', async () => {
    const { results, runs } = await staleRefresh('stale:multi', 'single');
    expect(results).toHaveLength(PROCESSES * CALLERS);
    expect(results.every((r) => r.ok && r.value === 'old')).toBe(true);
    expect(runs).toBe(1);
  });

  it("the same count sees duplicate refreshes: with lock 'local' each process refreshes once", async () => {
    const { results, runs } = await staleRefresh('stale:local', 'local');
    expect(results.every((r) => r.ok && r.value === 'old')).toBe(true);
    expect(runs).toBe(PROCESSES);
  });
});

describe('a holder that dies or stalls', () => {
  it('holder killed mid-loader: another process takes over after lockTtl and gets a value', async () => {
    const [a, b] = workers as [Worker, Worker];
    const key = 'killed-holder';
    const hold = a.call(key, 1, { ttl: 60_000, lockTtl: 1000 }, { kind: 'gate', gate: 'never' });
    await a.loaderStarted(hold);
    const wait = b.call(key, 5, { ttl: 60_000, lockTtl: 1000, waitTimeout: 30_000 }, { kind: 'sleep', ms: 10, value: 'from-b' });
    await a.kill();
    const results = await b.results(wait);
    expect(results.every((r) => r.ok && r.value === 'from-b')).toBe(true);
    expect(b.cacheEvents('waited').some((e) => e.key === key && e.outcome === 'took-over')).toBe(true);
    workers[0] = (await startWorkers(1, { url: server.url, adminUrl: server.adminUrl }))[0] as Worker;
  });

  it("waiters never hang past waitTimeout: with onWaitTimeout 'throw' they reject with ERR_WAIT_TIMEOUT while the lock is still held", async () => {
    const [a, b] = workers as [Worker, Worker];
    const key = 'bounded-wait';
    const hold = a.call(key, 1, { ttl: 60_000, lockTtl: 60_000 }, { kind: 'gate', gate: 'bounded' });
    await a.loaderStarted(hold);
    const wait = b.call(key, 10, { ttl: 60_000, waitTimeout: 300, onWaitTimeout: 'throw' }, { kind: 'sleep', ms: 10 });
    const results = await b.results(wait);
    expect(results.every((r) => !r.ok && r.code === 'ERR_WAIT_TIMEOUT')).toBe(true);
    expect(await admin.exists(`sg:{${(await import('../../src/keys.js')).slotTag(key)}}:l:${key}`)).toBe(1); // the holder still holds it
    a.open('bounded', 'done');
    expect((await a.results(hold))[0]?.value).toBe('done');
  });

  it("holder paused past lockTtl (SIGSTOP): its late write is rejected, the newer value stays, and its release leaves the next holder's lock alone", async () => {
    const [a, b, c] = workers as [Worker, Worker, Worker];
    const key = 'paused-holder';
    const { entryKeys } = await import('../../src/keys.js');
    const keys = entryKeys('sg', key);
    const stale = a.call(key, 1, { ttl: 60_000, lockTtl: 600 }, { kind: 'gate', gate: 'late' });
    const aStart = await a.loaderStarted(stale);
    a.pause();
    // The lock lapses while A is frozen; B takes over and writes the newer value.
    const fresh = b.call(key, 1, { ttl: 60_000, lockTtl: 600, waitTimeout: 30_000 }, { kind: 'sleep', ms: 10, value: 'newer-from-b' });
    const bStart = await b.loaderStarted(fresh);
    expect((await b.results(fresh))[0]?.value).toBe('newer-from-b');
    expect(bStart.fence as number).toBeGreaterThan(aStart.fence as number);
    // C now holds the lock (a rebuild after a delete), so A's late release would hit C's lock if it were unfenced.
    await admin.del(keys.value);
    const cHold = c.call(key, 1, { ttl: 60_000, lockTtl: 60_000 }, { kind: 'gate', gate: 'c' });
    await c.loaderStarted(cHold);
    const cToken = await admin.get(keys.lock);
    expect(cToken).not.toBeNull();
    a.resume();
    a.open('late', 'stale-from-a');
    const aResult = await a.results(stale);
    expect(aResult[0]?.value).toBe('stale-from-a'); // A's caller still gets what A computed
    expect(a.cacheEvents('writeRejected').some((e) => e.key === key)).toBe(true);
    expect(await admin.get(keys.lock)).toBe(cToken); // A's release did not delete C's lock
    c.open('c', 'from-c');
    expect((await c.results(cHold))[0]?.value).toBe('from-c');
    // The newest grant (C's) wrote last; A's stale value never landed.
    const check = b.call(key, 1, { ttl: 60_000 }, { kind: 'sleep', ms: 1, value: 'should-not-run' });
    expect((await b.results(check))[0]?.value).toBe('from-c');
  });
});
