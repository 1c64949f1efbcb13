/**
 * A forked "app server" process: its own cache on a client of the family under test (SG_TEST_CLIENT,
 * inherited from the parent's env; ioredis for the loader's counters and the Redlock nodes), driven
 * over IPC by a test or a benchmark. Events go to the parent over IPC, never through the Redis under test.
 *
 * Parent → worker:  { op: 'call', id, key, callers, options, loader, startAt? } | { op: 'open', gate, value } | { op: 'stats', id } | { op: 'exit' }
 * Worker → parent:  { ev: 'ready', family } (the adapter the cache picked) | { ev: 'loader-start', id, key, fence } | { ev: 'result', id, results }
 *                   | { ev: 'cache', name, data } (every cache event, for the history checker) | { ev: 'stats', id, stats }
 */
import { Redis } from 'ioredis';
import { createCache, type CallOptions, type LoaderContext } from '../../src/index.js';
import { portFor } from '../../src/client/detect.js';
import { familyClient } from './family.js';
import { countingLoader, type LoaderSpec } from './counting-loader.js';

interface CallMsg {
  op: 'call';
  id: number;
  key: string;
  callers: number;
  options: CallOptions;
  loader: LoaderSpec;
}
type Msg = CallMsg | { op: 'open'; gate: string; value: unknown } | { op: 'stats'; id: number } | { op: 'exit' };

export interface CallResult {
  ok: boolean;
  value?: unknown;
  code?: string;
  message?: string;
  ms: number;
}

const send = (m: unknown): void => {
  process.send?.(m);
};

const url = process.env.SG_REDIS_URL ?? 'redis://127.0.0.1:6379';
const prefix = process.env.SG_PREFIX ?? 'sg';
const { client: redis, dispose: disposeRedis } = familyClient(url);
// The loader's own counters are the test's bookkeeping, not the cache's traffic: admin user.
const counters = new Redis(process.env.SG_ADMIN_URL ?? url, { maxRetriesPerRequest: 1 });
const redlockUrls = (process.env.SG_REDLOCK_URLS ?? '').split(',').filter(Boolean);
const redlockNodes = redlockUrls.map((u) => new Redis(u, { maxRetriesPerRequest: 1 }));
for (const c of [counters, ...redlockNodes]) c.on('error', () => undefined);
const cache = createCache({
  redis,
  prefix,
  redisTimeout: Number(process.env.SG_REDIS_TIMEOUT ?? 1000),
  ...(redlockNodes.length > 0 ? { redlock: { nodes: redlockNodes } } : {}),
});

for (const name of ['hit', 'stale', 'miss', 'computed', 'waited', 'lockLost', 'writeRejected', 'degraded', 'decodeError', 'loaderError', 'refreshError'] as const) {
  cache.on(name, (data: Record<string, unknown>) => {
    const safe = { ...data };
    if (safe.error instanceof Error) safe.error = { code: (safe.error as { code?: string }).code, message: safe.error.message };
    send({ ev: 'cache', name, data: safe });
  });
}

const gates = new Map<string, (value: unknown) => void>();
const waitGate = (gate: string): Promise<unknown> => new Promise((resolve) => gates.set(gate, resolve));

async function runCall(msg: CallMsg): Promise<void> {
  const loader = countingLoader(counters, msg.loader, {
    onStart: (ctx: LoaderContext) => send({ ev: 'loader-start', id: msg.id, key: ctx.key, fence: ctx.fencingToken }),
    waitGate,
  });
  const calls = Array.from({ length: msg.callers }, async (): Promise<CallResult> => {
    const t0 = performance.now();
    try {
      const value = await cache.getOrCompute(msg.key, loader, msg.options);
      return { ok: true, value, ms: performance.now() - t0 };
    } catch (err) {
      const e = err as { code?: string; message?: string };
      return { ok: false, code: e.code, message: e.message, ms: performance.now() - t0 };
    }
  });
  send({ ev: 'result', id: msg.id, results: await Promise.all(calls) });
}

process.on('message', (msg: Msg) => {
  if (msg.op === 'call') void runCall(msg);
  else if (msg.op === 'open') gates.get(msg.gate)?.(msg.value);
  else if (msg.op === 'stats') send({ ev: 'stats', id: msg.id, stats: cache.stats() });
  else if (msg.op === 'exit') {
    void cache.close().then(() => {
      disposeRedis();
      for (const c of [counters, ...redlockNodes]) c.disconnect();
      process.exit(0);
    });
  }
});

void Promise.all([redis.ping(), counters.ping(), cache.ready()]).then(() => send({ ev: 'ready', family: portFor(redis).family }));
