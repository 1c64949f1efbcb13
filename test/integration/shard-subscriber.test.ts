/**
 * RedisPort.shardSubscriber() (ShardSubscriberPort) on real redis-servers, for both majors of the
 * family under test (SG_TEST_CLIENT: ioredis 5 and 6 in the first pass, node-redis 6 and 5 in
 * the second): standalone, a server without sharded pub/sub (SSUBSCRIBE and SPUBLISH renamed away), a
 * killed subscriber connection, a 3-master Cluster, and close() while Redis is down.
 * No wall-clock waits for "not delivered": a later message on a channel still held, sent on the same
 * connection, arrives after it would have.
 */
import { Cluster, Redis } from 'ioredis';
import { Cluster as Cluster6, Redis as Redis6 } from 'ioredis6';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { portFor } from '../../src/client/detect.js';
import { InvalidOptionError } from '../../src/errors.js';
import type { ShardSubscriberPort } from '../../src/client/port.js';
import { slotOf } from '../../src/client/slot.js';
import type { RedisClient } from '../../src/index.js';
import { familyClient, TEST_CLIENT, type ClientFamily } from '../support/clients.js';
import { nodeRedisClusterClient } from '../support/harness.js';
import { ACL_USER, AS_ACL_USER, startRedisCluster, startRedisServer, type RedisClusterHandle, type RedisServer } from '../support/redis-server.js';

/** Both majors of the family under test. */
const FAMILIES: readonly ClientFamily[] = TEST_CLIENT === 'ioredis' || TEST_CLIENT === 'ioredis6' ? ['ioredis', 'ioredis6'] : ['node-redis', 'node-redis5'];
/** ioredis-only behaviours (keyPrefix, the Cluster's sharded subscriber group): run in every pass. */
const IOREDIS: readonly ('ioredis' | 'ioredis6')[] = ['ioredis', 'ioredis6'];

const disposals: (() => void)[] = [];
const servers: RedisServer[] = [];
afterAll(async () => {
  for (const dispose of disposals.splice(0).reverse()) dispose();
  await Promise.all(servers.map((s) => s.stop()));
});

/** An ioredis connection as the default user, for the test's own commands (SPUBLISH, CLIENT KILL, PUBSUB). */
function admin(host: string, port: number): Redis {
  const r = new Redis({ host, port, maxRetriesPerRequest: 1 });
  r.on('error', () => undefined);
  disposals.push(() => r.disconnect());
  return r;
}

/** The ids of the connections in pub/sub mode on the server `r` is connected to. */
async function pubsubIds(r: Redis): Promise<string[]> {
  const list = (await r.call('CLIENT', 'LIST', 'TYPE', 'pubsub')) as string;
  return [...list.matchAll(/(?:^|\n)id=(\d+)/g)].map((m) => m[1] as string);
}

