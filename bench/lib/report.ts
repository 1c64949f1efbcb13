/** Writes the benchmark's JSON, a markdown table and two SVG charts (drawn here, no chart library). */
import { mkdirSync, writeFileSync } from 'node:fs';
import { STALL, type StallFigure, type StallSizes } from './failover.js';
import { heapMarkdown, type HeapFigure, type HeapSample } from './heap.js';
import type { HttpFigure } from './http.js';
import type { LatencyFigure } from './micro.js';
import { refreshPoint, RA_FRACTION } from './contenders.js';
import { fleetMarkdown, type FleetFigure, type FleetSizes } from './fleet.js';
import { hitMarkdown, type HitFigure, type HitSizes } from './hit-cost.js';
import { percentile, REFRESH_AHEAD, REFRESH_AHEAD_SIZES, refreshFloor } from './scenarios.js';

export interface ScenarioRow {
  scenario: string;
  contender: string;
  skipped?: string;
  loaderRuns?: number;
  ideal?: number;
  ratio?: number;
  maxConcurrent?: number;
  p50?: number;
  p99?: number;
  max?: number;
  throughput?: number;
  staleShare?: number;
  /** In every run, every answer older than ttl carried a burst-fill value. */
  staleAllFromFill?: boolean;
  /** The p99 of each run, in run order. */
  p99Runs?: number[];
  /** Worker CPU (user + system) per counted call, from the warm-up to the end of a run, µs (median). */
  cpuUsPerCall?: number;
  errors?: number;
  unsettled?: number;
  calls?: number;
  originCallsWhileFailing?: number | undefined;
  /** The most loaders running at one instant over every key and process (median over runs). */
  peakLoaders?: number;
  /** Loader runs ÷ (keys × duration ÷ ttl); see runsPerKeyPerTtl. */
  runsPerKeyPerTtl?: number;
  /** An open-loop scenario (latency from each scheduled arrival); shown in its own table. */
  open?: boolean;
  /** Open loop: p99 of how late calls started after their scheduled arrival, ms. */
  startLagP99?: number;
  /** Open loop: how long the burst fill before the run took, ms. */
  fillMs?: number;
}

export interface Report {
  env: Record<string, unknown>;
  rows: ScenarioRow[];
  http: HttpFigure[];
  overhead: LatencyFigure[];
  lockCost: LatencyFigure[];
  /** The tracing channel's cost, with and without a subscriber; absent in results files written before it existed. */
  tracing?: LatencyFigure[];
  /** Absent in results files written before the heap measurement existed. */
  heap?: HeapFigure[];
  /** Issue #13's figures (periodic stalls, replicaAck); absent in older results files and with --no-failover. */
  failover?: FailoverFigures;
  /** Issue #12's hit cost (K distinct warm keys, against a bare GET); absent in older results files and with --no-hit. */
  hit?: { readonly sizes: HitSizes; readonly figures: readonly HitFigure[] };
  /** Issue #12's fleet scenario (P processes); absent in older results files and with --no-fleet. */
  fleet?: { readonly sizes: FleetSizes; readonly figures: readonly FleetFigure[] };
  latencySamples: Record<string, Record<string, number[]>>;
}

const f1 = (x: number | undefined) => (x === undefined || Number.isNaN(x) ? '–' : x.toFixed(1));
const f2 = (x: number | undefined) => (x === undefined || Number.isNaN(x) ? '–' : x.toFixed(2));
const pct = (x: number | undefined) => (x === undefined ? '–' : `${(x * 100).toFixed(1)}%`);
const pct2 = (x: number | undefined) => (x === undefined ? '–' : `${(x * 100).toFixed(2)}%`);
const COLORS = ['#888888', '#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1'];

