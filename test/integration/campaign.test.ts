/**
 * The fault-injection campaign (RELIABILITY.md §4–5): forked workers hammer a real redis-server
 * while a seeded schedule pauses and kills holders, pauses, kills and restarts Redis (without
 * persistence and with appendfsync always) and flushes its scripts. Workers record every settle;
 * the checker verifies the hard properties on the history. The negative control runs with fencing
 * off and must be caught.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import {
  boundedSettles,
  loadersPerWindow,
  monotonicReads,
  quantiles,
  recoveryTimes,
  type Interval,
  type LoaderRun,
  type Settle,
  type Violation,
} from '../support/checker.js';
import { startRedisServer, type RedisServer } from '../support/redis-server.js';

const WORKER = fileURLToPath(new URL('../support/campaign-worker.ts', import.meta.url));
const now = (): number => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Fault = 'pause-holder' | 'kill-worker' | 'pause-redis' | 'restart-redis' | 'script-flush';

interface CampaignConfig {
  name: string;
  seed: number;
  seconds: number;
  workers: number;
  callers: number;
  keys: number;
  faults: Fault[];
  aof: boolean;
  unfenced: boolean;
}

/** Deterministic PRNG (mulberry32): a failing seed replays the same schedule. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const TIMING = { ttl: 300, lockTtl: 400, waitTimeout: 1000, pollInterval: 50, redisTimeout: 200, loaderMs: 100 };
/** Longest a call may take: a full wait, then a computed rebuild, each Redis step at its timeout, plus 2-core slack. */
const SETTLE_BOUND = TIMING.waitTimeout + TIMING.loaderMs + 8 * TIMING.redisTimeout + 500;

interface WorkerHandle {
  proc: number;
  child: ChildProcess;
  loading: number;
  /** Called (once) on this worker's next loader start. */
  onLoaderStart?: () => void;
  history: Promise<{ settles: Settle[]; runs: LoaderRun[]; unhandled: string[]; resources: string[]; killed: boolean } | undefined>;
}

