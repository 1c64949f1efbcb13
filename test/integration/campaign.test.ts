/**
 * The fault-injection campaign (RELIABILITY.md §4–5): forked workers hammer a real redis-server
 * while a seeded schedule pauses and kills holders, pauses, kills and restarts Redis (without
 * persistence and with appendfsync always), flushes its scripts, kills the subscribers' connections
 * (CLIENT KILL TYPE pubsub), deletes or evicts (maxmemory + allkeys-lru) fence and lock keys, and
 * starts the workers before Redis is up; with L1 under tracking (docs/tracking.md), it kills the
 * tracked reads connections and the invalidation listeners and overflows the server's tracking table.
 * Workers record every settle, set, delete and deleteByTag (the coherence campaigns tag half of their
 * writes); the checker verifies the hard properties on the history. Each property has a negative
 * control that must be caught: fencing off (UNSAFE unfencedWrites) for stale overwrites and superseded
 * reads, an incoherent L1 (UNSAFE incoherentL1) for L1 coherence, the server's invalidations ignored
 * (UNSAFE ignoreInvalidations) for L1 under tracking; for 'no read after deleteByTag',
 * SG_NEGATIVE_CONTROL=tag-snapshot-at-write runs the coherence campaign with the tag snapshot taken at
 * the write (UNSAFE tagSnapshotAtWrite): it must fail.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createCache } from '../../src/index.js';
import type { UnsafeSwitches } from '../../src/unsafe.js';
import {
  abortsHarmless,
  boundedSettles,
  loadersPerWindow,
  monotonicReads,
  noSupersededReads,
  producedAt,
  quantiles,
  recoveryTimes,
  tagsOfValues,
  type Interval,
  type LoaderRun,
  type Settle,
  type Violation,
  type Write,
} from '../support/checker.js';
import { TEST_CLIENT } from '../support/clients.js';
import { startRedisServer, type RedisServer } from '../support/redis-server.js';
import { prng, sleep } from '../support/schedule.js';

const WORKER = fileURLToPath(new URL('../support/campaign-worker.ts', import.meta.url));
/** The port family every worker's cache must run on: SG_TEST_CLIENT's (the workers inherit the env). */
const FAMILY = TEST_CLIENT.startsWith('ioredis') ? 'ioredis' : 'node-redis';
const now = (): number => performance.timeOrigin + performance.now();

/** 'tag-race' is no fault: the campaign (proc 0) makes a deleteByTag of the tags of a load that just began (granted before it). */
type Fault =
  | 'pause-holder'
  | 'kill-worker'
  | 'pause-redis'
  | 'restart-redis'
  | 'script-flush'
  | 'kill-pubsub'
  | 'del-fence-lock'
  | 'evict'
  | 'flap'
  | 'tag-race'
  // L1 under tracking only:
  | 'kill-listener'
  | 'kill-reads'
  | 'tracking-overflow';

interface CampaignConfig {
  name: string;
  seed: number;
  seconds: number;
  workers: number;
  callers: number;
  keys: number;
  faults: Fault[];
  aof: boolean;
  /** Negative-control switches passed to every worker's createCache as `[UNSAFE]`. */
  unsafe?: UnsafeSwitches;
  /** L1 on in every worker; 'tracking': on, under `local.invalidation: 'tracking'`. */
  l1?: boolean | 'tracking';
  /**
   * Shares of get / set / delete / deleteByTag / aborting getOrCompute steps (the rest: plain
   * getOrCompute); `tagged`: the share of sets and getOrComputes that tag their value with the key's tag.
   */
  mix?: { get: number; set: number; delete: number; abort: number; deleteByTag?: number; tagged?: number };
  /** Fresh time of every value; the L1 checks need it well above SUPERSEDE_BOUND. Default TIMING.ttl. */
  ttl?: number;
  /** Start the workers while Redis is down, and only then start it. */
  bootDown?: boolean;
  /** How long a paused holder stays frozen. Default 2.5 × lockTtl. */
  holderPauseMs?: number;
  /**
   * With pause-holder: the campaign (proc 0) deletes the frozen holder's key at once, so its late
   * value, made before that delete, is a superseded value if it is ever served (deterministic, not
   * left to the random mix landing a delete inside the pause). A tagged load (with `mix.tagged`) is
   * invalidated by a deleteByTag of its tag instead: its late write must be refused by the tag alone
   * (the key's fence is not raised).
   */
  deleteWhileFrozen?: boolean;
  /** Redis slow, not down (issue #13 §4): `DEBUG SLEEP 1.5` every 3 s for the whole campaign. */
  periodicStall?: boolean;
  /** Further createCache options for every worker (JSON), e.g. `{ degradedMemo: 0 }`. */
  cacheOptions?: { degradedMemo?: number };
}

/** Names a rebuild of `proc` whose write with `fence` was refused. */
const unstoredId = (proc: number, key: string, fence: number): string => `${proc}\u0000${key}\u0000${fence}`;


