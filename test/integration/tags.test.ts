/**
 * Tags (docs/tags.md; THE TAG RULE in src/lock/scripts.ts): once `deleteByTag(t)` resolves, no call
 * that starts afterwards, in any process, returns an entry tagged `t` whose grant (or set()) came
 * before it — from Redis, from another process's L1, or from a loader paused across it.
 * Real redis-server, both client families; "another process" is another cache on its own client, or a
 * forked worker (test/support/tags-worker.ts) where its L1 matters.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { InvalidOptionError, type Cache, type CacheOptions, type CacheStats, type LoaderContext } from '../../src/index.js';
import { UNSAFE } from '../../src/unsafe.js';
import { decodeEntry as decodePrevious } from '../fixtures/previous-codec.js';
import { createCache } from '../../src/index.js';
import { familyClient } from '../support/family.js';
import { ageEntry, countCommands, deferred, heldRebuild, keysOf, nextEvent, prefixOf, refreshOutcomes, useRedis } from '../support/harness.js';
import { startProxy } from '../support/proxy.js';
import { asAppUser } from '../support/redis-server.js';

const h = useRedis();
let prefixes = 0;
/** Two caches on one prefix: two processes of one service (each with its own client, subscription and L1). */
function pair(options: Partial<CacheOptions> = {}): [Cache, Cache] {
  const prefix = `tags${process.pid}x${++prefixes}`;
  return [h.cache({ prefix, local: { max: 100 }, ...options }), h.cache({ prefix, local: { max: 100 } })];
}
async function ready(...caches: Cache[]): Promise<void> {
  await Promise.all(caches.map((c) => c.ready()));
}

