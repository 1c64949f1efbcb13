/**
 * Start-up and shutdown with the defaults: close() is a cancellation on every entry point whatever the
 * loader rejects with, ready() is true only when calls can reach Redis, and the subscriber heartbeat
 * never stacks disconnects on a socket that is already closing. Real Redis throughout; the
 * family-specific parts follow SG_TEST_CLIENT (both passes) or name their family.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { Redis as Redis6 } from 'ioredis6';
import { createClient } from 'redis';
import { createClient as createClient5 } from 'redis5';
import { describe, expect, it } from 'vitest';
import { createCache, type Cache, type CacheEvents, type CallOptions, type LoaderContext } from '../../src/index.js';
import { familyClient, subscribeVia, TEST_CLIENT, useFamilyServer } from '../support/clients.js';
import { deferred, subscribed } from '../support/harness.js';
import { freePort } from '../support/redis-server.js';

/** A URL where nothing listens: connections are refused. */
const freePortUrl = async (): Promise<string> => `redis://127.0.0.1:${await freePort()}`;

const s = useFamilyServer();
let prefixes = 0;
const cacheOn = (options: Partial<Parameters<typeof createCache>[0]> = {}): Cache =>
  s.keep(createCache({ redis: s.client(), prefix: `lc${process.pid}x${++prefixes}`, ...options }));

/** What a loader honouring its signal does, as the README asks: a timer that rejects with AbortError when the signal aborts. */
const honouring = (started: () => void) => async (ctx: LoaderContext): Promise<string> => {
  started();
  return sleep(60_000, 'late', { signal: ctx.signal });
};

/** The events that would make a shutdown look like an origin failure. */
function failureEvents(cache: Cache): { readonly seen: string[] } {
  const seen: string[] = [];
  for (const name of ['refreshError', 'loaderError'] as const) {
    cache.on(name, (e: CacheEvents[typeof name][0]) => seen.push(`${name}(${e.key}): ${String((e.error as Error)?.name)}`));
  }
  return { seen };
}

/**
 * One entry point each: `start` begins the call(s) whose loader is running when it resolves, and
 * returns the promises a caller awaits (none for a background refresh).
 */
interface EntryPoint {
  readonly name: string;
  start(cache: Cache, started: Promise<void>, loader: (ctx: LoaderContext) => Promise<string>): Promise<Promise<unknown>[]>;
}

const TTL: CallOptions = { ttl: 60_000 };
const ENTRY_POINTS: readonly EntryPoint[] = [
  {
    name: 'getOrCompute (a miss)',
    async start(cache, started, loader) {
      const call = cache.getOrCompute('k', loader, TTL);
      await started;
      return [call];
    },
  },
  {
    name: 'getOrComputeMany (the keys it won)',
    async start(cache, started, loader) {
      const call = cache.getOrComputeMany(['a', 'b'], async (keys, ctx) => {
        const v = await loader({ key: keys[0] as string, signal: ctx.signal, fencingToken: undefined, staleValue: undefined, setOptions: () => undefined, skip: () => undefined });
        return new Map(keys.map((k) => [k, v]));
      }, TTL);
      await started;
      return [call];
    },
  },
  {
    name: 'forceFresh (over a fresh entry)',
    async start(cache, started, loader) {
      await cache.set('k', 'old', TTL);
      const call = cache.getOrCompute('k', loader, { ...TTL, forceFresh: true });
      await started;
      return [call];
    },
  },
  {
    name: 'a namespaced getOrCompute',
    async start(cache, started, loader) {
      const call = cache.namespace('users').getOrCompute('k', loader, TTL);
      await started;
      return [call];
    },
  },
  {
    name: 'the stale window’s background refresh',
    async start(cache, started, loader) {
      await cache.set('k', 'old', { ttl: 50, staleTtl: 60_000 });
      await sleep(80);
      expect(await cache.getOrCompute('k', loader, { ttl: 50, staleTtl: 60_000 })).toBe('old');
      await started;
      return [];
    },
  },
  {
    name: 'an early refresh (refreshAhead)',
    async start(cache, started, loader) {
      await cache.set('k', 'old', { ttl: 2000 });
      await sleep(200);
      expect(await cache.getOrCompute('k', loader, { ttl: 2000, refreshAhead: 0.05 })).toBe('old');
      await started;
      return [];
    },
  },
];

describe('close() while a loader that honours ctx.signal runs: a cancellation, not a failure', () => {
  it.each(ENTRY_POINTS)('$name: no loaderError or refreshError, and every caller rejects ERR_CLOSED', async (entry) => {
    const cache = cacheOn();
    await cache.ready();
    const failures = failureEvents(cache);
    const started = deferred<void>();
    const calls = await entry.start(cache, started.promise, honouring(() => started.resolve()));
    // Observed before close() rejects them.
    const outcomes = Promise.all(calls.map((p) => p.then(() => 'fulfilled', (e: unknown) => (e as { code?: string }).code)));
    await cache.close();
    const codes = await outcomes;
    await sleep(50); // the background work's tracker runs after close() resolved
    expect(codes).toEqual(calls.map(() => 'ERR_CLOSED'));
    expect(failures.seen).toEqual([]);
  });
});

