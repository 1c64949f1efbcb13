/**
 * `npm run bench:fleet [-- --quick] [--runs R] [--processes 1,4,16,32] [--keys 20,2000] [--callers C] [--out DIR]
 *   [--contenders single,cache-aside] [--cpu-prof DIR] [--warmup-ms MS] [--rate N]`:
 * the fleet scenario (bench/lib/fleet.ts) on its own; `npm run bench` runs it too (closed loop).
 * `--rate N`: open loop, N calls/s over the whole fleet whatever P is, plus an idle run per run
 * (FleetSizes.rate says why). Prints the table and
 * writes it, with the chart of CPU per request against P, to DIR (bench/results/fleet).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { redisToFlush } from './lib/server.js';
import { fleetBench, fleetMarkdown, type FleetSizes } from './lib/fleet.js';
import { fleetChart } from './lib/report.js';
import type { ContenderName } from './lib/contenders.js';

const { values: args } = parseArgs({
  options: { quick: { type: 'boolean' }, runs: { type: 'string' }, processes: { type: 'string' }, keys: { type: 'string' }, callers: { type: 'string' }, out: { type: 'string' }, 'cpu-prof': { type: 'string' }, 'warmup-ms': { type: 'string' }, contenders: { type: 'string' }, rate: { type: 'string' }, flush: { type: 'boolean' } },
});
const quick = args.quick ?? false;
const sizes: FleetSizes = {
  processes: (args.processes ?? (quick ? '1,4,16' : '1,4,16,32')).split(',').map(Number),
  keys: (args.keys ?? '20,2000').split(',').map(Number),
  callers: args.callers === undefined ? 4 : Number(args.callers),
  durationMs: quick ? 1500 : 4000,
  runs: args.runs === undefined ? 3 : Number(args.runs),
  warmupMs: args['warmup-ms'] === undefined ? (quick ? 3000 : 6000) : Number(args['warmup-ms']),
  ...(args['cpu-prof'] ? { cpuProfDir: args['cpu-prof'] } : {}),
  ...(args.rate ? { rate: Number(args.rate) } : {}),
};
const store = await redisToFlush('npm run bench:fleet', args.flush);
let figures;
try {
  figures = await fleetBench(store.url, sizes, (l) => console.log(l), args.contenders ? (args.contenders.split(',') as ContenderName[]) : undefined);
} finally {
  await store.stop();
}
const command = `npm run bench:fleet -- ${process.argv.slice(2).join(' ')}`.trim();
const table = [`\`${command}\` (${new Date().toISOString()})`, '', ...fleetMarkdown(figures, sizes)].join('\n');
console.log(`\n${table}`);
const dir = args.out ?? 'bench/results/fleet';
mkdirSync(dir, { recursive: true });
writeFileSync(`${dir}/latest.md`, `${table}\n`);
writeFileSync(`${dir}/cpu-per-request.svg`, fleetChart(figures));
console.log(`\nwrote ${dir}/latest.md, ${dir}/cpu-per-request.svg`);
