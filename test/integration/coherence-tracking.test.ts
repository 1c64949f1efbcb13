/**
 * L1 under server-assisted invalidation (`local: { invalidation: 'tracking' }`, docs/tracking.md), on a
 * real Redis, for every client family and major: the server's invalidation pushes drop another
 * process's change from L1 (no note does under tracking), and losing tracking (a killed listener
 * connection, a server restart) flushes L1 and tracking comes back. The L1 coherence tests of
 * coherence.test.ts also run in this mode there.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { createCache, type Cache, type CacheOptions } from '../../src/index.js';
import { familyClient, type ClientFamily } from '../support/clients.js';
import { keysOf, nextEvent, prefixOf, useRedis } from '../support/harness.js';
import { startProxy, type Proxy } from '../support/proxy.js';
import { startRedisServer, type RedisServer } from '../support/redis-server.js';
import { Redis } from 'ioredis';

const h = useRedis();
const TRACKED = { local: { max: 1000, invalidation: 'tracking' } } as const;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const caches: Cache[] = [];
const disposals: (() => void)[] = [];
const servers: RedisServer[] = [];
const admins: Redis[] = [];
const proxies: Proxy[] = [];
afterAll(async () => {
  await Promise.all(caches.map((c) => c.close()));
  for (const dispose of disposals) dispose();
  for (const a of admins) a.disconnect();
  await Promise.all([...proxies.map((p) => p.close()), ...servers.map((s) => s.stop())]);
});

/** A redis-server of the test's own (no other cache's connections on it), and an admin client. */
async function ownServer(): Promise<{ server: RedisServer; admin: Redis }> {
  const server = await startRedisServer();
  servers.push(server);
  const admin = new Redis(server.adminUrl, { maxRetriesPerRequest: 1 });
  admin.on('error', () => undefined);
  admins.push(admin);
  return { server, admin };
}

/** A cache on its own client of `family` (another "process"), closed in afterAll. */
function cacheOn(url: string, family: ClientFamily, options: Partial<CacheOptions>): Cache {
  const { client, dispose } = familyClient(url, family);
  disposals.push(dispose);
  const c = createCache({ redis: client, ...options });
  caches.push(c);
  return c;
}

/** Until `done()` holds, checking every 20 ms (bounded by the test's timeout: a hang is the failure). */
async function until(done: () => Promise<boolean>): Promise<void> {
  while (!(await done())) await sleep(20);
}

/** Resolves once `cache`'s tracking holds (within `ms`). */
const tracked = (cache: Cache, ms = 1000): Promise<boolean> =>
  ((cache as unknown as { rt: unknown }).rt as { tracking: { ready(ms: number): Promise<boolean> } }).tracking.ready(ms);

/** `cache.get(key)` answered from L1 (true) or from Redis (false). */
async function fromL1(cache: Cache, key: string): Promise<boolean> {
  const hit = nextEvent(cache, 'hit');
  const value = await cache.get(key);
  return value !== undefined && (await hit).tier === 'local';
}

/** Kills every connection some tracked connection redirects to (CLIENT LIST `redir=`): the listeners. */
async function killListeners(admin: Redis): Promise<number[]> {
  const list = (await admin.client('LIST')) as string;
  const ids = [...new Set([...list.matchAll(/ redir=(\d+) /g)].map((m) => Number(m[1])))];
  for (const id of ids) await admin.client('KILL', 'ID', String(id)).catch(() => undefined);
  return ids;
}

