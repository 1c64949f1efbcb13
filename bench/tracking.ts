/**
 * `npm run bench:tracking [-- --runs R --caches 1,4,16]`: L1 kept by notes against L1 kept by the
 * server (`local.invalidation: 'tracking'`, docs/tracking.md), and tracking with `notes: 'sharded'`,
 * side by side in one run, for C caches on one Redis (C "processes": each cache has its own client and
 * connections; they share this Node process, so client CPU is the fleet's total):
 * - per write: Redis commands (INFO commandstats, every command the server ran, those inside scripts
 *   too), the bytes Redis sent (INFO stats: replies, notes and invalidations: the fan-out) and client CPU (process.cpuUsage, all caches) per `set()` of a key every cache holds in L1,
 *   counted until every other cache dropped its copy;
 * - per L1 hit: commands and client CPU per `get()` answered from L1;
 * - the staleness window of a remote delete: from `delete()` resolving in one cache to the last moment
 *   another cache's L1 still held the old value (polled every event-loop turn), p50 and p99.
 * Medians of R runs. Nothing here is asserted: it is measured.
 */
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { createCache, type Cache, type CacheOptions } from '../src/index.js';
import { provideRedis } from '../test/support/redis-server.js';
import { median, percentile } from './lib/scenarios.js';

const { values: args } = parseArgs({ options: { runs: { type: 'string' }, caches: { type: 'string' } } });
const RUNS = args.runs === undefined ? 3 : Number(args.runs);
const CACHES = (args.caches ?? '1,4,16').split(',').map(Number);
const WRITES = 300;
const HITS = 20_000;
const DELETES = 200;

type Mode = { readonly name: string; readonly options: Partial<CacheOptions> };
const MODES: readonly Mode[] = [
  { name: 'notes', options: { local: { max: 10_000 } } },
  { name: 'tracking', options: { local: { max: 10_000, invalidation: 'tracking' } } },
  { name: 'tracking + sharded notes', options: { notes: 'sharded', local: { max: 10_000, invalidation: 'tracking' } } },
];

const store = await provideRedis();
const admin = new Redis(store.adminUrl);

/** Bytes the server has sent so far (INFO stats: replies, pub/sub messages, invalidations). */
async function bytesOut(): Promise<number> {
  return Number(/total_net_output_bytes:(\d+)/.exec(await admin.info('stats'))?.[1]);
}

/** Every command the server ran so far (INFO commandstats, summed). */
async function commands(): Promise<number> {
  const info = await admin.info('commandstats');
  return [...info.matchAll(/calls=(\d+)/g)].reduce((n, m) => n + Number(m[1]), 0);
}

const cpuMs = (): number => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};
const l1Of = (cache: Cache) => (cache as unknown as { rt: { local: { get(key: string): { value: unknown } | undefined } } }).rt.local;
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Until every cache but the writer dropped `key` from L1. */
async function dropped(caches: readonly Cache[], key: string): Promise<void> {
  while (caches.some((c) => l1Of(c).get(key) !== undefined)) await turn();
}

/** Until `key` is in every cache's L1 (a read on a tracked connection may be refused by a late invalidation: read again). */
async function held(caches: readonly Cache[], key: string): Promise<void> {
  for (const c of caches) while (l1Of(c).get(key) === undefined) await c.get(key);
}

interface Figures { readonly writeCommands: number; readonly writeBytes: number; readonly writeCpuUs: number; readonly hitCommands: number; readonly hitCpuUs: number; readonly staleP50: number; readonly staleP99: number }