/** Resolves once `done()` holds (polled; a state the server reaches on its own, not a non-event). */
async function eventually(done: () => Promise<boolean>, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** What a port delivered and reported, with a way to wait for a message or a loss report. */
function watch(port: ShardSubscriberPort) {
  const messages: [string, string][] = [];
  let waiters: (() => void)[] = [];
  let lost = 0;
  const wake = () => {
    const w = waiters;
    waiters = [];
    for (const f of w) f();
  };
  port.onMessage((channel, message) => {
    messages.push([channel, message]);
    wake();
  });
  port.onLost(() => {
    lost++;
    wake();
  });
  const until = async (done: () => boolean, what: string, ms = 10_000): Promise<void> => {
    const deadline = Date.now() + ms;
    while (!done()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      // Woken by a message or a loss report; the timer only bounds a wait that nothing ends.
      await new Promise<void>((resolve) => {
        waiters.push(resolve);
        setTimeout(resolve, 100).unref();
      });
    }
  };
  return {
    messages,
    get lost() {
      return lost;
    },
    got: (channel: string, message: string) => messages.some(([c, m]) => c === channel && m === message),
    /** Resolves once (channel, message) was delivered. */
    message: (channel: string, message: string) => until(() => messages.some(([c, m]) => c === channel && m === message), `${message} on ${channel}`),
    /** Resolves once the port reported more than `count` losses. */
    lostAfter: (count: number) => until(() => lost > count, 'a loss report'),
    /**
     * subscribe(channel) until it resolves: after a loss the client may refuse until it is connected
     * again (the port's next loss report says when; the caller retries then).
     */
    resubscribe: async (channel: string) => {
      const deadline = Date.now() + 20_000;
      for (;;) {
        try {
          await port.subscribe(channel);
          return;
        } catch (err) {
          if (Date.now() > deadline) throw err;
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    },
  };
}

/** A standalone client of `kind` on `server`, disposed in afterAll. */
function standalone(server: RedisServer, kind: ClientFamily): RedisClient {
  const { client, dispose } = familyClient(server.url, kind);
  disposals.push(dispose);
  return client;
}

/** A port disposed in afterAll (close() is idempotent: a test may close it first). */
function shardPort(client: RedisClient): ShardSubscriberPort {
  const port = portFor(client).shardSubscriber();
  disposals.push(() => port.close());
  return port;
}

describe.each(FAMILIES)('ShardSubscriberPort, standalone, %s', (kind) => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedisServer();
    servers.push(server);
  });

  it('subscribe resolves once the server holds the channel; SPUBLISH reaches onMessage; after unsubscribe it does not', async () => {
    const port = shardPort(standalone(server, kind));
    const seen = watch(port);
    const pub = admin(server.host, server.port);
    const [a, b] = [`${kind}:s1:a`, `${kind}:s1:b`];
    await port.subscribe(a);
    await port.subscribe(b);
    // Resolved means confirmed: the server counts the subscription now.
    expect(await pub.call('PUBSUB', 'SHARDNUMSUB', a, b)).toEqual([a, 1, b, 1]);
    expect(await pub.call('SPUBLISH', a, 'm1')).toBe(1);
    await seen.message(a, 'm1');
    await port.unsubscribe(a);
    expect(await pub.call('SPUBLISH', a, 'm2')).toBe(0);
    expect(await pub.call('SPUBLISH', b, 'm3')).toBe(1);
    await seen.message(b, 'm3'); // m2 would have come before m3, on the same connection
    expect(seen.got(a, 'm2')).toBe(false);
    expect(seen.messages).toEqual([[a, 'm1'], [b, 'm3']]);
  });

  it('a killed subscriber connection is reported lost; subscribed again, messages flow', async () => {
    const port = shardPort(standalone(server, kind));
    const seen = watch(port);
    const pub = admin(server.host, server.port);
    const ch = `${kind}:s2:a`;
    await port.subscribe(ch);
    expect(await pub.call('SPUBLISH', ch, 'before')).toBe(1);
    await seen.message(ch, 'before');
    const lostBefore = seen.lost;
    // Only our duplicate is in pub/sub mode on this server now.
    expect(await pub.call('CLIENT', 'KILL', 'TYPE', 'pubsub')).toBeGreaterThanOrEqual(1);
    await seen.lostAfter(lostBefore);
    await seen.resubscribe(ch);
    expect(await pub.call('SPUBLISH', ch, 'after')).toBe(1);
    await seen.message(ch, 'after');
  });

  it('reconnect() drops the connection and reports the loss; subscribed again, messages flow; after close() it does nothing', async () => {
    const pub = admin(server.host, server.port);
    // Other tests' ports on this server are in pub/sub mode too: ours is the one that appears.
    const others = await pubsubIds(pub);
    const port = shardPort(standalone(server, kind));
    const seen = watch(port);
    const ch = `${kind}:s4:a`;
    await port.subscribe(ch);
    expect(await pub.call('SPUBLISH', ch, 'before')).toBe(1);
    await seen.message(ch, 'before');
    const [old, ...more] = (await pubsubIds(pub)).filter((id) => !others.includes(id));
    expect(old).toBeDefined();
    expect(more).toEqual([]);
    const lostBefore = seen.lost;
    port.reconnect();
    port.reconnect(); // twice at once: fine
    await seen.lostAfter(lostBefore);
    await seen.resubscribe(ch);
    // The connection that held the channel is gone (the server sees it close), a new one holds it.
    await eventually(async () => !(await pubsubIds(pub)).includes(old as string), 'the old connection to close');
    expect(await pub.call('PUBSUB', 'SHARDNUMSUB', ch)).toEqual([ch, 1]);
    expect(await pub.call('SPUBLISH', ch, 'after')).toBe(1);
    await seen.message(ch, 'after');
    port.close();
    const lostAtClose = seen.lost;
    expect(() => port.reconnect()).not.toThrow();
    await expect(port.subscribe(ch)).rejects.toThrow();
    expect(seen.lost).toBe(lostAtClose);
  });

  it('close() with a subscribe in flight and Redis stopped: every promise settles, no unhandled rejection', async () => {
    const own = await startRedisServer();
    servers.push(own);
    const port = shardPort(standalone(own, kind));
    const seen = watch(port);
    await port.subscribe(`${kind}:s3:a`);
    // In flight on a live connection, then closed at once.
    const inFlight = port.subscribe(`${kind}:s3:b`).then(() => 'resolved', () => 'rejected');
    port.close();
    port.close(); // idempotent
    expect(['resolved', 'rejected']).toContain(await inFlight);
    // A second port: Redis stopped while subscribed, a subscribe and an unsubscribe sent meanwhile.
    const down = shardPort(standalone(own, kind));
    watch(down);
    await down.subscribe(`${kind}:s3:c`);
    await own.kill();
    const sent = down.subscribe(`${kind}:s3:d`).then(() => 'resolved', () => 'rejected');
    const unsubscribed = down.unsubscribe(`${kind}:s3:c`);
    await new Promise((r) => setTimeout(r, 100)); // the client notices: reconnecting, refused
    down.close();
    expect(await sent).toBe('rejected');
    await expect(unsubscribed).resolves.toBeUndefined();
    expect(await down.unsubscribe(`${kind}:s3:c`)).toBeUndefined(); // after close: resolves too
    await expect(down.subscribe(`${kind}:s3:e`)).rejects.toThrow();
    // Late rejections inside the clients (their reconnect attempts, flushed queues) would surface here.
    await new Promise((r) => setTimeout(r, 300));
    expect(seen.messages).toEqual([]);
  });
});

