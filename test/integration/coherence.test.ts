/**
 * L1 coherence on real Redis (issue 8, item 3 (a)-(e), item 4). Every test here failed before the
 * coherence layer (tickets taken before reads, fills refused after an invalidation, L1 flushed and
 * suspended while the subscription is away, a subscription retried until it holds).
 */
import { once } from 'node:events';
import type { Socket } from 'node:net';
import { Redis, type RedisOptions } from 'ioredis';
import { createClient } from 'redis';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { createCache, type Cache, type CacheOptions, type RedisClient } from '../../src/index.js';
import { dropConnection, familyClient, type TestClient } from '../support/clients.js';
import { deferred, keysOf, nextEvent, subscribed, useRedis } from '../support/harness.js';
import { APP_COMMANDS } from '../support/acl.js';
import { startProxy, type Proxy } from '../support/proxy.js';
import { freePort, startRedisServer, type RedisServer } from '../support/redis-server.js';
import { portFor } from '../../src/client/detect.js';

const h = useRedis();
const prefixOf = (cache: Cache) => ((cache as unknown as { rt: unknown }).rt as { options: { prefix: string } }).options.prefix;
const L1 = { local: { max: 10_000 } } as const;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A second cache (another "process": its own client, its own subscriber) on the same prefix. */
function peer(of: Cache, options: Partial<CacheOptions> = {}): Cache {
  return h.cache({ prefix: prefixOf(of), ...options });
}

/** Resolves once `cache` dropped its L1 copy of `key` on another instance's note. */
function remoteChangeOf(cache: Cache, key: string): Promise<void> {
  return new Promise((resolve) => {
    const on = (e: { key: string }) => {
      if (e.key !== key) return;
      cache.off('remoteChange', on);
      resolve();
    };
    cache.on('remoteChange', on);
  });
}

/**
 * `writer.set`, then wait until `reader` handled its note: a late 's' note would drop `reader`'s L1
 * copy by itself and hide (or fake) what a test looks at.
 */
async function setAndHeard(writer: Cache, reader: Cache, key: string, value: unknown): Promise<void> {
  const heard = remoteChangeOf(reader, key);
  await writer.set(key, value, 60_000);
  await heard;
}

/**
 * A url for an ACL user of its own (the README's least-privilege commands), so that its one
 * connection can be told apart in CLIENT LIST in every run (CLIENT SETNAME is not among those commands).
 */
async function urlAsOwnUser(proxy: Proxy, user: string): Promise<string> {
  await h.admin.acl('SETUSER', user, 'on', '>pw', '~*', '&*', '-@all', ...APP_COMMANDS);
  const u = new URL(through(proxy));
  u.username = user;
  u.password = 'pw';
  return u.toString();
}

/** The `cmd=` of the server-side connection of ACL user `user` (CLIENT LIST): the last command it executed. */
async function lastCommandOf(user: string): Promise<string | undefined> {
  const list = (await h.admin.client('LIST')) as string;
  const line = list.split('\n').find((l) => l.includes(` user=${user} `));
  return line?.match(/ cmd=(\S+)/)?.[1];
}

/** Until the server executed a script on splitCache(name)'s command connection (its last command). */
async function readExecuted(name: string): Promise<void> {
  await until(async () => /^eval/.test((await lastCommandOf(`${name}${process.pid}`)) ?? ''));
}

/** Until `done()` holds, checking every 20 ms (bounded by the test's timeout: a hang is the failure). */
async function until(done: () => Promise<boolean>): Promise<void> {
  while (!(await done())) await sleep(20);
}

/** The harness's url (credentials included, in the ACL run) pointed at `proxy`. */
function through(proxy: Proxy): string {
  const u = new URL(h.url);
  u.hostname = '127.0.0.1';
  u.port = String(proxy.port);
  return u.toString();
}

