/**
 * `node --import tsx bench/redraw.ts bench/results/<date>.json`: redraws rebuilds.svg from a results
 * file (the chart needs only the rows; latency charts need raw samples, which the JSON does not keep).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ratioChart, type Report } from './lib/report.js';

const file = process.argv[2];
if (!file) throw new Error('usage: node --import tsx bench/redraw.ts bench/results/<date>.json');
const report = { ...(JSON.parse(readFileSync(file, 'utf8')) as Omit<Report, 'latencySamples'>), latencySamples: {} };
writeFileSync(join(dirname(file), 'rebuilds.svg'), ratioChart(report));
console.log(`wrote ${join(dirname(file), 'rebuilds.svg')}`);
