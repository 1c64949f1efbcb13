/**
 * `npm run bench:hit [-- --quick] [--runs R] [--rate N] [--processes 1,4] [--keys 20,2000] [--variants bare,ours,…] [--cpu-prof DIR] [--window-prof DIR]
 *   [--warmup-ms W] [--duration-ms D] [--loops L]`: client CPU per fresh hit against a bare GET + decode of
 * the same bytes, and per L1 hit against a bare lru-cache get; P = 1 and 4 processes, K = 20 and 2,000
 * keys, L concurrent loops each (10), medians of R runs (3); `--rate N` paces each process at N requests/s (CPU per
 * request at equal throughput). `npm run bench` prints the same table (unpaced).
 */
import { parseArgs } from 'node:util';
import { provideRedis } from '../test/support/redis-server.js';
import { hitCost, hitMarkdown, type HitSizes, type HitVariant } from './lib/hit-cost.js';

const { values: args } = parseArgs({ options: { quick: { type: 'boolean' }, runs: { type: 'string' }, rate: { type: 'string' }, processes: { type: 'string' }, keys: { type: 'string' }, 'cpu-prof': { type: 'string' }, 'window-prof': { type: 'string' }, variants: { type: 'string' }, 'warmup-ms': { type: 'string' }, 'duration-ms': { type: 'string' }, loops: { type: 'string' } } });
const sizes: HitSizes = {
  processes: (args.processes ?? '1,4').split(',').map(Number),
  keys: (args.keys ?? '20,2000').split(',').map(Number),
  loops: args.loops === undefined ? 10 : Number(args.loops),
  warmupMs: args['warmup-ms'] !== undefined ? Number(args['warmup-ms']) : args.quick ? 3000 : 6000,
  durationMs: args['duration-ms'] !== undefined ? Number(args['duration-ms']) : args.quick ? 1000 : 3000,
  runs: args.runs === undefined ? 3 : Number(args.runs),
  rate: args.rate === undefined ? 0 : Number(args.rate),
  ...(args['cpu-prof'] ? { cpuProfDir: args['cpu-prof'] } : {}),
  ...(args['window-prof'] ? { windowProfDir: args['window-prof'] } : {}),
  ...(args.variants ? { variants: args.variants.split(',') as HitVariant[] } : {}),
};
const store = await provideRedis();
try {
  const figures = await hitCost(store.url, sizes, (l) => console.log(l));
  console.log(`\nnpm run bench:hit -- ${process.argv.slice(2).join(' ')}`.trim());
  console.log(hitMarkdown(figures, sizes).join('\n'));
} finally {
  await store.stop();
}