const proxies: Proxy[] = [];
const servers: RedisServer[] = [];
const ownClients: Redis[] = [];
/** Caches made here with createCache (not h.cache()): closed before the clients under them. */
const ownCaches: Cache[] = [];
/** Disposals of the family clients made here (caches' command clients, node-redis subscribers). */
const familyDisposals: (() => void)[] = [];
// One hook, in order: caches, then their clients, then proxies and servers. (vitest runs afterAll
// hooks in reverse: useRedis()'s, registered first, runs after this one, on its own caches and clients.)
afterAll(async () => {
  await Promise.all(ownCaches.map((c) => c.close()));
  for (const c of ownClients) c.disconnect();
  for (const dispose of familyDisposals) dispose();
  await Promise.all([...proxies.map((p) => p.close()), ...servers.map((s) => s.stop())]);
});
function ownClient(url: string, options: RedisOptions = {}): Redis {
  const c = new Redis(url, options);
  c.on('error', () => undefined);
  ownClients.push(c);
  return c;
}
/** createCache, the cache closed in afterAll (close() is idempotent: a test may close it first). */
function ownCache(options: CacheOptions): Cache {
  const c = createCache(options);
  ownCaches.push(c);
  return c;
}

// The same tests with the server's invalidations in place of the notes (docs/tracking.md): under
// tracking the reads go on a connection of the cache's own, the notes of other processes drop no L1
// copy, and this process's own writes keep none. (coherence-tracking.test.ts has tracking's own.)
describe.each(['notes', 'tracking'] as const)('L1 coherence in one process (local.invalidation %s)', (invalidation) => {
  const L1 = { local: { max: 10_000, invalidation } } as const;
  it('(a) get racing delete: the read reply that lands after the delete does not refill L1 (0 of 200)', async () => {
    const a = h.cache(L1);
    const b = peer(a);
    expect(await a.ready()).toBe(true);
    let resurrected = 0;
    for (let i = 0; i < 200; i++) {
      const key = `a${i}`;
      await setAndHeard(b, a, key, `v${i}`); // a's L1 has no copy: the get below goes to the store
      // Both start before either is awaited: the read is sent first, the delete right after.
      await Promise.all([a.get(key), a.delete(key)]);
      if ((await a.get(key)) !== undefined) resurrected++;
    }
    expect(resurrected).toBe(0);
  });

  it('(c) a set() refused by the fence does not fill L1', async () => {
    const client = h.client();
    const a = ownCache({ redis: client, prefix: `coh-c${invalidation}${process.pid}`, ...L1 });
    const b = peer(a);
    expect(await a.ready()).toBe(true);
    // The grant for a's set comes back; before a writes, b's delete (a newer fence) lands and a has
    // heard b's note. A tiny hook on a real client: the commands and replies are Redis's own.
    let armed = true;
    const send = client.sendCommand.bind(client);
    client.sendCommand = ((...args: Parameters<Redis['sendCommand']>) => {
      const reply = send(...args) as Promise<unknown>;
      // ioredis names a script call 'eval' or 'evalsha' (it may rename it as it writes it).
      if (!armed || !args[0].name.startsWith('eval')) return reply;
      armed = false; // the first script after arming is set()'s acquire
      return reply.then(async (granted: unknown) => {
        const heard = remoteChangeOf(a, 'k');
        await b.delete('k');
        await heard;
        return granted;
      });
    });
    await a.set('k', 'mine', 60_000);
    expect(armed).toBe(false);
    expect(await b.get('k')).toBeUndefined(); // the store refused the write
    expect(await a.get('k')).toBeUndefined(); // and L1 did not keep it
  });

  // The fault campaign's "no superseded read" (seed 808): a process served, for over a second after its
  // own set() resolved, the value that set() replaced. A read sent while the set() was under way (after
  // its invalidation, so its ticket held) ran in Redis just before the set's write, and both replies
  // came in one chunk: the read's L1 fill ran a few promise steps after the write's, and won. Here the
  // two go out in one TCP write (the socket corked), so Redis runs them back to back and answers both
  // at once. Both kinds of read: the read script (no clock sample yet, as after every reconnection)
  // lost the race before the fix; a plain read happened to fill first.
  it.each([
    ['get(), the read script (no clock sample yet)', false, false],
    ['get(), a plain read (GETRANGE, the clock sampled)', true, false],
    ['getMany(), the read script', false, true],
    ['getMany(), a plain read', true, true],
  ])("(c) a read answered just before this process's own set() wrote (%s) does not put the replaced value back in L1", async (_, sampled, many) => {
    const client = h.client();
    const a = ownCache({ redis: client, prefix: `coh-cw${sampled ? 'p' : 's'}${many ? 'm' : 'g'}${invalidation}${process.pid}`, ...L1 });
    const b = peer(a);
    expect(await a.ready()).toBe(true);
    await b.set('k', 'old', 60_000);
    if (sampled) {
      await b.set('warm', 'w', 60_000);
      expect(await a.get('warm')).toBe('w'); // the read script, which samples the node's clock
    }
    const { value, fence } = keysOf(a, 'k');
    let read: Promise<unknown> | undefined;
    const send = client.sendCommand.bind(client);
    client.sendCommand = ((...args: Parameters<Redis['sendCommand']>) => {
      const names = args[0].args.map(String);
      // set()'s write: the only script naming both the value and the fence key (its acquire names the lock, fence and backoff keys).
      if (read !== undefined || !args[0].name.startsWith('eval') || !names.includes(value) || !names.includes(fence)) return send(...args);
      const socket = (client as unknown as { stream: Socket }).stream;
      socket.cork();
      read = many ? a.getMany(['k']).then(([v]) => v) : a.get('k'); // begun after set()'s invalidation: its ticket holds
      // The write goes into the corked socket after the read did: it waits a turn, so the read (issued
      // through the cache's async read path) is surely written first.
      return new Promise((resolve, reject) => {
        setImmediate(() => {
          (send(...args) as Promise<unknown>).then(resolve, reject);
          process.nextTick(() => socket.uncork());
        });
      });
    });
    await a.set('k', 'new', 60_000);
    // It ran before the write (under tracking it went on the reads connection, so it may also have run after).
    if (invalidation === 'notes') expect(await read).toBe('old');
    else expect(['old', 'new']).toContain(await read);
    expect(await b.get('k')).toBe('new');
    expect(await a.get('k')).toBe('new');
  });
});