describe.each(IOREDIS)('ShardSubscriberPort, standalone, %s client with keyPrefix', (kind) => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedisServer();
    servers.push(server);
  });

  it('a channel is subscribed as given, without the client\'s keyPrefix: SPUBLISH on it (as the scripts send it) is delivered', async () => {
    const options = { keyPrefix: 'app:', maxRetriesPerRequest: 1 };
    const client = kind === 'ioredis' ? new Redis(server.url, options) : new Redis6(server.url, options);
    client.on('error', () => undefined);
    disposals.push(() => client.disconnect());
    const port = shardPort(client);
    const seen = watch(port);
    const pub = admin(server.host, server.port);
    const ch = `${kind}:kp:a`;
    await port.subscribe(ch);
    expect(await pub.call('PUBSUB', 'SHARDNUMSUB', ch, `app:${ch}`)).toEqual([ch, 1, `app:${ch}`, 0]);
    expect(await pub.call('SPUBLISH', ch, 'm1')).toBe(1);
    await seen.message(ch, 'm1');
    await port.unsubscribe(ch);
    expect(await pub.call('PUBSUB', 'SHARDNUMSUB', ch)).toEqual([ch, 0]);
  });
});

describe.each(FAMILIES)('ShardSubscriberPort, server without sharded pub/sub, %s', (kind) => {
  let server: RedisServer;
  beforeAll(async () => {
    // As Redis 6: SSUBSCRIBE answers "unknown command" (and SPUBLISH too: the scripts PUBLISH there).
    server = await startRedisServer(['--rename-command', 'SSUBSCRIBE', '', '--rename-command', 'SPUBLISH', '']);
    servers.push(server);
  });

  it('subscribe falls back to SUBSCRIBE (for every later channel too); PUBLISH is delivered; unsubscribe works', async () => {
    const port = shardPort(standalone(server, kind));
    const seen = watch(port);
    const pub = admin(server.host, server.port);
    await expect(pub.call('SPUBLISH', 'x', 'y')).rejects.toThrow(/unknown command/i);
    const [a, b] = [`${kind}:f:a`, `${kind}:f:b`];
    await port.subscribe(a);
    await port.subscribe(b);
    expect(await pub.call('PUBSUB', 'NUMSUB', a, b)).toEqual([a, 1, b, 1]);
    expect(await pub.publish(a, 'm1')).toBe(1);
    await seen.message(a, 'm1');
    await port.unsubscribe(a);
    expect(await pub.publish(a, 'm2')).toBe(0);
    expect(await pub.publish(b, 'm3')).toBe(1);
    await seen.message(b, 'm3');
    expect(seen.messages).toEqual([[a, 'm1'], [b, 'm3']]);
  });
});

/** The cache's Cluster client of `kind`, connected as a caller would (as the ACL user in ACL mode). */
async function clusterClient(cluster: RedisClusterHandle, kind: ClientFamily, keyPrefix?: { readonly keyPrefix: string; readonly in: 'cluster' | 'redisOptions' }): Promise<RedisClient> {
  if (kind === 'node-redis' || kind === 'node-redis5') return nodeRedisClusterClient(cluster, disposals, kind === 'node-redis' ? 6 : 5);
  const prefix = (where: 'cluster' | 'redisOptions') => (keyPrefix?.in === where ? { keyPrefix: keyPrefix.keyPrefix } : {});
  const options = { ...prefix('cluster'), redisOptions: { maxRetriesPerRequest: 1, ...(AS_ACL_USER ? ACL_USER : {}), ...prefix('redisOptions') } };
  const c = kind === 'ioredis' ? new Cluster(cluster.startup, options) : new Cluster6(cluster.startup, options);
  c.on('error', () => undefined);
  disposals.push(() => c.disconnect());
  if (c.status !== 'ready') await new Promise<void>((resolve) => c.once('ready', () => resolve()));
  return c;
}

