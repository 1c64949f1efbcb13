/**
 * `npm run demo`: 4 processes × 100 callers on one cold key, a 200 ms loader, under lock modes
 * none, local and single. Prints loader runs and caller latency. Starts a throwaway Redis when
 * REDIS_URL is unset (local redis-server, else testcontainers).
 */
import { Redis } from 'ioredis';
import { runsKey } from '../test/support/counting-loader.js';
import { provideRedis } from '../test/support/redis-server.js';
import { startWorkers } from '../test/support/workers.js';

const PROCESSES = 4;
const CALLERS = 100;
const LOADER_MS = 200;

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] as number;
}

const redis = await provideRedis();
console.log(`Redis: ${redis.url} (${redis.source}); ${PROCESSES} processes × ${CALLERS} callers; loader ${LOADER_MS} ms; cold key per mode`);
const prefix = `demo${Date.now()}`;
const workers = await startWorkers(PROCESSES, { url: redis.url, prefix });
const admin = new Redis(redis.url);
const rows: string[][] = [];
try {
  for (const mode of ['none', 'local', 'single'] as const) {
    const key = `${prefix}:home:${mode}`;
    const ids = workers.map((w) => w.call(key, CALLERS, { ttl: 60_000, lock: mode, waitTimeout: 10_000 }, { kind: 'sleep', ms: LOADER_MS }));
    const results = (await Promise.all(workers.map((w, i) => w.results(ids[i] as number)))).flat();
    const ms = results.map((r) => r.ms).sort((a, b) => a - b);
    const errors = results.filter((r) => !r.ok).length;
    const runs = Number(await admin.get(runsKey(key)));
    rows.push([mode, String(runs), percentile(ms, 50).toFixed(1), percentile(ms, 99).toFixed(1), String(errors)]);
  }
} finally {
  await Promise.all(workers.map((w) => w.stop()));
  admin.disconnect();
  await redis.stop();
}
const head = ['lock', 'loader runs', 'p50 ms', 'p99 ms', 'errors'];
const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] as string).length)));
const line = (cells: string[]) => `| ${cells.map((c, i) => c.padStart(widths[i] as number)).join(' | ')} |`;
console.log(`\n${line(head)}\n|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|\n${rows.map(line).join('\n')}`);
console.log(`\n(${PROCESSES * CALLERS} calls per mode; ideal loader runs: 1)`);
