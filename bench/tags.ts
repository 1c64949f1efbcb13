/**
 * `npm run bench:tags [-- --runs R] [--hit-ms D] [--race-ms D] [--parts hit,delete,race] [--out FILE]`:
 * what tags cost and what they guarantee, ours beside bentocache's (the one peer with tags and
 * deleteByTag in this repository's devDependencies), side by side in one run, on a redis-server of the
 * bench's own (or REDIS_URL's server: it writes under prefixes of its own and never flushes).
 * Variants (bench/lib/tags.ts): ours without L1, ours with L1, bentocache as normally run (memory L1 +
 * Redis L2 + Redis bus), bentocache with Redis as its only layer. Every part interleaves the variants
 * run by run (the order rotates), R runs (default 5).
 *
 * 1. **Tagged hit ÷ untagged hit**: K = 1,000 warm keys read uniformly; the tagged entries carry two
 *    tags each (`user:<i>`, `org:<i mod 10>`), the untagged ones none, each set in its own prefix.
 *    Every tag was invalidated once before the entries were written, so each library has its tag state
 *    in Redis (bentocache writes a tag's key only on deleteByTag). Per (variant, tagged) per run: a
 *    500 ms warm-up, then client CPU per request (process.cpuUsage over D ms, 10 concurrent loops),
 *    then latency (one loop, calls back to back, D/2 ms). The ratios are medians of the per-run
 *    ratios (tagged and untagged measured next to each other in each run).
 * 2. **deleteByTag on a tag of 10,000 entries**: per run, 10,000 entries tagged `big<r>` are written
 *    through the variant's instance (its L1 holds them where it has one), while 4 loops in the same
 *    process read 100 other (untagged) warm keys, each sample one event-loop turn plus the call (so a
 *    stalled loop shows). Figures: the time deleteByTag takes to resolve; the other reads' p99 in the
 *    300 ms before it and while it runs (samples pooled over runs, n shown); and, as a check, how many
 *    of 100 of the tagged keys still answered their old value after it resolved.
 * 3. **The race**: 4 worker processes × 10 callers (a 2 ms pause between calls) over 4 keys tagged
 *    `race`, getOrCompute in loops, loaders of 100 ms that stamp their value with the instant they
 *    started; the bench process, with its own instance, calls deleteByTag('race') every 50 ms (not
 *    waiting for the previous one) and keeps each call's instants. After the run each worker judges
 *    its answers against D, the latest-called deleteByTag that had resolved when the call started:
 *    an answer whose load began before D was *called* breaks the guarantee (its grant came before
 *    D); one whose load began while D ran (called, not yet resolved) is allowed (the grant may follow
 *    D's write). Counts are sums over runs.
 * Builds first and runs the compiled library (dist/), as users do.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { writeFileSync, mkdirSync, readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { provideRedis } from '../test/support/redis-server.js';
import { library } from './lib/library.js';
import { exited, median, percentile } from './lib/scenarios.js';
import { makeTagContender, TAG_VARIANTS, TAG_VARIANT_NOTES, type RaceDelete, type TagContender, type TagVariant } from './lib/tags.js';
import type { RaceJob, RaceReport } from './tags-worker.js';

const { values: args } = parseArgs({
  options: {
    runs: { type: 'string', default: '5' },
    'hit-ms': { type: 'string', default: '2000' },
    'race-ms': { type: 'string', default: '3000' },
    parts: { type: 'string', default: 'hit,delete,race' },
    out: { type: 'string' },
  },
});
const RUNS = Number(args.runs);
const HIT_MS = Number(args['hit-ms']);
const RACE_MS = Number(args['race-ms']);
const PARTS = new Set(args.parts.split(','));
const COMMAND = `npm run bench:tags${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`;

const HIT_KEYS = 1000;
const HIT_LOOPS = 10;
const HIT_WARMUP_MS = 500;
const TTL = 3_600_000;
const VALUE = { id: 42, name: 'Ada Lovelace', roles: ['admin', 'author'], profile: { city: 'London', since: 1843 } };
const BIG_TAG_ENTRIES = 10_000;
const OTHER_KEYS = 100;
const OTHER_LOOPS = 4;
const BASELINE_MS = 300;
const CHECKED_AFTER = 100;
const RACE_PROCESSES = 4;
const RACE_CALLERS = 10;
const RACE_KEYS = 4;
const RACE_LOADER_MS = 100;
const RACE_DELETE_EVERY_MS = 50;
const RACE_PAUSE_MS = 2;
const WORKER = fileURLToPath(new URL('./tags-worker.ts', import.meta.url));

const now = (): number => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const turn = () => new Promise((r) => setImmediate(r));
const lines: string[] = [];
const out = (line = '') => {
  lines.push(line);
  console.log(line);
};
const progress = (line: string) => console.error(line);
/** The variants in run r's order: rotated by one each run. */
const order = (r: number): TagVariant[] => TAG_VARIANTS.map((_, i) => TAG_VARIANTS[(i + r) % TAG_VARIANTS.length] as TagVariant);
const fmt = (x: number, digits = 2) => (Number.isFinite(x) ? x.toFixed(digits) : '–');

