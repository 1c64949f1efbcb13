/**
 * `node --import tsx bench/trace-summary.ts DIR`: reads what `npm run bench -- --trace DIR` wrote and
 * splits each scenario × contender's answers into those older than ttl (served in a stale window) and
 * the rest: how many, their latency (from the scheduled arrival), how late they started (the
 * process's event loop or CPU), and their service time (started → answered: the cache's own work).
 * A tail that sits in one class and in service time is the cache's; one that sits in start lag across
 * every class is the machine's.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { percentile } from './lib/scenarios.js';

interface Trace {
  scenario: string;
  contender: string;
  ttlMs: number;
  calls: [string, number, number, number, number][];
}

const dir = process.argv[2];
if (!dir) throw new Error('usage: bench/trace-summary.ts DIR');
const groups = new Map<string, Trace[]>();
for (const f of readdirSync(dir).filter((n) => n.endsWith('.json')).sort()) {
  const t = JSON.parse(readFileSync(`${dir}/${f}`, 'utf8')) as Trace;
  const name = `${t.scenario} · ${t.contender}`;
  groups.set(name, [...(groups.get(name) ?? []), t]);
}
const ms = (xs: number[], p: number) => percentile(xs, p).toFixed(2);
for (const [name, traces] of groups) {
  const all = traces.flatMap((t) => t.calls.map((c) => ({ latency: c[3] - c[1], lag: c[2] - c[1], service: c[3] - c[2], old: c[4] > t.ttlMs })));
  const overall = all.map((c) => c.latency).sort((a, b) => a - b);
  const p99 = percentile(overall, 99);
  console.log(`${name}: ${all.length} answers, p99 ${p99.toFixed(2)} ms`);
  for (const [label, old] of [['older than ttl', true], ['within ttl', false]] as const) {
    const cls = all.filter((c) => c.old === old);
    const sorted = (f: (c: (typeof cls)[number]) => number) => cls.map(f).sort((a, b) => a - b);
    const lat = sorted((c) => c.latency);
    const lag = sorted((c) => c.lag);
    const svc = sorted((c) => c.service);
    console.log(
      `  ${label}: ${cls.length} (${((100 * cls.length) / Math.max(1, all.length)).toFixed(1)}%), ${cls.filter((c) => c.latency >= p99).length} at or above the overall p99; ` +
        `latency p50/p90/p99 ${ms(lat, 50)}/${ms(lat, 90)}/${ms(lat, 99)}; start lag p99 ${ms(lag, 99)}; service p50/p90/p99 ${ms(svc, 50)}/${ms(svc, 90)}/${ms(svc, 99)}`,
    );
  }
}
