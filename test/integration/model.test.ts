/**
 * Model-based test of one process's public API against a reference model (fast-check commands), on
 * a real redis-server, with L1 off, on (notes drop other processes' changes) and on under tracking
 * (`local.invalidation: 'tracking'`: the server's invalidations drop them). Commands: get / set /
 * delete / getOrCompute (set and getOrCompute with or without tags), pairs of them started together
 * (neither awaited before both are started), getOrCompute with an already-aborted signal or one that
 * fires mid-flight, deleteByTag (alone, started together with a call, or while a load granted before
 * it is paused); and, through a second cache (L1 off) on the same prefix standing for every other
 * process, a peek at what they read and their sets, deletes and deleteByTags.
 *
 * The model keeps, per key, the SET of values the store may hold (more than one after a pair or an
 * abort). A result is accepted when some linear order of the commands, from some allowed state,
 * produces it; the allowed states after it are those orders' end states. Values are unique per
 * write, so "which write did this read return" is never ambiguous, and each value's tags are those of
 * the call that wrote it: a deleteByTag turns every allowed state carrying one of its tags into a miss
 * — and a load granted before a deleteByTag (its loader ran while the deleteByTag was made) is ordered
 * before it, so its value never outlives it (docs/tags.md). No fault is injected: a call that
 * rejects (other than ERR_ABORTED for a call that aborted) is a violation, and so is an unhandled
 * rejection. failBackoff is on: a cancelled load must not block the key.
 *
 * Seeds: SG_MODEL_SEED=<n> replays a run; the seed is printed either way.
 */
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCache, type Cache, type CacheOptions } from '../../src/index.js';
import { UNSAFE, type UnsafeSwitches } from '../../src/unsafe.js';
import { provideRedis, type ProvidedRedis } from '../support/redis-server.js';

let provided: ProvidedRedis;
beforeAll(async () => {
  provided = await provideRedis();
});
afterAll(async () => provided?.stop());

const KEYS = ['a', 'b'] as const;
type Key = (typeof KEYS)[number];
type Val = string | undefined;
type Tags = readonly ('t1' | 't2')[];

/** What a call did: resolved with a value (undefined for a miss), or rejected with a code. */
type Outcome = { ok: true; value: Val } | { ok: false; code: string };

type Op =
  | { kind: 'get'; key: Key }
  | { kind: 'set'; key: Key; tags?: Tags }
  | { kind: 'delete'; key: Key }
  | { kind: 'getOrCompute'; key: Key; loaderMs: number; tags?: Tags }
  /** abortAfter: 'pre' = the signal is already aborted when the call starts; n = it aborts after n ms. */
  | { kind: 'abortedGetOrCompute'; key: Key; loaderMs: number; abortAfter: 'pre' | number };

/** L1 off, on with notes (the default), or on with the server's invalidations (docs/tracking.md). */
type Mode = 'off' | 'notes' | 'tracking';

interface Real {
  cache: Cache;
  mode: Mode;
  /** The cache's own client. */
  client: Redis;
  observer: Cache;
  unhandled: unknown[];
  seq: number;
  /** The tags of each value written (values are unique per run). */
  tagsOf: Map<string, Tags>;
}

/** The model's states of one key after `op` ran atomically on `state` with `outcome`; [] = impossible. */
function apply(op: Op, written: string, state: Val, outcome: Outcome): Val[] {
  switch (op.kind) {
    case 'get':
      return outcome.ok && outcome.value === state ? [state] : [];
    case 'set':
      return outcome.ok ? [written] : [];
    case 'delete':
      return outcome.ok ? [undefined] : [];
    case 'getOrCompute':
    case 'abortedGetOrCompute': {
      if (outcome.ok) {
        if (state !== undefined) return outcome.value === state ? [state] : [];
        return outcome.value === written ? [written] : [];
      }
      if (op.kind === 'getOrCompute' || outcome.code !== 'ERR_ABORTED') return [];
      // The caller left; its loader honours the signal. If the load had already finished, its write
      // was sent before the abort, so either it landed or nothing did — nothing can land later.
      return state !== undefined ? [state] : [undefined, written];
    }
  }
}

