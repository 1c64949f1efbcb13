/**
 * Refresh ahead across processes: forked workers (test/support/refresh-worker.ts), each with its own
 * connection and cache, read hot keys under steady load while their entries pass the refresh point
 * again and again.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import type { CallOptions } from '../../src/index.js';
import { useRedis } from '../support/harness.js';
import type { Done, Load, Made, RunMsg } from '../support/refresh-worker.js';

const h = useRedis();
const WORKER = fileURLToPath(new URL('../support/refresh-worker.ts', import.meta.url));

function start(prefix: string, localMax: number): Promise<ChildProcess> {
  const child = fork(WORKER, [], {
    execArgv: ['--import', 'tsx'],
    env: { ...process.env, SG_REDIS_URL: h.url, SG_PREFIX: prefix, SG_LOCAL_MAX: String(localMax) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return new Promise((resolve, reject) => {
    child.once('exit', () => reject(new Error('worker exited before it was ready')));
    child.on('message', (m: { ev: string }) => m.ev === 'ready' && resolve(child));
  });
}

function runOn(child: ChildProcess, msg: Omit<RunMsg, 'op'>): Promise<Done> {
  return new Promise((resolve) => {
    child.on('message', (m: Done) => m.ev === 'done' && resolve(m));
    child.send({ op: 'run', ...msg });
  });
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  // The callback takes a send that races the child's own exit (EPIPE) instead of an uncaught error.
  child.send({ op: 'exit' }, () => undefined);
  await exited;
}

// A refresh must land between the refresh point (RA × TTL) and the expiry: 1.5 s of room, which a
// stall of the loaded machine (3 workers, this process, Redis, another test file) does not use up.
const TTL = 3000;
const RA = 0.5;
const LOAD_MS = 40;
// Four refresh intervals: at least three refreshes of each hot key.
const FOR_MS = 4 * RA * TTL;

describe.each([
  ['without L1', 0],
  ['with L1', 100],
])('refresh ahead across 3 processes under steady load (%s)', (_name, localMax) => {
  it('one refresh per entry per ttl across processes, never two loaders at once, no caller waits after the first fill, no answer older than ttl, unread keys never refreshed', async () => {
    const prefix = `fleet${process.pid}x${localMax}`;
    const options: CallOptions = { ttl: TTL, refreshAhead: RA };
    const hot = ['hot1', 'hot2'];
    const cold = ['cold1', 'cold2'];
    const workers = await Promise.all([0, 1, 2].map(() => start(prefix, localMax)));
    try {
      // The first fill, from this process: after it, every call in the fleet should be a hit.
      const filler = h.cache({ prefix });
      for (const key of [...hot, ...cold]) {
        const made: Made = { run: `fill.${key}`, at: performance.timeOrigin + performance.now() };
        expect(await filler.getOrCompute(key, () => made, options)).toEqual(made);
      }
      // Every worker is started before any result is awaited.
      const done = await Promise.all(workers.map((w) => runOn(w, { hot, cold, options, everyMs: 10, forMs: FOR_MS, loadMs: LOAD_MS })));
      const answers = done.flatMap((d) => d.answers);
      const loads = done.flatMap((d) => d.loads);
      const events = done.flatMap((d) => d.events);
      expect(done.flatMap((d) => d.errors)).toEqual([]);

      // No caller waited for a loader: not one miss (nor a wait, nor a stale answer) after the first fill.
      expect(events.filter((e) => ['miss', 'waited', 'stale', 'loaderError', 'refreshError', 'degraded'].includes(e.name))).toEqual([]);

      // No answer older than ttl: measured from the loader's end (before its write), so an upper bound.
      const ages = answers.map((a) => a.answeredAt - a.made.at);
      expect(Math.max(...ages)).toBeLessThanOrEqual(TTL);

      for (const key of hot) {
        const mine = loads.filter((l) => l.key === key).sort((a, b) => a.start - b.start);
        // The entry kept being refreshed, at most once per refresh interval (refreshAhead × ttl) …
        expect(mine.length).toBeGreaterThanOrEqual(3);
        expect(mine.length).toBeLessThanOrEqual(Math.ceil(FOR_MS / (RA * TTL)) + 1);
        // … each entry by exactly one process, once: the refreshed runs form one chain from the first fill.
        const refreshed = mine.map((l) => l.refreshed);
        expect(new Set(refreshed).size).toBe(refreshed.length);
        expect(refreshed).toEqual([`fill.${key}`, ...mine.slice(0, -1).map((l) => l.run)]);
        // Never two loaders of one key at once, anywhere in the fleet.
        const overlapping = mine.filter((l, i): l is Load => i > 0 && l.start < (mine[i - 1] as Load).end);
        expect(overlapping).toEqual([]);
      }
      // Every loader run was a won early refresh; every other attempt lost the lock or found it done.
      const outcomes = (o: string) => events.filter((e) => e.name === 'refresh' && e.outcome === o).length;
      expect(outcomes('won') - outcomes('already-refreshed')).toBe(loads.length);
      expect(outcomes('started')).toBe(outcomes('won') + outcomes('lost'));
      if (process.env.SG_DEBUG) console.log({ loads: loads.length, answers: answers.length, maxAge: Math.max(...ages), ...Object.fromEntries(['started', 'won', 'lost', 'already-refreshed'].map((o) => [o, outcomes(o)])) });

      // Keys read only before their refresh point were never refreshed.
      expect(loads.filter((l) => cold.includes(l.key))).toEqual([]);
      expect(events.filter((e) => e.name === 'refresh' && cold.includes(e.key))).toEqual([]);
    } finally {
      await Promise.all(workers.map(stop));
    }
  }, 30_000);
});

describe('a failing refresh across 3 processes under steady load', () => {
  it('the value is served until it expires, each process tries the entry at most once before then, then the miss path falls back to fail-safe; other keys keep refreshing', async () => {
    const prefix = `fleetfail${process.pid}`;
    const options: CallOptions = { ttl: TTL, refreshAhead: RA, failSafeTtl: 60_000 };
    const workers = await Promise.all([0, 1, 2].map(() => start(prefix, 0)));
    try {
      const filler = h.cache({ prefix });
      const filledFrom = performance.timeOrigin + performance.now(); // no entry written before this expires before filledFrom + TTL
      for (const key of ['bad', 'good']) {
        const made: Made = { run: `fill.${key}`, at: performance.timeOrigin + performance.now() };
        expect(await filler.getOrCompute(key, () => made, options)).toEqual(made);
      }
      const expiredFrom = filledFrom + TTL; // the entry expires no earlier
      const done = await Promise.all(workers.map((w) => runOn(w, { hot: ['bad', 'good'], cold: [], options, everyMs: 10, forMs: 2 * TTL, loadMs: LOAD_MS, failing: ['bad'] })));
      const answers = done.flatMap((d) => d.answers);
      const loads = done.flatMap((d) => d.loads);
      const events = done.flatMap((d) => d.events);
      // Before and after its expiry, every caller of the failing key got its one value: never an error.
      expect(done.flatMap((d) => d.errors)).toEqual([]);
      expect(new Set(answers.filter((a) => a.key === 'bad').map((a) => a.made.run))).toEqual(new Set(['fill.bad']));

      const bad = loads.filter((l) => l.key === 'bad').sort((x, y) => x.start - y.start);
      // Each process won the refresh lock of the entry at most once (a loss may be tried again, a failure
      // is not), and every won refresh ran the loader and failed in the background, unseen by callers.
      const won = done.map((d) => d.events.filter((e) => e.name === 'refresh' && e.key === 'bad' && e.outcome === 'won').length);
      expect(won.every((n) => n <= 1)).toBe(true);
      expect(won.reduce((x, y) => x + y, 0)).toBeGreaterThanOrEqual(1);
      expect(events.filter((e) => e.name === 'refreshError' && e.key === 'bad')).toHaveLength(won.reduce((x, y) => x + y, 0));
      // Never two loaders of it at once while it was fresh.
      const early = bad.filter((l) => l.start < expiredFrom);
      expect(early.filter((l, i) => i > 0 && l.start < (early[i - 1] as Load).end)).toEqual([]);
      // No caller of it missed before it expired; after, the miss path ran and fell back to the kept value.
      const badEvents = events.filter((e) => e.key === 'bad');
      expect(badEvents.filter((e) => e.name === 'miss' && e.at < expiredFrom)).toEqual([]);
      expect(badEvents.filter((e) => e.name === 'miss').length).toBeGreaterThan(0);
      expect(new Set(badEvents.filter((e) => e.name === 'stale').map((e) => e.reason))).toEqual(new Set(['loaderError']));

      // The other key was not held back by the failing one: it kept being refreshed, one chain.
      const good = loads.filter((l) => l.key === 'good').sort((x, y) => x.start - y.start);
      expect(good.length).toBeGreaterThanOrEqual(2);
      expect(good.map((l) => l.refreshed)).toEqual(['fill.good', ...good.slice(0, -1).map((l) => l.run)]);
      expect(events.filter((e) => e.key === 'good' && ['miss', 'stale', 'loaderError', 'refreshError'].includes(e.name))).toEqual([]);
    } finally {
      await Promise.all(workers.map(stop));
    }
  }, 30_000);
});