const TIMING = { ttl: 300, lockTtl: 400, waitTimeout: 1000, pollInterval: 50, redisTimeout: 200, loaderMs: 100 };
/** Longest a call may take: a full wait, then a computed rebuild, each Redis step at its timeout, plus 2-core slack. */
const SETTLE_BOUND = TIMING.waitTimeout + TIMING.loaderMs + 8 * TIMING.redisTimeout + 500;
/**
 * The stated propagation bound of "no superseded read": how long after a delete/set returned another
 * process's L1 may still serve the old value. The pub/sub note (or, after a subscriber reconnect,
 * the flush on resubscribe: ioredis reconnects after 50 ms, then in steps of 50 ms; under tracking,
 * the server's invalidation, or the flush once tracking holds again) arrives within
 * 2 × pollInterval; a flight that was still writing when the delete ran settles within
 * 2 × redisTimeout (its write and release); plus 500 ms of scheduling slack on 2 shared cores.
 */
const SUPERSEDE_BOUND = 2 * TIMING.pollInterval + 2 * TIMING.redisTimeout + 500;
/**
 * How long a subscription may still count as up after a note to it was lost: the heartbeat finds a
 * silently dead socket within 2 × redisTimeout (README: "2 × redisTimeout plus the note delay"), plus
 * the note's own delay (2 × pollInterval, as above) and the same 500 ms of scheduling slack.
 */
const SUBSCRIPTION_LAG = 2 * TIMING.pollInterval + 2 * TIMING.redisTimeout + 500;
/** failBackoff in campaigns that abort callers: no loader failure is injected, so any ERR_BACKOFF is a violation. */
const FAIL_BACKOFF = 2000;
/**
 * The step mix of the coherence campaigns. Writes are rare on purpose: a process's L1 copy that a
 * lost note or a late read reply left behind is only visible until the next write of that key
 * (anywhere, if the process still hears notes) replaces it, so each key sees about one write every
 * one or two seconds fleet-wide; every write races a read in its own process.
 */
const COHERENCE_MIX = { get: 0.2, set: 0.002, delete: 0.002, abort: 0.15 };
/**
 * The coherence campaign's: half of the writes tagged (one tag per key, two tags in all, so a
 * deleteByTag reaches half of the keys), and deleteByTags rarer than deletes: a value a broken tag rule
 * let through is then read past the bound before the next deleteByTag of its tag removes it (the
 * campaign's own 'tag-race' makes the races).
 */
const TAGGED_MIX = { ...COHERENCE_MIX, deleteByTag: 0.0005, tagged: 0.5 };

interface WorkerHandle {
  proc: number;
  child: ChildProcess;
  loading: number;
  /** Called (once) on this worker's next loader start, with its call's tags. */
  onLoaderStart?: (key: string, tags: string[] | undefined) => void;
  history: Promise<{ settles: Settle[]; writes: Write[]; runs: LoaderRun[]; unstored: [string, number][]; unhandled: string[]; unsubscribed: Interval[]; resources: string[]; killed: boolean } | undefined>;
}