/** The subscriber connection's own "closed" event: ioredis 'close'; node-redis 'reconnecting', or 'end' once destroyed. */
function closedOf(subscriber: unknown): Promise<unknown> {
  if (subscriber instanceof Redis) return once(subscriber, 'close');
  // node-redis: an EventEmitter too, which emits 'error' before 'reconnecting' (events.once would reject on it).
  const e = subscriber as { once(event: string, listener: () => void): unknown };
  return new Promise<void>((resolve) => {
    e.once('reconnecting', resolve);
    e.once('end', resolve);
  });
}

describe.each<'ioredis' | 'node-redis'>(['ioredis', 'node-redis'])('L1 coherence across processes (cache a on %s)', (family) => {
  /** a's command client, of the family under test. */
  function commandClient(url: string): RedisClient & TestClient {
    const { client, dispose } = familyClient(url, family);
    familyDisposals.push(dispose);
    return client;
  }
  /** a's subscriber, through `proxy`: ioredis's duplicate() connects itself; node-redis's is connected by the cache. */
  function subscriberClient(proxy: Proxy): unknown {
    // autoResubscribe off, as on the cache's own duplicate (client/ioredis.ts): ioredis's own
    // re-subscribe is not awaited, and a close before its reply is an unhandled rejection.
    if (family === 'ioredis') return ownClient(through(proxy), { maxRetriesPerRequest: 1, autoResubscribe: false });
    const c = createClient({ url: through(proxy) });
    familyDisposals.push(() => dropConnection(c)); // the cache destroys it on close(); this is for a cache that did not
    return c;
  }

  /**
   * A cache whose command connection goes through `commands` (or directly) and whose subscriber goes
   * through its own proxy, so each can be held on its own. Resolves once subscribed.
   */
  async function splitCache(name: string, commands?: Proxy) {
    name = `${name}-${family}`;
    const subscriberProxy = await startProxy({ host: '127.0.0.1', port: Number(new URL(h.url).port) });
    proxies.push(subscriberProxy);
    const client = commandClient(commands ? await urlAsOwnUser(commands, `${name}${process.pid}`) : h.url);
    let subscriber: unknown;
    (client as { duplicate: () => unknown }).duplicate = () => (subscriber = subscriberClient(subscriberProxy));
    const a = ownCache({ redis: client, prefix: `${name}${process.pid}`, ...L1 });
    const b = peer(a);
    expect(await a.ready()).toBe(true);
    await client.ping(); // a's command connection is ready: nothing of its handshake is held later
    /** Kills every subscriber connection; resolves once a's saw the close, with a unable to reconnect until `back()`. */
    const killSubscriber = async () => {
      subscriberProxy.hold('up', true); // a's reconnects reach the proxy and no further
      const closed = closedOf(subscriber);
      await h.admin.client('KILL', 'TYPE', 'pubsub');
      await closed;
      return { back: () => subscriberProxy.hold('up', false) };
    };
    return { a, b, client, killSubscriber, subscriberProxy, subscriber: () => subscriber };
  }

  it('(b) a note handled before a late read reply: the late reply does not refill L1', async () => {
    const commands = await startProxy({ host: '127.0.0.1', port: Number(new URL(h.url).port) });
    proxies.push(commands);
    const { a, b } = await splitCache('coh-b', commands); // only a's command replies are held below
    await setAndHeard(b, a, 'k', 'old');

    commands.hold('down', true);
    const read = a.get('k');
    // The read executed on the server (its reply is now held in the proxy) before the delete.
    await readExecuted(`coh-b-${family}`);
    const heard = remoteChangeOf(a, 'k');
    await b.delete('k');
    await heard;
    commands.hold('down', false);
    expect(await read).toBe('old'); // it was read before the delete: fine to return
    expect(await a.get('k')).toBeUndefined(); // but not to keep
  });

  it('(d) notes lost while the subscriber reconnects (CLIENT KILL TYPE pubsub): L1 is flushed, and coherent again once re-subscribed', async () => {
    const { a, b, killSubscriber } = await splitCache('coh-d');
    await setAndHeard(b, a, 'k', 'old');
    expect(await a.get('k')).toBe('old');
    const hit = nextEvent(a, 'hit');
    expect(await a.getOrCompute('k', () => 'loaded', 60_000)).toBe('old');
    expect(await hit).toEqual({ key: 'k', tier: 'local' }); // in a's L1

    const away = await killSubscriber();
    await b.delete('k'); // a is not subscribed: this note is lost for a
    expect(await a.get('k')).toBeUndefined(); // while away
    away.back();
    await until(async () => (await subscribed(a)) === true);
    expect(await a.get('k')).toBeUndefined(); // and once back

    // Re-subscribed: another process's change reaches a's L1 again.
    await setAndHeard(b, a, 'k', 'new');
    expect(await a.get('k')).toBe('new');
    const heard = remoteChangeOf(a, 'k');
    await b.delete('k');
    await heard;
    expect(await a.get('k')).toBeUndefined();
  });

  it('(d) a read begun while the subscriber was away, answered after it re-subscribed, does not fill L1 (the notes it may have missed are lost)', async () => {
    const commands = await startProxy({ host: '127.0.0.1', port: Number(new URL(h.url).port) });
    proxies.push(commands);
    const { a, b, killSubscriber } = await splitCache('coh-d2', commands);
    await setAndHeard(b, a, 'k', 'old');

    const away = await killSubscriber();
    commands.hold('down', true);
    const read = a.get('k');
    await readExecuted(`coh-d2-${family}`);
    await b.delete('k'); // lost for a
    away.back();
    await until(async () => (await subscribed(a)) === true);
    commands.hold('down', false);
    expect(await read).toBe('old');
    expect(await a.get('k')).toBeUndefined();
  });

  it('(d) bytes vanish, the socket stays open: the heartbeat declares it down, L1 is flushed, and it re-subscribes', async () => {
    // The default redisTimeout (1 s) is the heartbeat's period: a stall shorter than that flushes nothing before the fault.
    const { a, b, subscriberProxy, subscriber } = await splitCache('coh-f');
    await setAndHeard(b, a, 'k', 'old');
    expect(await a.get('k')).toBe('old'); // in a's L1
    const closed = closedOf(subscriber());
    subscriberProxy.blackhole('down', true);
    subscriberProxy.blackhole('up', true);
    await b.delete('k'); // the note vanishes on its way to a
    await closed; // no FIN, no RST: only the heartbeat can close it
    subscriberProxy.blackhole('down', false);
    subscriberProxy.blackhole('up', false);
    subscriberProxy.reset(); // the reconnect attempt made while blackholed is stuck in its handshake
    await until(async () => (await subscribed(a)) === true);
    expect(await a.get('k')).toBeUndefined();
  });
});