describe('ShardSubscriberPort on a Cluster (3 masters)', () => {
  let cluster: RedisClusterHandle;
  /** "host:port" of each master → one channel whose slot it owns (hash tags, spread over the masters). */
  let channelOf: Map<string, string>;
  beforeAll(async () => {
    cluster = await startRedisCluster(3);
    const n = cluster.nodes[0] as RedisServer;
    const ranges = await admin(n.host, n.port).cluster('SLOTS');
    const ownerOf = (slot: number) => {
      const range = ranges.find(([from, to]) => slot >= from && slot <= to);
      return `${String(range?.[2]?.[0])}:${String(range?.[2]?.[1])}`;
    };
    channelOf = new Map();
    for (let i = 0; channelOf.size < 3; i++) {
      const channel = `x:{t${i}}:n:k`;
      const owner = ownerOf(slotOf(channel));
      if (!channelOf.has(owner)) channelOf.set(owner, channel);
    }
  });
  afterAll(async () => {
    for (const dispose of disposals.splice(0).reverse()) dispose();
    await cluster.stop();
  });

  /** An admin connection to the master `owner` ("host:port"). */
  const to = (owner: string): Redis => {
    const [host, port] = owner.split(':');
    return admin(host as string, Number(port));
  };

  it.each(FAMILIES)('%s: a channel per master, each subscribed at its master; SPUBLISH there delivers; a classic subscriber on another master hears nothing of it', async (kind) => {
    const port = shardPort(await clusterClient(cluster, kind));
    const seen = watch(port);
    const channels = [...channelOf].map(([owner, ch]) => [owner, `${kind}:${ch}`] as const);
    for (const [, ch] of channels) await port.subscribe(ch);
    for (const [owner, ch] of channels) {
      // The subscription is on the owning master (SPUBLISH counts the receivers of that node only).
      expect(await to(owner).call('SPUBLISH', ch, `m:${ch}`)).toBe(1);
      await seen.message(ch, `m:${ch}`);
    }
    // Shard-local: a classic SUBSCRIBE on another master never gets the sharded message; it gets the
    // classic PUBLISH sent right after it (the Cluster bus forwards that one), so the sharded one would
    // have come first.
    const [[owner, ch], [otherOwner]] = channels as unknown as [readonly [string, string], readonly [string, string]];
    const classic = to(otherOwner);
    const heard: string[] = [];
    classic.on('message', (_c: string, m: string) => heard.push(m));
    await classic.subscribe(ch);
    expect(await to(owner).call('SPUBLISH', ch, 'sharded')).toBe(1);
    await to(owner).publish(ch, 'classic');
    for (let i = 0; !heard.includes('classic'); i++) {
      if (i > 200) throw new Error('the classic PUBLISH never reached the other master');
      await new Promise((r) => setTimeout(r, 25));
    }
    expect(heard).toEqual(['classic']);
    await seen.message(ch, 'sharded');
    expect(seen.got(ch, 'classic')).toBe(false); // and our sharded port gets no classic message
    await classic.unsubscribe(ch);
  });

  it.each(FAMILIES)('%s: a master killing the sharded connection is reported lost; subscribed again, messages flow', async (kind) => {
    const port = shardPort(await clusterClient(cluster, kind));
    const seen = watch(port);
    const [owner, base] = [...channelOf][1] as [string, string];
    const ch = `${kind}:lost:${base}`;
    await port.subscribe(ch);
    expect(await to(owner).call('SPUBLISH', ch, 'before')).toBe(1);
    await seen.message(ch, 'before');
    const lostBefore = seen.lost;
    expect(await to(owner).call('CLIENT', 'KILL', 'TYPE', 'pubsub')).toBeGreaterThanOrEqual(1);
    await seen.lostAfter(lostBefore);
    // Until the client has a new connection to the master, the SSUBSCRIBE may be refused, or be
    // answered by a connection that is being replaced: subscribe until a message goes through.
    for (let i = 0; ; i++) {
      await seen.resubscribe(ch);
      if ((await to(owner).call('SPUBLISH', ch, `after${i}`)) === 1) {
        await seen.message(ch, `after${i}`);
        break;
      }
      if (i > 100) throw new Error('never subscribed again');
      await new Promise((r) => setTimeout(r, 50));
    }
  });
  it.each(FAMILIES)('%s: reconnect() drops the connections and reports the loss; subscribed again, each master delivers', async (kind) => {
    const channels = [...channelOf].map(([owner, ch]) => [owner, `${kind}:rc:${ch}`] as const);
    // Other tests' ports are in pub/sub mode on the masters too: ours are the ones that appear.
    const others = await Promise.all(channels.map(([owner]) => pubsubIds(to(owner))));
    const port = shardPort(await clusterClient(cluster, kind));
    const seen = watch(port);
    for (const [, ch] of channels) await port.subscribe(ch);
    for (const [owner, ch] of channels) {
      expect(await to(owner).call('SPUBLISH', ch, `before:${ch}`)).toBe(1);
      await seen.message(ch, `before:${ch}`);
    }
    const olds = await Promise.all(
      channels.map(async ([owner], i) => [owner, (await pubsubIds(to(owner))).filter((id) => !others[i]?.includes(id))] as const),
    );
    for (const [, ids] of olds) expect(ids).toHaveLength(1);
    const lostBefore = seen.lost;
    port.reconnect();
    port.reconnect(); // twice at once: fine
    await seen.lostAfter(lostBefore);
    // The connections that held the channels close (each master sees it).
    for (const [owner, ids] of olds) {
      const admin = to(owner);
      await eventually(async () => (await pubsubIds(admin)).every((id) => !ids.includes(id)), `the old connections to ${owner} to close`);
    }
    // Until the client has new connections, a SSUBSCRIBE may be refused or answered by one being
    // replaced: subscribe until a message goes through, at each master.
    for (const [owner, ch] of channels) {
      for (let i = 0; ; i++) {
        await seen.resubscribe(ch);
        if ((await to(owner).call('SPUBLISH', ch, `after${i}`)) === 1) {
          await seen.message(ch, `after${i}`);
          break;
        }
        if (i > 100) throw new Error(`never subscribed again at ${owner}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    port.close();
    expect(() => port.reconnect()).not.toThrow();
    await expect(port.subscribe(channels[0]?.[1] as string)).rejects.toThrow();
  });

  it.each(IOREDIS.flatMap((kind) => [[kind, 'redisOptions'], [kind, 'cluster']] as const))(
    '%s with keyPrefix in its %s options: each channel is subscribed at its master as given, without the prefix; SPUBLISH there is delivered',
    async (kind, where) => {
      const port = shardPort(await clusterClient(cluster, kind, { keyPrefix: 'app:', in: where }));
      const seen = watch(port);
      // Channels per master: the slot is the channel's own (a prefix outside the hash tag would not
      // move it, so the subscriber count at the owner is what tells).
      const channels = [...channelOf].map(([owner, ch]) => [owner, `${kind}:kp-${where}:${ch}`] as const);
      for (const [, ch] of channels) await port.subscribe(ch);
      for (const [owner, ch] of channels) {
        expect(await to(owner).call('PUBSUB', 'SHARDNUMSUB', ch, `app:${ch}`)).toEqual([ch, 1, `app:${ch}`, 0]);
        expect(await to(owner).call('SPUBLISH', ch, `m:${ch}`)).toBe(1);
        await seen.message(ch, `m:${ch}`);
      }
    },
  );

  it('an ioredis Cluster without a sharded subscriber group (ioredis < 5.9) is refused, naming notes; the duplicate is disconnected', async () => {
    // ioredis < 5.9 is not installed. What it does with `shardedSubscribers: true` is ignore it (an
    // unknown option): its duplicate has no `shardedSubscribers` group. A 5.11 duplicate made with the
    // option off lacks it the same way; nothing else is changed (no Redis behaviour is imitated).
    const c = (await clusterClient(cluster, 'ioredis')) as Cluster;
    const made: Cluster[] = [];
    const duplicate = c.duplicate.bind(c);
    Object.defineProperty(c, 'duplicate', {
      value: (nodes: never[], options: object) => {
        const d = duplicate(nodes, { ...options, shardedSubscribers: false });
        made.push(d);
        return d;
      },
    });
    let thrown: unknown;
    try {
      portFor(c).shardSubscriber();
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(InvalidOptionError);
    expect((thrown as InvalidOptionError).option).toBe('notes');
    expect((thrown as InvalidOptionError).value).toBe('sharded');
    expect((thrown as Error).message).toMatch(/5\.9 or later/);
    expect(made).toHaveLength(1);
    // Disconnected by the port before throwing: never 'ready', and no reconnection.
    expect(['disconnecting', 'close', 'end']).toContain(made[0]?.status);
  });
});