describe('deleteByTag', () => {
  it('another cache never returns the old value after it resolves (Redis and its L1), and untagged entries stay', async () => {
    const [a, b] = pair();
    await ready(a, b);
    await a.getOrCompute('u:1', () => 'old-1', { ttl: 60_000, tags: ['org:3', 'user:1'] });
    await a.getOrCompute('u:2', () => 'old-2', { ttl: 60_000, tags: ['org:4'] });
    await a.set('plain', 'p', 60_000);
    // b holds the tagged entry in its L1 (the second read is an L1 hit).
    expect(await b.get('u:1')).toBe('old-1');
    expect(await b.get('u:1')).toBe('old-1');
    expect(b.stats().localHits).toBe(1);

    await a.deleteByTag('org:3');

    expect(await b.get('u:1')).toBeUndefined();
    expect(await a.get('u:1')).toBeUndefined();
    let ran = 0;
    expect(await b.getOrCompute('u:1', () => (ran++, 'new-1'), { ttl: 60_000, tags: ['org:3', 'user:1'] })).toBe('new-1');
    expect(ran).toBe(1);
    expect(await a.get('u:1')).toBe('new-1');
    // Other tags and untagged entries are untouched.
    expect(await b.get('u:2')).toBe('old-2');
    expect(await b.get('plain')).toBe('p');
    expect(b.stats().tagInvalidations).toBeGreaterThanOrEqual(1);
  });

  it('an array of tags invalidates the entries of each; set() entries are tagged too', async () => {
    const [a, b] = pair();
    await ready(a, b);
    await a.set('x', 'x0', { ttl: 60_000, tags: ['t1'] });
    await a.set('y', 'y0', { ttl: 60_000, tags: ['t2'] });
    await a.set('z', 'z0', { ttl: 60_000, tags: ['t3'] });
    expect(await b.getMany(['x', 'y', 'z'])).toEqual(['x0', 'y0', 'z0']);
    await b.deleteByTag(['t1', 't2']);
    expect(await a.getMany(['x', 'y', 'z'])).toEqual([undefined, undefined, 'z0']);
    expect(await a.has('x')).toBe(false);
  });

  it('a loader paused past it (granted before, writing after): its write is refused and no caller that starts after it gets its value', async () => {
    // SG_NEGATIVE_CONTROL=tag-snapshot-at-write: the write carries the time of the write instead of its
    // grant's (UNSAFE.tagSnapshotAtWrite), so the paused loader's value lands: this test must fail.
    const atWrite = process.env.SG_NEGATIVE_CONTROL === 'tag-snapshot-at-write';
    const [a, b] = pair(atWrite ? ({ [UNSAFE]: { tagSnapshotAtWrite: true } } as Partial<CacheOptions>) : {});
    await ready(a, b);
    const options = { ttl: 60_000, tags: ['org:3'] };
    // a's loader is granted, then paused.
    const held = await heldRebuild<string>(a, 'k', options);
    // A caller of b that started before the deleteByTag waits on a's lock.
    const before = b.getOrCompute('k', () => 'b-before', options);

    await b.deleteByTag('org:3');

    // Callers that start after it, in a's own process (it joins the flight begun before, then runs its
    // call again once that flight settles with a value tagged org:3) and in b's.
    const afterA = a.getOrCompute('k', () => 'a-after', options);
    const afterB = b.getOrCompute('k', () => 'b-after', options);
    let rejected = 0;
    a.on('writeRejected', () => rejected++);
    held.open('paused-old');
    expect(await held.call).toBe('paused-old'); // its own caller started before the deleteByTag
    const answers = await Promise.all([afterA, afterB]);
    expect(answers).not.toContain('paused-old');
    expect(rejected).toBe(1);
    expect(await b.get('k')).not.toBe('paused-old');
    expect(await a.get('k')).not.toBe('paused-old');
    // The waiter that started before it may have either value, but the store never held the old one.
    await before;
    const stored = await h.admin.getBuffer(keysOf(a, 'k').value);
    if (stored) expect(decodePrevious(stored).value).not.toBe('paused-old');
  });

  it('tags chosen by the loader (ctx.setOptions) count from the grant: a deleteByTag during the load refuses the write', async () => {
    const [a, b] = pair();
    await ready(a, b);
    // Loader-chosen tags, no tag in the call options. A tag without a record yet (its first use) is
    // unknown, so the first write is refused (and creates the record): one more load, once.
    const first = nextEvent(a, 'writeRejected');
    expect(await a.getOrCompute('lc', (ctx) => (ctx.setOptions({ tags: ['org:9'] }), 'v-first'), 60_000)).toBe('v-first');
    await first;
    expect(await b.get('lc')).toBeUndefined();
    expect(await a.getOrCompute('lc', (ctx) => (ctx.setOptions({ tags: ['org:9'] }), 'v0'), 60_000)).toBe('v0');
    expect(await b.get('lc')).toBe('v0');
    await a.deleteByTag('org:9');
    expect(await b.get('lc')).toBeUndefined();

    // A load granted before the deleteByTag, whose loader names the tag only afterwards.
    const gate = deferred<void>();
    const started = deferred<void>();
    const call = a.getOrCompute('lc', async (ctx) => {
      started.resolve();
      await gate.promise;
      ctx.setOptions({ tags: ['org:9'] });
      return 'v-old';
    }, 60_000);
    await started.promise;
    await b.deleteByTag('org:9');
    const rejected = nextEvent(a, 'writeRejected');
    gate.resolve();
    expect(await call).toBe('v-old');
    await rejected;
    expect(await b.get('lc')).toBeUndefined();
    // The next load lands (the records exist), with the loader's tag.
    expect(await b.getOrCompute('lc', (ctx) => (ctx.setOptions({ tags: ['org:9'] }), 'v1'), 60_000)).toBe('v1');
    expect(await a.get('lc')).toBe('v1');
  });

  it('a tag record lost (eviction stand-in) makes its entries invalid: one rebuild, never the old value', async () => {
    // No L1 in a: its copy would stay until its fresh time (no invalidation happened), as any copy does.
    const [a, b] = pair({ local: false });
    await ready(a, b);
    await a.getOrCompute('ev', () => 'old', { ttl: 60_000, tags: ['lost'] });
    const records = await h.admin.keys(`${prefixOf(a)}:tag:*`);
    expect(records).toEqual([`${prefixOf(a)}:tag:{${prefixOf(a)}}: lost`]);
    await h.admin.del(...records);
    let runs = 0;
    const loader = () => (runs++, `new-${runs}`);
    expect(await b.getOrCompute('ev', loader, { ttl: 60_000, tags: ['lost'] })).toBe('new-1');
    expect(await a.getOrCompute('ev', loader, { ttl: 60_000, tags: ['lost'] })).toBe('new-1');
    expect(await b.getOrCompute('ev', loader, { ttl: 60_000, tags: ['lost'] })).toBe('new-1');
    expect(runs).toBe(1);
    expect(b.stats().tagInvalidations).toBe(1);

    // A loader-chosen tag whose record is lost while the load runs: that write is refused (and
    // re-creates the record), the next one lands.
    const gate = deferred<void>();
    const started = deferred<void>();
    const call = a.getOrCompute('ev2', async (ctx) => (started.resolve(), await gate.promise, ctx.setOptions({ tags: ['lost2'] }), 'first'), 60_000);
    await started.promise;
    await h.admin.del(`${prefixOf(a)}:tag:{${prefixOf(a)}}: lost2`);
    const rejected = nextEvent(a, 'writeRejected');
    gate.resolve();
    expect(await call).toBe('first');
    await rejected;
    expect(await b.get('ev2')).toBeUndefined();
    expect(await b.getOrCompute('ev2', (ctx) => (ctx.setOptions({ tags: ['lost2'] }), 'second'), 60_000)).toBe('second');
    expect(await a.get('ev2')).toBe('second');
  });

  it("drops the L1 copies of another process (a forked worker) before it resolves", async () => {
    const a = h.cache({ local: { max: 100 } });
    await a.ready();
    const worker = await TagsWorker.start(h.url, prefixOf(a));
    await worker.call({ op: 'compute', key: 'w', value: 'w-old', tags: ['org:3'] });
    await worker.call({ op: 'compute', key: 'w-plain', value: 'plain' });
    // The worker holds both in its L1 (a second get is a local hit).
    expect((await worker.call({ op: 'get', key: 'w' })).value).toBe('w-old');
    expect((await worker.stats()).localHits).toBeGreaterThanOrEqual(1);

    await a.deleteByTag('org:3');

    const hitsBefore = (await worker.stats()).localHits;
    expect((await worker.call({ op: 'get', key: 'w' })).value).toBeUndefined();
    expect((await worker.call({ op: 'get', key: 'w-plain' })).value).toBe('plain');
    const after = await worker.stats();
    expect(after.localHits).toBe(hitsBefore + 1); // the untagged copy is still served from L1
    expect(after.tagInvalidations).toBe(1);
    const again = await worker.call({ op: 'compute', key: 'w', value: 'w-new', tags: ['org:3'] });
    expect(again).toMatchObject({ value: 'w-new', loaded: true });
  });

  it('on a namespace: only its entries (and its nested namespaces\'); cache.deleteByTag reaches namespaced entries', async () => {
    const [a, b] = pair();
    await ready(a, b);
    const users = a.namespace('users');
    const admins = users.namespace('admins');
    const orders = a.namespace('orders');
    await users.set('1', 'u1', { ttl: 60_000, tags: ['org:3'] });
    await admins.set('1', 'a1', { ttl: 60_000, tags: ['org:3'] });
    await orders.set('1', 'o1', { ttl: 60_000, tags: ['org:3'] });
    await a.set('1', 'p1', { ttl: 60_000, tags: ['org:3'] });
    const bUsers = b.namespace('users');
    expect(await bUsers.get('1')).toBe('u1');

    await users.deleteByTag('org:3');
    expect(await bUsers.get('1')).toBeUndefined();
    expect(await b.namespace('users').namespace('admins').get('1')).toBeUndefined();
    expect(await b.namespace('orders').get('1')).toBe('o1');
    expect(await b.get('1')).toBe('p1');

    await b.deleteByTag('org:3');
    expect(await orders.get('1')).toBeUndefined();
    expect(await a.get('1')).toBeUndefined();
  });

  it("drops another process's degraded copies (L1 and the degraded memo) of tagged loads made while its Redis connection was dead", async () => {
    const { hostname, port } = new URL(h.url);
    const proxy = await startProxy({ host: hostname, port: Number(port) });
    const { client, dispose } = familyClient(asAppUser(proxy.url));
    const a = h.cache({ local: { max: 100 } });
    const b = createCache({ redis: client, prefix: prefixOf(a), local: { max: 100 }, redisTimeout: 300 });
    try {
      await Promise.all([a.ready(), b.ready()]);
      // b's data connection goes silently dead; its subscriber (another connection) keeps working.
      const clients = (await h.admin.client('LIST')) as string;
      const ports = clients.split('\n').filter((line) => / sub=0 /.test(line) && / psub=0 /.test(line)).map((line) => Number(/ addr=[^ ]*:(\d+) /.exec(line)?.[1]));
      expect(ports.filter((p) => proxy.silence(p))).toHaveLength(1);
      // A tagged load on b is degraded (Redis does not answer): it fills b's L1 and degraded memo.
      const degraded = nextEvent(b, 'degraded');
      expect(await b.getOrCompute('d', () => 'degraded-old', { ttl: 60_000, tags: ['org:3'] })).toBe('degraded-old');
      await degraded;
      expect(await b.getOrCompute('d', () => 'not-run', { ttl: 60_000, tags: ['org:3'] })).toBe('degraded-old');

      await a.deleteByTag('org:3'); // b cannot acknowledge (its data connection is dead): resolves after 2 × redisTimeout

      // The note reached b on its subscriber: neither its L1 nor its memo answers the old value.
      expect(await b.getOrCompute('d', () => 'degraded-new', { ttl: 60_000, tags: ['org:3'] })).toBe('degraded-new');
    } finally {
      await b.close();
      dispose();
      await proxy.close();
    }
  });

  it('bad tags are typed errors before any Redis traffic', async () => {
    const a = h.cache();
    await a.ready();
    const client = (a as unknown as { rt: { options: { redis: Parameters<typeof countCommands>[0] } } }).rt.options.redis;
    const sent = countCommands(client);
    const loader = () => 'v';
    const bad: unknown[] = ['org:3', [''], [1], ['x'.repeat(257)], Array.from({ length: 33 }, (_, i) => `t${i}`), ['\uD800']];
    for (const tags of bad) {
      await expect(a.getOrCompute('k', loader, { ttl: 1000, tags } as never)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'tags' });
      await expect(a.set('k', 'v', { ttl: 1000, tags } as never)).rejects.toBeInstanceOf(InvalidOptionError);
    }
    for (const tag of ['', 1, [], ['ok', ''], 'y'.repeat(257)]) await expect(a.deleteByTag(tag as never)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'tag' });
    await expect(a.namespace('n').deleteByTag('')).rejects.toBeInstanceOf(InvalidOptionError);
    await expect(a.getOrComputeMany(['k'], async () => new Map(), { ttl: 1000, tags: ['t'] })).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'tags' });
    expect(sent.count).toBe(0);
    // A loader's bad tags reject its call (no fail-safe hides it), and nothing is written.
    await expect(a.getOrCompute('k2', (ctx) => (ctx.setOptions({ tags: [''] }), 'v'), 1000)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'ctx.setOptions.tags' });
    expect(await a.get('k2')).toBeUndefined();
    // 32 tags of 256 characters are fine.
    const most = Array.from({ length: 32 }, (_, i) => `${i}`.padEnd(256, 'x'));
    expect(await a.getOrCompute('k3', loader, { ttl: 1000, tags: most })).toBe('v');
  });

  it('an untagged hit sends the same one command as before; a tagged Redis hit one more; an L1 tagged hit none', async () => {
    const [a] = pair({ local: false });
    const [, l1] = pair();
    await ready(a, l1);
    await a.set('plain', 'p', 60_000);
    await a.set('tagged', 't', { ttl: 60_000, tags: ['x'] });
    await a.get('plain'); // the node's clock is sampled: hits are plain reads from now on
    const client = (a as unknown as { rt: { options: { redis: Parameters<typeof countCommands>[0] } } }).rt.options.redis;
    const sent = countCommands(client);
    expect(await a.get('plain')).toBe('p');
    expect(sent.count).toBe(1);
    sent.reset();
    expect(await a.get('tagged')).toBe('t');
    expect(sent.count).toBe(2);
    // L1: the second tagged read sends nothing.
    const l1Client = (l1 as unknown as { rt: { options: { redis: Parameters<typeof countCommands>[0] } } }).rt.options.redis;
    await l1.set('tagged', 't', { ttl: 60_000, tags: ['x'] });
    const l1Sent = countCommands(l1Client);
    expect(await l1.get('tagged')).toBe('t');
    expect(l1Sent.count).toBe(0);
  });

  it('a reader of the previous release reads the value of a tagged entry', async () => {
    const a = h.cache();
    await a.set('prev', { n: 1 }, { ttl: 60_000, tags: ['org:3', 'user:1'] });
    const bytes = await h.admin.getBuffer(keysOf(a, 'prev').value);
    expect(decodePrevious(bytes as Buffer).value).toEqual({ n: 1 });
  });
});