/** A state after deleteByTag(tags): a miss if its value carries one of them. */
const dropTagged = (r: Real, state: Val, tags: Tags): Val => (state !== undefined && (r.tagsOf.get(state) ?? []).some((t) => tags.includes(t)) ? undefined : state);

const tagged = (op: { tags?: Tags }): string => (op.tags && op.tags.length > 0 ? `, tags ${op.tags.join('+')}` : '');
const describeOp = (op: Op, written: string): string =>
  op.kind === 'get' || op.kind === 'delete'
    ? `${op.kind}(${op.key})`
    : op.kind === 'set'
      ? `set(${op.key}, ${written}${tagged(op)})`
      : op.kind === 'getOrCompute'
        ? `getOrCompute(${op.key}, ${op.loaderMs} ms → ${written}${tagged(op)})`
        : `getOrCompute(${op.key}, ${op.loaderMs} ms → ${written}, abort ${op.abortAfter === 'pre' ? 'before the call' : `after ${op.abortAfter} ms`})`;

const describeOutcome = (o: Outcome): string => (o.ok ? `→ ${String(o.value)}` : `✗ ${o.code}`);

/** A loader that honours its signal, as a well-behaved loader does. */
function loader(ms: number, value: string) {
  return (ctx: { signal: AbortSignal }) =>
    new Promise<string>((resolve, reject) => {
      if (ctx.signal.aborted) return reject(ctx.signal.reason as Error);
      const timer = setTimeout(() => (ctx.signal.removeEventListener('abort', onAbort), resolve(value)), ms);
      const onAbort = () => (clearTimeout(timer), reject(ctx.signal.reason as Error));
      ctx.signal.addEventListener('abort', onAbort, { once: true });
    });
}

const settle = (p: Promise<unknown>): Promise<Outcome> =>
  p.then(
    (value) => ({ ok: true as const, value: value as Val }),
    (e: unknown) => ({ ok: false as const, code: String((e as { code?: string }).code ?? e) }),
  );
const withTags = (op: { tags?: Tags }) => (op.tags && op.tags.length > 0 ? { tags: op.tags } : undefined);

/** Starts `op` on the real cache (synchronously: the call is issued before this returns). */
function start(op: Op, r: Real): { written: string; settled: Promise<Outcome> } {
  const written = `${op.kind === 'set' ? 's' : 'l'}${++r.seq}`;
  r.tagsOf.set(written, 'tags' in op ? (op.tags ?? []) : []);
  switch (op.kind) {
    case 'get':
      return { written, settled: settle(r.cache.get<string>(op.key)) };
    case 'set':
      return { written, settled: settle(r.cache.set(op.key, written, withTags(op)).then(() => written)) };
    case 'delete':
      return { written, settled: settle(r.cache.delete(op.key).then(() => undefined)) };
    case 'getOrCompute':
      return { written, settled: settle(r.cache.getOrCompute(op.key, loader(op.loaderMs, written), withTags(op))) };
    case 'abortedGetOrCompute': {
      const signal = op.abortAfter === 'pre' ? AbortSignal.abort() : AbortSignal.timeout(op.abortAfter);
      return { written, settled: settle(r.cache.getOrCompute(op.key, loader(op.loaderMs, written), { signal })) };
    }
  }
}

type Model = Map<Key, Set<Val>>;

/**
 * Lets late rejections surface, then checks none did: two round trips on the cache's own connection
 * (ordered after whatever the call's background work sent), then a macrotask (Node reports an
 * unhandled rejection once the microtask queue drains).
 */
async function noUnhandled(r: Real, what: string): Promise<void> {
  await r.client.ping();
  await r.client.ping();
  await new Promise((resolve) => setImmediate(resolve));
  if (r.unhandled.length > 0) throw new Error(`unhandled rejection after ${what}: ${String(r.unhandled[0])}`);
}

function check(m: Model, key: Key, next: Set<Val>, what: string): void {
  if (next.size === 0) throw new Error(`${what}: no order of these calls, from any allowed state {${[...(m.get(key) as Set<Val>)].map(String).join(', ')}}, gives these results`);
  m.set(key, next);
}