describe('ready() is true only when calls can reach Redis', () => {
  it('false while the caller\'s client cannot reach Redis although the subscriber can, with a degraded event saying why', async () => {
    const client = familyClient(await freePortUrl(), TEST_CLIENT, { retryDelay: 200 });
    const stopSub = subscribeVia(client.client, s.server.url);
    try {
      const cache = s.keep(createCache({ redis: client.client, prefix: `lc${process.pid}ready`, redisTimeout: 400 }));
      const why: string[] = [];
      cache.on('degraded', (e) => {
        if (e.operation === 'ready') why.push((e.error as { operation?: string }).operation ?? '?');
      });
      expect(await cache.ready()).toBe(false);
      expect(why).toEqual(['ping']);
      await cache.close();
    } finally {
      stopSub();
      client.dispose();
    }
  });

  it('true once subscribed and the client answers', async () => {
    const cache = cacheOn();
    expect(await cache.ready()).toBe(true);
  });

  it('close() ends a pending ready() at once with false, and the closed cache reports nothing after', async () => {
    const client = familyClient(await freePortUrl(), TEST_CLIENT, { retryDelay: 200 });
    try {
      // A redisTimeout longer than the test's own timeout: only close() can end this ready() in time.
      const cache = s.keep(createCache({ redis: client.client, prefix: `lc${process.pid}rc`, redisTimeout: 120_000 }));
      let closed = false;
      const afterClose: string[] = [];
      cache.on('degraded', (e) => {
        if (closed) afterClose.push(e.operation);
      });
      const pending = cache.ready();
      await sleep(100);
      closed = true;
      await cache.close();
      expect(await pending).toBe(false);
      expect(afterClose).toEqual([]);
    } finally {
      client.dispose();
    }
  });

  it('false while a circuit breaker refuses operations, with a degraded event naming it', async () => {
    const cache = cacheOn({ redisTimeout: 150, breakerThreshold: 2, breakerCooldown: 120_000 });
    expect(await subscribed(cache, 10_000)).toBe(true);
    // Two separate hangs (each one suspicion of the node: one failure) open the breaker; their callers answer degraded.
    for (const key of ['b1', 'b2']) {
      const answered = new Promise((resolve) => cache.on('health', (e) => e.state === 'recovered' && resolve(e)));
      s.server.pause();
      try {
        expect(await cache.getOrCompute(key, () => 'v', 60_000)).toBe('v');
      } finally {
        s.server.resume();
      }
      if (key === 'b1') await answered; // the node answered again: the next hang is a second failure
    }
    expect(cache.health().nodes.map((n) => n.state)).toEqual(['open']);
    const why: string[] = [];
    cache.on('degraded', (e) => {
      const error = e.error as { operation?: string; failure?: string };
      if (e.operation === 'ready') why.push(`${error.operation}:${error.failure}`);
    });
    expect(await cache.ready()).toBe(false);
    expect(why).toContain('ready:breaker');
  });

  it('false once closed', async () => {
    const cache = cacheOn();
    await cache.close();
    expect(await cache.ready()).toBe(false);
  });
});

describe('a node-redis client that is neither open nor opening', () => {
  const majors = [
    ['node-redis 6', () => createClient({ url: s.server.url })],
    ['node-redis 5', () => createClient5({ url: s.server.url })],
  ] as const;

  it.each(majors)('%s never connected: createCache throws ERR_CLIENT_NOT_CONNECTED naming connect()', (_name, make) => {
    const client = make();
    expect(() => createCache({ redis: client })).toThrow(expect.objectContaining({ code: 'ERR_CLIENT_NOT_CONNECTED', option: 'redis' }));
    expect(() => createCache({ redis: client })).toThrow(/"redis" is not open: call its connect\(\)/);
  });

  it.each(majors)('%s closed with destroy(): refused the same way', async (_name, make) => {
    const client = make();
    client.on('error', () => undefined);
    await client.connect();
    client.destroy();
    expect(() => createCache({ redis: client })).toThrow(expect.objectContaining({ code: 'ERR_CLIENT_NOT_CONNECTED' }));
  });

  it.each(majors)('%s connecting (connect() called, not awaited): accepted, and ready() waits for it', async (_name, make) => {
    const client = make();
    client.on('error', () => undefined);
    const connecting = client.connect();
    const cache = createCache({ redis: client, prefix: `lc${process.pid}connecting` });
    try {
      expect(await cache.ready()).toBe(true);
    } finally {
      await cache.close();
      await connecting;
      client.destroy();
    }
  });
});

