/**
 * `npm run bench:failover [-- --quick] [--runs R]`: the failover figures of issue #13 alone (the full
 * `npm run bench` includes them): the degraded-mode loader ratio under periodic stalls (`DEBUG SLEEP
 * 1.5` every 3 s; 4 processes × 50 callers, 20 keys, ttl 1 s, loader 100 ms, 15 s), with the degraded
 * memo and without, and the cost of `replicaAck` per rebuild.
 */
import { parseArgs } from 'node:util';
import { failoverMarkdown } from './lib/report.js';
import { replicaAckCost, stallRatio, type StallSizes } from './lib/failover.js';

const { values: args } = parseArgs({ options: { quick: { type: 'boolean', default: false }, runs: { type: 'string' } } });
const quick = args.quick ?? false;
const runs = args.runs === undefined ? 1 : Number(args.runs);
const sizes: StallSizes = { processes: 4, callers: quick ? 25 : 50, keys: 20, durationMs: quick ? 7000 : 15_000, ttlMs: 1000, loaderMs: 100 };
const stall = [];
for (let r = 0; r < runs; r++) for (const memo of [true, false]) stall.push(await stallRatio(sizes, memo));
const replicaAck = await replicaAckCost(quick ? 300 : 2000, runs);
console.log(failoverMarkdown({ sizes, stall, replicaAck }).join('\n'));