class Single implements fc.AsyncCommand<Model, Real> {
  constructor(readonly op: Op) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const { written, settled } = start(this.op, r);
    const outcome = await settled;
    const what = `${describeOp(this.op, written)} ${describeOutcome(outcome)}`;
    const next = new Set<Val>();
    for (const s of m.get(this.op.key) as Set<Val>) for (const t of apply(this.op, written, s, outcome)) next.add(t);
    check(m, this.op.key, next, what);
    await noUnhandled(r, what);
  }
  toString = () => describeOp(this.op, '…');
}

/** Two calls on one key, both started before either is awaited. */
class Pair implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly a: Op,
    readonly b: Op,
  ) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const ra = start(this.a, r);
    const rb = start(this.b, r);
    const [oa, ob] = await Promise.all([ra.settled, rb.settled]);
    const what = `together: ${describeOp(this.a, ra.written)} ${describeOutcome(oa)} | ${describeOp(this.b, rb.written)} ${describeOutcome(ob)}`;
    const next = new Set<Val>();
    for (const s of m.get(this.a.key) as Set<Val>) {
      for (const s1 of apply(this.a, ra.written, s, oa)) for (const s2 of apply(this.b, rb.written, s1, ob)) next.add(s2);
      for (const s1 of apply(this.b, rb.written, s, ob)) for (const s2 of apply(this.a, ra.written, s1, oa)) next.add(s2);
    }
    check(m, this.a.key, next, what);
    await noUnhandled(r, what);
  }
  toString = () => `together(${describeOp(this.a, '…')}, ${describeOp(this.b, '…')})`;
}

/**
 * Another process writes (a set or delete through the second cache). Awaited until the cache under
 * test has heard of it (its `remoteChange` event): the model allows no propagation delay, so the
 * command waits for the note rather than the model allowing the old value for a while. Under tracking
 * the note drops no L1 copy: the server's invalidation does, on another connection, so the command
 * also waits (at most INVALIDATION_WAIT_MS) until L1 holds no copy of the key. Past that it goes on,
 * and the model judges what the cache answers next (an old copy still served is a violation).
 */
class OtherWrite implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly kind: 'set' | 'delete',
    readonly key: Key,
  ) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const written = `o${++r.seq}`;
    const heard = new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => (r.cache.off('remoteChange', onChange), resolve(false)), 2000);
      const onChange = (e: { key: string }) => {
        if (e.key !== this.key) return;
        clearTimeout(timer);
        r.cache.off('remoteChange', onChange);
        resolve(true);
      };
      r.cache.on('remoteChange', onChange);
    });
    await (this.kind === 'set' ? r.observer.set(this.key, written) : r.observer.delete(this.key));
    if (!(await heard)) throw new Error(`another process's ${this.kind}(${this.key}) was never heard by the cache under test (no remoteChange within 2 s)`);
    if (r.mode === 'tracking') await invalidated(r.cache, this.key);
    m.set(this.key, new Set([this.kind === 'set' ? written : undefined]));
  }
  toString = () => `other process: ${this.kind}(${this.key})`;
}

/** deleteByTag(tags) made here or by another process (the observer), awaited: every state carrying one of `tags` becomes a miss. */
class DeleteByTag implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly tags: Tags,
    readonly other: boolean,
  ) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const what = `${this.toString()}`;
    const outcome = await settle((this.other ? r.observer : r.cache).deleteByTag(this.tags).then(() => undefined));
    if (!outcome.ok) throw new Error(`${what} ${describeOutcome(outcome)}`);
    for (const k of KEYS) m.set(k, new Set([...(m.get(k) as Set<Val>)].map((s) => dropTagged(r, s, this.tags))));
    await noUnhandled(r, what);
  }
  toString = () => `${this.other ? 'other process: ' : ''}deleteByTag(${this.tags.join('+')})`;
}

/**
 * A call and a deleteByTag here. `paused` false: started together (either order). `paused` true: a
 * tagged getOrCompute whose loader, once it runs (its grant taken), waits until the deleteByTag
 * resolved — the load was granted before it, so only the order "the call, then the deleteByTag" is
 * allowed: its caller may get its value, no one after it may (a call that was a hit settles first).
 */
