/**
 * A forked "app server" for getOrComputeMany tests (and the batch bench): its own connection and
 * cache, driven over IPC. The loader's counters go to Redis through a separate admin connection.
 *
 * Parent → worker: { op: 'many', id, batches: string[][], ttl, loaderMs, startAt } | { op: 'exit' }
 *   every batch is one getOrComputeMany call, all started at once at `startAt` (epoch ms);
 * Worker → parent: { ev: 'ready' } | { ev: 'done', id, results: { ok, values?, code?, message?, ms }[] }
 * Counters: HINCRBY <counters>:loads <key> 1 per key loaded, INCR <counters>:calls per loadMany call.
 */
import { Redis } from 'ioredis';
import { createCache } from '../../src/index.js';

interface ManyMsg {
  op: 'many';
  id: number;
  batches: string[][];
  ttl: number;
  loaderMs: number;
  startAt: number;
  counters: string;
}

const url = process.env.SG_REDIS_URL as string;
const redis = new Redis(url, { maxRetriesPerRequest: 1 });
const admin = new Redis(process.env.SG_ADMIN_URL ?? url, { maxRetriesPerRequest: 1 });
const cache = createCache({ redis, prefix: process.env.SG_PREFIX ?? 'sg' });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function many(m: ManyMsg): Promise<void> {
  const loadMany = async (missing: string[]) => {
    await admin.incr(`${m.counters}:calls`);
    const tx = admin.multi();
    for (const key of missing) tx.hincrby(`${m.counters}:loads`, key, 1);
    await tx.exec();
    await sleep(m.loaderMs);
    return new Map(missing.filter((k) => !k.startsWith('absent')).map((k) => [k, `v:${k}`]));
  };
  await sleep(Math.max(0, m.startAt - Date.now()));
  const results = await Promise.all(
    m.batches.map(async (keys) => {
      const t0 = performance.now();
      try {
        const values = await cache.getOrComputeMany(keys, loadMany, { ttl: m.ttl, waitTimeout: 30_000 });
        return { ok: true, values, ms: performance.now() - t0 };
      } catch (error) {
        const e = error as { code?: string; message?: string };
        return { ok: false, code: e.code, message: e.message, ms: performance.now() - t0 };
      }
    }),
  );
  process.send?.({ ev: 'done', id: m.id, results });
}

process.on('message', (m: ManyMsg | { op: 'exit' }) => {
  if (m.op === 'exit') {
    void cache.close().then(() => {
      redis.disconnect();
      admin.disconnect();
      process.exit(0);
    });
    return;
  }
  void many(m);
});

void cache.ready().then(() => process.send?.({ ev: 'ready' }));