/**
 * Set-up, not measured: `op`, tried again (up to 3 times in all) if it fails. On this shared machine a
 * burst of writes can outlast a 500 ms redisTimeout; the set-up must still complete.
 */
async function setUp(op: () => Promise<void>): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await op();
    } catch (err) {
      if (attempt >= 3) throw err;
      progress(`tags · set-up write failed (${String(err)}), trying again`);
    }
  }
}

/** Writes `keys` through the contender, 50 at a time. */
async function fill(c: TagContender, keys: string[], tagsOf: (i: number) => string[] | undefined): Promise<void> {
  for (let i = 0; i < keys.length; i += 50) {
    await Promise.all(keys.slice(i, i + 50).map((k, j) => setUp(() => c.set(k, VALUE, TTL, tagsOf(i + j)))));
  }
}

/** deleteByTag of every tag in `tags`, 32 at a time (ours takes at most 32 per call). */
async function invalidateAll(c: TagContender, tags: string[]): Promise<void> {
  for (let i = 0; i < tags.length; i += 32) await setUp(() => c.deleteByTag(tags.slice(i, i + 32)));
  // bentocache judges an entry written in the same millisecond as its tag's invalidation invalid.
  await sleep(5);
}

// ---------------------------------------------------------------- 1. tagged hit ÷ untagged hit

interface HitSample {
  cpuUs: number;
  rps: number;
  p50Us: number;
  p99Us: number;
}

/** Calls that failed (a redisTimeout on the busy machine), per part: printed under its table. */
const failures = { hit: 0, delete: 0 };

async function hitWindow(answer: (i: number) => Promise<unknown>, ms: number, loops: number): Promise<{ n: number; cpuUs: number; latencies: number[] }> {
  let n = 0;
  const latencies: number[] = [];
  const until = performance.now() + ms;
  const c0 = process.cpuUsage();
  await Promise.all(
    Array.from({ length: loops }, async () => {
      while (performance.now() < until) {
        const t = performance.now();
        try {
          await answer(Math.floor(Math.random() * HIT_KEYS));
        } catch {
          failures.hit++;
          continue;
        }
        if (loops === 1) latencies.push((performance.now() - t) * 1000);
        n++;
      }
    }),
  );
  const c = process.cpuUsage(c0);
  return { n, cpuUs: c.user + c.system, latencies };
}