async function campaign(c: CampaignConfig) {
  const rand = prng(c.seed);
  const server: RedisServer = await startRedisServer(c.aof ? ['--appendonly', 'yes', '--appendfsync', 'always'] : []);
  const admin = new Redis(server.adminUrl, { maxRetriesPerRequest: 1 });
  admin.on('error', () => undefined);
  const prefix = `camp${c.seed}`;
  const until = now() + 1000 + c.seconds * 1000;
  let nextProc = 0;
  const workers: WorkerHandle[] = [];
  const pauses: Interval[] = [];
  const heals: number[] = [];
  const injected: Record<string, number> = {};

  const spawnWorker = async (): Promise<WorkerHandle> => {
    const proc = ++nextProc;
    const child = fork(WORKER, [], {
      execArgv: ['--import', 'tsx'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      env: {
        ...process.env,
        SG_PROC: String(proc),
        SG_REDIS_URL: server.url,
        SG_PREFIX: prefix,
        SG_REDIS_TIMEOUT: String(TIMING.redisTimeout),
        SG_CALLERS: String(c.callers),
        SG_KEYS: String(c.keys),
        SG_LOADER_MS: String(TIMING.loaderMs),
        SG_THINK_MS: '40',
        SG_UNFENCED: c.unfenced ? '1' : '0',
        SG_CALL_OPTIONS: JSON.stringify({ ttl: TIMING.ttl, lockTtl: TIMING.lockTtl, waitTimeout: TIMING.waitTimeout, pollInterval: TIMING.pollInterval }),
      },
    });
    const handle: WorkerHandle = { proc, child, loading: 0, history: Promise.resolve(undefined) };
    // The history arrives in batches; a killed worker keeps what it sent (killed: true, no handle check).
    const acc = { settles: [] as Settle[], runs: [] as LoaderRun[], unhandled: [] as string[] };
    type Raw = { settles?: [string, number, number, boolean, number, string][]; runs?: [string, number, number, number][]; unhandled?: string[]; resources?: string[] };
    const take = (m: Raw) => {
      for (const [key, start, end, ok, fence, code] of m.settles ?? []) acc.settles.push({ proc, key, start, end, ok, code, fence: fence === -1 ? undefined : fence });
      for (const [key, start, end, fence] of m.runs ?? []) acc.runs.push({ proc, key, start, end, fence: fence === -1 ? undefined : fence });
      acc.unhandled.push(...(m.unhandled ?? []));
    };
    handle.history = new Promise((resolve) => {
      child.on('message', (m: Raw & { ev: string }) => {
        if (m.ev === 'loader-start') {
          handle.loading++;
          const hook = handle.onLoaderStart;
          handle.onLoaderStart = undefined;
          hook?.();
        } else if (m.ev === 'loader-end') handle.loading--;
        else if (m.ev === 'batch') take(m);
        else if (m.ev === 'history') {
          take(m);
          resolve({ ...acc, resources: m.resources ?? [], killed: false });
        }
      });
      child.once('exit', () => resolve({ ...acc, resources: [], killed: true }));
    });
    await new Promise((r) => child.once('message', r)); // ready
    child.send({ op: 'start', until });
    return handle;
  };

  for (let i = 0; i < c.workers; i++) workers.push(await spawnWorker());
  await sleep(1000); // warm-up without faults

  const all = [...workers];
  while (now() < until - 1500) {
    await sleep(700 + rand() * 800);
    const fault = c.faults[Math.floor(rand() * c.faults.length)] as Fault;
    injected[fault] = (injected[fault] ?? 0) + 1;
    const live = workers.filter((w) => w.child.exitCode === null && w.child.signalCode === null);
    if (fault === 'pause-holder') {
      // Freeze a worker the moment one of its loaders starts: it then holds a lock (and a fence).
      const holder = await new Promise<WorkerHandle | undefined>((resolve) => {
        const timer = setTimeout(() => resolve(undefined), 3000);
        for (const w of live) {
          w.onLoaderStart = () => {
            clearTimeout(timer);
            for (const o of live) o.onLoaderStart = undefined;
            process.kill(w.child.pid as number, 'SIGSTOP');
            resolve(w);
          };
        }
      });
      if (!holder) continue;
      const from = now();
      await sleep(TIMING.lockTtl * 2.5);
      process.kill(holder.child.pid as number, 'SIGCONT');
      pauses.push({ proc: holder.proc, from, to: now() });
    } else if (fault === 'kill-worker') {
      const victim = live[Math.floor(rand() * live.length)];
      if (!victim) continue;
      victim.child.kill('SIGKILL');
      workers.splice(workers.indexOf(victim), 1);
      const fresh = await spawnWorker();
      workers.push(fresh);
      all.push(fresh);
    } else if (fault === 'pause-redis') {
      server.pause();
      await sleep(600);
      server.resume();
      heals.push(now());
    } else if (fault === 'restart-redis') {
      await server.kill();
      await sleep(200);
      await server.restart();
      heals.push(now());
    } else {
      await admin.script('FLUSH').catch(() => undefined);
    }
  }

  const histories = (await Promise.all(all.map((w) => w.history))).filter((h) => h !== undefined);
  // No lock outlives its TTL: once every worker has closed and one lockTtl has passed, none is left.
  await sleep(TIMING.lockTtl + 100);
  const leftoverLocks = (await admin.keys(`${prefix}:*:l:*`)).length;
  admin.disconnect();
  await server.stop();

  const settles = histories.flatMap((h) => h.settles);
  const runs = histories.flatMap((h) => h.runs);
  const reads = monotonicReads(settles);
  const bounded = boundedSettles(settles, SETTLE_BOUND, pauses);
  const unhandled = histories.flatMap((h) => h.unhandled);
  const leaks = histories.filter((h) => !h.killed && h.resources.length > 0).map((h) => h.resources.join(','));
  const violations: Violation[] = [...reads.violations, ...bounded.violations];
  const figures = {
    campaign: c.name,
    seed: c.seed,
    faults: injected,
    calls: settles.length,
    errors: settles.filter((s) => !s.ok).length,
    loaderRuns: runs.length,
    'no stale overwrite': `${reads.checked} ordered read pairs checked, ${reads.violations.length} violations`,
    'bounded settle': `${bounded.checked} settles checked against ${SETTLE_BOUND} ms, ${bounded.violations.length} violations`,
    'unhandled rejections': unhandled.length,
    'locks left after TTL': leftoverLocks,
    'workers with open handles after close()': leaks.length,
    'settle latency ms': quantiles(bounded.latencies),
    [`loaders per key per ${TIMING.ttl} ms window`]: quantiles(loadersPerWindow(runs, TIMING.ttl)),
    'recovery after heal ms': quantiles(recoveryTimes(settles, heals).filter(Number.isFinite)),
  };
  console.log(`campaign figures\n${JSON.stringify(figures, null, 2)}`);
  return { violations, reads, bounded, unhandled, leftoverLocks, leaks, settles };
}

const ALL_FAULTS: Fault[] = ['pause-holder', 'kill-worker', 'pause-redis', 'restart-redis', 'script-flush'];

describe('fault campaign', () => {
  it('hard properties hold under mixed faults (no persistence): no stale overwrite, bounded settles, no unhandled rejection, no lock left, nothing leaked', async () => {
    const r = await campaign({ name: 'mixed', seed: 1130, seconds: 20, workers: 4, callers: 20, keys: 5, faults: ALL_FAULTS, aof: false, unfenced: false });
    expect(r.reads.checked).toBeGreaterThan(1000);
    expect(r.violations).toEqual([]);
    expect(r.unhandled).toEqual([]);
    expect(r.leftoverLocks).toBe(0);
    expect(r.leaks).toEqual([]);
  }, 120_000);

  it('hard properties hold with appendfsync always across Redis restarts and paused holders', async () => {
    const r = await campaign({ name: 'aof', seed: 2026, seconds: 12, workers: 4, callers: 20, keys: 5, faults: ['pause-holder', 'restart-redis'], aof: true, unfenced: false });
    expect(r.reads.checked).toBeGreaterThan(500);
    expect(r.violations).toEqual([]);
    expect(r.unhandled).toEqual([]);
  }, 120_000);

  it('negative control: with fencing off, the same checker reports stale overwrites', async () => {
    const r = await campaign({ name: 'negative-control', seed: 7, seconds: 12, workers: 4, callers: 20, keys: 2, faults: ['pause-holder'], aof: false, unfenced: true });
    expect(r.reads.violations.length).toBeGreaterThan(0);
  }, 120_000);

  it('soak: 4 workers × 100 callers for 60 s under seeded random faults, hard properties hold', async () => {
    const r = await campaign({ name: 'soak', seed: 60, seconds: 60, workers: 4, callers: 100, keys: 20, faults: ALL_FAULTS, aof: false, unfenced: false });
    expect(r.violations).toEqual([]);
    expect(r.unhandled).toEqual([]);
    expect(r.leftoverLocks).toBe(0);
    expect(r.leaks).toEqual([]);
  }, 180_000);
});