async function campaign(c: CampaignConfig) {
  const rand = prng(c.seed);
  const server: RedisServer = await startRedisServer(c.aof ? ['--appendonly', 'yes', '--appendfsync', 'always'] : []);
  if (c.bootDown) await server.kill(); // the workers start first; the server comes up after the warm-up
  const admin = new Redis(server.adminUrl, { maxRetriesPerRequest: 1 });
  admin.on('error', () => undefined);
  const ttl = c.ttl ?? TIMING.ttl;
  const prefix = `camp${c.seed}`;
  // Set once the first workers are up, so the campaign gets its warm-up and its `seconds` of faults
  // whatever the workers' start-up costs (node-redis loads about 0.4 s slower than ioredis).
  let until = 0;
  let nextProc = 0;
  const workers: WorkerHandle[] = [];
  const pauses: Interval[] = [];
  const heals: number[] = [];
  const injected: Record<string, number> = {};
  let evicted = 0;
  /** Tracked reads connections and invalidation listeners the campaign killed. */
  let trackingKilled = 0;
  // The campaign's own writer (proc 0, L1 off) for faults that need a write at a chosen moment.
  const writerClient = new Redis(server.url, { maxRetriesPerRequest: 1 });
  writerClient.on('error', () => undefined);
  // Not under test: a generous redisTimeout, so its deletes land on a loaded machine too (a delete
  // that fails is not judged, and the L1 properties would then be checked against fewer writes).
  const writer = createCache({ redis: writerClient, prefix, redisTimeout: 5 * TIMING.redisTimeout });
  const parentWrites: Write[] = [];
  /** The campaign (proc 0) deletes every key, each attempt recorded as it went; a failed one is retried (twice at most). */
  const deleteEveryKey = async (): Promise<void> => {
    for (let k = 0; k < c.keys; k++) {
      const key = `k${k}`;
      for (let attempt = 0; attempt < 3; attempt++) {
        const start = now();
        const ok = await writer.delete(key).then(() => true, () => false);
        parentWrites.push({ proc: 0, key, kind: 'delete', start, end: now(), ok });
        if (ok) break;
      }
    }
  };

  const spawnWorker = async (): Promise<WorkerHandle> => {
    const proc = ++nextProc;
    const child = fork(WORKER, [], {
      execArgv: ['--import', 'tsx'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      env: {
        ...process.env,
        SG_PROC: String(proc),
        SG_REDIS_URL: server.url,
        SG_PREFIX: prefix,
        SG_REDIS_TIMEOUT: String(TIMING.redisTimeout),
        SG_CALLERS: String(c.callers),
        SG_KEYS: String(c.keys),
        SG_LOADER_MS: String(TIMING.loaderMs),
        SG_THINK_MS: '40',
        SG_UNSAFE: JSON.stringify(c.unsafe ?? {}),
        SG_L1: c.l1 === 'tracking' ? 'tracking' : c.l1 ? '1' : '0',
        SG_CACHE_OPTIONS: JSON.stringify(c.cacheOptions ?? {}),
        SG_MIX: JSON.stringify(c.mix ?? {}),
        SG_CALL_OPTIONS: JSON.stringify({
          ttl,
          lockTtl: TIMING.lockTtl,
          waitTimeout: TIMING.waitTimeout,
          pollInterval: TIMING.pollInterval,
          ...(c.mix ? { failBackoff: FAIL_BACKOFF } : {}),
        }),
      },
    });
    const handle: WorkerHandle = { proc, child, loading: 0, history: Promise.resolve(undefined) };
    // The history arrives in batches; a killed worker keeps what it sent (killed: true, no handle check).
    // unstored: [`proc \0 key \0 fence`, when] of the rebuilds whose write the fence refused (their value reached only their flight's callers).
    const acc = { settles: [] as Settle[], writes: [] as Write[], runs: [] as LoaderRun[], unstored: [] as [string, number][], unhandled: [] as string[], unsubscribed: [] as Interval[] };
    // The intervals its subscription was down: from each [false, t] to the next [true, t] (open: to the end).
    let downSince: number | undefined;
    type Raw = {
      settles?: [string, number, number, boolean, number, string, string, boolean][];
      writes?: ['set' | 'delete' | 'deleteByTag', string, number, number, boolean, string, string, string][];
      runs?: [string, number, number, number, string, string][];
      refused?: [string, number, number][];
      unhandled?: string[];
      resources?: string[];
      subscription?: [boolean, number][];
    };
    const take = (m: Raw) => {
      for (const [key, start, end, ok, fence, code, value, signal] of m.settles ?? []) {
        acc.settles.push({ proc, key, start, end, ok, code, fence: fence === -1 ? undefined : fence, value: value === '' ? undefined : value, signal });
      }
      const tagList = (tags: string) => (tags === '' ? undefined : tags.split(','));
      for (const [kind, key, start, end, ok, value, code, tags] of m.writes ?? []) {
        acc.writes.push({ proc, key, kind, start, end, ok, value: value === '' ? undefined : value, code: code === '' ? undefined : code, tags: tagList(tags) });
      }
      for (const [key, start, end, fence, value, tags] of m.runs ?? []) acc.runs.push({ proc, key, start, end, fence: fence === -1 ? undefined : fence, value, tags: tagList(tags) });
      for (const [key, fence, at] of m.refused ?? []) acc.unstored.push([unstoredId(proc, key, fence), at]);
      acc.unhandled.push(...(m.unhandled ?? []));
      for (const [up, at] of m.subscription ?? []) {
        if (!up) downSince ??= at;
        else if (downSince !== undefined) {
          acc.unsubscribed.push({ proc, from: downSince, to: at });
          downSince = undefined;
        }
      }
    };
    const unsubscribed = () => (downSince === undefined ? acc.unsubscribed : [...acc.unsubscribed, { proc, from: downSince, to: Infinity }]);
    handle.history = new Promise((resolve) => {
      child.on('message', (m: Raw & { ev: string; key?: string; tags?: string[] }) => {
        if (m.ev === 'loader-start') {
          handle.loading++;
          const hook = handle.onLoaderStart;
          handle.onLoaderStart = undefined;
          hook?.(m.key ?? '', m.tags);
        } else if (m.ev === 'loader-end') handle.loading--;
        else if (m.ev === 'batch') take(m);
        else if (m.ev === 'history') {
          take(m);
          resolve({ ...acc, unsubscribed: unsubscribed(), resources: m.resources ?? [], killed: false });
        }
      });
      child.once('exit', () => resolve({ ...acc, unsubscribed: unsubscribed(), resources: [], killed: true }));
    });
    const ready = await new Promise<{ family?: string }>((r) => child.once('message', r));
    if (ready.family !== FAMILY) throw new Error(`campaign worker ${proc}: its cache runs on ${ready.family}, not ${FAMILY} (SG_TEST_CLIENT=${TEST_CLIENT})`);
    if (until > 0) child.send({ op: 'start', until }); // a replacement worker starts at once
    return handle;
  };

  for (let i = 0; i < c.workers; i++) workers.push(await spawnWorker());
  until = now() + 1000 + c.seconds * 1000;
  for (const w of workers) w.child.send({ op: 'start', until });
  await sleep(1000); // warm-up without faults (with bootDown: the workers run against a Redis that is not there)
  if (c.bootDown) {
    await server.restart();
    heals.push(now());
    injected['boot-down'] = 1;
  }

  // The stall runs on a connection of its own: DEBUG SLEEP blocks the server and its sender's replies.
  const staller = new Redis(server.adminUrl, { maxRetriesPerRequest: 1 });
  staller.on('error', () => undefined);
  const stall = (): void => {
    injected['periodic-stall'] = (injected['periodic-stall'] ?? 0) + 1;
    void staller.call('DEBUG', 'SLEEP', '1.5').then(() => heals.push(now()), () => undefined);
  };
  const stalls = c.periodicStall ? (stall(), setInterval(stall, 3000)) : undefined;

  const all = [...workers];
  while (now() < until - 1500) {
    await sleep(700 + rand() * 800);
    const fault = c.faults[Math.floor(rand() * c.faults.length)] as Fault;
    injected[fault] = (injected[fault] ?? 0) + 1;
    const live = workers.filter((w) => w.child.exitCode === null && w.child.signalCode === null);
    if (fault === 'pause-holder') {
      // Freeze a worker the moment one of its loaders starts: it then holds a lock (and a fence).
      const frozen = await new Promise<{ holder: WorkerHandle; key: string; tags: string[] | undefined } | undefined>((resolve) => {
        const timer = setTimeout(() => resolve(undefined), 3000);
        for (const w of live) {
          w.onLoaderStart = (key, tags) => {
            clearTimeout(timer);
            for (const o of live) o.onLoaderStart = undefined;
            process.kill(w.child.pid as number, 'SIGSTOP');
            resolve({ holder: w, key, tags });
          };
        }
      });
      if (!frozen) continue;
      const { holder, tags } = frozen;
      const from = now();
      // A deleteByTag resolves once every process acknowledged its note, the frozen one included, or
      // after 2 × redisTimeout: it is awaited once the holder runs again.
      let byTag: Promise<void> | undefined;
      if (c.deleteWhileFrozen && tags !== undefined) {
        byTag = writer.deleteByTag(tags).then(
          () => void parentWrites.push({ proc: 0, key: '', kind: 'deleteByTag', start: from, end: now(), ok: true, tags }),
          () => void parentWrites.push({ proc: 0, key: '', kind: 'deleteByTag', start: from, end: now(), ok: false, tags }),
        );
      } else if (c.deleteWhileFrozen) {
        const ok = await writer.delete(frozen.key).then(() => true, () => false);
        parentWrites.push({ proc: 0, key: frozen.key, kind: 'delete', start: from, end: now(), ok });
      }
      await sleep(c.holderPauseMs ?? TIMING.lockTtl * 2.5);
      process.kill(holder.child.pid as number, 'SIGCONT');
      pauses.push({ proc: holder.proc, from, to: now() });
      await byTag;
    } else if (fault === 'tag-race') {
      // The next tagged load anywhere: its grant came before this deleteByTag, so its write must be
      // refused and its value never read once the deleteByTag resolved (plus the bound).
      const began = await new Promise<string[] | undefined>((resolve) => {
        const end = (tags: string[] | undefined) => {
          clearTimeout(timer);
          for (const o of live) if (o.onLoaderStart === hook) o.onLoaderStart = undefined;
          resolve(tags);
        };
        const timer = setTimeout(() => end(undefined), 3000);
        const hook = (_key: string, tags: string[] | undefined): void => (tags === undefined ? arm() : end(tags));
        const arm = () => live.forEach((w) => (w.onLoaderStart ??= hook));
        arm();
      });
      if (!began) continue;
      const start = now();
      const ok = await writer.deleteByTag(began).then(() => true, () => false);
      parentWrites.push({ proc: 0, key: '', kind: 'deleteByTag', start, end: now(), ok, tags: began });
    } else if (fault === 'kill-worker') {
      const victim = live[Math.floor(rand() * live.length)];
      if (!victim) continue;
      victim.child.kill('SIGKILL');
      workers.splice(workers.indexOf(victim), 1);
      const fresh = await spawnWorker();
      workers.push(fresh);
      all.push(fresh);
    } else if (fault === 'pause-redis') {
      server.pause();
      await sleep(600);
      server.resume();
      heals.push(now());
    } else if (fault === 'restart-redis') {
      await server.kill();
      await sleep(200);
      await server.restart();
      heals.push(now());
    } else if (fault === 'kill-pubsub') {
      // Every subscriber connection drops and cannot come back for a while: maxclients is first
      // lowered to the connections that stay, so the reconnects are refused. Notes sent meanwhile are
      // surely lost (not left to a race with a fast resubscribe): the campaign itself (proc 0)
      // deletes every key then, so each worker's L1 copy must go by other means (not served while
      // the subscription is down, flushed when it is back) within the bound.
      const held = await holdSubscribersOut(admin);
      try {
        await deleteEveryKey();
        await sleep(200);
      } finally {
        await held.release();
      }
    } else if (fault === 'kill-listener') {
      // Every invalidation listener drops and is kept out for a while (as kill-pubsub's subscribers):
      // the server has nowhere to send the invalidations of the deletes made meanwhile, so they are
      // surely lost (redis #11767: silently). The notes still arrive, but under tracking they drop no
      // L1 copy: each worker's copy must go by other means (not served while tracking is lost, flushed
      // when it holds again) within the bound.
      const held = await holdListenersOut(admin);
      trackingKilled += held.killed;
      try {
        await deleteEveryKey();
        await sleep(200);
      } finally {
        await held.release();
      }
    } else if (fault === 'kill-reads') {
      // Every tracked reads connection drops; the deletes race its reconnection and CLIENT TRACKING
      // (reads sent before tracking holds again are untracked: their fills must be refused).
      trackingKilled += await killTrackedReads(admin);
      await deleteEveryKey();
    } else if (fault === 'tracking-overflow') {
      // The tracking table holds one key: the server evicts the others by invalidating them, all the
      // time the workers read. Deletes made meanwhile must still drop every copy.
      const [, before] = (await admin.config('GET', 'tracking-table-max-keys').catch(() => ['', '1000000'])) as [string, string];
      try {
        await admin.config('SET', 'tracking-table-max-keys', '1');
        await sleep(300);
        await deleteEveryKey();
        await sleep(300);
      } catch {
        // Redis went away under another fault: nothing to undo on a fresh server.
      } finally {
        await admin.config('SET', 'tracking-table-max-keys', before).catch(() => undefined);
      }
    } else if (fault === 'del-fence-lock') {
      for (const kind of ['f', 'l']) {
        const found = await scanKeys(admin, `${prefix}:*:${kind}:*`);
        if (found.length > 0) await admin.del(...found).catch(() => undefined);
      }
    } else if (fault === 'evict') {
      evicted += await evictUnderPressure(admin);
    } else if (fault === 'flap') {
      // Connection flaps: every normal client connection (the workers' and their subscribers' too) drops at once.
      await admin.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes').catch(() => undefined);
      await admin.call('CLIENT', 'KILL', 'TYPE', 'pubsub').catch(() => undefined);
      heals.push(now());
    } else {
      await admin.script('FLUSH').catch(() => undefined);
    }
  }

  clearInterval(stalls);
  const histories = (await Promise.all(all.map((w) => w.history))).filter((h) => h !== undefined);
  // No lock outlives its TTL: once every worker has closed and one lockTtl has passed, none is left.
  await sleep(TIMING.lockTtl + 100);
  const leftoverLocks = (await admin.keys(`${prefix}:*:l:*`)).length;
  await writer.close();
  writerClient.disconnect();
  staller.disconnect();
  admin.disconnect();
  await server.stop();

  const settles = histories.flatMap((h) => h.settles);
  const writes = [...parentWrites, ...histories.flatMap((h) => h.writes)];
  const runs = histories.flatMap((h) => h.runs);
  // "No stale overwrite" is about the store: the answers of a rebuild whose write the fence refused
  // (e.g. its fence hash was deleted or evicted meanwhile) never reached it, so the next read returning
  // the stored, older value is no overwrite. Those answers — calls of that process, key and token that
  // started before the refusal, i.e. its flight's callers — are left out of the check (and counted).
  // A later read of the same token is checked as any other (were it in the store after all, e.g. a
  // write applied whose reply was lost and whose resend was refused, it must not go backwards either).
  const refusedAt = new Map(histories.flatMap((h) => h.unstored));
  const fromRefusedWrites = new Set(settles.filter((s) => s.fence !== undefined && s.start <= (refusedAt.get(unstoredId(s.proc, s.key, s.fence)) ?? -Infinity)));
  const reads = monotonicReads(settles.filter((s) => !fromRefusedWrites.has(s)));
  const bounded = boundedSettles(settles, SETTLE_BOUND, pauses);
  // README's one exception (Guarantees, Degraded values): a degraded value kept while its process's
  // subscription is down (and Redis unavailable to it) may be older than a write made meanwhile, for its ttl.
  const keptUntil = new Map(runs.filter((r) => r.fence === undefined && r.value !== undefined).map((r) => [r.value as string, r.end + ttl]));
  const unsubscribed = histories.flatMap((h) => h.unsubscribed);
  const superseded = noSupersededReads(settles, writes, producedAt(runs, writes), SUPERSEDE_BOUND, pauses, { unsubscribed, lag: SUBSCRIPTION_LAG, keptUntil }, tagsOfValues(runs, writes));
  const unhandled = histories.flatMap((h) => h.unhandled);
  const aborts = abortsHarmless(settles, unhandled, writes);
  const leaks = histories.filter((h) => !h.killed && h.resources.length > 0).map((h) => h.resources.join(','));
  const violations: Violation[] = [...reads.violations, ...bounded.violations, ...superseded.violations, ...aborts.violations];
  // Runs without a fencing token ran on the degraded path (Redis unavailable for the key): the degraded memo bounds these.
  const degradedRuns = runs.filter((r) => r.fence === undefined);
  const figures = {
    campaign: c.name,
    seed: c.seed,
    faults: injected,
    l1: c.l1 ?? false,
    unsafe: c.unsafe ?? {},
    calls: settles.length,
    errors: countBy(settles.filter((s) => !s.ok).map((s) => s.code ?? '?')),
    'sets / deletes / deleteByTags (ok)': `${writes.filter((w) => w.kind === 'set').length} / ${writes.filter((w) => w.kind === 'delete').length} / ${writes.filter((w) => w.kind === 'deleteByTag').length} (${writes.filter((w) => w.ok).length} ok)`,
    'set/delete errors': countBy(writes.filter((w) => !w.ok).map((w) => w.code ?? '?')),
    loaderRuns: runs.length,
    'keys evicted': evicted,
    'tracking connections killed': trackingKilled,
    'no stale overwrite': `${reads.checked} ordered read pairs checked, ${reads.violations.length} violations (${fromRefusedWrites.size} answers of refused writes left out)`,
    'no superseded read': `${superseded.checked} reads judged against a delete/set/deleteByTag done > ${SUPERSEDE_BOUND} ms before, ${superseded.violations.length} violations (${superseded.allowedDegraded} degraded values older than a write left out: kept while their process's subscription was down)`,
    'aborts harmless': `${aborts.checked} calls with a signal; ${aborts.violations.filter((v) => v.property === 'no backoff from aborts').length} ERR_BACKOFF (calls, sets, deletes), ${aborts.violations.filter((v) => v.property === 'abort only the caller who aborted').length} ERR_ABORTED without a signal`,
    'bounded settle': `${bounded.checked} settles checked against ${SETTLE_BOUND} ms, ${bounded.violations.length} violations`,
    'unhandled rejections': unhandled.length,
    'locks left after TTL': leftoverLocks,
    'workers with open handles after close()': leaks.length,
    'settle latency ms': quantiles(bounded.latencies),
    [`loaders per key per ${ttl} ms window`]: quantiles(loadersPerWindow(runs, ttl)),
    [`degraded loaders (no lock, no token) per key per ${ttl} ms window`]: quantiles(loadersPerWindow(degradedRuns, ttl)),
    'recovery after heal ms': quantiles(recoveryTimes(settles, heals).filter(Number.isFinite)),
    'first violations': violations.slice(0, 5).map((v) => `${v.property}: ${v.detail}`),
  };
  console.log(`campaign figures\n${JSON.stringify(figures, null, 2)}`);
  const tagDeletes = writes.filter((w) => w.kind === 'deleteByTag' && w.ok).length;
  return { violations, injected, trackingKilled, reads, bounded, superseded, aborts, unhandled, leftoverLocks, leaks, settles, tagDeletes, perWindow: quantiles(loadersPerWindow(runs, ttl)), degradedPerWindow: quantiles(loadersPerWindow(degradedRuns, ttl)) };
}

function countBy(xs: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const x of xs) out[x] = (out[x] ?? 0) + 1;
  return out;
}

