/**
 * One process of bench:tracking (bench/lib/tracking.ts): its own ioredis client and cache (the
 * compiled library, as users run it: bench/lib/library.ts), driven over IPC, one request at a time.
 * It looks into its L1 directly (the cache's tier, not a public API) to know what L1 holds without
 * sending a command.
 */
import { Redis } from 'ioredis';
import type { Cache } from '../src/index.js';
import { library } from './lib/library.js';
import { TRACKING_MODES, type HitsReport, type TrackingOp } from './lib/tracking.js';

const TTL = 600_000;
const now = (): number => performance.timeOrigin + performance.now();
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, ms)));
const cpuUs = (since?: NodeJS.CpuUsage): number => {
  const u = process.cpuUsage(since);
  return u.user + u.system;
};
const { lib } = await library();

let redis: Redis | undefined;
let cache: Cache | undefined;
/** This process's L1, read without touching its Redis. */
let l1: { get(key: string): unknown } | undefined;
let degraded = 0;
let window: NodeJS.CpuUsage | undefined;
let polling: Promise<number[]> | undefined;

const open = (): { cache: Cache; l1: { get(key: string): unknown } } => {
  if (!cache || !l1) throw new Error('no cache open');
  return { cache, l1 };
};

/** Until `key` is out of L1 (a note or an invalidation is on its way: every event-loop turn). */
async function dropped(key: string): Promise<void> {
  const deadline = now() + 30_000;
  while (open().l1.get(key) !== undefined) {
    if (now() > deadline) throw new Error(`${key} still in L1 after 30 s`);
    await turn();
  }
}

/** Until `key` is in L1: a read on a tracked connection may be refused by a late invalidation, so read again. */
async function held(key: string): Promise<void> {
  const c = open();
  for (let tries = 0; c.l1.get(key) === undefined; tries++) {
    if (tries === 100) throw new Error(`${key} not in L1 after 100 reads`);
    await c.cache.get(key);
  }
}

/** `get()` round and round; the CPU window opens at the first turn past startAt. Yields every 256 calls, as a server's loop would. */
async function hits(keys: string[], startAt: number, until: number, loop: boolean): Promise<HitsReport> {
  if (!loop) {
    await sleep(startAt - now());
    const cpu = process.cpuUsage();
    await sleep(until - now());
    return { hits: 0, cpuUs: cpuUs(cpu) };
  }
  const c = open().cache;
  let count = 0;
  let cpu: NodeJS.CpuUsage | undefined;
  for (let i = 0; ; ) {
    const t = now();
    if (t >= until) break;
    if (!cpu && t >= startAt) cpu = process.cpuUsage();
    for (let j = 0; j < 256; j++) await c.get(keys[i++ % keys.length] as string);
    if (cpu) count += 256;
    await turn();
  }
  return { hits: count, cpuUs: cpu ? cpuUs(cpu) : 0 };
}

/** Every event-loop turn, stamps each key still in L1 with the moment it was seen; ends when none is left. */
async function poll(keys: string[]): Promise<number[]> {
  const c = open();
  const last = keys.map(() => Number.NEGATIVE_INFINITY);
  const left = new Set(keys.keys());
  const deadline = now() + 60_000;
  while (left.size > 0) {
    for (const j of left) {
      if (c.l1.get(keys[j] as string) !== undefined) last[j] = now();
      else left.delete(j);
    }
    if (now() > deadline) throw new Error(`${left.size} deleted keys still in L1 after 60 s`);
    await turn();
  }
  return last;
}

async function handle(req: TrackingOp): Promise<unknown> {
  switch (req.op) {
    case 'open': {
      redis = new Redis(req.url);
      const c = lib.createCache({ redis, prefix: req.prefix, ...TRACKING_MODES[req.mode] });
      c.on('degraded', () => degraded++);
      cache = c;
      l1 = (c as unknown as { rt: { local: { get(key: string): unknown } } }).rt.local;
      degraded = 0;
      // ready() answers false after redisTimeout while the subscription or tracking is not there yet
      // (17 processes opening at once on 2 busy cores): they keep trying in the background; ask again.
      for (let tries = 1; !(await c.ready()); tries++) if (tries === 20) throw new Error(`${req.mode}: ready() resolved false 20 times`);
      return undefined;
    }
    case 'set': {
      const c = open().cache;
      for (let i = 0; i < req.keys.length; i += 50) await Promise.all(req.keys.slice(i, i + 50).map((k) => c.set(k, req.value, TTL)));
      return undefined;
    }
    case 'hold':
      for (const k of req.keys) await held(k);
      return undefined;
    case 'cpuStart':
      window = process.cpuUsage();
      return undefined;
    case 'write': {
      const c = open().cache;
      for (const k of req.keys) await c.set(k, req.value, TTL);
      return undefined;
    }
    case 'cpuEnd':
      if (req.until !== undefined) await dropped(req.until);
      return cpuUs(window);
    case 'hits':
      return hits(req.keys, req.startAt, req.until, req.loop);
    case 'staleStart':
      polling = poll(req.keys);
      polling.catch(() => undefined); // staleEnd reports it
      return undefined;
    case 'staleEnd':
      return polling;
    case 'delete': {
      const c = open().cache;
      const resolved: number[] = [];
      for (const k of req.keys) {
        await c.delete(k);
        resolved.push(now());
        await sleep(req.gapMs);
      }
      return resolved;
    }
    case 'close': {
      await cache?.close();
      redis?.disconnect();
      cache = undefined;
      l1 = undefined;
      return degraded;
    }
  }
}

process.on('message', (m: TrackingOp & { id: number } | { id: number; op: 'exit' }) => {
  if (m.op === 'exit') process.exit(0);
  handle(m).then(
    (result) => process.send?.({ id: m.id, result }),
    (err: unknown) => process.send?.({ id: m.id, error: err instanceof Error ? (err.stack ?? err.message) : String(err) }),
  );
});
process.send?.({ ready: true });
