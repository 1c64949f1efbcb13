/**
 * Retained heap over many loader runs: each variant runs in a fresh process (bench/heap-worker.ts,
 * --expose-gc) against the same Redis; heapUsed after full collections and RSS are read at evenly
 * spaced checkpoints. A figure, never a test assertion: the heap is not deterministic enough to gate on,
 * but a per-run leak shows as a line that keeps rising from checkpoint to checkpoint.
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { median } from './scenarios.js';

export interface HeapRequest {
  url: string;
  prefix: string;
  /** Run counts at which to sample, ascending; the first is normally 0 (after the warm-up). */
  checkpoints: number[];
  ttlMs: number;
  /** 0: no L1 tier; otherwise `local: { max: localMax }`. */
  localMax: number;
  inFlight: number;
}

export interface HeapSample {
  runs: number;
  heapUsed: number;
  rss: number;
  /** Seconds since the first checkpoint. */
  seconds: number;
}

export interface HeapVariant {
  name: string;
  localMax: number;
}

export interface HeapFigure {
  variant: string;
  /** Medians over the runs, per checkpoint. */
  samples: HeapSample[];
  /** Retained heap growth from the first to the last checkpoint, bytes per 1,000 loader runs. */
  bytesPer1kRuns: number;
}

export const HEAP_VARIANTS: HeapVariant[] = [
  { name: 'L1 off', localMax: 0 },
  { name: 'L1 on (max 100)', localMax: 100 },
];

/** Calls in flight at once: sequential calls would take minutes more per variant. */
export const DEFAULT_IN_FLIGHT = 32;
/** Short, so Redis drops the entries soon and only the client's own retention shows. */
export const HEAP_TTL_MS = 1000;

const WORKER = fileURLToPath(new URL('../heap-worker.ts', import.meta.url));

function oneProcess(req: HeapRequest): Promise<HeapSample[]> {
  const child = fork(WORKER, [], { execArgv: ['--expose-gc', '--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  return new Promise((resolve, reject) => {
    child.on('message', (m: { ev: 'ready' } | { ev: 'samples'; samples: HeapSample[] } | { ev: 'failed'; message: string }) => {
      if (m.ev === 'ready') child.send(req);
      else if (m.ev === 'samples') resolve(m.samples);
      else reject(new Error(m.message));
    });
    child.once('exit', (code) => reject(new Error(`heap worker exited with ${String(code)} before reporting`)));
  });
}

export function checkpointsFor(total: number, steps = 4): number[] {
  return Array.from({ length: steps + 1 }, (_, i) => Math.round((total * i) / steps));
}

export async function heapGrowth(
  url: string,
  opts: { total: number; runs: number; ttlMs?: number; inFlight?: number; variants?: HeapVariant[]; log?: (line: string) => void },
): Promise<HeapFigure[]> {
  const checkpoints = checkpointsFor(opts.total);
  const figures: HeapFigure[] = [];
  for (const variant of opts.variants ?? HEAP_VARIANTS) {
    const all: HeapSample[][] = [];
    for (let r = 0; r < opts.runs; r++) {
      const samples = await oneProcess({
        url, prefix: `heap${r}-${variant.localMax}`, checkpoints, ttlMs: opts.ttlMs ?? HEAP_TTL_MS,
        localMax: variant.localMax, inFlight: opts.inFlight ?? DEFAULT_IN_FLIGHT,
      });
      all.push(samples);
      const last = samples[samples.length - 1] as HeapSample;
      opts.log?.(`heap · ${variant.name} · run ${r + 1}/${opts.runs}: ${fmtMiB(last.heapUsed - (samples[0] as HeapSample).heapUsed)} MiB retained after ${last.runs} runs, ${last.seconds.toFixed(0)} s`);
    }
    const samples = checkpoints.map((runs, i) => ({
      runs,
      heapUsed: median(all.map((s) => (s[i] as HeapSample).heapUsed)),
      rss: median(all.map((s) => (s[i] as HeapSample).rss)),
      seconds: median(all.map((s) => (s[i] as HeapSample).seconds)),
    }));
    const first = samples[0] as HeapSample;
    const last = samples[samples.length - 1] as HeapSample;
    figures.push({ variant: variant.name, samples, bytesPer1kRuns: ((last.heapUsed - first.heapUsed) / Math.max(1, last.runs - first.runs)) * 1000 });
  }
  return figures;
}

const MiB = 1024 * 1024;
export const fmtMiB = (bytes: number): string => (bytes / MiB).toFixed(1);
const signedMiB = (bytes: number): string => `${bytes >= 0 ? '+' : ''}${fmtMiB(bytes)}`;

/** What the heap figures are, for the report next to them. */
export function heapNote(total: number, runs: number, inFlight = DEFAULT_IN_FLIGHT): string {
  return `${total.toLocaleString('en-US')} loader runs per variant on distinct keys, instant loader, ttl ${HEAP_TTL_MS} ms, ${inFlight} calls in flight, drained before each checkpoint (after a 2,000-run warm-up); heapUsed after full GC, each variant in a fresh --expose-gc process; median of ${runs} run${runs === 1 ? '' : 's'}`;
}

/** A markdown table: one row per variant and checkpoint, heap and RSS absolute and as growth since the first checkpoint. */
export function heapMarkdown(figures: HeapFigure[], note: string): string[] {
  if (figures.length === 0) return [];
  const out = ['', `**Retained heap** (${note}):`, ''];
  out.push('| variant | loader runs | heap used MiB | heap growth MiB | RSS MiB | RSS growth MiB | s |', '|---|---:|---:|---:|---:|---:|---:|');
  for (const f of figures) {
    const first = f.samples[0] as HeapSample;
    for (const s of f.samples) {
      out.push(`| ${f.variant} | ${s.runs.toLocaleString('en-US')} | ${fmtMiB(s.heapUsed)} | ${s === first ? '–' : signedMiB(s.heapUsed - first.heapUsed)} | ${fmtMiB(s.rss)} | ${s === first ? '–' : signedMiB(s.rss - first.rss)} | ${s.seconds.toFixed(0)} |`);
    }
  }
  out.push('', figures.map((f) => `${f.variant}: ${(f.bytesPer1kRuns / 1024).toFixed(1)} KiB retained per 1,000 loader runs`).join('; ') + '.');
  return out;
}
