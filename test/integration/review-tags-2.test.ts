/**
 * Review of the tag feature (docs/tags.md), second pass: each test states a property the docs promise.
 * Real redis-server (test/support/harness.ts); two caches on one prefix are two processes.
 */
import { describe, expect, it } from 'vitest';
import { createCache, InvalidOptionError, type Cache, type CacheOptions } from '../../src/index.js';
import { familyClient } from '../support/family.js';
import { countCommands, heldRebuild, prefixOf, subscribed, subscriptionDowns, useRedis } from '../support/harness.js';
import { startProxy } from '../support/proxy.js';
import { asAppUser } from '../support/redis-server.js';

const h = useRedis();
let prefixes = 0;
function pair(options: Partial<CacheOptions> = {}): [Cache, Cache] {
  const prefix = `rtags2${process.pid}x${++prefixes}`;
  return [h.cache({ prefix, local: { max: 100 }, ...options }), h.cache({ prefix, local: { max: 100 } })];
}
async function ready(...caches: Cache[]): Promise<void> {
  await Promise.all(caches.map((c) => c.ready()));
}
function clientOf(c: Cache): Parameters<typeof countCommands>[0] {
  return (c as unknown as { rt: { options: { redis: Parameters<typeof countCommands>[0] } } }).rt.options.redis;
}

describe('bad tags on every entry point', () => {
  it('namespaced set(), getOrCompute() and getOrComputeMany() with bad tags are InvalidOptionError before any Redis traffic (the generation is not read first)', async () => {
    const [a] = pair();
    await ready(a);
    const sent = countCommands(clientOf(a));
    const bad: unknown[] = ['org:3', [''], [1], ['x'.repeat(257)], Array.from({ length: 33 }, (_, i) => `t${i}`), ['\uD800']];
    let n = 0;
    for (const tags of bad) {
      // A namespace never used: its generation is not cached, so reading it would be traffic.
      const ns = a.namespace(`fresh${++n}`);
      await expect(ns.set('k', 'v', { ttl: 1000, tags } as never)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'tags' });
      await expect(ns.getOrCompute('k', () => 'v', { ttl: 1000, tags } as never)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'tags' });
      await expect(ns.getOrComputeMany(['k'], async () => new Map(), { ttl: 1000, tags } as never)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'tags' });
    }
    expect(sent.count).toBe(0);
    expect(InvalidOptionError).toBeDefined();
  });

  it('an empty batch with bad options (a bad tag, a bad ttl) is InvalidOptionError too, before any Redis traffic, on the cache and on a namespace', async () => {
    const [a] = pair();
    await ready(a);
    const sent = countCommands(clientOf(a));
    const load = async () => new Map<string, string>();
    const ns = a.namespace('never-used');
    for (const batch of [a, ns]) {
      await expect(batch.getOrComputeMany([], load, { ttl: 1000, tags: [''] })).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'tags' });
      await expect(batch.getOrComputeMany([], load, -1)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'ttl' });
      await expect(batch.getOrComputeMany([], 'not a function' as never, 1000)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'loadMany' });
      expect(await batch.getOrComputeMany([], load, { ttl: 1000, tags: ['ok'] })).toEqual([]);
    }
    expect(sent.count).toBe(0);
  });
});

describe('loader tags added to the call\'s', () => {
  it('a loader that names a tag its call already declared adds nothing: 32 distinct tags in all are fine (getOrCompute and a batch key), and the entry is invalidated by that tag', async () => {
    const [a, b] = pair();
    await ready(a, b);
    const most = Array.from({ length: 32 }, (_, i) => `d${i}`);
    expect(await a.getOrCompute('one', (ctx) => (ctx.setOptions({ tags: ['d0'] }), 'v1'), { ttl: 60_000, tags: most })).toBe('v1');
    expect(
      await a.getOrComputeMany(['many'], async (missing, ctx) => {
        for (const k of missing) ctx.setOptions(k, { tags: ['d31', 'd0'] });
        return new Map(missing.map((k) => [k, 'v2']));
      }, { ttl: 60_000, tags: most }),
    ).toEqual(['v2']);
    expect(await b.getMany(['one', 'many'])).toEqual(['v1', 'v2']);
    await b.deleteByTag('d0');
    expect(await a.getMany(['one', 'many'])).toEqual([undefined, undefined]);
  });
});

