/**
 * One process of `npm run bench:tags`'s race (bench/tags.ts): one contender instance, `callers`
 * closed-loop callers over `keys` keys tagged `tag`, each call a getOrCompute whose loader takes
 * `loaderMs` and stamps its value with the instant it started. Times are epoch ms
 * (performance.timeOrigin + performance.now()), one axis with the parent's deleteByTag instants.
 * Protocol: → {ready}; ← RaceJob; → {warm}; ← {startAt}; → {done}; ← {deletes}; → RaceReport.
 */
import { countRace, makeTagContender, type RaceAnswer, type RaceCounts, type RaceDelete, type TagVariant } from './lib/tags.js';

export interface RaceJob {
  variant: TagVariant;
  url: string;
  prefix: string;
  tag: string;
  keys: number;
  callers: number;
  loaderMs: number;
  /** A caller's pause between two calls (a request loop, not a spin on L1 hits). */
  pauseMs: number;
  durationMs: number;
}

export interface RaceReport {
  answers: number;
  failed: number;
  loaderRuns: number;
  /** Latency of every answered call, ms, sorted (sent as p50/p99 only). */
  p50: number;
  p99: number;
  counts: RaceCounts;
  firstError?: string;
}

const now = (): number => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const TTL = 60_000;

function next<T>(): Promise<T> {
  return new Promise((resolve) => process.once('message', (m: T) => resolve(m)));
}

async function race(job: RaceJob): Promise<RaceReport> {
  const cache = await makeTagContender(job.variant, job.url, job.prefix);
  await cache.ready();
  const names = Array.from({ length: job.keys }, (_, i) => `r${i}`);
  const tags = [job.tag];
  let loaderRuns = 0;
  const loader = async () => {
    const loadStartedAt = now();
    loaderRuns++;
    await sleep(job.loaderMs);
    return { loadStartedAt, pid: process.pid };
  };
  const started = next<{ startAt: number }>();
  process.send?.({ warm: true });
  const { startAt } = await started;
  const until = startAt + job.durationMs;
  const answers: RaceAnswer[] = [];
  const latencies: number[] = [];
  let failed = 0;
  let firstError: string | undefined;
  await sleep(Math.max(0, startAt - now()));
  await Promise.all(
    Array.from({ length: job.callers }, async () => {
      while (now() < until) {
        const key = names[Math.floor(Math.random() * names.length)] as string;
        const calledAt = now();
        try {
          const v = (await cache.get(key, loader, TTL, tags)) as { loadStartedAt: number };
          latencies.push(now() - calledAt);
          answers.push({ key, calledAt, loadStartedAt: v.loadStartedAt });
        } catch (err) {
          failed++;
          firstError ??= String(err);
        }
        await sleep(job.pauseMs);
      }
    }),
  );
  const deletes = next<{ deletes: RaceDelete[] }>();
  process.send?.({ done: true });
  const counts = countRace((await deletes).deletes, answers);
  await cache.close();
  latencies.sort((a, b) => a - b);
  const q = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? Number.NaN;
  return { answers: answers.length, failed, loaderRuns, p50: q(0.5), p99: q(0.99), counts, ...(firstError === undefined ? {} : { firstError }) };
}

process.once('message', (job: RaceJob) => {
  race(job).then(
    (r) => process.send?.({ report: r }, () => process.exit(0)),
    (err: unknown) => process.send?.({ failed: String(err) }, () => process.exit(1)),
  );
});
process.send?.({ ready: true });
