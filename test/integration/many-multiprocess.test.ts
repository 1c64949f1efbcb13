/**
 * getOrComputeMany across real processes (issue #11, part 4): P forked processes × C concurrent
 * batches over the same N cold keys; every key must be loaded exactly once in total.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedisServer, type RedisServer } from '../support/redis-server.js';

const WORKER = fileURLToPath(new URL('../support/batch-worker.ts', import.meta.url));
const PROCESSES = 4;

let server: RedisServer;
let admin: Redis;
const children: ChildProcess[] = [];

function start(prefix: string): Promise<ChildProcess> {
  const child = fork(WORKER, [], {
    execArgv: ['--import', 'tsx'],
    env: { ...process.env, SG_REDIS_URL: server.url, SG_ADMIN_URL: server.adminUrl, SG_PREFIX: prefix },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  children.push(child);
  return new Promise((resolve) => child.once('message', () => resolve(child)));
}

interface Result {
  ok: boolean;
  values?: unknown[];
  code?: string;
  message?: string;
}

function run(child: ChildProcess, id: number, batches: string[][], startAt: number, counters: string, loaderMs = 200): Promise<Result[]> {
  return new Promise((resolve) => {
    const onMessage = (m: { ev: string; id: number; results: Result[] }) => {
      if (m.ev !== 'done' || m.id !== id) return;
      child.off('message', onMessage);
      resolve(m.results);
    };
    child.on('message', onMessage);
    child.send({ op: 'many', id, batches, ttl: 60_000, loaderMs, startAt, counters });
  });
}

beforeAll(async () => {
  server = await startRedisServer();
  admin = new Redis(server.adminUrl);
});

afterAll(async () => {
  // A test may already have told its workers to exit: writing to a closed channel raises EPIPE
  // (asynchronously, as an uncaught error), so only live channels are told, and a send that races
  // the child's own exit is reported to the callback instead of thrown.
  for (const c of children) if (c.connected) c.send({ op: 'exit' }, () => undefined);
  await Promise.all(children.map((c) => new Promise((r) => (c.exitCode !== null ? r(undefined) : c.once('exit', r)))));
  admin.disconnect();
  await server.stop();
});

describe(`getOrComputeMany: ${PROCESSES} processes, the same cold keys at once`, () => {
  it('loads every key exactly once in total, each process in at most one loadMany call per batch, and every caller gets every value', async () => {
    const workers = await Promise.all(Array.from({ length: PROCESSES }, () => start('many1')));
    const keys = Array.from({ length: 40 }, (_, i) => `k${i}`);
    // Overlapping batches: each caller asks for a different rotation of the same keys, plus absent ones.
    const batches = (w: number) => Array.from({ length: 5 }, (_, c) => [...keys.slice((w * 5 + c) % 40), ...keys.slice(0, (w * 5 + c) % 40), 'absent1']);
    const startAt = Date.now() + 300;
    // Every process starts all its callers (at startAt) before the parent awaits any.
    const pending = workers.map((w, i) => run(w, 1, batches(i), startAt, 'c1'));
    const results = (await Promise.all(pending)).flat();
    expect(results.every((r) => r.ok)).toBe(true);
    for (const r of results) {
      const values = r.values as unknown[];
      expect(values).toHaveLength(41);
      expect(values.at(-1) ?? undefined).toBeUndefined(); // a key left out of the Map: not found (IPC turns undefined into null)
      expect(values.slice(0, 40).every((v) => typeof v === 'string' && v.startsWith('v:k'))).toBe(true);
    }
    const loads = await admin.hgetall('c1:loads');
    for (const key of keys) expect(Number(loads[key]), key).toBe(1);
    // The absent key is not cached: it may be asked for again, but never by two processes at once.
    expect(Number(loads.absent1)).toBeGreaterThanOrEqual(1);
    const calls = Number(await admin.get('c1:calls'));
    expect(calls).toBeLessThanOrEqual(PROCESSES * 5 + Number(loads.absent1));
    for (const w of workers) w.send({ op: 'exit' });
  }, 60_000);
});
