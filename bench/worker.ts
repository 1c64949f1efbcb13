/**
 * One benchmark "app server" process. For a run it builds the contender, waits for the shared start
 * instant, then drives C virtual users (closed loop) or a fixed arrival schedule (open loop) against
 * it for the run's duration. The loader is the same for every contender: it sleeps D ms, stamps the
 * value with its creation time (so every answer says how old it is), and reports its run interval to
 * the parent over IPC (never through the Redis under test).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { makeContender, type ContenderName } from './lib/contenders.js';
import { keyPicker, lease, type ScenarioSpec } from './lib/scenarios.js';

export interface RunRequest {
  op: 'run';
  contender: ContenderName;
  scenario: ScenarioSpec;
  callers: number;
  /** Wall-clock ms (performance.timeOrigin-based) at which every worker starts. */
  startAt: number;
  url: string;
  redlockUrls: string[];
  prefix: string;
  /** `--trace`: write every counted call and loader run to this directory. */
  traceDir?: string;
}

export interface RunReport {
  ev: 'report';
  calls: number;
  errors: number;
  /** Calls abandoned after CALL_LIMIT_MS without settling (counted in errors too). */
  unsettled: number;
  staleAnswers: number;
  /** Of them, answers carrying a value of the burst fill before the run (its age counts from the fill's loader, before its write queued behind the others). */
  staleFromFill: number;
  latencies: number[];
  /**
   * Open loop only: per arrival, how late the call actually started after its scheduled instant (ms).
   * A latency tail with a matching lag tail is this process's event loop being busy (or timers late),
   * not the call waiting on something.
   */
  startLags: number[];
  /** The first error a call met, if any (e.g. an option this build does not know). */
  firstError?: string;
  /** Loader runs: [key, start, end, ok]. */
  runs: [string, number, number, boolean][];
  /** This process's CPU (user + system, µs) from the shared start instant until its last call settled. */
  cpuUs: number;
  /** Of which system (kernel) time, µs. */
  systemUs: number;
  /** Voluntary context switches over the same window: how often the process slept and was woken. */
  wakeups: number;
}

const CALL_LIMIT_MS = 10_000;
const now = (): number => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