describe('the subscription when Redis is down at boot', () => {
  it.each([
    ['maxRetriesPerRequest: 1', { maxRetriesPerRequest: 1 }],
    ['enableOfflineQueue: false', { enableOfflineQueue: false }],
  ] as const)('(e) %s: the failed first SUBSCRIBE is retried; once Redis is up, another process\'s delete reaches this L1', async (_name, clientOptions) => {
    const port = await freePort();
    const refused = deferred<void>();
    const a = ownCache({ redis: ownClient(`redis://127.0.0.1:${port}`, clientOptions), prefix: `coh-e${port}`, redisTimeout: 500, ...L1 });
    a.on('degraded', (e) => {
      // A refused SUBSCRIBE (not a socket error, which carries an errno code).
      if (e.operation === 'subscribe' && (e.error as { code?: unknown }).code === undefined) refused.resolve();
    });
    await refused.promise;
    const server = await startRedisServer([], { port });
    servers.push(server);
    const b = ownCache({ redis: ownClient(server.url, { maxRetriesPerRequest: 1 }), prefix: `coh-e${port}` });
    await until(async () => (await subscribed(a)) === true);

    await setAndHeard(b, a, 'k', 'old');
    expect(await a.get('k')).toBe('old'); // now in a's L1
    const heard = remoteChangeOf(a, 'k');
    await b.delete('k');
    await heard;
    expect(await a.get('k')).toBeUndefined();
    await Promise.all([a.close(), b.close()]);
  }, 30_000);

  it('(e) the ioredis subscriber sends no SUBSCRIBE before ioredis is ready (its ready check, INFO, would then fail in subscriber mode)', async () => {
    const proxy = await startProxy({ host: '127.0.0.1', port: Number(new URL(h.url).port) });
    proxies.push(proxy);
    proxy.hold('down', true); // every reply held: ioredis connects, sends its ready check, and waits
    const client = ownClient(through(proxy), { enableOfflineQueue: false });
    const sub = portFor(client).subscriber();
    sub.on('error', () => undefined); // the ready check INFO fails while replies are held: expected here
    try {
      const duplicate = (sub as unknown as { sub: Redis }).sub;
      while (duplicate.status !== 'connect') await sleep(5);
      const asked: string[] = [];
      const send = duplicate.sendCommand.bind(duplicate);
      duplicate.sendCommand = ((command: { name: string }, ...rest: never[]) => (asked.push(command.name), send(command as never, ...rest)));
      const subscribed = sub.subscribe('ch', () => undefined);
      subscribed.catch(() => undefined);
      expect(asked).not.toContain('subscribe'); // ioredis is asked synchronously, if at all
      await expect(subscribed).rejects.toThrow();
    } finally {
      proxy.hold('down', false);
      sub.close();
    }
  });

  it('a SUBSCRIBE refused on a live connection (NOPERM on the channel) is retried until it holds, without a reconnect', async () => {
    const user = `nochan${process.pid}`;
    await h.admin.acl('SETUSER', user, 'on', '>pw', '~*', 'resetchannels', '+@all');
    const u = new URL(h.url);
    u.username = user;
    u.password = 'pw';
    const prefix = `coh-acl${process.pid}`;
    const client = ownClient(u.toString(), { maxRetriesPerRequest: 1 });
    let closes = 0;
    const duplicate = client.duplicate.bind(client);
    client.duplicate = ((...args: Parameters<Redis['duplicate']>) => duplicate(...args).on('close', () => closes++));
    const a = ownCache({ redis: client, prefix, ...L1 });
    const refused = deferred<void>();
    a.on('degraded', (e) => {
      if (e.operation === 'subscribe' && (e.error as { code?: unknown }).code === undefined) refused.resolve();
    });
    await refused.promise;
    expect(await a.ready()).toBe(false);
    await h.admin.acl('SETUSER', user, `&${prefix}:*`);
    await until(async () => (await subscribed(a)) === true);
    expect(closes).toBe(0);
    await a.close();
  });

  it('(e) a caller\'s ioredis client with lazyConnect and enableOfflineQueue: false: the subscriber (its duplicate, lazy too) connects and subscribes', async () => {
    const client = ownClient(h.url, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });
    await client.connect(); // the caller connects its own client
    const a = ownCache({ redis: client, prefix: `coh-lazy${process.pid}`, redisTimeout: 300 });
    await until(async () => (await subscribed(a)) === true);
    await a.close();
  });

  it('ready() settles (false) within redisTimeout when Redis is unreachable and the client has ioredis defaults', async () => {
    const port = await freePort();
    const a = ownCache({ redis: ownClient(`redis://127.0.0.1:${port}`), prefix: 'coh-unreachable', redisTimeout: 300 });
    const reported = nextEvent(a, 'degraded');
    expect(await a.ready()).toBe(false);
    expect((await reported).operation).toBe('subscribe');
    await a.close();
  });
});