async function measure(mode: Mode, count: number, run: number): Promise<Figures> {
  const prefix = `bt${run}${mode.name.length}x${count}`;
  const clients = Array.from({ length: count + 1 }, () => new Redis(store.url));
  const [writer, ...readers] = clients.map((redis) => createCache({ redis, prefix, ...mode.options }));
  const all = [writer as Cache, ...readers];
  try {
    await Promise.all(all.map((c) => c.ready()));
    const keys = Array.from({ length: WRITES }, (_, i) => `w${i}`);
    for (const key of keys) await (writer as Cache).set(key, 'v0', 600_000);
    for (const key of keys) await held(readers, key);

    // Per write: set() of a key every reader holds, until every reader dropped it.
    let c0 = await commands();
    const b0 = await bytesOut();
    let t0 = cpuMs();
    for (const key of keys) {
      await (writer as Cache).set(key, 'v1', 600_000);
      await dropped(readers, key);
    }
    const writeCpuUs = ((cpuMs() - t0) * 1000) / WRITES;
    const writeCommands = ((await commands()) - c0 - 1) / WRITES;
    const writeBytes = ((await bytesOut()) - b0) / WRITES;

    // Per L1 hit.
    const hot = readers[0] as Cache;
    await held([hot], 'w0');
    c0 = await commands();
    t0 = cpuMs();
    for (let i = 0; i < HITS; i++) await hot.get('w0');
    const hitCpuUs = ((cpuMs() - t0) * 1000) / HITS;
    const hitCommands = ((await commands()) - c0 - 1) / HITS;

    // Staleness of a remote delete, seen by every reader.
    const windows: number[] = [];
    for (let i = 0; i < DELETES; i++) {
      const key = `d${i}`;
      await (writer as Cache).set(key, 'old', 600_000);
      await held(readers, key);
      const lastSeen = readers.map(() => Number.NEGATIVE_INFINITY);
      let polling = true;
      const poll = (async () => {
        while (polling) {
          const now = performance.now();
          readers.forEach((r, j) => {
            if (l1Of(r).get(key) !== undefined) lastSeen[j] = now;
          });
          await turn();
        }
      })();
      await (writer as Cache).delete(key);
      const resolvedAt = performance.now();
      await dropped(readers, key);
      polling = false;
      await poll;
      for (const seen of lastSeen) windows.push(Math.max(0, seen - resolvedAt));
    }
    windows.sort((a, b) => a - b);
    return { writeCommands, writeBytes, writeCpuUs, hitCommands, hitCpuUs, staleP50: percentile(windows, 50), staleP99: percentile(windows, 99) };
  } finally {
    await Promise.all(all.map((c) => c.close()));
    for (const c of clients) c.disconnect();
  }
}

try {
  const rows: string[] = [];
  for (const count of CACHES) {
    for (const mode of MODES) {
      const runs: Figures[] = [];
      for (let r = 0; r < RUNS; r++) {
        const f = await measure(mode, count, r);
        runs.push(f);
        console.error(`tracking · ${mode.name} · ${count} readers · run ${r + 1}/${RUNS}: ${JSON.stringify(f)}`);
      }
      const m = (k: keyof Figures) => median(runs.map((f) => f[k]));
      rows.push(`| ${count} | ${mode.name} | ${m('writeCommands').toFixed(1)} | ${m('writeBytes').toFixed(0)} | ${m('writeCpuUs').toFixed(0)} | ${m('hitCommands').toFixed(3)} | ${m('hitCpuUs').toFixed(2)} | ${m('staleP50').toFixed(2)} | ${m('staleP99').toFixed(2)} |`);
    }
  }
  console.log(`\nnpm run bench:tracking -- ${process.argv.slice(2).join(' ')}`.trim());
  console.log(`\n**L1 kept by notes vs by the server** (one writer cache and C reader caches in one Node process, each with its own ioredis client; ${WRITES} writes, ${HITS} L1 hits, ${DELETES} deletes; medians of ${RUNS} runs; client CPU is every cache's together):\n`);
  console.log('| readers C | mode | Redis commands / write | Redis bytes out / write | client CPU µs / write | Redis commands / L1 hit | client CPU µs / L1 hit | remote delete staleness p50 ms | p99 ms |');
  console.log('|---:|---|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of rows) console.log(r);
} finally {
  admin.disconnect();
  await store.stop();
}