async function scanKeys(admin: Redis, pattern: string): Promise<string[]> {
  const found: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await admin.scan(cursor, 'MATCH', pattern, 'COUNT', 1000).catch(() => ['0', [] as string[]] as const);
    cursor = next;
    found.push(...batch);
  } while (cursor !== '0');
  return found;
}

/**
 * Eviction: caps memory just above what is in use, with allkeys-lru, and writes 2 MiB of filler, so
 * Redis evicts keys, the cache's value, fence and lock keys among them. maxmemory-samples 1 makes the
 * victim choice close to random: with the default sampling the cache's hot keys would rarely go.
 * Then the filler is dropped and the cap lifted.
 */
async function evictUnderPressure(admin: Redis): Promise<number> {
  const evictedSoFar = async () => Number(/evicted_keys:(\d+)/.exec(await admin.info('stats'))?.[1]);
  let before = Number.NaN;
  let after = Number.NaN;
  try {
    before = await evictedSoFar();
    const used = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))?.[1]);
    await admin.config('SET', 'maxmemory-policy', 'allkeys-lru');
    await admin.config('SET', 'maxmemory-samples', '1');
    await admin.config('SET', 'maxmemory', String(used + 256 * 1024));
    const filler = 'x'.repeat(1024);
    const p = admin.pipeline();
    for (let i = 0; i < 2048; i++) p.set(`filler:${i}`, filler);
    await p.exec();
    await sleep(300);
    after = await evictedSoFar();
  } catch {
    // Redis went away under another fault: nothing to undo on a fresh server.
  } finally {
    await admin.config('SET', 'maxmemory', '0').catch(() => undefined);
    const names = Array.from({ length: 2048 }, (_, i) => `filler:${i}`);
    await admin.del(...names).catch(() => undefined);
  }
  return Number.isFinite(after - before) ? after - before : 0;
}

