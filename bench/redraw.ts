/**
 * `node --import tsx bench/redraw.ts bench/results/<date>.json`: rewrites latest.md and rebuilds.svg
 * next to a results file from its rows (after a change to how they are presented; the figures are the
 * file's). The latency charts need raw samples, which the JSON does not keep: they stay as written.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { markdown, ratioChart, type Report } from './lib/report.js';

const file = process.argv[2];
if (!file) throw new Error('usage: node --import tsx bench/redraw.ts bench/results/<date>.json');
const report = { ...(JSON.parse(readFileSync(file, 'utf8')) as Omit<Report, 'latencySamples'>), latencySamples: {} };
for (const [name, text] of [['latest.md', markdown(report)], ['rebuilds.svg', ratioChart(report)]] as const) {
  writeFileSync(join(dirname(file), name), text);
  console.log(`wrote ${join(dirname(file), name)}`);
}
