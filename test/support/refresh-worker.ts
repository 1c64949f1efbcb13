/**
 * A forked "app server" for the refresh-ahead fleet test: its own ioredis connection and cache, put
 * under steady load by the parent's one `run` message; it reports everything when the run ends.
 *
 * Parent → worker:  { op: 'run', hot, cold, options, everyMs, forMs, loadMs } | { op: 'exit' }
 * Worker → parent:  { ev: 'ready' } | { ev: 'done', answers, loads, events }
 */
import { Redis } from 'ioredis';
import { createCache, type CallOptions, type LoaderContext } from '../../src/index.js';

/** What the loader returns: which run made it and when it finished (epoch ms, sub-ms precision). */
export interface Made {
  run: string;
  at: number;
}
export interface Answer {
  key: string;
  made: Made;
  answeredAt: number;
}
export interface Load {
  key: string;
  run: string;
  /** The run of the value this load refreshed (`ctx.staleValue`), if any. */
  refreshed: string | undefined;
  start: number;
  end: number;
  /** The loader threw (a key in `failing`). */
  failed?: true;
}
export interface RunMsg {
  op: 'run';
  hot: string[];
  cold: string[];
  options: CallOptions;
  everyMs: number;
  forMs: number;
  loadMs: number;
  /** Keys whose loader throws in this worker (the parent made their first fill). */
  failing?: string[];
}
export interface Done {
  ev: 'done';
  answers: Answer[];
  loads: Load[];
  errors: string[];
  /** `at`: epoch ms when it was emitted; `reason`: a stale event's. */
  events: { name: string; key: string; at: number; outcome?: string; reason?: string }[];
}

const now = (): number => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const send = (m: unknown): void => void process.send?.(m);

const redis = new Redis(process.env.SG_REDIS_URL ?? 'redis://127.0.0.1:6379', { maxRetriesPerRequest: 1 });
redis.on('error', () => undefined);
const localMax = Number(process.env.SG_LOCAL_MAX ?? '0');
const cache = createCache({ redis, prefix: process.env.SG_PREFIX ?? 'sg', ...(localMax > 0 ? { local: { max: localMax } } : {}) });

const events: Done['events'] = [];
for (const name of ['refresh', 'miss', 'waited', 'stale', 'loaderError', 'refreshError', 'degraded'] as const) {
  cache.on(name, (e: { key: string | undefined; outcome?: string; reason?: string }) =>
    events.push({ name, key: e.key ?? '', at: now(), ...(e.outcome ? { outcome: e.outcome } : {}), ...(e.reason ? { reason: e.reason } : {}) }),
  );
}

async function run(msg: RunMsg): Promise<void> {
  const answers: Answer[] = [];
  const loads: Load[] = [];
  const errors: string[] = [];
  let seq = 0;
  const loader = async (ctx: LoaderContext<Made>): Promise<Made> => {
    const start = now();
    await sleep(msg.loadMs);
    if (msg.failing?.includes(ctx.key)) {
      loads.push({ key: ctx.key, run: `${process.pid}.failed`, refreshed: ctx.staleValue?.run, start, end: now(), failed: true });
      throw new Error('origin down');
    }
    const made = { run: `${process.pid}.${++seq}`, at: now() };
    loads.push({ key: ctx.key, run: made.run, refreshed: ctx.staleValue?.run, start, end: made.at });
    return made;
  };
  const calls: Promise<void>[] = [];
  const ask = (key: string) => {
    calls.push(
      cache.getOrCompute<Made>(key, loader, msg.options).then(
        (made) => void answers.push({ key, made, answeredAt: now() }),
        (error: unknown) => void errors.push(String(error)),
      ),
    );
  };
  for (const key of msg.cold) ask(key); // read once, before their refresh point, then never again
  const end = now() + msg.forMs;
  while (now() < end) {
    for (const key of msg.hot) ask(key);
    await sleep(msg.everyMs);
  }
  await Promise.all(calls);
  // Wait for the refreshes the last hits started: every started one has its outcome, and every won
  // one has run its loader or found the entry refreshed (bounded: a refresh that never settles is
  // reported as it stands, and the parent's checks fail on it).
  const count = (o: string) => events.filter((e) => e.name === 'refresh' && e.outcome === o).length;
  const settled = () => count('started') === count('won') + count('lost') && loads.length + count('already-refreshed') + count('abandoned') >= count('won');
  const waitFrom = now();
  for (const giveUpAt = waitFrom + 10_000; !settled() && now() < giveUpAt; ) await sleep(20);
  if (process.env.SG_DEBUG) console.error(`refresh-worker ${process.pid}: settled after ${(now() - waitFrom).toFixed(0)} ms (${String(settled())})`);
  await sleep(msg.loadMs * 3); // and the won refreshes' writes land
  send({ ev: 'done', answers, loads, errors, events } satisfies Done);
}

process.on('message', (msg: RunMsg | { op: 'exit' }) => {
  if (msg.op === 'run') void run(msg);
  else void cache.close().then(() => {
    redis.disconnect();
    process.exit(0);
  });
});

void Promise.all([redis.ping(), cache.ready()]).then(() => send({ ev: 'ready' }));