describe('the subscriber port while its connection is down', () => {
  it('(g) a SUBSCRIBE sent while the pub/sub connection is lost (killed, reconnects refused) does not resolve as held (node-redis: the channel is already registered, so it sent nothing)', async () => {
    const port = portFor(h.cacheClient());
    const sub = port.subscriber();
    const t0 = Date.now();
    const events: string[] = [];
    const ready = () => new Promise<void>((resolve) => sub.on('ready', () => resolve()));
    let closes = 0;
    sub.on('ready', () => events.push(`ready@${Date.now() - t0}`));
    sub.on('close', () => (closes++, events.push(`close@${Date.now() - t0}`)));
    sub.on('error', () => undefined);
    try {
      const channel = `coh-g-${process.pid}`;
      const heard: string[] = [];
      const onMessage = (_ch: string, m: string) => heard.push(m);
      await until(async () => sub.subscribe(channel, onMessage).then(() => true, () => false));
      // Reconnects refused: maxclients lowered to the connections that stay, then the pub/sub ones killed.
      const [, before] = (await h.admin.config('GET', 'maxclients')) as [string, string];
      const list = String(await h.admin.client('LIST'));
      const all = list.split('\n').filter((l) => l.trim() !== '');
      const subscribers = all.filter((l) => / sub=[1-9]/.test(l)).length;
      const back = ready();
      try {
        await h.admin.config('SET', 'maxclients', String(all.length - subscribers));
        await h.admin.client('KILL', 'TYPE', 'pubsub');
        await until(async () => closes > 0);
        await sleep(100);
        const outcome = await Promise.race([
          sub.subscribe(channel, onMessage).then(() => 'resolved', () => 'rejected'),
          sleep(500).then(() => 'pending'),
        ]);
        expect(outcome, `subscriber events: ${events.join(' ')}`).not.toBe('resolved');
      } finally {
        await h.admin.config('SET', 'maxclients', before);
      }
      await back;
      // Back: a SUBSCRIBE holds again, and a message reaches it.
      await until(async () => sub.subscribe(channel, onMessage).then(() => true, () => false));
      await until(async () => (await h.admin.publish(channel, 'm')) > 0);
      await until(async () => heard.length > 0);
    } finally {
      sub.close();
    }
  });
});

