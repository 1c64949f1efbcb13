/**
 * `npm run bench:tracking [-- --quick] [--runs R] [--processes 1,4,16] [--modes notes,tracking,tracking+sharded] [--out FILE]`:
 * L1 kept by notes against L1 kept by the server, and tracking with sharded notes, side by side in
 * one run, on P separate reader processes and one writer process (bench/lib/tracking.ts says what is
 * measured and how). `--quick`: a smoke run (1 run, no warm-up run, fewer writes and deletes, short hit windows).
 * Always on a redis-server of its own (bench/lib/server.ts): its figures are server-wide counters.
 * `--out FILE`: also writes the table and the per-run lines there.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { parseArgs } from 'node:util';
import { ownRedis } from './lib/server.js';
import { TRACKING_MODES, trackingBench, trackingMarkdown, type TrackingMode, type TrackingSizes } from './lib/tracking.js';

const { values: args } = parseArgs({ options: { quick: { type: 'boolean' }, runs: { type: 'string' }, processes: { type: 'string' }, modes: { type: 'string' }, out: { type: 'string' } } });
const quick = args.quick ?? false;

/** `--modes a,b` checked against the modes known, so a typo fails before minutes of runs. */
function modes(value: string): TrackingMode[] {
  const known = Object.keys(TRACKING_MODES);
  const given = value.split(',').filter((m) => m !== '');
  const unknown = given.filter((m) => !known.includes(m));
  if (unknown.length > 0 || given.length === 0) throw new Error(`--modes: unknown ${unknown.join(', ') || '(none given)'}; known: ${known.join(', ')}`);
  return given as TrackingMode[];
}

const rest = process.argv.slice(2);
const sizes: TrackingSizes = {
  processes: (args.processes ?? '1,4,16').split(',').map(Number),
  modes: modes(args.modes ?? Object.keys(TRACKING_MODES).join(',')),
  runs: args.runs === undefined ? (quick ? 1 : 5) : Number(args.runs),
  warmupRuns: quick ? 0 : 1,
  writes: quick ? 50 : 300,
  hitKeys: 20,
  hitWarmupMs: quick ? 300 : 1500,
  hitMs: quick ? 500 : 2000,
  deletes: quick ? 30 : 100,
  deleteGapMs: 2,
  command: ['npm run bench:tracking', ...(rest.length > 0 ? ['--', ...rest] : [])].join(' '),
};

const lines: string[] = [];
const log = (line: string) => {
  lines.push(line);
  console.log(line);
};
const server = await ownRedis('npm run bench:tracking');
let table: string[];
try {
  table = trackingMarkdown(await trackingBench(server.url, server.adminUrl, sizes, log), sizes);
} finally {
  await server.stop();
}
console.log(`\n${table.join('\n')}`);
if (args.out) {
  mkdirSync(dirname(args.out), { recursive: true });
  writeFileSync(args.out, [`${new Date().toISOString()}`, '', ...table, '', 'Per run:', '', '```', ...lines, '```', ''].join('\n'));
  console.log(`\nwrote ${args.out}`);
}
