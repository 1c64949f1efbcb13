/** One hit-cost process (bench/lib/hit-cost.ts): builds its variant on its client family (ioredis or node-redis), warms up, then counts requests and CPU over the shared window. */
import { mkdirSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import { Redis } from 'ioredis';
import { LRUCache } from 'lru-cache';
import { Packr } from 'msgpackr';
import { createClient, RESP_TYPES, type RedisClientType } from 'redis';
import { baseLibrary, library } from './lib/library.js';
import { entryKeys } from '../src/keys.js';
import { READ } from '../src/lock/scripts.js';
import { HIT_MAX_VALUE_BYTES, HIT_TTL, HIT_VALUE, type HitReport, type HitRequest } from './lib/hit-cost.js';

const now = (): number => performance.timeOrigin + performance.now();

/** A node-redis client (package `redis`), connected as a caller would; errors are the commands' to report. */
async function nodeRedis(url: string): Promise<RedisClientType> {
  const c: RedisClientType = createClient({ url });
  c.on('error', () => undefined);
  await c.connect();
  return c;
}

async function run(req: HitRequest, go: () => Promise<number>): Promise<HitReport> {
  // The family's client: ioredis (also for lru, which sends nothing, as before the families) or node-redis.
  const nr = req.client === 'node-redis' ? await nodeRedis(req.url) : undefined;
  // bare-autopipeline: the bare client made with ioredis's own auto-pipelining (node-redis pipelines a tick's commands by itself).
  const redis = nr ? undefined : new Redis(req.url, { enableAutoPipelining: req.variant === 'bare-autopipeline' });
  const names = Array.from({ length: req.keys }, (_, i) => `k${i}`);
  let answer: (key: string) => unknown;
  let close = async (): Promise<void> => undefined;
  // The bare variants read the bytes the cache stored, their Redis keys computed once, up front, and decode them as the cache does.
  const packr = new Packr({ useRecords: true, moreTypes: true, structuredClone: false, mapsAsObjects: false });
  const raw = new Map(names.map((k) => [k, entryKeys(req.prefix, k).value]));
  const cap = HIT_MAX_VALUE_BYTES;
  // node-redis: bulk strings as Buffers, as the library's node-redis port asks for the entry bytes.
  const bytes = nr?.withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer });
  const asBytes = { typeMapping: { [RESP_TYPES.BLOB_STRING]: Buffer } };
  if (req.variant === 'bare' || req.variant === 'bare-autopipeline') {
    // The hand-rolled client: GET and decode.
    if (bytes) answer = async (key) => packr.unpack((await bytes.get(raw.get(key) as string)) as Buffer);
    else answer = async (key) => packr.unpack((await (redis as Redis).getBuffer(raw.get(key) as string)) as Buffer);
  } else if (req.variant === 'bare-tuned') {
    // The bare client given the two client-level savings the cache makes on its own commands:
    // ioredis writes a tick's commands in one socket write (its socket corked from the tick's first GET
    // to nextTick: src/client/tick-writes.ts); node-redis arms no per-command timer (`timeout: undefined`:
    // src/client/node-redis.ts). The rest of `ours ÷ bare-tuned` is the library's own work.
    if (nr) {
      const tuned = nr.withCommandOptions({ typeMapping: { [RESP_TYPES.BLOB_STRING]: Buffer }, timeout: undefined } as never) as unknown as { get(k: string): Promise<Buffer> };
      answer = async (key) => packr.unpack(await tuned.get(raw.get(key) as string));
    } else {
      const r = redis as Redis;
      const socket = () => (r as unknown as { stream: { cork(): void; uncork(): void } }).stream;
      let corked = false;
      const uncork = () => {
        corked = false;
        socket().uncork();
      };
      answer = async (key) => {
        if (!corked) {
          corked = true;
          socket().cork();
          process.nextTick(uncork);
        }
        return packr.unpack((await r.getBuffer(raw.get(key) as string)) as Buffer);
      };
    }
  } else if (req.variant === 'bare-getrange') {
    // GETRANGE 0 cap: the bytes up to the size cap, one plain command, and decode.
    if (bytes) answer = async (key) => packr.unpack((await bytes.getRange(raw.get(key) as string, 0, cap)) as Buffer);
    else answer = async (key) => packr.unpack(await (redis as Redis).getrangeBuffer(raw.get(key) as string, 0, cap));
  } else if (req.variant === 'script') {
    // The bare client running our read script (the same Lua, EVALSHA through defineCommand) and decoding the bytes (ioredis only).
    if (!redis) throw new Error('script runs on ioredis only');
    redis.defineCommand('sgBenchRead', { numberOfKeys: 1, lua: READ });
    const read = (redis as unknown as { sgBenchReadBuffer(k: string, max: number): Promise<[number, Buffer]> }).sgBenchReadBuffer.bind(redis);
    answer = async (key) => packr.unpack((await read(raw.get(key) as string, cap))[1]);
  } else if (req.variant === 'evalsha') {
    // The same script by EVALSHA as a plain command: ioredis's generic callBuffer (no Script wrapper), node-redis's sendCommand.
    if (nr) {
      const sha = await nr.scriptLoad(READ);
      answer = async (key) => packr.unpack((await nr.sendCommand<[number, Buffer]>(['EVALSHA', sha, '1', raw.get(key) as string, String(cap)], asBytes))[1]);
    } else {
      const r = redis as Redis;
      const sha = (await r.script('LOAD', READ)) as string;
      answer = async (key) => packr.unpack(((await r.callBuffer('evalsha', sha, 1, raw.get(key) as string, cap)) as [number, Buffer])[1]);
    }
  } else if (req.variant === 'getrange-pttl') {
    // GETRANGE 0 cap and PTTL, two commands sent together, no script.
    if (nr && bytes) {
      answer = async (key) => {
        const k = raw.get(key) as string;
        const [b] = await Promise.all([bytes.getRange(k, 0, cap), nr.pTTL(k)]);
        return packr.unpack(b as Buffer);
      };
    } else {
      const r = redis as Redis;
      answer = async (key) => {
        const k = raw.get(key) as string;
        const [b] = await Promise.all([r.getrangeBuffer(k, 0, cap), r.pttl(k)]);
        return packr.unpack(b);
      };
    }
  } else if (req.variant === 'lru') {
    const lru = new LRUCache<string, object>({ max: req.keys * 2 });
    for (const k of names) lru.set(k, HIT_VALUE);
    answer = (key) => lru.get(key);
  } else {
    const { createCache } = req.variant === 'ours-base' || req.variant === 'ours-options-base' ? await baseLibrary() : (await library()).lib;
    // The library detects the family from the client object.
    const cache = createCache({ redis: nr ?? (redis as Redis), prefix: req.prefix, ...(req.variant === 'ours-l1' ? { local: { max: req.keys * 2 } } : {}) });
    const loader = () => HIT_VALUE;
    const signal = new AbortController().signal;
    // A new options object per call, as a handler writes it inline.
    if (req.variant === 'ours-options' || req.variant === 'ours-options-base') answer = (key) => cache.getOrCompute(key, loader, { ttl: HIT_TTL, lock: 'single' });
    else if (req.variant === 'ours-options-signal') answer = (key) => cache.getOrCompute(key, loader, { ttl: HIT_TTL, lock: 'single', signal });
    else answer = (key) => cache.getOrCompute(key, loader, HIT_TTL);
    close = () => cache.close();
    await cache.ready(); // L1 serves only while the subscription holds
  }
  // L1 variants: every key read once first, so the window sees L1 hits only.
  if (req.variant === 'ours-l1') for (const k of names) await answer(k);
  const profiler = req.windowProfDir ? windowProfiler(req.windowProfDir) : undefined;
  // Every process is built and warm before the parent names the window's start.
  const startAt = await go();
  let requests = 0;
  let window: { cpu: NodeJS.CpuUsage; ru: NodeJS.ResourceUsage; t: number } | undefined;
  const until = startAt + req.durationMs;
  // An L1 or lru-cache answer never waits for I/O, so its loops may never yield to a timer: the
  // window is opened by the first iteration past startAt, from inside the loops.
  // Paced (req.rate > 0): each loop sends its share of the process's rate on a fixed schedule, so
  // every variant does the same work per second and CPU per request compares at equal throughput.
  const interval = req.rate > 0 ? (1000 * req.loops) / req.rate : 0;
  const loop = async (i: number) => {
    let next = startAt - req.warmupMs + (interval * i) / req.loops;
    for (;;) {
      if (interval > 0) {
        next += interval;
        const wait = next - now();
        if (wait > 1) await new Promise((r) => setTimeout(r, wait));
      }
      const t = now();
      if (t >= until) return;
      if (!window && t >= startAt) {
        profiler?.start();
        window = { cpu: process.cpuUsage(), ru: process.resourceUsage(), t };
      }
      await answer(names[Math.floor(Math.random() * names.length)] as string);
      if (window) requests++;
    }
  };
  await Promise.all(Array.from({ length: req.loops }, (_, i) => loop(i)));
  const opened = window ?? { cpu: process.cpuUsage(), ru: process.resourceUsage(), t: now() };
  const cpu = process.cpuUsage(opened.cpu);
  const ru = process.resourceUsage();
  const wallMs = now() - opened.t;
  await profiler?.stop();
  await close();
  redis?.disconnect();
  nr?.destroy();
  return {
    requests,
    cpuUs: cpu.user + cpu.system,
    userUs: cpu.user,
    systemUs: cpu.system,
    voluntarySwitches: ru.voluntaryContextSwitches - opened.ru.voluntaryContextSwitches,
    involuntarySwitches: ru.involuntaryContextSwitches - opened.ru.involuntaryContextSwitches,
    wallMs,
  };
}

/** A CPU profile of the timed window alone (start() is synchronous: an L1 loop may never yield before the window closes). */
function windowProfiler(dir: string): { start(): void; stop(): Promise<void> } {
  const session = new Session();
  session.connect();
  session.post('Profiler.enable');
  session.post('Profiler.setSamplingInterval', { interval: 100 });
  return {
    start: () => session.post('Profiler.start'),
    stop: () =>
      new Promise((resolve, reject) =>
        session.post('Profiler.stop', (err, res) => {
          if (err) return reject(err);
          mkdirSync(dir, { recursive: true });
          writeFileSync(`${dir}/${process.pid}.cpuprofile`, JSON.stringify(res.profile));
          session.disconnect();
          resolve();
        }),
      ),
  };
}

process.once('message', (req: HitRequest) => {
  const go = () =>
    new Promise<number>((resolve) => {
      process.once('message', (m: { startAt: number }) => resolve(m.startAt));
      process.send?.({ warm: true });
    });
  // Exits once its report is sent (a --cpu-prof profile is written on exit).
  run(req, go).then(
    (r) => process.send?.(r, () => process.exit(0)),
    (err: unknown) => process.send?.({ failed: String(err) }, () => process.exit(1)),
  );
});
process.send?.({ ready: true });