describe('tag notes lost with the subscription', () => {
  it("a deleteByTag whose note a process lost (its subscriber went silent): once that process noticed and resubscribed, a call that starts there does not join a tagged load granted before it", async () => {
    const { hostname, port } = new URL(h.url);
    const proxy = await startProxy({ host: hostname, port: Number(port) });
    const { client, dispose } = familyClient(asAppUser(proxy.url));
    const a = h.cache({ local: { max: 100 }, redisTimeout: 300 });
    const b = createCache({ redis: client, prefix: prefixOf(a), local: { max: 100 }, redisTimeout: 300 });
    try {
      await Promise.all([a.ready(), b.ready()]);
      const options = { ttl: 60_000, tags: ['t'], lock: 'local' as const };
      // b's loader is granted, then paused.
      const held = await heldRebuild<string>(b, 'k', options);
      // b's subscriber goes silently dead (its data connection keeps working): the note is lost.
      const clients = (await h.admin.client('LIST')) as string;
      const subs = clients.split('\n').filter((line) => / sub=1 /.test(line)).map((line) => Number(/ addr=[^ ]*:(\d+) /.exec(line)?.[1]));
      expect(subs.filter((p) => proxy.silence(p))).toHaveLength(1);
      const downs = subscriptionDowns(b);
      await a.deleteByTag('t'); // resolves after its acknowledgement wait: b never acknowledges
      // b notices (heartbeat) and subscribes again: past the "silently dead" exception.
      while (downs.count === 0) await new Promise((r) => setTimeout(r, 20));
      expect(await subscribed(b, 5000)).toBe(true);
      const after = b.getOrCompute('k', () => 'new', options);
      held.open('old');
      expect(await held.call).toBe('old'); // its own caller started before the deleteByTag
      expect(await after).toBe('new');
      expect(await b.get('k')).toBe('new');
    } finally {
      await b.close();
      dispose();
      await proxy.close();
    }
  });

  it('while its subscription is down (channels revoked: it cannot subscribe again), a call that starts after a deleteByTag does not join a tagged load begun before it', async () => {
    const user = `rvdown${process.pid}`;
    await h.admin.call('ACL', 'SETUSER', user, 'on', '>pw', '~*', '&*', '+@all');
    const u = new URL(h.url);
    u.username = user;
    u.password = 'pw';
    const { client, dispose } = familyClient(u.toString());
    const a = h.cache({ local: { max: 100 }, redisTimeout: 300 });
    const b = createCache({ redis: client, prefix: prefixOf(a), local: { max: 100 }, redisTimeout: 300 });
    b.on('degraded', () => undefined); // its writes publish notes: refused (NOPERM) from here on
    try {
      await Promise.all([a.ready(), b.ready()]);
      const downs = subscriptionDowns(b);
      // b loses its channels: Redis drops its subscriber, which cannot subscribe again.
      await h.admin.call('ACL', 'SETUSER', user, 'resetchannels');
      while (downs.count === 0) await new Promise((r) => setTimeout(r, 20));
      const options = { ttl: 60_000, tags: ['t'], lock: 'local' as const };
      const held = await heldRebuild<string>(b, 'k', options); // granted while b is down
      const coalesced = [b.getOrCompute('k', () => 'before', options)]; // joins it before the deleteByTag
      await a.deleteByTag('t'); // b is not a receiver: it resolves at once
      const after = [b.getOrCompute('k', () => 'new', options), b.getOrCompute('k', () => 'new', options)];
      held.open('old');
      expect(await held.call).toBe('old');
      // Started before the deleteByTag: either value (while down, a joiner cannot tell, so it runs its call again).
      expect(['old', 'before']).toContain((await Promise.all(coalesced))[0]);
      // Never the load granted before it ('before' is a load granted after it: the rerun of the call above).
      expect(await Promise.all(after)).not.toContain('old');
    } finally {
      await b.close();
      dispose();
      await h.admin.call('ACL', 'DELUSER', user);
    }
  });
});