/**
 * Kills every subscriber connection and keeps new connections out until `release()`: maxclients is
 * lowered to the connections that stay before the kill (Redis keeps the ones it has and refuses new
 * ones), then restored. Connections that are not subscribers (the workers' own clients, the writer)
 * go on working meanwhile.
 */
async function holdSubscribersOut(admin: Redis): Promise<{ release(): Promise<void> }> {
  const [, before] = (await admin.config('GET', 'maxclients').catch(() => ['maxclients', '10000'])) as [string, string];
  const list = String(await admin.call('CLIENT', 'LIST').catch(() => ''));
  const all = list.split('\n').filter((l) => l.trim() !== '');
  const subscribers = all.filter((l) => / sub=[1-9]| psub=[1-9]| ssub=[1-9]/.test(l)).length;
  await admin.config('SET', 'maxclients', String(Math.max(1, all.length - subscribers))).catch(() => undefined);
  await admin.call('CLIENT', 'KILL', 'TYPE', 'pubsub').catch(() => undefined);
  return { release: async () => void (await admin.config('SET', 'maxclients', before).catch(() => undefined)) };
}

/** The connections CLIENT TRACKING is on (CLIENT LIST flags `t`) and the listeners they redirect to (`redir=`). */
async function trackingConnections(admin: Redis): Promise<{ all: number; reads: string[]; listeners: string[] }> {
  const lines = String(await admin.call('CLIENT', 'LIST').catch(() => '')).split('\n').filter((l) => l.trim() !== '');
  const tracked = lines.filter((l) => / flags=\S*t/.test(l));
  const reads = tracked.map((l) => / id=(\d+) /.exec(` ${l}`)?.[1] as string);
  const listeners = [...new Set(tracked.map((l) => / redir=(\d+) /.exec(l)?.[1]).filter((id): id is string => id !== undefined && id !== '-1'))];
  return { all: lines.length, reads, listeners };
}