class WithDeleteByTag implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly op: Op,
    readonly tags: Tags,
    readonly paused: boolean,
  ) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    let written: string;
    let settled: Promise<Outcome>;
    let deleted: Outcome;
    if (this.paused && this.op.kind === 'getOrCompute') {
      written = `l${++r.seq}`;
      r.tagsOf.set(written, this.op.tags ?? []);
      const running = deferred<void>();
      const gate = deferred<void>();
      const value = written;
      settled = settle(r.cache.getOrCompute(this.op.key, async () => (running.resolve(), await gate.promise, value), withTags(this.op)));
      await Promise.race([running.promise, settled]);
      deleted = await settle(r.cache.deleteByTag(this.tags).then(() => undefined));
      gate.resolve();
    } else {
      const started = start(this.op, r);
      written = started.written;
      settled = started.settled;
      deleted = await settle(r.cache.deleteByTag(this.tags).then(() => undefined));
    }
    const outcome = await settled;
    const what = `${this.paused ? 'paused across' : 'together'}: ${describeOp(this.op, written)} ${describeOutcome(outcome)} | deleteByTag(${this.tags.join('+')}) ${describeOutcome(deleted)}`;
    if (!deleted.ok) throw new Error(what);
    const next = new Set<Val>();
    for (const s of m.get(this.op.key) as Set<Val>) {
      for (const s1 of apply(this.op, written, s, outcome)) next.add(dropTagged(r, s1, this.tags));
      if (!this.paused) for (const s2 of apply(this.op, written, dropTagged(r, s, this.tags), outcome)) next.add(s2);
    }
    check(m, this.op.key, next, what);
    for (const k of KEYS) if (k !== this.op.key) m.set(k, new Set([...(m.get(k) as Set<Val>)].map((s) => dropTagged(r, s, this.tags))));
    await noUnhandled(r, what);
  }
  toString = () => `${this.paused ? 'paused across' : 'together'}(${describeOp(this.op, '…')}, deleteByTag(${this.tags.join('+')}))`;
}

function deferred<T>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

const INVALIDATION_WAIT_MS = 1000;

/** Until `cache`'s L1 holds no copy of `key` (the server's invalidation arrived), INVALIDATION_WAIT_MS at most. */
async function invalidated(cache: Cache, key: Key): Promise<void> {
  const local = (cache as unknown as { rt: { local: { get(key: string): unknown } } }).rt.local;
  for (let waited = 0; local.get(key) !== undefined && waited < INVALIDATION_WAIT_MS; waited += 5) await new Promise((resolve) => setTimeout(resolve, 5));
}

/** What any other process reads: the store, through a second cache without L1. */
class Peek implements fc.AsyncCommand<Model, Real> {
  constructor(readonly key: Key) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const value = await r.observer.get<string>(this.key);
    const allowed = m.get(this.key) as Set<Val>;
    if (!allowed.has(value)) throw new Error(`peek(${this.key}) from another cache → ${String(value)}; allowed {${[...allowed].map(String).join(', ')}}`);
    m.set(this.key, new Set([value]));
  }
  toString = () => `peek(${this.key})`;
}

const key = fc.constantFrom(...KEYS);
const loaderMs = fc.constantFrom(0, 1, 5, 15);
/** A write's tags: none (half of the writes), one or both. */
const tags = fc.constantFrom<Tags>([], [], ['t1'], ['t2'], ['t1', 't2']);
const deletedTags = fc.constantFrom<Tags>(['t1'], ['t2'], ['t1', 't2']);
const plainOp = (k: fc.Arbitrary<Key>): fc.Arbitrary<Op> =>
  fc.oneof(
    k.map((key) => ({ kind: 'get' as const, key })),
    fc.tuple(k, tags).map(([key, tags]) => ({ kind: 'set' as const, key, tags })),
    k.map((key) => ({ kind: 'delete' as const, key })),
    fc.tuple(k, loaderMs, tags).map(([key, loaderMs, tags]) => ({ kind: 'getOrCompute' as const, key, loaderMs, tags })),
  );
