/**
 * Failover and partial-outage figures (issue #13): the degraded-mode loader ratio under periodic
 * stalls, and the cost of `replicaAck` per rebuild. Real redis-server processes started here.
 */
import { Redis } from 'ioredis';
import { createCache, type Cache } from '../../src/index.js';
import { startRedisServer } from '../../test/support/redis-server.js';
import { measure, medianOf, type LatencyFigure } from './micro.js';

export interface StallSizes {
  readonly processes: number;
  readonly callers: number;
  readonly keys: number;
  readonly durationMs: number;
  readonly ttlMs: number;
  readonly loaderMs: number;
}

export interface StallFigure {
  readonly degradedMemo: boolean;
  readonly loaderRuns: number;
  /** One loader run per key per ttl across the fleet. */
  readonly ideal: number;
  readonly ratio: number;
  readonly degradedRuns: number;
  readonly calls: number;
  readonly failed: number;
}

/** The stall: `DEBUG SLEEP 1.5` every 3 s (Redis answers half of the time), as measured in the issue. */
export const STALL = { sleepSec: 1.5, periodMs: 3000 } as const;

/**
 * The slow-Redis pattern on one real redis-server. `processes` cache instances, each with its own
 * ioredis client, breaker and degraded memo (a process each, inside one Node process to spare the
 * shared cores), run `callers` closed-loop callers on `keys` hot keys; lock 'single', L1 off,
 * `maxRetriesPerRequest: 1`, redisTimeout 1 s and breakerCooldown 2 s (stated: the defaults when the
 * scenario was designed): the resonance (period = cooldown + timeout).
 */
export async function stallRatio(s: StallSizes, degradedMemo: boolean): Promise<StallFigure> {
  const server = await startRedisServer();
  const admin = new Redis(server.adminUrl);
  const clients = Array.from({ length: s.processes }, () => {
    const c = new Redis(server.url, { maxRetriesPerRequest: 1 });
    c.on('error', () => undefined);
    return c;
  });
  const caches: Cache[] = clients.map((redis) => createCache({ redis, prefix: 'stall', lock: 'single', redisTimeout: 1000, breakerCooldown: 2000, ...(degradedMemo ? {} : { degradedMemo: 0 }) }));
  let loaderRuns = 0;
  let degradedRuns = 0;
  for (const cache of caches) cache.on('computed', (e) => void (e.lock === 'degraded' && degradedRuns++));
  const loader = async (): Promise<number> => {
    loaderRuns++;
    await new Promise((r) => setTimeout(r, s.loaderMs));
    return Date.now();
  };
  let calls = 0;
  let failed = 0;
  const started = Date.now();
  const end = started + s.durationMs;
  const stall = (): void => void admin.call('DEBUG', 'SLEEP', String(STALL.sleepSec)).catch(() => undefined);
  stall();
  const stalls = setInterval(stall, STALL.periodMs);
  const caller = async (cache: Cache, n: number): Promise<void> => {
    let i = n;
    while (Date.now() < end) {
      i = (i * 7 + 3) % s.keys;
      calls++;
      await cache.getOrCompute(`k${i}`, loader, s.ttlMs).catch(() => void failed++);
      await new Promise((r) => setTimeout(r, 5));
    }
  };
  await Promise.all(caches.flatMap((cache) => Array.from({ length: s.callers }, (_, n) => caller(cache, n))));
  clearInterval(stalls);
  const elapsed = Date.now() - started;
  await Promise.all(caches.map((c) => c.close()));
  for (const c of clients) c.disconnect();
  admin.disconnect();
  await server.stop();
  const ideal = s.keys * Math.ceil(elapsed / s.ttlMs);
  return { degradedMemo, loaderRuns, ideal, ratio: loaderRuns / ideal, degradedRuns, calls, failed };
}

/**
 * One rebuild (a miss: read, grant, loader, fenced write) on a primary with one replica in sync, with
 * `replicaAck: { replicas: 1, timeout: 100 }` and without: the acknowledgement's cost is one WAIT
 * round trip after the grant and one after the write.
 */
export async function replicaAckCost(ops: number, runs: number): Promise<LatencyFigure[]> {
  const primary = await startRedisServer(['--repl-diskless-sync-delay', '0']);
  const replica = await startRedisServer(['--replicaof', primary.host, String(primary.port)]);
  const check = new Redis(replica.adminUrl);
  while (!(await check.info('replication')).includes('master_link_status:up')) await new Promise((r) => setTimeout(r, 20));
  check.disconnect();
  const plain = new Redis(primary.adminUrl);
  const acked = new Redis(primary.adminUrl);
  const off = createCache({ redis: plain, prefix: 'ackoff' });
  const on = createCache({ redis: acked, prefix: 'ackon', replicaAck: { replicas: 1, timeout: 100 } });
  let i = 0;
  const rebuild = (cache: Cache) => () => cache.getOrCompute(`k${i++}`, () => i, 60_000);
  const all: LatencyFigure[][] = [];
  for (let r = 0; r < runs; r++) {
    all.push([
      await measure('rebuild (miss → grant → write), replicaAck off', ops, rebuild(off)),
      await measure('rebuild, replicaAck { replicas: 1, timeout: 100 }', ops, rebuild(on)),
    ]);
  }
  await Promise.all([off.close(), on.close()]);
  plain.disconnect();
  acked.disconnect();
  await Promise.all([replica.stop(), primary.stop()]);
  return medianOf(all);
}
