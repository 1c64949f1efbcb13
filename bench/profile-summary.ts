/**
 * `node --import tsx bench/profile-summary.ts DIR [--top N]`: sums the self time of every
 * `.cpuprofile` in DIR (what `--cpu-prof DIR` of bench:hit, bench:fleet or bench writes), by where
 * the code lives (this package's src/, ioredis, node-redis, msgpackr, lru-cache, Node's internals,
 * GC, idle) and by function, and prints both as shares of the busy (non-idle) time.
 *
 * Caveats: a profile covers the whole process, start-up (module loading, tsx) and warm-up included;
 * and V8 samples on a wall-clock interval, so a process descheduled on an oversubscribed machine
 * (16–32 processes on 2 cores) charges the wait to whatever was on its stack. Trust the shares of a
 * run with fewer busy processes than cores.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const { positionals, values } = parseArgs({ allowPositionals: true, options: { top: { type: 'string' } } });
const dir = positionals[0];
if (!dir) throw new Error('usage: bench/profile-summary.ts DIR [--top N]');
const top = Number(values.top ?? 25);

/** The bucket a frame's code belongs to. */
function area(url: string, name: string): string {
  if (name === '(idle)') return 'idle';
  if (name === '(garbage collector)') return 'GC';
  if (name === '(program)') return 'program (native, unattributed)';
  if (url.includes('/node_modules/ioredis')) return 'ioredis';
  if (url.includes('/node_modules/@redis/') || url.includes('/node_modules/redis')) return 'node-redis';
  if (url.includes('/node_modules/msgpackr')) return 'msgpackr';
  if (url.includes('/node_modules/lru-cache')) return 'lru-cache';
  if (url.includes('/src/')) return 'stampede-guard src/';
  // The compiled library (the hit benches run dist/, as users do); node_modules/ is matched above.
  if (url.includes('/dist/')) return 'stampede-guard dist/';
  if (url.includes('/bench/')) return 'bench harness';
  if (url.startsWith('node:') || url === '') return 'Node internals / native';
  return 'other';
}

const byArea = new Map<string, number>();
const byFn = new Map<string, number>();
let files = 0;
for (const f of readdirSync(dir).filter((n) => n.endsWith('.cpuprofile'))) {
  files++;
  const p = JSON.parse(readFileSync(join(dir, f), 'utf8')) as Profile;
  const frames = new Map(p.nodes.map((n) => [n.id, n.callFrame]));
  p.samples.forEach((id, i) => {
    const cf = frames.get(id);
    if (!cf) return;
    const us = p.timeDeltas[i] ?? 0;
    const a = area(cf.url, cf.functionName);
    byArea.set(a, (byArea.get(a) ?? 0) + us);
    if (a === 'idle') return;
    const where = `${cf.functionName || '(anonymous)'} ${cf.url.replace(/^.*\/(node_modules\/)?/, '')}:${cf.lineNumber + 1}`;
    byFn.set(where, (byFn.get(where) ?? 0) + us);
  });
}
const busy = [...byArea].filter(([a]) => a !== 'idle').reduce((s, [, us]) => s + us, 0);
const pct = (us: number) => `${((100 * us) / Math.max(1, busy)).toFixed(1)}%`;
console.log(`${files} profiles in ${dir}; busy time ${(busy / 1e6).toFixed(2)} s (idle ${((byArea.get('idle') ?? 0) / 1e6).toFixed(2)} s)\n`);
console.log('| where | share of busy time |\n|---|---:|');
for (const [a, us] of [...byArea].filter(([a]) => a !== 'idle').sort((x, y) => y[1] - x[1])) console.log(`| ${a} | ${pct(us)} |`);
console.log(`\n| function (self time) | share |\n|---|---:|`);
for (const [fn, us] of [...byFn].sort((x, y) => y[1] - x[1]).slice(0, top)) console.log(`| \`${fn}\` | ${pct(us)} |`);
