/**
 * `npm run bench:hit-layers [-- --runs R] [--ms D] [--keys K] [--only "name,name"]`: where a fresh hit's client CPU goes (issue 12 §1),
 * by peeling the library's layers off one at a time, side by side in one process and one run:
 * 1 process × 10 concurrent loops over 20 warm keys, no L1, each variant timed for D ms (default
 * 2,000) after a warm-up, interleaved over R runs (default 3), medians. Every variant reads and
 * decodes the same stored bytes; each adds one layer to the one above it:
 * - `GET + decode`: the bare client (ioredis getBuffer + msgpackr unpack);
 * - `GETRANGE + decode`: the read a fresh hit sends (GETRANGE up to maxValueBytes: the size cap inside
 *   Redis), on the bare client;
 * - `+ port`: the same through the client port (client/);
 * - `+ a promise hop`: the same wrapped in one more promise (what any layer's own promise costs);
 * - `+ Io`: bounded by redisTimeout, through the node's circuit breaker (io.ts);
 * - `+ Store.read`: the node's clock window, the envelope checked and judged fresh by its freshUntil,
 *   its value through the post-decode allow-list (codec.ts);
 * - `getOrCompute`: the whole call (options, L1 look-up, in-process flight, Rebuild, freshness, counters).
 * Runs the compiled library (dist/: `npm run build` first; the script does), as users do.
 */
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { Packr } from 'msgpackr';
import { provideRedis } from '../test/support/redis-server.js';
import { library } from './lib/library.js';
import { median } from './lib/scenarios.js';

const { values: args } = parseArgs({ options: { runs: { type: 'string' }, ms: { type: 'string' }, keys: { type: 'string' }, only: { type: 'string' } } });
const RUNS = args.runs === undefined ? 3 : Number(args.runs);
const MS = args.ms === undefined ? 2000 : Number(args.ms);
const K = args.keys === undefined ? 20 : Number(args.keys);
const LOOPS = 10;
const VALUE = { id: 42, name: 'Ada Lovelace', roles: ['admin', 'author'], profile: { city: 'London', since: 1843 } };
const TTL = 3_600_000;

type Internals = typeof import('../src/index.js') & {
  entryKeys: typeof import('../src/keys.js').entryKeys;
  decodeEntry: typeof import('../src/codec.js').decodeEntry;
};

const store = await provideRedis();
const redis = new Redis(store.url);
try {
  const { lib, from } = await library();
  // The internal modules of the same build (dist/ or src/), for the intermediate layers.
  const dir = from === 'dist' ? '../dist' : '../src';
  const internals = {
    ...lib,
    entryKeys: ((await import(`${dir}/keys.js`)) as typeof import('../src/keys.js')).entryKeys,
    decodeEntry: ((await import(`${dir}/codec.js`)) as typeof import('../src/codec.js')).decodeEntry,
  } as Internals;
  const prefix = 'layers';
  const cache = internals.createCache({ redis, prefix });
  const names = Array.from({ length: K }, (_, i) => `k${i}`);
  for (const k of names) await cache.set(k, VALUE, TTL);
  const keys = names.map((k) => internals.entryKeys(prefix, k));
  const packr: { unpack(b: Buffer): unknown } = new Packr({ useRecords: true, moreTypes: true, structuredClone: false, mapsAsObjects: false });
  // The cache's own collaborators (private fields of the composition root: this is a measurement, not an API).
  const deps = ((cache as unknown as { rt: unknown }).rt as { deps: { store: { read(key: string, keys: unknown): Promise<{ value: unknown }>; scripts: { getRange(k: string, end: string): Promise<Buffer> }; io: { run<T>(op: string, fn: () => Promise<T>, key: string): Promise<T> } } } }).deps;
  const scripts = deps.store.scripts;
  const io = deps.store.io;
  const capEnd = String(1_048_576);
  const loader = () => VALUE;
  const variants: [string, (i: number) => Promise<unknown>][] = [
    ['GET + decode', async (i) => packr.unpack((await redis.getBuffer(keys[i]!.value))!)],
    ['GETRANGE + decode', async (i) => packr.unpack(await redis.getrangeBuffer(keys[i]!.value, 0, capEnd))],
    ['+ port', async (i) => packr.unpack(await scripts.getRange(keys[i]!.value, capEnd))],
    ['+ a promise hop', (i) => new Promise((res, rej) => { scripts.getRange(keys[i]!.value, capEnd).then((r) => res(packr.unpack(r)), rej); })],
    ['+ Io', async (i) => packr.unpack(await io.run('read', () => scripts.getRange(keys[i]!.value, capEnd), names[i]!))],
    ['+ Store.read', async (i) => (await deps.store.read(names[i]!, keys[i]!)).value],
    ['getOrCompute', (i) => cache.getOrCompute(names[i]!, loader, TTL)],
  ];
  if (args.only !== undefined) { const keep = new Set(args.only.split(',')); for (let i = variants.length - 1; i >= 0; i--) if (!keep.has(variants[i]![0])) variants.splice(i, 1); }
  const figures = new Map<string, { cpu: number[]; user: number[]; sys: number[]; rps: number[] }>(variants.map(([n]) => [n, { cpu: [], user: [], sys: [], rps: [] }]));
  const timed = async (answer: (i: number) => Promise<unknown>, ms: number) => {
    let n = 0;
    const until = performance.now() + ms;
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    await Promise.all(Array.from({ length: LOOPS }, async () => {
      while (performance.now() < until) {
        await answer(Math.floor(Math.random() * K));
        n++;
      }
    }));
    const c = process.cpuUsage(c0);
    return { cpuUs: (c.user + c.system) / n, userUs: c.user / n, sysUs: c.system / n, rps: n / ((performance.now() - t0) / 1000) };
  };
  for (let r = 0; r < RUNS; r++) {
    for (const [name, answer] of variants) {
      await timed(answer, Math.min(500, MS / 4)); // warm-up (JIT)
      const f = await timed(answer, MS);
      figures.get(name)!.cpu.push(f.cpuUs);
      figures.get(name)!.user.push(f.userUs);
      figures.get(name)!.sys.push(f.sysUs);
      figures.get(name)!.rps.push(f.rps);
      console.error(`hit layers · ${name} · run ${r + 1}/${RUNS}: ${f.cpuUs.toFixed(2)} µs CPU/request, ${f.rps.toFixed(0)} req/s`);
    }
  }
  await cache.close();
  const base = median((figures.get('GET + decode') ?? [...figures.values()][0]!).cpu);
  console.log(`\nnpm run bench:hit-layers -- ${process.argv.slice(2).join(' ')}`.trim());
  console.log(`\n**Hit layers** (${from}/; 1 process × ${LOOPS} loops over ${K} warm keys, no L1, ${MS} ms per variant, medians of ${RUNS} interleaved runs):\n`);
  console.log('| variant | client CPU µs/request | user | system | ÷ GET + decode | req/s |');
  console.log('|---|---:|---:|---:|---:|---:|');
  for (const [name] of variants) {
    const f = figures.get(name)!;
    const cpu = median(f.cpu);
    console.log(`| ${name} | ${cpu.toFixed(2)} | ${median(f.user).toFixed(2)} | ${median(f.sys).toFixed(2)} | ${(cpu / base).toFixed(2)} | ${median(f.rps).toFixed(0)} |`);
  }
} finally {
  redis.disconnect();
  await store.stop();
}