const tagCommands = [
  fc.tuple(deletedTags, fc.boolean()).map(([t, other]) => new DeleteByTag(t, other)),
  fc.tuple(plainOp(key), deletedTags).map(([op, t]) => new WithDeleteByTag(op, t, false)),
  fc.tuple(key, loaderMs, fc.constantFrom<Tags>(['t1'], ['t2'], ['t1', 't2']), deletedTags).map(([k, ms, t, d]) => new WithDeleteByTag({ kind: 'getOrCompute', key: k, loaderMs: ms, tags: t }, d, true)),
];
const abortedOp: fc.Arbitrary<Op> = fc
  .tuple(key, loaderMs, fc.oneof(fc.constant('pre' as const), fc.integer({ min: 0, max: 20 })))
  .map(([key, loaderMs, abortAfter]) => ({ kind: 'abortedGetOrCompute' as const, key, loaderMs, abortAfter }));
const pair = key.chain((k) => fc.tuple(plainOp(fc.constant(k)), plainOp(fc.constant(k)))).map(([a, b]) => new Pair(a, b));

/** One process's own calls (tagged or not), peeks and other processes' writes: no deleteByTag. */
const untaggedCommands = (pairs: fc.Arbitrary<Pair> | undefined) => [
  plainOp(key).map((op) => new Single(op)),
  ...(pairs ? [pairs] : []),
  key.map((k) => new Peek(k)),
  fc.tuple(fc.constantFrom('set' as const, 'delete' as const), key).map(([kind, k]) => new OtherWrite(kind, k)),
];
const coherenceCommands = [...untaggedCommands(pair), ...tagCommands];
const allCommands = fc.commands([...coherenceCommands, abortedOp.map((op) => new Single(op))], { maxCommands: 30 });
/** Without aborts: what the L1 negative controls run, so that their failure is about L1 alone. */
const withoutAborts = fc.commands(coherenceCommands, { maxCommands: 30 });
/**
 * Under tracking: the same, but a set() and a getOrCompute() of one key are never started together.
 * Their reads go on different connections there (the call's on the tracked one), so the call may miss,
 * load, and store its value after the set()'s: the fence rule's order (the later grant's write wins,
 * docs/guarantees.md), as between two processes in every mode, but a result this one-process model,
 * which orders a call's read with its write, refuses (docs/tracking.md, Limits).
 */
const setWithLoad = (p: Pair): boolean => new Set([p.a.kind, p.b.kind]).size === 2 && [p.a.kind, p.b.kind].every((k) => k === 'set' || k === 'getOrCompute');
const trackingCommands = fc.commands([...untaggedCommands(pair.filter((p) => !setWithLoad(p))), ...tagCommands, abortedOp.map((op) => new Single(op))], { maxCommands: 30 });
/**
 * What the tracking negative control runs: one call at a time, peeks and other processes' writes (no
 * pairs, no aborts, no deleteByTag), so that its failure is about the server's invalidations alone.
 */
const oneAtATime = fc.commands(untaggedCommands(undefined), { maxCommands: 30 });

const SEED = Number(process.env.SG_MODEL_SEED ?? 20261201);
const NUM_RUNS = 150;
/** Tracking mode: fewer runs (the suite's time is bounded; each run opens two more connections). */
const TRACKING_RUNS = 60;

/** Numbers every run of every test, so each gets a prefix (and keys) of its own. */
let run = 0;