/** Kills every tracked reads connection; returns how many. They reconnect at once. */
async function killTrackedReads(admin: Redis): Promise<number> {
  const { reads } = await trackingConnections(admin);
  let killed = 0;
  for (const id of reads) killed += Number(await admin.call('CLIENT', 'KILL', 'ID', id).catch(() => 0));
  return killed;
}

/**
 * Kills every invalidation listener and keeps new connections out until `release()` (maxclients
 * lowered to the connections that stay, as holdSubscribersOut): the listeners cannot come back, the
 * rest (the workers' clients, subscribers and reads connections, the writer) go on working.
 */
async function holdListenersOut(admin: Redis): Promise<{ killed: number; release(): Promise<void> }> {
  const [, before] = (await admin.config('GET', 'maxclients').catch(() => ['maxclients', '10000'])) as [string, string];
  const { all, listeners } = await trackingConnections(admin);
  await admin.config('SET', 'maxclients', String(Math.max(1, all - listeners.length))).catch(() => undefined);
  let killed = 0;
  for (const id of listeners) killed += Number(await admin.call('CLIENT', 'KILL', 'ID', id).catch(() => 0));
  return { killed, release: async () => void (await admin.config('SET', 'maxclients', before).catch(() => undefined)) };
}

const ALL_FAULTS: Fault[] = ['pause-holder', 'kill-worker', 'pause-redis', 'restart-redis', 'script-flush', 'kill-pubsub', 'del-fence-lock', 'evict'];
/** The L1 checks need values to stay fresh well past the propagation bound. */
const L1_TTL = 3 * SUPERSEDE_BOUND;
/**
 * L1 under tracking, a shortened schedule (this file runs once per client family): the faults that
 * matter to tracking. Seed 8028 draws each of the four among its first four faults.
 */