describe('the subscriber port leaves no socket behind', () => {
  it('(h) close() while its connection is still connecting (at once, and right after a reconnect()): no socket is left open', async () => {
    const client = h.cacheClient();
    await client.ping();
    // Every connection the port opens (ioredis and node-redis: duplicate()), to look at each after close().
    const opened: { status?: string; isReady?: boolean }[] = [];
    const c = client as unknown as { duplicate: (...args: unknown[]) => { status?: string; isReady?: boolean } };
    const duplicate = c.duplicate.bind(client);
    c.duplicate = (...args: unknown[]) => {
      const d = duplicate(...args);
      opened.push(d);
      return d;
    };
    const port = portFor(client);
    for (let i = 0; i < 5; i++) {
      const sub = port.subscriber();
      sub.on('error', () => undefined);
      sub.close(); // its TCP connect is still pending
    }
    const again = port.subscriber();
    again.on('error', () => undefined);
    await new Promise<void>((resolve) => again.on('ready', () => resolve()));
    again.reconnect(); // a fresh connection, still connecting when closed
    again.close();
    // The harness's own disposal of a caller's client (familyClient) in the same window.
    for (let i = 0; i < 3; i++) {
      const made = familyClient(h.url);
      opened.push(made.client as unknown as { status?: string; isReady?: boolean });
      made.dispose();
    }
    // Time for a socket left open to finish connecting and show as ready (node-redis: isReady).
    await sleep(300);
    expect(opened.length).toBeGreaterThanOrEqual(9);
    // node-redis: isReady; ioredis: status ('end' once closed, which a loaded machine may take longer
    // to report): until every connection is closed; one left open stays ready, or never ends.
    await vi.waitFor(() => expect(opened.filter((d) => d.isReady === true || (d.status !== undefined && d.status !== 'end'))).toHaveLength(0), { timeout: 5000 });
  });
});