describe.each<ClientFamily>(['ioredis', 'ioredis6', 'node-redis', 'node-redis5'])('server-assisted L1 (cache a on %s)', (family) => {
  // With sharded notes (the payoff: a write no longer fans out to every process) a hears no note of k at all.
  it.each(['broadcast', 'sharded'] as const)("notes %s: another process's set() and delete(), and a plain DEL no note announces, drop a's L1 copy (the server's invalidation)", async (notes) => {
    const a = cacheOn(h.url, family, { prefix: `trk-r-${notes}-${family}${process.pid}`, notes, ...TRACKED });
    const b = h.cache({ prefix: prefixOf(a), notes, ...TRACKED });
    await until(() => a.ready()); // within the test's timeout: a loaded machine may take longer than one redisTimeout
    await b.set('k', 'old', 60_000);
    expect(await a.get('k')).toBe('old'); // read on a's tracked connection: in L1
    expect(await fromL1(a, 'k')).toBe(true);

    await b.set('k', 'new', 60_000);
    await until(async () => (await a.get('k')) === 'new');
    // Read again, tracked again (a read begun before the invalidation arrived does not fill: the next one does).
    await until(() => fromL1(a, 'k'));

    await b.delete('k');
    await until(async () => (await a.get('k')) === undefined);

    // No note at all: only the server knows the key changed.
    await b.set('k', 'again', 60_000);
    await until(async () => (await a.get('k')) === 'again');
    await until(() => fromL1(a, 'k'));
    await h.admin.del(keysOf(a, 'k').value);
    await until(async () => (await a.get('k')) === undefined);
  });

  it.each(['broadcast', 'sharded'] as const)("notes %s: another process's deleteByTag drops a's tagged L1 copy (tag notes still reach L1)", async (notes) => {
    const a = cacheOn(h.url, family, { prefix: `trk-t-${notes}-${family}${process.pid}`, notes, ...TRACKED });
    const b = h.cache({ prefix: prefixOf(a), notes, ...TRACKED });
    await until(() => a.ready()); // within the test's timeout: a loaded machine may take longer than one redisTimeout
    await b.set('k', 'tagged', { ttl: 60_000, tags: ['t'] });
    expect(await a.get('k')).toBe('tagged');
    await until(() => fromL1(a, 'k'));
    await b.deleteByTag('t'); // resolves once every subscribed process acknowledged its note
    expect(await a.get('k')).toBeUndefined();
  });

  it('a killed listener connection (CLIENT KILL): L1 is flushed, tracking is re-established and drops copies again', async () => {
    const a = cacheOn(h.url, family, { prefix: `trk-k-${family}${process.pid}`, ...TRACKED });
    const b = h.cache({ prefix: prefixOf(a), ...TRACKED });
    await until(() => a.ready()); // within the test's timeout: a loaded machine may take longer than one redisTimeout
    await b.set('k', 'old', 60_000);
    expect(await a.get('k')).toBe('old');
    expect(await fromL1(a, 'k')).toBe(true);

    const down = nextEvent(a, 'degraded'); // tracking retried while the listener is away, or a connection error
    expect((await killListeners(h.admin)).length).toBeGreaterThan(0);
    await Promise.race([down, sleep(50)]);
    await until(async () => !(await fromL1(a, 'k'))); // flushed once a saw the close
    expect(await tracked(a, 5000)).toBe(true);
    // A read now is tracked with the new listener: another process's change reaches a's L1 again.
    expect(await a.get('k')).toBe('old');
    await until(() => fromL1(a, 'k'));
    await b.set('k', 'new', 60_000);
    await until(async () => (await a.get('k')) === 'new');
  });

  it('a server restart: tracking comes back on both connections, and copies read afterwards are dropped by the new server', async () => {
    const { server } = await ownServer();
    const prefix = `trk-s-${family}${process.pid}`;
    const a = cacheOn(server.url, family, { prefix, ...TRACKED });
    const b = cacheOn(server.url, 'ioredis', { prefix, ...TRACKED });
    await until(() => a.ready()); // within the test's timeout: a loaded machine may take longer than one redisTimeout
    await b.set('k', 'old', 60_000);
    expect(await a.get('k')).toBe('old');
    expect(await fromL1(a, 'k')).toBe(true);

    await server.kill(); // the data is gone with it (no persistence)
    await server.restart();
    await until(async () => tracked(a, 200));
    await until(async () => (await b.set('k', 'new', 60_000).then(() => true, () => false)));
    expect(await a.get('k')).toBe('new'); // L1 was flushed
    await until(() => fromL1(a, 'k'));
    await b.delete('k');
    await until(async () => (await a.get('k')) === undefined);
  });
});

describe('invalidations the server sends on its own', () => {
  it('FLUSHALL (an invalidation with no key list) drops every L1 copy', async () => {
    const { server, admin } = await ownServer();
    const a = cacheOn(server.url, 'ioredis', { prefix: `trk-f${process.pid}`, ...TRACKED });
    const b = cacheOn(server.url, 'ioredis', { prefix: prefixOf(a) });
    await until(() => a.ready()); // within the test's timeout: a loaded machine may take longer than one redisTimeout
    for (const key of ['k1', 'k2']) {
      await b.set(key, 'old', 60_000);
      await until(() => fromL1(a, key));
    }
    await admin.flushall();
    await until(async () => (await a.get('k1')) === undefined && (await a.get('k2')) === undefined);
  });

  it('the tracking table overflowing (tracking-table-max-keys 1): the server evicts a tracked key by invalidating it, and no copy outlives a change', async () => {
    const { server, admin } = await ownServer();
    await admin.config('SET', 'tracking-table-max-keys', '1');
    const a = cacheOn(server.url, 'ioredis', { prefix: `trk-m${process.pid}`, ...TRACKED });
    const b = cacheOn(server.url, 'ioredis', { prefix: prefixOf(a) });
    await until(() => a.ready());
    const local = (a as unknown as { rt: { local: { get(key: string): unknown } } }).rt.local;
    await b.set('first', 'old', 60_000);
    await b.set('second', 'old', 60_000);
    await until(() => fromL1(a, 'first'));
    await until(() => fromL1(a, 'second')); // two keys tracked, one allowed: the server evicts one (at random)
    await until(async () => local.get('first') === undefined || local.get('second') === undefined); // its copy went with it
    await b.set('first', 'new', 60_000);
    await b.set('second', 'new', 60_000);
    await until(async () => (await a.get('first')) === 'new' && (await a.get('second')) === 'new');
  });
});