describe('deleteByTag reaches only what may carry its tags (in-process loads, early refreshes, the degraded memo)', () => {
  // lock 'local' (fence-only grants): a call that does not join a load in progress runs its own loader at once.
  const local = { ttl: 60_000, lock: 'local' as const };

  it('an untagged load in progress stays coalesced across a deleteByTag: one loader run for every caller, before and after it', async () => {
    const [a, b] = pair();
    await ready(a, b);
    let runs = 0;
    const gate = deferred<void>();
    const started = deferred<void>();
    const loader = async () => (runs++, started.resolve(), await gate.promise, 'v');
    const first = a.getOrCompute('plain', loader, local);
    await started.promise;
    await b.deleteByTag('org:3'); // resolves once a acknowledged its note
    await a.deleteByTag('org:4'); // and a's own
    const later = Array.from({ length: 4 }, () => a.getOrCompute('plain', loader, local));
    gate.resolve();
    expect(await Promise.all([first, ...later])).toEqual(['v', 'v', 'v', 'v', 'v']);
    expect(runs).toBe(1);
    expect(a.stats().coalesced).toBe(4);
  });

  it("a load whose loader names the deleted tag only after it: a caller that joined after the deleteByTag is not answered with its value", async () => {
    const [a, b] = pair();
    await ready(a, b);
    await a.set('seed', 's', { ttl: 60_000, tags: ['org:9'] }); // the tag's record exists
    const gate = deferred<void>();
    const started = deferred<void>();
    const first = a.getOrCompute('lc', async (ctx) => {
      started.resolve();
      await gate.promise;
      ctx.setOptions({ tags: ['org:9'] });
      return 'v-old';
    }, local);
    await started.promise;
    await b.deleteByTag('org:9');
    let laterRuns = 0;
    const later = a.getOrCompute('lc', () => (laterRuns++, 'v-new'), local);
    const untagged = a.getOrCompute('other', () => 'o', local);
    gate.resolve();
    expect(await first).toBe('v-old'); // its own caller started before the deleteByTag
    expect(await later).toBe('v-new');
    expect(laterRuns).toBe(1);
    expect(await untagged).toBe('o');
    expect(await b.get('lc')).toBe('v-new');
  });

  it('a tagged load in progress: a caller that joined after a deleteByTag of its tag loads again (never its value)', async () => {
    const [a, b] = pair();
    await ready(a, b);
    const held = await heldRebuild<string>(a, 'tk', { ...local, tags: ['org:3'] });
    await b.deleteByTag('org:3');
    const later = a.getOrCompute('tk', () => 'new', { ...local, tags: ['org:3'] });
    held.open('old');
    expect(await held.call).toBe('old');
    expect(await later).toBe('new');
  });

  it('an untagged early refresh in progress is not abandoned by a deleteByTag; one of an entry with the tag is', async () => {
    const a = h.cache();
    const options = { ttl: 20_000, refreshAhead: 0.05, waitTimeout: 60_000, pollInterval: 60_000 };
    async function refreshing(key: string, tags?: string[]) {
      const o = tags ? { ...options, tags } : options;
      expect(await a.getOrCompute(key, async () => 'v1', o)).toBe('v1');
      await ageEntry(h.admin, keysOf(a, key).value, 18_500); // past its refresh point
      const started = deferred<LoaderContext>();
      const gate = deferred<string>();
      const won = new Promise<void>((resolve) => a.on('refresh', (e) => e.key === key && e.outcome === 'won' && resolve()));
      expect(await a.getOrCompute(key, (ctx) => (started.resolve(ctx), gate.promise), o)).toBe('v1');
      await won;
      return { ctx: await started.promise, open: gate.resolve };
    }
    await a.ready();
    const outcomes = refreshOutcomes(a);
    const plain = await refreshing('plain');
    const tagged = await refreshing('tagged', ['org:3']);
    await a.deleteByTag('org:3');
    expect(plain.ctx.signal.aborted).toBe(false);
    expect(tagged.ctx.signal.aborted).toBe(true);
    const written = new Promise<void>((resolve) => a.on('computed', (e) => e.key === 'plain' && e.written && resolve()));
    plain.open('v2');
    await written;
    expect(await h.cache({ prefix: prefixOf(a) }).get('plain')).toBe('v2');
    expect(outcomes.filter((o) => o === 'abandoned')).toHaveLength(1);
  });

  it("another process's untagged degraded values survive a deleteByTag in its memo; its tagged ones do not", async () => {
    const { hostname, port } = new URL(h.url);
    const proxy = await startProxy({ host: hostname, port: Number(port) });
    const { client, dispose } = familyClient(asAppUser(proxy.url));
    const a = h.cache({ local: { max: 100 } });
    // No L1: what answers is the degraded memo.
    const b = createCache({ redis: client, prefix: prefixOf(a), local: false, redisTimeout: 300 });
    try {
      await Promise.all([a.ready(), b.ready()]);
      const clients = (await h.admin.client('LIST')) as string;
      const ports = clients.split('\n').filter((line) => / sub=0 /.test(line) && / psub=0 /.test(line)).map((line) => Number(/ addr=[^ ]*:(\d+) /.exec(line)?.[1]));
      expect(ports.filter((p) => proxy.silence(p))).toHaveLength(1);
      expect(await b.getOrCompute('plain', () => 'plain-old', 60_000)).toBe('plain-old');
      expect(await b.getOrCompute('d', () => 'tagged-old', { ttl: 60_000, tags: ['org:3'] })).toBe('tagged-old');
      expect(await b.getOrCompute('plain', () => 'not-run', 60_000)).toBe('plain-old');

      await a.deleteByTag('org:3'); // b cannot acknowledge (its data connection is dead): resolves after 2 × redisTimeout

      expect(await b.getOrCompute('plain', () => 'plain-new', 60_000)).toBe('plain-old');
      expect(await b.getOrCompute('d', () => 'tagged-new', { ttl: 60_000, tags: ['org:3'] })).toBe('tagged-new');
    } finally {
      await b.close();
      dispose();
      await proxy.close();
    }
  });
});

