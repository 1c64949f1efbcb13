/**
 * `npm run bench:heap [-- --quick] [--loader-runs N] [--runs R] [--in-flight F]`
 *
 * Retained heap (after full GC) and RSS over N loader runs (distinct keys, instant loader, short ttl),
 * with L1 off and with a small L1, each variant in a fresh --expose-gc process against a redis-server
 * started here; medians of R runs per checkpoint. Prints a markdown table with the command.
 * N defaults to 1,000,000 (100,000 with --quick, as in npm run bench -- --quick).
 */
import { parseArgs } from 'node:util';
import { provideRedis } from '../test/support/redis-server.js';
import { DEFAULT_IN_FLIGHT, heapGrowth, heapMarkdown, heapNote } from './lib/heap.js';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    'loader-runs': { type: 'string' },
    runs: { type: 'string' },
    'in-flight': { type: 'string' },
  },
});
const quick = args.quick ?? false;
const total = Number(args['loader-runs'] ?? (quick ? 100_000 : 1_000_000));
const runs = Number(args.runs ?? 1);
const inFlight = Number(args['in-flight'] ?? DEFAULT_IN_FLIGHT);
const extra = process.argv.slice(2).join(' ');
const command = extra ? `npm run bench:heap -- ${extra}` : 'npm run bench:heap';

const store = await provideRedis();
try {
  const figures = await heapGrowth(store.url, { total, runs, inFlight, log: (l) => console.log(l) });
  console.log(`\nCommand: \`${command}\`; Node ${process.version}.`);
  console.log(heapMarkdown(figures, heapNote(total, runs, inFlight)).join('\n'));
} finally {
  await store.stop();
}