export function markdown(r: Report): string {
  const e = r.env;
  const out: string[] = [];
  out.push(`Command: \`${String(e.command)}\``);
  out.push('');
  out.push(`Machine: ${String(e.cpus)}, ${String(e.os)}; Node ${String(e.node)}; Redis ${String(e.redis)} (${String(e.redisSource)}); ioredis ${String(e.ioredis)}; node-redis ${typeof e.nodeRedis === 'string' ? e.nodeRedis : '–'}; ${String(e.date)}.`);
  out.push(`Sizes: ${String(e.processes)} processes × ${String(e.callers)} concurrent callers; ${JSON.stringify(e.sizes)}; each figure is the median of ${String(e.runs)} runs.`);
  const closed = r.rows.filter((x) => !x.open);
  if (closed.length > 0) {
    out.push('');
    out.push('| scenario | contender | loader runs | ideal | rebuild ratio | vs none | max at once | p50 ms | p99 ms | max ms | calls/s | stale | errors (never settled) | origin calls while failing |');
    out.push('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  }
  for (const row of closed) {
    if (row.skipped) {
      out.push(`| ${row.scenario} | ${row.contender} | cannot run: ${row.skipped} |||||||||||||||`);
      continue;
    }
    const none = r.rows.find((x) => x.scenario === row.scenario && x.contender === 'none');
    const reduction = none?.loaderRuns && row.loaderRuns !== undefined ? `${(100 * (1 - row.loaderRuns / none.loaderRuns)).toFixed(1)}%` : '–';
    out.push(
      `| ${row.scenario} | ${row.contender} | ${row.loaderRuns} | ${row.ideal} | ${f2(row.ratio)} | ${reduction} | ${row.maxConcurrent} | ${f1(row.p50)} | ${f1(row.p99)} | ${f1(row.max)} | ${f1(row.throughput)} | ${pct(row.staleShare)} | ${row.errors}${row.unsettled ? ` (${row.unsettled})` : ''} | ${row.originCallsWhileFailing ?? '–'} |`,
    );
  }
  out.push(...openMarkdown(r));
  if (r.http.length > 0) {
    out.push('', '**HTTP** (node:cluster workers, autocannon, 20 keys):', '');
    out.push('| lock | req/s | p50 ms | p99 ms | origin calls | origin calls per expiry | errors |', '|---|---:|---:|---:|---:|---:|---:|');
    for (const h of r.http) out.push(`| ${h.mode} | ${h.requestsPerSec.toFixed(0)} | ${h.p50ms} | ${h.p99ms} | ${h.originCalls} | ${f2(h.originCallsPerExpiry)} | ${h.errors} |`);
  }
  const micro = (title: string, figs: LatencyFigure[]) => {
    if (figs.length === 0) return;
    out.push('', `**${title}** (sequential operations, µs):`, '', '| operation | p50 µs | p99 µs |', '|---|---:|---:|');
    for (const m of figs) out.push(`| ${m.name} | ${f1(m.p50us)} | ${f1(m.p99us)} |`);
  };
  micro('Overhead', r.overhead);
  if (r.overhead.length >= 4) {
    const [bare, hit, lru, l1, nrBare, nrHit] = r.overhead as [LatencyFigure, LatencyFigure, LatencyFigure, LatencyFigure, LatencyFigure?, LatencyFigure?];
    out.push('', `Fresh hit ÷ bare GET+decode (p50): ${f2(hit.p50us / bare.p50us)}; L1 hit ÷ bare lru-cache get (p50): ${f2(l1.p50us / lru.p50us)}.`);
    // node-redis figures (runs since the client port): the same ratio on that client.
    if (nrBare && nrHit) out.push('', `On node-redis, fresh hit ÷ bare GET+decode (p50): ${f2(nrHit.p50us / nrBare.p50us)}.`);
  }
  micro('Tracing channel', r.tracing ?? []);
  micro('Lock cost', r.lockCost);
  out.push(...heapMarkdown(r.heap ?? [], String(r.env.heapNote)));
  if (r.failover) out.push('', ...failoverMarkdown(r.failover));
  if (r.hit) out.push(...hitMarkdown([...r.hit.figures], r.hit.sizes));
  if (r.fleet && r.fleet.figures.length > 0) out.push('', ...fleetMarkdown(r.fleet.figures, r.fleet.sizes), '', 'Chart: `fleet-cpu.svg` (client CPU per request against P).');
  return `${out.join('\n')}\n`;
}

/** The open-loop scenarios' table: the figures issue 10 asks for, per contender. */
function openMarkdown(r: Report): string[] {
  const rows = r.rows.filter((x) => x.open);
  if (rows.length === 0) return [];
  const sizes = r.env.sizes as { openPerSecond?: number; openDurationMs?: number } | undefined;
  const out = [
    '',
    `**Open loop** (${String(sizes?.openPerSecond)} arrivals/s per process on a fixed schedule, ${String(r.env.processes)} processes, ${String(sizes?.openDurationMs)} ms per run, mass-expiry its ttl + 1 s, after a ${String((r.env.sizes as { openWarmupMs?: number } | undefined)?.openWarmupMs)} ms warm-up not counted; latency from each scheduled arrival; "older than ttl": answers whose value was loaded more than ttl before the answer; "start lag": how late calls started after their scheduled instant):`,
    '',
    '| scenario | contender | calls | p50 ms | p99 ms | max ms | start lag p99 ms | older than ttl | loader runs | per key per ttl | ideal | rebuild ratio | max at once (one key) | peak loaders (all keys) | errors | burst fill ms | p99 per run ms | CPU µs per call |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const row of rows) {
    if (row.skipped) {
      out.push(`| ${row.scenario} | ${row.contender} | cannot run: ${row.skipped} |||||||||||||`);
      continue;
    }
    out.push(
      `| ${row.scenario} | ${row.contender} | ${row.calls} | ${f1(row.p50)} | ${f1(row.p99)} | ${f1(row.max)} | ${f1(row.startLagP99)} | ${pct2(row.staleShare)} | ${row.loaderRuns} | ${f2(row.runsPerKeyPerTtl)} | ${row.ideal} | ${f2(row.ratio)} | ${row.maxConcurrent} | ${row.peakLoaders} | ${row.errors}${row.unsettled ? ` (${row.unsettled})` : ''} | ${f1(row.fillMs)} | ${row.p99Runs ? row.p99Runs.map(f1).join(' / ') : '–'} | ${f1(row.cpuUsPerCall)} |`,
    );
  }
  // Rows whose every answer "older than ttl" carried a value of the burst fill, in every run.
  const fromFill = rows.filter((x) => x.staleAllFromFill === true);
  if (fromFill.length > 0) {
    out.push(
      '',
      `"older than ttl" counts a value's age from its loader's end, before its write: an upper bound. In ${fromFill.map((x) => `${x.scenario} · ${x.contender}`).join(', ')}, every answer counted older than ttl carried a value of the burst fill, ` +
        'whose writes (one per key, all sent at once) queue behind each other for up to the burst fill\'s time after their loaders ended.',
    );
  }
  if (rows.some((x) => x.scenario === 'refresh-ahead')) {
    const ra = REFRESH_AHEAD_SIZES;
    out.push(
      '',
      `"ideal": for the contenders that refresh ahead (${REFRESH_AHEAD.filter((c) => refreshPoint(c) !== undefined).join(', ')}), one loader run per entry whose readers reach its refresh point (${RA_FRACTION} × ttl after the entry was written), none beside it; for the others, one run per key per expiry. ` +
        `"per key per ttl": loader runs ÷ (keys × run time ÷ ttl). Refreshing at ${RA_FRACTION} × ttl with a ${ra.loaderMs} ms loader and ttl ${ra.ttlMs} ms cannot go below ${f2(refreshFloor(ra.ttlMs, RA_FRACTION, ra.loaderMs))} per key per ttl without serving answers older than ttl (each entry is replaced ${RA_FRACTION} × ttl + one loader time after it was written).`,
    );
  }
  return out;
}

/** Grouped bars: rebuild ratio (loader runs ÷ ideal) per scenario and contender, log scale. */
export function ratioChart(r: Report): string {
  const rows = r.rows.filter((x) => !x.skipped && x.ratio !== undefined);
  const scenariosList = [...new Set(rows.map((x) => x.scenario))];
  const contenders = [...new Set(rows.map((x) => x.contender))];
  const W = 980;
  const H = 420;
  const left = 60;
  const bottom = 340;
  const top = 40;
  const maxRatio = Math.max(10, ...rows.map((x) => x.ratio as number));
  const yMax = Math.ceil(Math.log10(maxRatio));
  // The axis starts at 0.5 so the ideal (1.0) shows as a visible bar, not as the baseline.
  const yMin = Math.log10(0.5);
  const y = (v: number) => bottom - ((Math.log10(Math.max(0.5, v)) - yMin) / (yMax - yMin)) * (bottom - top);
  const groupW = (W - left - 20) / Math.max(1, scenariosList.length);
  const barW = (groupW - 16) / Math.max(1, contenders.length);
  const parts: string[] = [];
  parts.push(`<text x="${left}" y="22" font-size="15" font-weight="bold">Loader runs ÷ ideal (1.0 = one rebuild per key per expiry; log scale; lower is better)</text>`);
  for (let p = 0; p <= yMax; p++) {
    const v = 10 ** p;
    parts.push(`<line x1="${left}" x2="${W - 10}" y1="${y(v)}" y2="${y(v)}" stroke="#ddd"/><text x="${left - 6}" y="${y(v) + 4}" font-size="11" text-anchor="end">${v}</text>`);
  }
  scenariosList.forEach((s, gi) => {
    const gx = left + gi * groupW + 8;
    contenders.forEach((c, ci) => {
      const row = rows.find((x) => x.scenario === s && x.contender === c);
      if (!row) return;
      const v = row.ratio as number;
      const x = gx + ci * barW;
      const h = Math.max(1, bottom - y(v));
      parts.push(`<rect x="${x.toFixed(1)}" y="${(bottom - h).toFixed(1)}" width="${(barW - 2).toFixed(1)}" height="${h.toFixed(1)}" fill="${COLORS[ci % COLORS.length]}"><title>${s} · ${c}: ${v.toFixed(2)}</title></rect>`);
    });
    parts.push(`<text x="${gx + (groupW - 16) / 2}" y="${bottom + 16}" font-size="11" text-anchor="middle">${s}</text>`);
  });
  contenders.forEach((c, ci) => {
    const x = left + (ci % 4) * 220;
    const yy = bottom + 36 + Math.floor(ci / 4) * 18;
    parts.push(`<rect x="${x}" y="${yy - 10}" width="12" height="12" fill="${COLORS[ci % COLORS.length]}"/><text x="${x + 18}" y="${yy}" font-size="12">${c}</text>`);
  });
  return svg(W, H, parts);
}

/** The frame of the line charts: plot area left of a 200-px legend column. */
const LINE_FRAME = { W: 980, H: 420, left: 60, right: 780, top: 40, bottom: 360 } as const;

/** A legend entry in the column right of a line chart's plot area. */
function legendEntry(i: number, color: string | undefined, label: string): string {
  const { right, top } = LINE_FRAME;
  return `<rect x="${right + 20}" y="${top + i * 20}" width="12" height="12" fill="${color}"/><text x="${right + 38}" y="${top + i * 20 + 11}" font-size="12">${label}</text>`;
}

/** Latency percentile curves per contender for one scenario (log-scaled ms). */
export function latencyChart(r: Report, scenario: string): string {
  const samples = r.latencySamples[scenario] ?? {};
  const ps = [10, 25, 50, 75, 90, 95, 99, 99.9, 100];
  const { W, H, left, right, top, bottom } = LINE_FRAME;
  // Loops, not spreads: a run holds hundreds of thousands of samples (a spread overflows the stack).
  let maxMs = 1;
  let minMs = 1;
  for (const list of Object.values(samples)) {
    for (const x of list) {
      if (x > maxMs) maxMs = x;
      if (x > 0 && x < minMs) minMs = x;
    }
  }
  minMs = Math.max(0.05, minMs);
  const ly = (v: number) => bottom - ((Math.log10(Math.max(minMs, v)) - Math.log10(minMs)) / (Math.log10(maxMs) - Math.log10(minMs) || 1)) * (bottom - top);
  const lx = (i: number) => left + (i / (ps.length - 1)) * (right - left);
  const parts: string[] = [`<text x="${left}" y="22" font-size="15" font-weight="bold">Latency of every call by percentile — ${scenario} (ms, log scale)</text>`];
  for (let d = Math.floor(Math.log10(minMs)); d <= Math.ceil(Math.log10(maxMs)); d++) {
    const v = 10 ** d;
    if (v < minMs || v > maxMs * 1.01) continue;
    parts.push(`<line x1="${left}" x2="${right}" y1="${ly(v)}" y2="${ly(v)}" stroke="#ddd"/><text x="${left - 6}" y="${ly(v) + 4}" font-size="11" text-anchor="end">${v}</text>`);
  }
  ps.forEach((p, i) => parts.push(`<text x="${lx(i)}" y="${bottom + 16}" font-size="11" text-anchor="middle">p${p}</text>`));
  Object.entries(samples).forEach(([c, lat], ci) => {
    const sorted = [...lat].sort((a, b) => a - b);
    const pts = ps.map((p, i) => `${lx(i).toFixed(1)},${ly(percentile(sorted, p)).toFixed(1)}`).join(' ');
    parts.push(`<polyline points="${pts}" fill="none" stroke="${COLORS[ci % COLORS.length]}" stroke-width="2"/>`);
    parts.push(legendEntry(ci, COLORS[ci % COLORS.length], c));
  });
  return svg(W, H, parts);
}

/** Retained heap (MiB, after GC) against loader runs, one line per variant, from 0 MiB. */
export function heapChart(r: Report): string {
  const figures = r.heap ?? [];
  const { W, H, left, right, top, bottom } = LINE_FRAME;
  const MiB = 1024 * 1024;
  const all: HeapSample[] = figures.flatMap((f) => f.samples);
  const maxRuns = Math.max(1, ...all.map((s) => s.runs));
  const maxMiB = Math.max(1, ...all.map((s) => s.heapUsed / MiB)) * 1.1;
  const x = (runs: number) => left + (runs / maxRuns) * (right - left);
  const y = (mib: number) => bottom - (mib / maxMiB) * (bottom - top);
  const parts: string[] = [`<text x="${left}" y="22" font-size="15" font-weight="bold">Heap used after GC (MiB) by loader runs — flat is no leak</text>`];
  // Gridlines every power of ten, halved when that would leave fewer than three.
  const decade = 10 ** Math.floor(Math.log10(maxMiB));
  const step = maxMiB / decade < 3 ? decade / 2 : decade;
  for (let v = 0; v <= maxMiB; v += step) {
    parts.push(`<line x1="${left}" x2="${right}" y1="${y(v)}" y2="${y(v)}" stroke="#ddd"/><text x="${left - 6}" y="${y(v) + 4}" font-size="11" text-anchor="end">${v}</text>`);
  }
  for (const s of figures[0]?.samples ?? []) parts.push(`<text x="${x(s.runs)}" y="${bottom + 16}" font-size="11" text-anchor="middle">${s.runs.toLocaleString('en-US')}</text>`);
  figures.forEach((f, i) => {
    const color = COLORS[(i + 1) % COLORS.length];
    const pts = f.samples.map((s) => `${x(s.runs).toFixed(1)},${y(s.heapUsed / MiB).toFixed(1)}`).join(' ');
    parts.push(`<polyline points="${pts}" fill="none" stroke="${color}" stroke-width="2"/>`);
    parts.push(legendEntry(i, color, f.variant));
  });
  return svg(W, H, parts);
}

/** Client CPU per request (µs, every process summed) against the fleet size P, one line per contender and K. */
export function fleetChart(figures: readonly FleetFigure[]): string {
  const { W, H, left, right, top, bottom } = LINE_FRAME;
  const Ps = [...new Set(figures.map((f) => f.P))].sort((a, b) => a - b);
  const maxUs = Math.max(1, ...figures.map((f) => f.cpuUsPerCall)) * 1.1;
  // P at even steps (1, 4, 16, 32 are not evenly spaced in any simple scale; the labels say which).
  const x = (P: number) => left + (Ps.length === 1 ? 0.5 : Ps.indexOf(P) / (Ps.length - 1)) * (right - left);
  const y = (us: number) => bottom - (us / maxUs) * (bottom - top);
  const parts: string[] = [`<text x="${left}" y="22" font-size="15" font-weight="bold">Client CPU per request (µs, all processes) against fleet size P</text>`];
  const decade = 10 ** Math.floor(Math.log10(maxUs));
  const step = maxUs / decade < 3 ? decade / 2 : decade;
  for (let v = 0; v <= maxUs; v += step) {
    parts.push(`<line x1="${left}" x2="${right}" y1="${y(v)}" y2="${y(v)}" stroke="#ddd"/><text x="${left - 6}" y="${y(v) + 4}" font-size="11" text-anchor="end">${v}</text>`);
  }
  for (const P of Ps) parts.push(`<text x="${x(P)}" y="${bottom + 16}" font-size="11" text-anchor="middle">P = ${P}</text>`);
  const lines = [...new Set(figures.map((f) => `${f.contender}, K = ${f.K}`))];
  lines.forEach((label, i) => {
    const color = COLORS[(i + 1) % COLORS.length];
    const dash = label.startsWith('cache-aside') ? ' stroke-dasharray="6 4"' : '';
    const pts = figures
      .filter((f) => `${f.contender}, K = ${f.K}` === label)
      .sort((a, b) => a.P - b.P)
      .map((f) => `${x(f.P).toFixed(1)},${y(f.cpuUsPerCall).toFixed(1)}`)
      .join(' ');
    parts.push(`<polyline points="${pts}" fill="none" stroke="${color}" stroke-width="2"${dash}/>`);
    parts.push(legendEntry(i, color, label));
  });
  return svg(W, H, parts);
}

function svg(w: number, h: number, parts: string[]): string {
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}" font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>${parts.join('')}</svg>\n`;
}

/** Writes under bench/results (a full run) or bench/results/quick (--quick, so it never replaces the full figures). */
export function writeReport(r: Report, dir = 'bench/results'): string[] {
  mkdirSync(dir, { recursive: true });
  const stamp = String(r.env.date).replace(/[:.]/g, '-');
  const json = `${dir}/${stamp}.json`;
  const { latencySamples: _omit, ...rest } = r;
  writeFileSync(json, `${JSON.stringify(rest, null, 2)}\n`);
  writeFileSync(`${dir}/latest.md`, markdown(r));
  writeFileSync(`${dir}/rebuilds.svg`, ratioChart(r));
  const files = [json, `${dir}/latest.md`, `${dir}/rebuilds.svg`];
  if (r.heap && r.heap.length > 0) {
    writeFileSync(`${dir}/heap.svg`, heapChart(r));
    files.push(`${dir}/heap.svg`);
  }
  if (r.fleet && r.fleet.figures.length > 0) {
    writeFileSync(`${dir}/fleet-cpu.svg`, fleetChart(r.fleet.figures));
    files.push(`${dir}/fleet-cpu.svg`);
  }
  for (const s of ['cold-stampede', 'hot-20-keys', 'stale-window', 'fresh-hits', 'refresh-ahead', 'open-fresh-hits', 'mass-expiry']) {
    if (!r.latencySamples[s]) continue;
    writeFileSync(`${dir}/latency-${s}.svg`, latencyChart(r, s));
    files.push(`${dir}/latency-${s}.svg`);
  }
  return files;
}

export interface FailoverFigures {
  readonly sizes: StallSizes;
  /** One figure per run and degradedMemo setting. */
  readonly stall: readonly StallFigure[];
  readonly replicaAck: readonly LatencyFigure[];
}

/** The failover section: loader ratio under periodic stalls (each run), and replicaAck's cost per rebuild. */
export function failoverMarkdown(f: FailoverFigures): string[] {
  const s = f.sizes;
  const out = [
    `**Slow Redis** (\`DEBUG SLEEP ${STALL.sleepSec}\` every ${STALL.periodMs / 1000} s; ${s.processes} processes × ${s.callers} callers, ${s.keys} keys, ttl ${s.ttlMs} ms, loader ${s.loaderMs} ms, ${s.durationMs / 1000} s, lock single, L1 off; one row per run):`,
    '',
    '| degradedMemo | loader runs | of them degraded | ideal | ratio | calls | failed |',
    '|---|---:|---:|---:|---:|---:|---:|',
  ];
  for (const r of f.stall) out.push(`| ${r.degradedMemo ? 'on' : 'off (0)'} | ${r.loaderRuns} | ${r.degradedRuns} | ${r.ideal} | ${f2(r.ratio)} | ${r.calls} | ${r.failed} |`);
  out.push('', '**replicaAck cost** (primary + 1 replica in sync, sequential rebuilds, µs):', '', '| operation | p50 µs | p99 µs |', '|---|---:|---:|');
  for (const m of f.replicaAck) out.push(`| ${m.name} | ${f1(m.p50us)} | ${f1(m.p99us)} |`);
  return out;
}