async function hitPart(url: string): Promise<void> {
  const names = Array.from({ length: HIT_KEYS }, (_, i) => `k${i}`);
  const tagsOf = (i: number) => [`user:${i}`, `org:${i % 10}`];
  const tagLists = names.map((_, i) => tagsOf(i));
  const allTags = [...new Set(tagLists.flat())];
  const cells = new Map<string, { c: TagContender; answer: (i: number) => Promise<unknown>; samples: HitSample[] }>();
  for (const variant of TAG_VARIANTS) {
    for (const tagged of [false, true]) {
      const c = await makeTagContender(variant, url, `tags-hit-${variant}-${tagged ? 'tagged' : 'untagged'}`);
      await c.ready();
      if (tagged) await invalidateAll(c, allTags);
      await fill(c, names, (i) => (tagged ? tagLists[i] : undefined));
      const loader = () => VALUE;
      const answer = (i: number) => c.get(names[i] as string, loader, TTL, tagged ? tagLists[i] : undefined);
      for (let i = 0; i < HIT_KEYS; i++) await setUp(async () => void (await answer(i))); // L1 variants: every key in L1 before any window
      cells.set(`${variant}/${tagged}`, { c, answer, samples: [] });
    }
  }
  for (let r = 0; r < RUNS; r++) {
    for (const variant of order(r)) {
      // Untagged first on even runs, tagged first on odd ones.
      for (const tagged of r % 2 === 0 ? [false, true] : [true, false]) {
        const cell = cells.get(`${variant}/${tagged}`)!;
        await hitWindow(cell.answer, HIT_WARMUP_MS, HIT_LOOPS);
        const tput = await hitWindow(cell.answer, HIT_MS, HIT_LOOPS);
        const lat = await hitWindow(cell.answer, HIT_MS / 2, 1);
        lat.latencies.sort((a, b) => a - b);
        const s = { cpuUs: tput.cpuUs / tput.n, rps: tput.n / (HIT_MS / 1000), p50Us: percentile(lat.latencies, 50), p99Us: percentile(lat.latencies, 99) };
        cell.samples.push(s);
        progress(`tags · hit · ${variant} ${tagged ? 'tagged' : 'untagged'} · run ${r + 1}/${RUNS}: ${fmt(s.cpuUs)} µs CPU/request, ${fmt(s.rps, 0)} req/s, p50 ${fmt(s.p50Us, 1)} µs`);
      }
    }
  }
  for (const cell of cells.values()) await cell.c.close();

  out(`### 1. A tagged hit ÷ an untagged hit`);
  out();
  out(`${HIT_KEYS} warm keys read uniformly, the tagged ones with 2 tags each; client CPU over ${HIT_MS} ms with ${HIT_LOOPS} concurrent loops, latency over ${HIT_MS / 2} ms with one loop (calls back to back); medians of ${RUNS} interleaved runs; the ÷ columns are medians of the per-run ratios.`);
  out();
  out('| variant | untagged CPU µs/req | tagged CPU µs/req | tagged ÷ untagged (CPU) | untagged p50 µs | tagged p50 µs | tagged ÷ untagged (p50) | untagged p99 µs | tagged p99 µs | untagged req/s | tagged req/s |');
  out('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const variant of TAG_VARIANTS) {
    const u = cells.get(`${variant}/false`)!.samples;
    const t = cells.get(`${variant}/true`)!.samples;
    const m = (xs: HitSample[], f: (s: HitSample) => number) => median(xs.map(f));
    const ratio = (f: (s: HitSample) => number) => median(t.map((s, i) => f(s) / f(u[i] as HitSample)));
    out(
      `| ${TAG_VARIANT_NOTES[variant]} | ${fmt(m(u, (s) => s.cpuUs))} | ${fmt(m(t, (s) => s.cpuUs))} | ${fmt(ratio((s) => s.cpuUs))} | ${fmt(m(u, (s) => s.p50Us), 1)} | ${fmt(m(t, (s) => s.p50Us), 1)} | ${fmt(ratio((s) => s.p50Us))} | ${fmt(m(u, (s) => s.p99Us), 1)} | ${fmt(m(t, (s) => s.p99Us), 1)} | ${fmt(m(u, (s) => s.rps), 0)} | ${fmt(m(t, (s) => s.rps), 0)} |`,
    );
  }
  out();
  out(`Calls that failed in the timed windows (not counted): ${failures.hit}.`);
  out();
}

// ---------------------------------------------------------------- 2. deleteByTag on 10,000 entries

interface DeleteFigures {
  resolveMs: number[];
  baseline: number[];
  during: number[];
  oldAfter: number;
  checked: number;
  /** deleteByTag calls that failed (their run not counted). */
  failed: number;
}