describe('the subscriber connection never leaves a promise unhandled', () => {
  it('(i) close() right after the subscriber reconnected, its re-subscribe unanswered: no unhandled rejection (the Bus alone subscribes; ioredis\'s own re-subscribe is off)', async () => {
    // The cache's client (and so its subscriber, a duplicate) goes through a proxy that can hold replies.
    const replies = await startProxy({ host: '127.0.0.1', port: Number(new URL(h.url).port) });
    proxies.push(replies);
    const { client, dispose } = familyClient(through(replies));
    familyDisposals.push(dispose);
    await client.ping();
    // Every duplicate (ioredis and node-redis: the subscriber), to act on its next 'ready'.
    const opened: { once(event: 'ready', listener: () => void): unknown }[] = [];
    const c = client as unknown as { duplicate: (...args: unknown[]) => (typeof opened)[number] };
    const duplicate = c.duplicate.bind(client);
    c.duplicate = (...args: unknown[]) => {
      const d = duplicate(...args);
      opened.push(d);
      return d;
    };
    const cache = ownCache({ redis: client, prefix: `coh-i${process.pid}` });
    expect(await cache.ready()).toBe(true);
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      // 'ready' is emitted on the tick after the client wrote what it sends on reconnecting (ioredis:
      // its own SUBSCRIBE, unawaited, when autoResubscribe is on). The proxy runs in this process, so
      // no byte of it has reached Redis yet: holding replies now leaves it unanswered when close() ends the connection.
      const closedOnReady = new Promise<void>((resolve) => {
        for (const d of opened) {
          d.once('ready', () => {
            replies.hold('down', true);
            resolve(cache.close());
          });
        }
      });
      await h.admin.client('KILL', 'TYPE', 'pubsub');
      await closedOnReady;
      await sleep(100); // an unhandled rejection is reported once its tick's microtasks are done
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
      replies.hold('down', false);
    }
  });
});