describe('expireByTag', () => {
  const stale = { ttl: 60_000, staleTtl: 30_000, tags: ['org:3'] };
  /** Resolves once `key`'s value was written by a load in any of `caches`. */
  const writtenIn = (key: string, ...caches: Cache[]) =>
    new Promise<void>((resolve) => caches.forEach((c) => c.on('computed', (e) => e.key === key && e.written && resolve())));

  it('another cache gets no fresh answer after it resolves: the old value is served stale while one rebuild runs; other tags and untagged entries stay fresh', async () => {
    // Negative control: with the read ignoring the expired time (tags.ts judge), the old value stays fresh and this fails.
    const [a, b] = pair();
    await ready(a, b);
    await a.getOrCompute('e', () => 'old', stale);
    await a.getOrCompute('e4', () => 'other', { ...stale, tags: ['org:4'] });
    await a.set('plain', 'p', 60_000);
    expect(await b.get('e')).toBe('old');
    expect(await b.get('e')).toBe('old'); // b's L1 holds it

    await a.expireByTag('org:3');

    expect(await b.get('e')).toBeUndefined(); // get() answers fresh values only
    const staleEvents: string[] = [];
    for (const c of [a, b]) c.on('stale', (e) => staleEvents.push(`${e.key}:${e.reason}`));
    const gate = deferred<void>();
    let runs = 0;
    const loader = async () => (runs++, await gate.promise, 'new');
    const written = writtenIn('e', a, b);
    // Stale readers in both caches, started together: each is answered at once with the old value.
    expect(await Promise.all([b.getOrCompute('e', loader, stale), a.getOrCompute('e', loader, stale), b.getOrCompute('e', loader, stale)])).toEqual(['old', 'old', 'old']);
    expect(staleEvents).toEqual(['e:window', 'e:window', 'e:window']);
    gate.resolve();
    await written;
    expect(await b.get('e')).toBe('new');
    expect(await a.get('e')).toBe('new');
    expect(runs).toBe(1);
    expect(await b.get('e4')).toBe('other');
    expect(await b.get('plain')).toBe('p');
  });

  it('across processes (forked workers with L1): no fresh old answer anywhere, stale readers everywhere, exactly one rebuild for the fleet', async () => {
    const a = h.cache({ local: { max: 100 } });
    await a.ready();
    const workers = await Promise.all([TagsWorker.start(h.url, prefixOf(a)), TagsWorker.start(h.url, prefixOf(a))]);
    await a.getOrCompute('m', () => 'old', stale);
    for (const w of workers) {
      await w.call({ op: 'compute', key: 'm', value: 'unused', tags: stale.tags, staleTtl: stale.staleTtl });
      expect((await w.call({ op: 'get', key: 'm' })).value).toBe('old'); // its L1
    }
    const runsBefore = a.stats().loaderRuns + (await Promise.all(workers.map((w) => w.stats()))).reduce((n, s) => n + s.loaderRuns, 0);

    await a.expireByTag('org:3');

    for (const w of workers) expect((await w.call({ op: 'get', key: 'm' })).value).toBeUndefined();
    const gate = deferred<void>();
    const loader = async () => (await gate.promise, 'a-new');
    // Every reader started before any is awaited: three in each worker, three here.
    const there = workers.flatMap((w) => [1, 2, 3].map(() => w.call({ op: 'compute', key: 'm', value: 'w-new', tags: stale.tags, staleTtl: stale.staleTtl, delayMs: 300 })));
    const here = [1, 2, 3].map(() => a.getOrCompute('m', loader, stale));
    expect(await Promise.all(here)).toEqual(['old', 'old', 'old']);
    const answers = (await Promise.all(there)).map((r) => r.value);
    expect(answers.every((v) => v === 'old' || v === 'w-new')).toBe(true);
    gate.resolve();
    await vi.waitFor(async () => expect(await a.get('m')).not.toBeUndefined(), { timeout: 10_000 });
    const value = await a.get('m');
    for (const w of workers) expect((await w.call({ op: 'get', key: 'm' })).value).toBe(value);
    const stats = await Promise.all(workers.map((w) => w.stats()));
    const runsAfter = a.stats().loaderRuns + stats.reduce((n, s) => n + s.loaderRuns, 0);
    expect(runsAfter - runsBefore).toBe(1);
    expect(a.stats().staleServed + stats.reduce((n, s) => n + s.staleServed, 0)).toBeGreaterThanOrEqual(3);
  });

  it('an entry whose staleTtl is 0 behaves as deleted: the next call loads, nothing is served stale', async () => {
    const [a, b] = pair();
    await ready(a, b);
    await a.getOrCompute('z', () => 'old', { ttl: 60_000, tags: ['org:3'] });
    expect(await b.get('z')).toBe('old');
    await a.expireByTag(['org:3']);
    let staleServed = 0;
    b.on('stale', () => staleServed++);
    expect(await b.get('z')).toBeUndefined();
    expect(await b.getOrCompute('z', () => 'new', { ttl: 60_000, tags: ['org:3'] })).toBe('new');
    expect(staleServed).toBe(0);
    expect(b.stats().tagInvalidations).toBeGreaterThanOrEqual(1);
  });

  it('a loader paused past it (granted before, writing after): its write lands but is never a fresh answer, in its own process or another', async () => {
    // Negative control: with the write's L1 copy kept (protocol/write.ts), a's own get answers the old value fresh.
    const [a, b] = pair();
    await ready(a, b);
    await a.set('seed', 's', stale); // the tag's record exists
    const held = await heldRebuild<string>(a, 'k', stale);
    await b.expireByTag('org:3');
    const written = writtenIn('k', a);
    held.open('paused-old');
    expect(await held.call).toBe('paused-old'); // its own caller started before the expireByTag
    await written;
    expect(await a.get('k')).toBeUndefined();
    // Another process: served stale (not fresh), and rebuilt once.
    const staleServed = nextEvent(b, 'stale');
    const rebuilt = writtenIn('k', a, b);
    expect(await b.getOrCompute('k', () => 'new', stale)).toBe('paused-old');
    expect((await staleServed).reason).toBe('window');
    await rebuilt;
    expect(await a.get('k')).toBe('new');
  });

  it('a set() made before it is stale after it; a set() after it is fresh', async () => {
    const [a, b] = pair();
    await ready(a, b);
    await a.set('s', 'before', stale);
    expect(await b.get('s')).toBe('before');
    await b.expireByTag('org:3');
    expect(await a.get('s')).toBeUndefined();
    expect(await b.getOrCompute('s', () => 'loaded', stale)).toBe('before'); // stale, one rebuild
    await a.set('s', 'after', stale);
    expect(await b.get('s')).toBe('after');
  });

  it("on a namespace: only its entries (and its nested namespaces'); bad tags are typed errors before any Redis traffic", async () => {
    const [a, b] = pair();
    await ready(a, b);
    const users = a.namespace('users');
    await users.set('1', 'u1', stale);
    await users.namespace('admins').set('1', 'a1', stale);
    await a.namespace('orders').set('1', 'o1', stale);
    await a.set('1', 'p1', stale);
    await users.expireByTag('org:3');
    expect(await b.namespace('users').get('1')).toBeUndefined();
    expect(await b.namespace('users').namespace('admins').get('1')).toBeUndefined();
    expect(await b.namespace('orders').get('1')).toBe('o1');
    expect(await b.get('1')).toBe('p1');
    expect(await b.namespace('users').getOrCompute('1', () => 'u2', stale)).toBe('u1'); // stale

    const client = (a as unknown as { rt: { options: { redis: Parameters<typeof countCommands>[0] } } }).rt.options.redis;
    const sent = countCommands(client);
    for (const tag of ['', 1, [], ['ok', ''], 'y'.repeat(257)]) await expect(a.expireByTag(tag as never)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'tag' });
    await expect(users.expireByTag('')).rejects.toBeInstanceOf(InvalidOptionError);
    expect(sent.count).toBe(0);
  });
});