async function deletePart(url: string): Promise<void> {
  const others = Array.from({ length: OTHER_KEYS }, (_, i) => `o${i}`);
  const figures = new Map<TagVariant, DeleteFigures>();
  const instances = new Map<TagVariant, TagContender>();
  for (const variant of TAG_VARIANTS) {
    const c = await makeTagContender(variant, url, `tags-del-${variant}`);
    await c.ready();
    await fill(c, others, () => undefined);
    instances.set(variant, c);
    figures.set(variant, { resolveMs: [], baseline: [], during: [], oldAfter: 0, checked: 0, failed: 0 });
  }
  const otherLoader = () => VALUE;
  const reloaded = () => 'reloaded';
  for (let r = 0; r < RUNS; r++) {
    for (const variant of order(r)) {
      const c = instances.get(variant)!;
      const f = figures.get(variant)!;
      const tag = `big${r}`;
      const keys = Array.from({ length: BIG_TAG_ENTRIES }, (_, i) => `${tag}:${i}`);
      await fill(c, keys, () => [tag]);
      await sleep(5); // bentocache: not in the millisecond of the last write
      // Other traffic: [start, latency ms] per read, each read after one event-loop turn.
      const samples: [number, number][] = [];
      let reading = true;
      const loops = Array.from({ length: OTHER_LOOPS }, async () => {
        while (reading) {
          const t = performance.now();
          await turn();
          try {
            await c.get(others[Math.floor(Math.random() * OTHER_KEYS)] as string, otherLoader, TTL, undefined);
          } catch {
            failures.delete++;
            continue;
          }
          samples.push([t, performance.now() - t]);
        }
      });
      await sleep(BASELINE_MS);
      const t0 = performance.now();
      const deleted = await c.deleteByTag([tag]).then(
        () => true,
        (err: unknown) => (progress(`tags · deleteByTag · ${variant} failed: ${String(err)}`), false),
      );
      const t1 = performance.now();
      reading = false;
      await Promise.all(loops);
      if (!deleted) {
        f.failed++;
        continue;
      }
      f.resolveMs.push(t1 - t0);
      for (const [t, ms] of samples) {
        if (t >= t0 - BASELINE_MS && t < t0) f.baseline.push(ms);
        else if (t >= t0 && t <= t1) f.during.push(ms);
      }
      for (const k of keys.slice(0, CHECKED_AFTER)) {
        let answer: unknown;
        await setUp(async () => void (answer = await c.get(k, reloaded, TTL, [tag])));
        if (answer !== 'reloaded') f.oldAfter++;
        f.checked++;
      }
      progress(`tags · deleteByTag · ${variant} · run ${r + 1}/${RUNS}: resolved in ${fmt(t1 - t0)} ms`);
    }
  }
  for (const c of instances.values()) await c.close();

  out(`### 2. deleteByTag on a tag of ${BIG_TAG_ENTRIES.toLocaleString('en')} entries`);
  out();
  out(`One process: the entries written through the variant's instance (its L1 holds them where it has one), ${OTHER_LOOPS} loops reading ${OTHER_KEYS} other untagged warm keys through it meanwhile (a sample: one event-loop turn + the call). Resolve time: median (min–max) of ${RUNS} interleaved runs; the other reads' latencies pooled over the runs: the ${BASELINE_MS} ms before each deleteByTag, and from its call to its resolution.`);
  out();
  out('| variant | deleteByTag resolved in, ms | other reads before it: n, p99 ms | other reads while it runs: n, p99 ms, max ms | old values answered after it (of tagged keys read) | deleteByTag failed |');
  out('|---|---:|---:|---:|---:|---:|');
  for (const variant of TAG_VARIANTS) {
    const f = figures.get(variant)!;
    const b = [...f.baseline].sort((x, y) => x - y);
    const d = [...f.during].sort((x, y) => x - y);
    out(
      `| ${TAG_VARIANT_NOTES[variant]} | ${fmt(median(f.resolveMs))} (${fmt(Math.min(...f.resolveMs))}–${fmt(Math.max(...f.resolveMs))}) | ${b.length}, ${fmt(percentile(b, 99), 3)} | ${d.length}, ${fmt(percentile(d, 99), 3)}, ${fmt(d.at(-1) ?? Number.NaN, 3)} | ${f.oldAfter} of ${f.checked} | ${f.failed} |`,
    );
  }
  out();
  out(`Other reads that failed (not counted): ${failures.delete}.`);
  out();
}

// ---------------------------------------------------------------- 3. the race