describe('the subscriber heartbeat while Redis hangs', () => {
  it.each([
    ['ioredis 5', (url: string) => new Redis(url, { maxRetriesPerRequest: 1 })],
    ['ioredis 6', (url: string) => new Redis6(url, { maxRetriesPerRequest: 1 })],
  ] as const)('%s: never a second disconnect before the connection closed, no MaxListenersExceededWarning', async (_name, make) => {
    const client = make(s.server.url);
    client.on('error', () => undefined);
    // The cache's one duplicate(), instrumented: each disconnect(true) and each 'close' in order.
    const log: string[] = [];
    const c = client as unknown as { duplicate: (...args: unknown[]) => Redis };
    const duplicate = c.duplicate.bind(client);
    c.duplicate = (...args) => {
      const dup = duplicate(...args);
      const disconnect = dup.disconnect.bind(dup);
      dup.disconnect = (reconnect?: boolean) => {
        log.push(reconnect ? 'drop' : 'end');
        disconnect(reconnect);
      };
      dup.on('close', () => log.push('close'));
      return dup;
    };
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on('warning', onWarning);
    // The heartbeat's period is redisTimeout: 50 periods of a hung server, more than ioredis'
    // disconnectTimeout (2 s) needs to destroy the socket that a FIN could not close.
    const cache = createCache({ redis: client, prefix: `lc${process.pid}hb`, redisTimeout: 60 });
    try {
      // Subscribed (ready() would also want a PING answered within the 60 ms redisTimeout: not the point here).
      expect(await subscribed(cache, 10_000)).toBe(true);
      s.server.pause();
      await sleep(3000);
      s.server.resume();
      await sleep(200);
    } finally {
      s.server.resume();
      process.off('warning', onWarning);
      await cache.close();
      client.disconnect();
    }
    const drops = log.filter((e) => e === 'drop').length;
    expect(drops).toBeGreaterThan(0); // the hang was seen
    // Between two drops there is always a close: a drop never lands on a socket still closing.
    const stacked = log.findIndex((e, i) => e === 'drop' && log.slice(0, i).lastIndexOf('drop') > log.slice(0, i).lastIndexOf('close'));
    expect({ stacked, log: log.join(' ') }).toMatchObject({ stacked: -1 });
    expect(warnings.filter((w) => w === 'MaxListenersExceededWarning')).toEqual([]);
  });
});

describe('messages say "namespace" for a namespace', () => {
  it('a namespace clear() that cannot reach Redis names the namespace, not a key', async () => {
    const client = familyClient(await freePortUrl(), TEST_CLIENT, { offlineQueue: false, retryDelay: 200 });
    try {
      const cache = s.keep(createCache({ redis: client.client, prefix: `lc${process.pid}ns`, redisTimeout: 300 }));
      const error = await cache.namespace('users').clear().then(() => undefined, (e: unknown) => e);
      expect(error).toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE', key: undefined, namespace: 'users' });
      expect((error as Error).message).toContain('namespace "users"');
      expect((error as Error).message).not.toMatch(/for "users"/);
      await cache.close();
    } finally {
      client.dispose();
    }
  });
});

describe('the start-up and shutdown docs/operations.md recommends, with Redis down', () => {
  const socket = { connectTimeout: 2_000, reconnectStrategy: (retries: number) => Math.min(100 * 2 ** retries, 2_000) };
  it.each([
    ['node-redis 6', (url: string) => createClient({ url, socket })],
    ['node-redis 5', (url: string) => createClient5({ url, socket })],
  ] as const)('%s: connect() not awaited to the end, calls answer degraded, close() then destroy() settles', async (_name, make) => {
    const redis = make(await freePortUrl());
    redis.on('error', () => undefined);
    const connecting = redis.connect().catch(() => undefined);
    await Promise.race([connecting, sleep(200)]);
    const cache = createCache({ redis, prefix: `lc${process.pid}down`, redisTimeout: 200 });
    expect(await cache.getOrCompute('k', () => 'computed', 1000)).toBe('computed');
    expect(await cache.ready()).toBe(false);
    await cache.close();
    // close() waits for the commands node-redis still queues (the cache's timed-out reads): it does
    // not settle while Redis is down. destroy() rejects them; node-redis 5 then throws "The client is
    // closed" (close() already marked it closed) after it has done so.
    const closed = redis.close().then(() => true, () => false);
    if (!(await Promise.race([closed, sleep(300, false)]))) {
      try {
        redis.destroy();
      } catch {
        // node-redis 5 after close()
      }
    }
    expect(redis.isOpen).toBe(false);
  });

  it('ioredis: calls answer degraded, close() then quit() raced with disconnect() settles', async () => {
    const redis = new Redis(await freePortUrl(), { maxRetriesPerRequest: 1 });
    redis.on('error', () => undefined);
    const cache = createCache({ redis, prefix: `lc${process.pid}down`, redisTimeout: 200 });
    expect(await cache.getOrCompute('k', () => 'computed', 1000)).toBe('computed');
    await cache.close();
    const quit = redis.quit().then(() => true, () => false);
    // Resolves: ioredis answers a QUIT it cannot send (nothing queued) by disconnecting at once, and
    // stops reconnecting (its status may still read 'reconnecting'). A hang would time the test out.
    if (!(await Promise.race([quit, sleep(300, false)]))) redis.disconnect();
  });
});