// ---------------------------------------------------------------- the forked worker

const WORKER = fileURLToPath(new URL('../support/tags-worker.ts', import.meta.url));
const forked: ChildProcess[] = [];
afterAll(() => {
  for (const child of forked) child.kill('SIGKILL');
});

class TagsWorker {
  private next = 1;
  private readonly waiting = new Map<number, (m: Record<string, unknown>) => void>();
  private constructor(private readonly child: ChildProcess) {
    child.on('message', (m: Record<string, unknown>) => {
      const id = m.id as number | undefined;
      if (id !== undefined) this.waiting.get(id)?.(m);
    });
  }

  static async start(url: string, prefix: string): Promise<TagsWorker> {
    const child = fork(WORKER, [], { execArgv: ['--import', 'tsx'], env: { ...process.env, SG_REDIS_URL: url, SG_PREFIX: prefix }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    forked.push(child);
    await new Promise<void>((resolve, reject) => {
      child.once('message', () => resolve());
      child.once('exit', () => reject(new Error('tags worker exited')));
    });
    return new TagsWorker(child);
  }

  call(msg: { op: 'get'; key: string } | { op: 'compute'; key: string; value: unknown; tags?: string[]; staleTtl?: number; delayMs?: number }): Promise<Record<string, unknown>> {
    const id = this.next++;
    return new Promise((resolve) => {
      this.waiting.set(id, resolve);
      this.child.send({ ...msg, id });
    });
  }

  async stats(): Promise<CacheStats> {
    const id = this.next++;
    const m = await new Promise<Record<string, unknown>>((resolve) => {
      this.waiting.set(id, resolve);
      this.child.send({ op: 'stats', id });
    });
    return m.stats as CacheStats;
  }
}