/** A child's messages by kind; a `failed` message or an exit rejects what is awaited. */
function inbox(child: ChildProcess): (kind: string) => Promise<Record<string, unknown>> {
  const got = new Map<string, Record<string, unknown>>();
  const waiting = new Map<string, { resolve: (m: Record<string, unknown>) => void; reject: (e: Error) => void }>();
  let broken: Error | undefined;
  const fail = (e: Error) => {
    broken = e;
    for (const w of waiting.values()) w.reject(e);
    waiting.clear();
  };
  child.on('message', (m: Record<string, unknown>) => {
    if ('failed' in m) return fail(new Error(`race worker: ${String(m.failed)}`));
    const kind = Object.keys(m)[0] as string;
    const w = waiting.get(kind);
    if (w) {
      waiting.delete(kind);
      w.resolve(m);
    } else got.set(kind, m);
  });
  child.once('exit', (code) => {
    if (waiting.size > 0) fail(new Error(`race worker exited (${String(code)}) before answering`));
  });
  return (kind) => {
    const m = got.get(kind);
    if (m) return Promise.resolve(m);
    if (broken) return Promise.reject(broken);
    return new Promise((resolve, reject) => waiting.set(kind, { resolve, reject }));
  };
}

interface RaceFigures {
  answers: number;
  judged: number;
  before: number;
  during: number;
  loaderRuns: number;
  failed: number;
  deletes: number;
  deleteFailed: number;
  resolveMs: number[];
  p50: number[];
  p99: number[];
  examples: string[];
  firstError?: string;
}

async function raceRun(variant: TagVariant, url: string, r: number, f: RaceFigures): Promise<void> {
  const prefix = `tags-race-${variant}-${r}`;
  const tag = 'race';
  const children = Array.from({ length: RACE_PROCESSES }, () => fork(WORKER, [], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }));
  const boxes = children.map(inbox);
  let deleter: TagContender | undefined;
  try {
    await Promise.all(boxes.map((b) => b('ready')));
    const job: RaceJob = { variant, url, prefix, tag, keys: RACE_KEYS, callers: RACE_CALLERS, loaderMs: RACE_LOADER_MS, pauseMs: RACE_PAUSE_MS, durationMs: RACE_MS };
    for (const c of children) c.send(job);
    await Promise.all(boxes.map((b) => b('warm')));
    deleter = await makeTagContender(variant, url, prefix);
    await deleter.ready();
    const startAt = now() + 100;
    for (const c of children) c.send({ startAt });
    const deletes: RaceDelete[] = [];
    const pending: Promise<void>[] = [];
    // deleteByTag on a fixed 50 ms schedule from the first answers on, each not waiting for the last.
    for (let at = startAt + RACE_DELETE_EVERY_MS; at < startAt + RACE_MS; at += RACE_DELETE_EVERY_MS) {
      await sleep(Math.max(0, at - now()));
      const calledAt = now();
      pending.push(
        deleter.deleteByTag([tag]).then(
          () => void deletes.push({ calledAt, resolvedAt: now() }),
          () => void f.deleteFailed++,
        ),
      );
    }
    await Promise.all(pending);
    await Promise.all(boxes.map((b) => b('done')));
    const reports = boxes.map((b) => b('report'));
    for (const c of children) c.send({ deletes });
    for (const { report } of (await Promise.all(reports)) as { report: RaceReport }[]) {
      f.answers += report.answers;
      f.judged += report.counts.judged;
      f.before += report.counts.loadedBeforeCall;
      f.during += report.counts.loadedWhileRunning;
      f.loaderRuns += report.loaderRuns;
      f.failed += report.failed;
      f.p50.push(report.p50);
      f.p99.push(report.p99);
      f.firstError ??= report.firstError;
      for (const e of report.counts.examples) {
        if (f.examples.length >= 5) break;
        const rel = (t: number) => `${fmt(t - startAt, 1)} ms`;
        f.examples.push(
          `run ${r + 1}, key ${prefix}/${e.answer.key}: call at ${rel(e.answer.calledAt)}, its value's load began at ${rel(e.answer.loadStartedAt)}; the latest deleteByTag resolved before the call was called at ${rel(e.latest.calledAt)}, resolved at ${rel(e.latest.resolvedAt)}`,
        );
      }
    }
    f.deletes += deletes.length;
    f.resolveMs.push(...deletes.map((d) => d.resolvedAt - d.calledAt));
    progress(`tags · race · ${variant} · run ${r + 1}/${RUNS}: ${f.before} answers loaded before a resolved deleteByTag so far`);
  } finally {
    await deleter?.close();
    await exited(children);
  }
}

