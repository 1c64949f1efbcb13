/**
 * `npm run bench:hit [-- --quick] [--runs R] [--rate N] [--processes 1,4] [--keys 20,2000] [--clients ioredis,node-redis] [--variants bare,ours,…] [--cpu-prof DIR] [--window-prof DIR]
 *   [--warmup-ms W] [--duration-ms D] [--loops L]`: client CPU per fresh hit against a bare GET + decode of
 * the same bytes on the same client family, and per L1 hit against a bare lru-cache get; P = 1 and 4 processes, K = 20 and 2,000
 * keys, L concurrent loops each (10), each variant on ioredis and on node-redis (`--clients`, both by default),
 * medians of R runs (3); `--rate N` paces each process at N requests/s (CPU per
 * request at equal throughput). `npm run bench` prints the same table (unpaced, ioredis only).
 * `ours-base` (and `ours-options-base`) need SG_BENCH_BASE, another build's dist/index.js.
 */
import { parseArgs } from 'node:util';
import { provideRedis } from '../test/support/redis-server.js';
import { EXTRA_HIT_VARIANTS, HIT_CLIENTS, HIT_VARIANTS, hitCost, hitMarkdown, type HitClient, type HitSizes, type HitVariant } from './lib/hit-cost.js';

const { values: args } = parseArgs({ options: { quick: { type: 'boolean' }, runs: { type: 'string' }, rate: { type: 'string' }, processes: { type: 'string' }, keys: { type: 'string' }, 'cpu-prof': { type: 'string' }, 'window-prof': { type: 'string' }, variants: { type: 'string' }, clients: { type: 'string' }, 'warmup-ms': { type: 'string' }, 'duration-ms': { type: 'string' }, loops: { type: 'string' } } });

/** `--name a,b` checked against the names known, so a typo fails before minutes of runs. */
function list<T extends string>(flag: string, value: string, known: readonly T[]): T[] {
  const names = value.split(',').filter((n) => n !== '');
  const unknown = names.filter((n) => !(known as readonly string[]).includes(n));
  if (unknown.length > 0 || names.length === 0) throw new Error(`--${flag}: unknown ${unknown.join(', ') || '(none given)'}; known: ${known.join(', ')}`);
  return names as T[];
}

/** The command line as typed, with the SG_BENCH_* settings it ran under (quoted where a shell needs it). */
function commandLine(): string {
  const quote = (s: string) => (/^[\w,./=:@%+-]+$/.test(s) ? s : `'${s.replaceAll("'", `'\\''`)}'`);
  const env = ['SG_BENCH_BASE', 'SG_BENCH_SOURCE', 'SG_BENCH_NODE_FLAGS'].flatMap((k) => (process.env[k] === undefined ? [] : [`${k}=${quote(process.env[k])}`]));
  const rest = process.argv.slice(2);
  return [...env, 'npm run bench:hit', ...(rest.length > 0 ? ['--', ...rest.map(quote)] : [])].join(' ');
}

const variants = args.variants ? list<HitVariant>('variants', args.variants, [...HIT_VARIANTS, ...EXTRA_HIT_VARIANTS]) : undefined;
if (variants?.some((v) => v.endsWith('-base')) && process.env.SG_BENCH_BASE === undefined) throw new Error('ours-base and ours-options-base need SG_BENCH_BASE: another build\'s dist/index.js');
const sizes: HitSizes = {
  processes: (args.processes ?? '1,4').split(',').map(Number),
  keys: (args.keys ?? '20,2000').split(',').map(Number),
  loops: args.loops === undefined ? 10 : Number(args.loops),
  warmupMs: args['warmup-ms'] !== undefined ? Number(args['warmup-ms']) : args.quick ? 3000 : 6000,
  durationMs: args['duration-ms'] !== undefined ? Number(args['duration-ms']) : args.quick ? 1000 : 3000,
  runs: args.runs === undefined ? 3 : Number(args.runs),
  rate: args.rate === undefined ? 0 : Number(args.rate),
  clients: list<HitClient>('clients', args.clients ?? HIT_CLIENTS.join(','), HIT_CLIENTS),
  command: commandLine(),
  ...(args['cpu-prof'] ? { cpuProfDir: args['cpu-prof'] } : {}),
  ...(args['window-prof'] ? { windowProfDir: args['window-prof'] } : {}),
  ...(variants ? { variants } : {}),
};
const store = await provideRedis();
try {
  const figures = await hitCost(store.url, sizes, (l) => console.log(l));
  console.log(hitMarkdown(figures, sizes).join('\n'));
} finally {
  await store.stop();
}