/** `endOnFailure`: a negative control stops at its first counterexample (no shrinking). */
async function runModel(mode: Mode, commands = allCommands, unsafe: UnsafeSwitches = {}, numRuns = NUM_RUNS, endOnFailure = false): Promise<void> {
  // Rejections a previous test's background work left behind (reported against that test by vitest)
  // surface now, before this test's own listener is on.
  await new Promise((resolve) => setTimeout(resolve, 200));
  const switches = Object.keys(unsafe).filter((k) => unsafe[k as keyof UnsafeSwitches]);
  console.log(`model test (L1 ${mode}${switches.map((k) => `, ${k}`).join('')}): seed ${SEED}, ${numRuns} runs; replay with SG_MODEL_SEED=${SEED}`);
  const local = mode === 'off' ? false : mode === 'notes' ? { max: 100 } : { max: 100, invalidation: 'tracking' as const };
  await fc.assert(
    fc.asyncProperty(commands, async (cmds) => {
      const prefix = `model${process.pid}x${++run}`;
      const clients = [new Redis(provided.url, { maxRetriesPerRequest: 1 }), new Redis(provided.url, { maxRetriesPerRequest: 1 })];
      const defaults = { ttl: 60_000, failBackoff: 60_000, waitTimeout: 2_000 };
      const cache = createCache({ redis: clients[0] as Redis, prefix, local, defaults, [UNSAFE]: unsafe } as CacheOptions);
      const observer = createCache({ redis: clients[1] as Redis, prefix, defaults });
      const real: Real = { cache, mode, client: clients[0] as Redis, observer, unhandled: [], seq: 0, tagsOf: new Map() };
      const onUnhandled = (e: unknown) => real.unhandled.push(e);
      process.on('unhandledRejection', onUnhandled);
      try {
        // ready() is true once subscribed (and, under tracking, tracked): L1 serves only from then on.
        await Promise.all([cache.ready(), observer.ready()]);
        const model: Model = new Map(KEYS.map((k) => [k, new Set<Val>([undefined])]));
        await fc.asyncModelRun(() => ({ model, real }), cmds);
        await Promise.all([cache.close(), observer.close()]);
        await noUnhandled(real, 'close()');
      } finally {
        process.off('unhandledRejection', onUnhandled);
        await Promise.all([cache.close(), observer.close()]);
        for (const c of clients) c.disconnect();
      }
    }),
    { seed: SEED, numRuns, endOnFailure },
  );
}

/** A negative control: the model (without aborts by default, so the failure is about L1 alone) must find a result no order of the calls allows. */
async function expectDisallowedResult(mode: Mode, unsafe: UnsafeSwitches, numRuns: number, commands = withoutAborts): Promise<void> {
  const failure = await runModel(mode, commands, unsafe, numRuns, true).then(() => undefined, (e: unknown) => e);
  const why = String((failure as { cause?: unknown } | undefined)?.cause);
  console.log(`negative control caught: ${String(failure).split('\n').find((l) => l.startsWith('Counterexample'))} — ${why}`);
  expect(why).not.toMatch(/unhandled rejection/);
  expect(why).toMatch(/no order of these calls|peek\([ab]\) from another cache/);
}

describe('model-based: one process against a reference model (real Redis)', () => {
  it('L1 on: get/set/delete/getOrCompute (tagged or not), deleteByTag, pairs started together, aborted calls: every result allowed by the model, no unhandled rejection', async () => {
    await runModel('notes');
  }, 120_000);

  it('L1 off: the same commands and model', async () => {
    await runModel('off');
  }, 120_000);

  it("L1 on under tracking (local.invalidation 'tracking'): the same commands and model (no set() started together with a getOrCompute() of its key: docs/tracking.md, Limits), another process's change dropped by the server's invalidation", async () => {
    await runModel('tracking', trackingCommands, {}, TRACKING_RUNS);
  }, 120_000);

  it('negative control: with an incoherent L1 (UNSAFE incoherentL1), the model finds a result no order of the calls allows', async () => {
    await expectDisallowedResult('notes', { incoherentL1: true }, NUM_RUNS);
  }, 120_000);

  it('negative control: under tracking with the invalidation pushes ignored (UNSAFE ignoreInvalidations), the model finds a result no order of the calls allows', async () => {
    await expectDisallowedResult('tracking', { ignoreInvalidations: true }, TRACKING_RUNS, oneAtATime);
  }, 120_000);

  it('negative control: with the tag snapshot taken at the write instead of the grant (UNSAFE tagSnapshotAtWrite), the model finds a value that outlived a deleteByTag', async () => {
    await expectDisallowedResult('notes', { tagSnapshotAtWrite: true }, NUM_RUNS);
  }, 120_000);
});