async function racePart(url: string): Promise<void> {
  const figures = new Map<TagVariant, RaceFigures>(
    TAG_VARIANTS.map((v) => [v, { answers: 0, judged: 0, before: 0, during: 0, loaderRuns: 0, failed: 0, deletes: 0, deleteFailed: 0, resolveMs: [], p50: [], p99: [], examples: [] }]),
  );
  for (let r = 0; r < RUNS; r++) for (const variant of order(r)) await raceRun(variant, url, r, figures.get(variant)!);

  out(`### 3. The race: deleteByTag every ${RACE_DELETE_EVERY_MS} ms against loads of ${RACE_LOADER_MS} ms`);
  out();
  out(
    `${RACE_PROCESSES} processes × ${RACE_CALLERS} callers (a ${RACE_PAUSE_MS} ms pause between calls) over ${RACE_KEYS} keys tagged \`race\`, ${RACE_MS} ms per run, ${RUNS} interleaved runs; the bench process calls deleteByTag('race') every ${RACE_DELETE_EVERY_MS} ms. D = the latest-called deleteByTag that had resolved when a call started. **Load began before D was called** breaks the guarantee (the load's grant came before D); **while D ran** (after its call, before it resolved) is allowed. Counts are sums over runs; latencies medians of the processes' figures.`,
  );
  out();
  out('| variant | answers | judged (a deleteByTag had resolved) | load began before D was called | load began while D ran | loader runs | deleteByTags resolved (failed) | deleteByTag resolve p50 / p99 ms | call p50 / p99 ms | calls failed |');
  out('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const variant of TAG_VARIANTS) {
    const f = figures.get(variant)!;
    const rs = [...f.resolveMs].sort((a, b) => a - b);
    out(
      `| ${TAG_VARIANT_NOTES[variant]} | ${f.answers} | ${f.judged} | **${f.before}** | ${f.during} | ${f.loaderRuns} | ${f.deletes} (${f.deleteFailed}) | ${fmt(percentile(rs, 50), 1)} / ${fmt(percentile(rs, 99), 1)} | ${fmt(median(f.p50), 1)} / ${fmt(median(f.p99), 1)} | ${f.failed} |`,
    );
  }
  out();
  for (const variant of TAG_VARIANTS) {
    const f = figures.get(variant)!;
    if (f.examples.length > 0) {
      out(`${TAG_VARIANT_NOTES[variant]}, the first answers loaded before D was called (times from the run's start):`);
      out();
      for (const e of f.examples) out(`- ${e}`);
      out();
    }
    if (f.firstError !== undefined) out(`${TAG_VARIANT_NOTES[variant]}: first failed call: ${f.firstError}`);
  }

}

// ---------------------------------------------------------------- main

const store = await provideRedis();
try {
  const admin = new Redis(store.adminUrl);
  const redisVersion = /redis_version:(\S+)/.exec(await admin.info('server'))?.[1] ?? '?';
  admin.disconnect();
  const bento = (JSON.parse(readFileSync(new URL('../node_modules/bentocache/package.json', import.meta.url), 'utf8')) as { version: string }).version;
  out('```');
  out(COMMAND);
  out('```');
  out();
  out(`${new Date().toISOString()} · ${cpus().length} × ${cpus()[0]?.model ?? '?'} · Node ${process.version} · Redis ${redisVersion} (${store.source}) · ioredis clients · bentocache ${bento} · ours from ${(await library()).from}/`);
  out();
  if (PARTS.has('hit')) await hitPart(store.url);
  if (PARTS.has('delete')) await deletePart(store.url);
  if (PARTS.has('race')) await racePart(store.url);
  if (args.out) {
    mkdirSync(dirname(args.out), { recursive: true });
    writeFileSync(args.out, `${lines.join('\n')}\n`);
  }
} finally {
  await store.stop();
}