async function run(req: RunRequest): Promise<RunReport> {
  const { scenario } = req;
  const contender = makeContender(req.contender, { url: req.url, redlockUrls: req.redlockUrls, prefix: req.prefix, ...lease(scenario) });
  const runs: RunReport['runs'] = [];
  const latencies: number[] = [];
  let errors = 0;
  let staleAnswers = 0;
  let staleFromFill = 0;
  let unsettled = 0;
  let firstError: string | undefined;
  const pick = keyPicker(scenario, Math.random);
  if (req.traceDir) mkdirSync(req.traceDir, { recursive: true });
  const failFrom = req.startAt + scenario.durationMs * (scenario.failWindow?.[0] ?? 2);
  const failTo = req.startAt + scenario.durationMs * (scenario.failWindow?.[1] ?? 2);

  // Open loop: arrivals before startAt are the warm-up; neither their answers nor loader runs that
  // start before startAt are counted.
  const measureFrom = scenario.kind === 'open' ? req.startAt : -Infinity;
  const loaderFor = (key: string) => async () => {
    const start = now();
    await sleep(scenario.loaderMs);
    const end = now();
    const failing = end >= failFrom && end < failTo;
    if (start >= measureFrom) runs.push([key, start, end, !failing]);
    if (failing) throw new Error('origin failing');
    return { key, created: end };
  };

  // A call that never settles would stall the whole run: give up on it after CALL_LIMIT_MS and count it.
  const startLags: number[] = [];
  /** --trace: [key, scheduled, started, answered, age of the value], ms. */
  const trace: [string, number, number, number, number][] = [];
  const call = async (key: string, t0 = now()) => {
    let timer: NodeJS.Timeout | undefined;
    const counted = t0 >= measureFrom;
    const started = now();
    try {
      const limit = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('call did not settle')), CALL_LIMIT_MS)));
      const v = (await Promise.race([contender.get(key, loaderFor(key), scenario.ttlMs, scenario.staleMs), limit])) as { created: number; filled?: true };
      const t1 = now();
      if (!counted) return;
      latencies.push(t1 - t0);
      if (req.traceDir) trace.push([key, t0, started, t1, t1 - v.created]);
      if (t1 - v.created > scenario.ttlMs) {
        staleAnswers++;
        if (v.filled) staleFromFill++;
      }
    } catch (err) {
      if (!counted) return;
      latencies.push(now() - t0);
      errors++;
      firstError ??= String(err);
      if ((err as Error).message === 'call did not settle') unsettled++;
    } finally {
      clearTimeout(timer);
    }
  };

  await contender.ready?.();
  let cpu0 = process.cpuUsage();
  let ru0 = process.resourceUsage();
  if (scenario.kind === 'open') {
    const from = req.startAt - (scenario.warmupMs ?? 0);
    // CPU counts from startAt, like the answers: the warm-up's calls are not in the figure.
    const snapshot = setTimeout(() => {
      cpu0 = process.cpuUsage();
      ru0 = process.resourceUsage();
    }, req.startAt - now());
    await sleep(from - now());
    await openLoop(from, req.startAt + scenario.durationMs, scenario.perSecond ?? 0, (scheduled) => {
      if (scheduled >= measureFrom) startLags.push(now() - scheduled);
      return call(pick(), scheduled);
    });
    clearTimeout(snapshot);
  } else {
    await sleep(req.startAt - now());
    cpu0 = process.cpuUsage();
    ru0 = process.resourceUsage();
    const users = Array.from({ length: req.callers }, async () => {
      if (scenario.kind === 'cold') return call('cold');
      const until = req.startAt + scenario.durationMs;
      while (now() < until) {
        await call(pick());
        if (scenario.thinkMs > 0) await sleep(scenario.thinkMs);
      }
    });
    await Promise.all(users);
  }
  const cpu = process.cpuUsage(cpu0);
  const wakeups = process.resourceUsage().voluntaryContextSwitches - ru0.voluntaryContextSwitches;
  // Background refreshes started by the last calls (refresh ahead, stale windows) finish before the
  // contender closes: a peer whose refresh outlives its connection would otherwise fail after close.
  if (scenario.kind !== 'cold') await sleep(scenario.loaderMs + 50);
  await contender.close();
  if (req.traceDir) {
    const file = `${req.traceDir}/${scenario.name}.${req.contender}.${req.prefix}.${process.pid}.json`;
    writeFileSync(file, JSON.stringify({ scenario: scenario.name, contender: req.contender, ttlMs: scenario.ttlMs, startAt: req.startAt, calls: trace, runs }));
  }
  return { ev: 'report', calls: latencies.length, errors, unsettled, staleAnswers, staleFromFill, latencies, startLags, runs, cpuUs: cpu.user + cpu.system, systemUs: cpu.system, wakeups, ...(firstError ? { firstError } : {}) };
}

/**
 * Fires arrival i at its scheduled instant from + i / perSecond, never waiting for earlier answers
 * (none when perSecond is 0).
 * Each wake fires every arrival that is due (a late timer or a busy event loop makes them late, and
 * their latency counts from the schedule). Resolves when every fired call has settled.
 */
async function openLoop(from: number, until: number, perSecond: number, fire: (scheduled: number) => Promise<void>): Promise<void> {
  // No arrivals (the fleet's idle run): the contender stays connected and does its background work only.
  if (perSecond <= 0) {
    await sleep(until - now());
    return;
  }
  const interval = 1000 / perSecond;
  const calls: Promise<void>[] = [];
  for (let i = 0; ; ) {
    const t = now();
    for (let at = from + i * interval; at <= t && at < until; at = from + ++i * interval) calls.push(fire(at));
    const next = from + i * interval;
    if (next >= until) break;
    await sleep(next - now());
  }
  await Promise.all(calls);
}

// A peer's background work failing after the run is reported, not a reason to lose the whole bench.
process.on('unhandledRejection', (reason) => console.error(`worker: unhandled rejection: ${String(reason)}`));
process.on('message', (msg: RunRequest | { op: 'exit' }) => {
  if (msg.op === 'exit') process.exit(0);
  else
    void run(msg).then(
      (report) => process.send?.(report),
      (err: unknown) => process.send?.({ ev: 'failed', message: String(err) }),
    );
});
process.send?.({ ev: 'ready' });
