/**
 * One benchmark "app server" process. For a run it builds the contender, waits for the shared start
 * instant, then drives C virtual users against it for the run's duration. The loader is the same for
 * every contender: it sleeps D ms, stamps the value with its creation time, and reports its run
 * interval to the parent over IPC (never through the Redis under test).
 */
import { makeContender, type ContenderName } from './lib/contenders.js';
import { keyPicker, type ScenarioSpec } from './lib/scenarios.js';

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
}

export interface RunReport {
  ev: 'report';
  calls: number;
  errors: number;
  /** Calls abandoned after CALL_LIMIT_MS without settling (counted in errors too). */
  unsettled: number;
  staleAnswers: number;
  latencies: number[];
  /** Loader runs: [key, start, end, ok]. */
  runs: [string, number, number, boolean][];
}

const CALL_LIMIT_MS = 10_000;
const now = (): number => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

async function run(req: RunRequest): Promise<RunReport> {
  const { scenario } = req;
  const contender = makeContender(req.contender, { url: req.url, redlockUrls: req.redlockUrls, prefix: req.prefix });
  const runs: RunReport['runs'] = [];
  const latencies: number[] = [];
  let errors = 0;
  let staleAnswers = 0;
  let unsettled = 0;
  const pick = keyPicker(scenario, Math.random);
  const failFrom = req.startAt + scenario.durationMs * (scenario.failWindow?.[0] ?? 2);
  const failTo = req.startAt + scenario.durationMs * (scenario.failWindow?.[1] ?? 2);

  const loaderFor = (key: string) => async () => {
    const start = now();
    await sleep(scenario.loaderMs);
    const end = now();
    const failing = end >= failFrom && end < failTo;
    runs.push([key, start, end, !failing]);
    if (failing) throw new Error('origin failing');
    return { key, created: end };
  };

  // A call that never settles would stall the whole run: give up on it after CALL_LIMIT_MS and count it.
  const call = async (key: string) => {
    const t0 = now();
    let timer: NodeJS.Timeout | undefined;
    try {
      const limit = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('call did not settle')), CALL_LIMIT_MS)));
      const v = (await Promise.race([contender.get(key, loaderFor(key), scenario.ttlMs, scenario.staleMs), limit])) as { created: number };
      const t1 = now();
      latencies.push(t1 - t0);
      if (t1 - v.created > scenario.ttlMs) staleAnswers++;
    } catch (err) {
      latencies.push(now() - t0);
      errors++;
      if ((err as Error).message === 'call did not settle') unsettled++;
    } finally {
      clearTimeout(timer);
    }
  };

  await sleep(req.startAt - now());
  const users = Array.from({ length: req.callers }, async () => {
    if (scenario.kind === 'cold') return call('cold');
    const until = req.startAt + scenario.durationMs;
    while (now() < until) {
      await call(pick());
      if (scenario.thinkMs > 0) await sleep(scenario.thinkMs);
    }
  });
  await Promise.all(users);
  await contender.close();
  return { ev: 'report', calls: latencies.length, errors, unsettled, staleAnswers, latencies, runs };
}

process.on('message', (msg: RunRequest | { op: 'exit' }) => {
  if (msg.op === 'exit') process.exit(0);
  else
    void run(msg).then(
      (report) => process.send?.(report),
      (err: unknown) => process.send?.({ ev: 'failed', message: String(err) }),
    );
});
process.send?.({ ev: 'ready' });