describe('a silently dead listener socket', () => {
  it('bytes vanish, the socket stays open: the heartbeat drops the listener, L1 is flushed, and tracking comes back', async () => {
    const { server } = await ownServer();
    // a's listener (ioredis: its duplicate with protocol 2) goes through a proxy that can swallow bytes.
    const proxy = await startProxy({ host: server.host, port: server.port });
    proxies.push(proxy);
    const { client, dispose } = familyClient(server.url, 'ioredis');
    disposals.push(dispose);
    const duplicate = (client as unknown as { duplicate(o?: object): unknown }).duplicate.bind(client);
    (client as unknown as { duplicate(o?: object): unknown }).duplicate = (o?: { protocol?: number }) =>
      duplicate(o?.protocol === 2 ? { ...o, host: '127.0.0.1', port: proxy.port } : o);
    const prefix = `trk-h${process.pid}`;
    const a = createCache({ redis: client, prefix, redisTimeout: 300, ...TRACKED });
    caches.push(a);
    const b = cacheOn(server.url, 'ioredis', { prefix });
    await until(() => a.ready()); // within the test's timeout: a loaded machine may take longer than one redisTimeout
    await b.set('k', 'old', 60_000);
    await until(() => fromL1(a, 'k'));

    proxy.blackhole('down', true);
    proxy.blackhole('up', true);
    await b.delete('k'); // its invalidation vanishes on its way to a
    await until(async () => (await a.get('k')) === undefined); // only the heartbeat's verdict ends a's copy
    proxy.blackhole('down', false);
    proxy.blackhole('up', false);
    proxy.reset(); // a reconnect attempt made while blackholed is stuck in its handshake
    expect(await tracked(a, 5000)).toBe(true);
    await b.set('k', 'new', 60_000);
    await until(() => fromL1(a, 'k'));
    await b.delete('k');
    await until(async () => (await a.get('k')) === undefined);
  });
});

describe('an invalidation that overtakes a read reply', () => {
  it("the server's invalidation handled before a late read reply: the late reply does not fill L1 (the read's ticket)", async () => {
    const { server, admin } = await ownServer();
    // a's reads connection (ioredis: its duplicate({}), the one without overrides) goes through a proxy
    // that can hold Redis's replies; its other connections go straight to the server.
    const proxy = await startProxy({ host: server.host, port: server.port });
    proxies.push(proxy);
    const { client, dispose } = familyClient(server.url, 'ioredis');
    disposals.push(dispose);
    const duplicate = (client as unknown as { duplicate(o?: object): unknown }).duplicate.bind(client);
    (client as unknown as { duplicate(o?: object): unknown }).duplicate = (o?: object) =>
      duplicate(o !== undefined && Object.keys(o).length === 0 ? { host: '127.0.0.1', port: proxy.port } : o);
    const prefix = `trk-o${process.pid}`;
    const a = createCache({ redis: client, prefix, ...TRACKED });
    caches.push(a);
    const b = cacheOn(server.url, 'ioredis', { prefix });
    await until(() => a.ready()); // within the test's timeout: a loaded machine may take longer than one redisTimeout
    await b.set('k', 'old', 60_000);
    await b.set('marker', 'm', 60_000);
    await until(() => fromL1(a, 'marker')); // tracked: its invalidation comes after k's below
    const local = (a as unknown as { rt: { local: { get(key: string): unknown } } }).rt.local;

    /** How many reads (GETRANGE, the read script) the server ran: only a reads on this server meanwhile. */
    const reads = async () => [...(await admin.info('commandstats')).matchAll(/^cmdstat_(?:getrange|evalsha|eval):calls=(\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0);
    const before = await reads();
    proxy.hold('down', true);
    const read = a.get('k');
    // The read ran on the server (its reply now held in the proxy), so k is tracked for a.
    await until(async () => (await reads()) > before);
    await b.delete('k');
    await b.delete('marker');
    await until(async () => local.get('marker') === undefined); // a handled both invalidations, k's first
    expect(await Promise.race([read.then(() => 'answered'), sleep(0).then(() => 'held')])).toBe('held'); // the reply is still in the proxy
    proxy.hold('down', false);
    expect(await read).toBe('old'); // read before the delete: fine to return
    expect(await a.get('k')).toBeUndefined(); // but not to keep
  });
});