const TRACKING_FAULTS: Fault[] = ['kill-listener', 'kill-reads', 'tracking-overflow', 'restart-redis'];
const TRACKING_CAMPAIGN: CampaignConfig = { name: 'coherence-tracking', seed: 8028, seconds: 10, workers: 4, callers: 20, keys: 10, faults: TRACKING_FAULTS, aof: false, l1: 'tracking', mix: COHERENCE_MIX, ttl: L1_TTL };

describe('fault campaign', () => {
  it('hard properties hold under mixed faults (no persistence): no stale overwrite, bounded settles, no unhandled rejection, no lock left, nothing leaked', async () => {
    const r = await campaign({ name: 'mixed', seed: 1130, seconds: 15, workers: 4, callers: 20, keys: 5, faults: ALL_FAULTS, aof: false });
    expect(r.reads.checked).toBeGreaterThan(1000);
    expect(r.violations).toEqual([]);
    expect(r.unhandled).toEqual([]);
    expect(r.leftoverLocks).toBe(0);
    expect(r.leaks).toEqual([]);
  }, 120_000);

  it('hard properties hold with appendfsync always across Redis restarts and paused holders', async () => {
    const r = await campaign({ name: 'aof', seed: 2026, seconds: 10, workers: 4, callers: 20, keys: 5, faults: ['pause-holder', 'restart-redis'], aof: true });
    expect(r.reads.checked).toBeGreaterThan(500);
    expect(r.violations).toEqual([]);
    expect(r.unhandled).toEqual([]);
  }, 120_000);

  it(`L1 on, with sets, deletes, tagged writes, deleteByTags and aborting callers under every fault: no read returns a value superseded by a delete/set/deleteByTag done ${SUPERSEDE_BOUND} ms earlier, aborts harm nobody, and the hard properties hold`, async () => {
    const unsafe = process.env.SG_NEGATIVE_CONTROL === 'tag-snapshot-at-write' ? { tagSnapshotAtWrite: true } : undefined;
    const r = await campaign({ name: 'coherence', seed: 808, seconds: 20, workers: 4, callers: 20, keys: 10, faults: [...ALL_FAULTS, 'tag-race', 'tag-race'], aof: false, l1: true, mix: TAGGED_MIX, ttl: L1_TTL, deleteWhileFrozen: true, unsafe });
    expect(r.superseded.checked).toBeGreaterThan(1000);
    expect(r.tagDeletes).toBeGreaterThan(5);
    expect(r.aborts.checked).toBeGreaterThan(500);
    expect(r.violations).toEqual([]);
    expect(r.leftoverLocks).toBe(0);
    expect(r.leaks).toEqual([]);
  }, 120_000);

  it(`L1 under tracking, with sets, deletes and aborting callers, its listeners and tracked reads connections killed (CLIENT KILL), Redis restarted and the tracking table overflowing: no read returns a value superseded by a delete/set done ${SUPERSEDE_BOUND} ms earlier, aborts harm nobody, and the hard properties hold`, async () => {
    const r = await campaign(TRACKING_CAMPAIGN);
    expect(Object.keys(r.injected)).toEqual(expect.arrayContaining(TRACKING_FAULTS));
    expect(r.trackingKilled).toBeGreaterThan(0);
    expect(r.superseded.checked).toBeGreaterThan(500);
    expect(r.aborts.checked).toBeGreaterThan(250);
    expect(r.violations).toEqual([]);
    expect(r.leftoverLocks).toBe(0);
    expect(r.leaks).toEqual([]);
  }, 120_000);

  it('Redis down at boot, then up, with subscriber kills: every process hears the others (L1 coherent), aborts harm nobody', async () => {
    const r = await campaign({ name: 'boot-down', seed: 4242, seconds: 8, workers: 3, callers: 20, keys: 3, faults: ['kill-pubsub'], aof: false, l1: true, mix: COHERENCE_MIX, ttl: L1_TTL, bootDown: true });
    expect(r.superseded.checked).toBeGreaterThan(500);
    expect(r.violations).toEqual([]);
  }, 120_000);

  it('negative control: with fencing off, the same checker reports stale overwrites and superseded reads', async () => {
    // 24 s: about 6 frozen holders. Whether a late write lands after a newer value was read in the same
    // process depends on the interleaving; with 12 s (3 holders) one ACL pass once saw none.
    const r = await campaign({ name: 'negative-unfenced', seed: 7, seconds: 24, workers: 4, callers: 20, keys: 2, faults: ['pause-holder'], aof: false, unsafe: { unfencedWrites: true },
      // The frozen holder's key is deleted at once (2 s pause); its late value then survives about a second.
      mix: { get: 0.2, set: 0.001, delete: 0.002, abort: 0 }, ttl: L1_TTL, holderPauseMs: 2000, deleteWhileFrozen: true });
    expect(r.reads.violations.length).toBeGreaterThan(0);
    expect(r.superseded.violations.length).toBeGreaterThan(0);
  }, 120_000);

  it('negative control: with an incoherent L1, the same checker reports superseded reads', async () => {
    // The boot-down campaign's schedule: L1 copies made while Redis was away, and notes lost around
    // subscriber kills, must be flushed; with the flush and generations switched off they are not.
    // 16 s (about 10 subscriber kills): the copies L1 keeps across a kill are served past the bound
    // only when they were filled late enough before the delete; with 8 s one CI run once saw none.
    const r = await campaign({ name: 'negative-incoherent-l1', seed: 4242, seconds: 16, workers: 3, callers: 20, keys: 3, faults: ['kill-pubsub'], aof: false, l1: true, unsafe: { incoherentL1: true }, mix: COHERENCE_MIX, ttl: L1_TTL, bootDown: true });
    expect(r.superseded.violations.length).toBeGreaterThan(0);
  }, 120_000);

  it('negative control: under tracking with the server\'s invalidations ignored (UNSAFE ignoreInvalidations), the same campaign reports superseded reads', async () => {
    const r = await campaign({ ...TRACKING_CAMPAIGN, name: 'negative-ignored-invalidations', unsafe: { ignoreInvalidations: true } });
    expect(r.superseded.violations.length).toBeGreaterThan(0);
  }, 120_000);

  /**
   * Issue #13 §4: a Redis that answers half of the time (1.5 s stalls every 3 s) plus connection flaps
   * (every client killed), ttl 1 s. The property of the degraded memo: while Redis is unavailable for
   * a key, a process runs at most one loader for it per ttl — per outage: the memo is cleared when
   * Redis comes back (for coherence: notes may have been lost), so a ttl window that holds a recovery
   * and a new failure can see a process run twice. So the degraded runs (no lock, no token) per key
   * per ttl window are judged on the median window (at most one per process: ≤ 4 with 4 processes)
   * and on the p99 (at most two per process: ≤ 8). Seen: median 4, p99 4–5; the negative control
   * (memo off) median 8–20, p99 25–34. The runs under the lock come on top and are printed only.
   */
  it('slow Redis (periodic stalls) and connection flaps: hard properties hold; degraded loader runs per key per ttl window stay within one per process (median) and two (p99)', async () => {
    const r = await campaign({ name: 'slow-redis', seed: 1313, seconds: 12, workers: 4, callers: 20, keys: 5, faults: ['flap'], aof: false, ttl: 1000, periodicStall: true });
    expect(r.violations).toEqual([]);
    expect(r.unhandled).toEqual([]);
    expect(r.leftoverLocks).toBe(0);
    expect(r.degradedPerWindow.p50).toBeLessThanOrEqual(4);
    expect(r.degradedPerWindow.p99).toBeLessThanOrEqual(2 * 4);
  }, 120_000);

  it('negative control: with the degraded memo off, the same slow Redis breaks the bound above (median above one per process, or p99 above two)', async () => {
    const r = await campaign({ name: 'negative-no-memo', seed: 1313, seconds: 12, workers: 4, callers: 20, keys: 5, faults: ['flap'], aof: false, ttl: 1000, periodicStall: true, cacheOptions: { degradedMemo: 0 } });
    // The test above fails if either of its two bounds fails; this control shows it does without the
    // memo. Asserting both here made it depend on the machine's load: one CI run on a busy machine saw
    // median 5 (over the bound) with p99 7 (under its bound), as fewer calls ran per stall.
    const { p50, p99 } = r.degradedPerWindow;
    expect({ p50, p99, boundBroken: p50 > 4 || p99 > 2 * 4 }).toMatchObject({ boundBroken: true });
  }, 120_000);

  it('soak: 4 workers × 100 callers for 30 s, L1 on, sets, deletes and aborts under seeded random faults, hard properties hold', async () => {
    const r = await campaign({ name: 'soak', seed: 60, seconds: 30, workers: 4, callers: 100, keys: 20, faults: ALL_FAULTS, aof: false, l1: true, mix: COHERENCE_MIX, ttl: L1_TTL });
    expect(r.violations).toEqual([]);
    expect(r.unhandled).toEqual([]);
    expect(r.leftoverLocks).toBe(0);
    expect(r.leaks).toEqual([]);
  }, 180_000);
});
