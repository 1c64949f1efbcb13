/**
 * What the cache saves per command on the caller's client, against this file's own Redis server:
 * - ioredis: a tick's commands leave in one socket write (src/client/tick-writes.ts): the socket is
 *   corked at the cache's first command of the tick and uncorked on nextTick. Counted on the
 *   connection's own socket (its `_write`/`_writev` calls: one per flush to the kernel).
 * - node-redis: no per-command timer (src/client/node-redis.ts): node-redis 6 arms an
 *   AbortSignal.timeout for every command by default; the cache's commands are bounded by
 *   redisTimeout instead. Counted by wrapping AbortSignal.timeout.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { createClient } from 'redis';
import { createCache } from '../../src/index.js';
import { useRedis } from '../support/harness.js';

const h = useRedis();
const nextMacrotask = () => new Promise((r) => setImmediate(r));

interface CountedSocket {
  _write: (...a: unknown[]) => unknown;
  _writev: (...a: unknown[]) => unknown;
  writableCorked: number;
}

/** Counts the flushes of `client`'s current socket (each `_write` or `_writev` is one write to the kernel). */
function countFlushes(client: Redis): { readonly flushes: number; readonly socket: CountedSocket } {
  const socket = (client as unknown as { stream: CountedSocket }).stream;
  const counter = { flushes: 0, socket };
  const write = socket._write.bind(socket);
  const writev = socket._writev.bind(socket);
  socket._write = (...a) => {
    counter.flushes++;
    return write(...a);
  };
  socket._writev = (...a) => {
    counter.flushes++;
    return writev(...a);
  };
  return counter;
}

let n = 0;
const prefix = () => `tw${process.pid}x${++n}`;

describe('one socket write per tick on an ioredis connection', () => {
  it("ten fresh hits started in one tick leave in one write, and the caller's socket is uncorked after it", async () => {
    const client = h.client();
    const cache = createCache({ redis: client, prefix: prefix() });
    const keys = Array.from({ length: 10 }, (_, i) => `k${i}`);
    for (const k of keys) await cache.set(k, k, 60_000);
    await cache.get('k0'); // the node's clock is sampled: the hits below are plain reads
    const counted = countFlushes(client);
    // Every contender starts before any is awaited: ten keys, so ten reads (none shared).
    const hits = keys.map((k) => cache.getOrCompute(k, () => 'loaded', 60_000));
    await nextMacrotask();
    expect(counted.flushes).toBe(1);
    expect(counted.socket.writableCorked).toBe(0);
    expect(await Promise.all(hits)).toEqual(keys);
    await cache.close();
  });

  it("the caller's own commands written in the cache's tick go out with it, in order, and answer", async () => {
    const client = h.client();
    const cache = createCache({ redis: client, prefix: prefix() });
    await cache.set('k', 'v', 60_000);
    await cache.get('k');
    const counted = countFlushes(client);
    const own = `${prefix()}:own`;
    const hit = cache.getOrCompute('k', () => 'loaded', 60_000);
    // The cache sends its read a few microtasks later (its shared read's flight): the caller's commands follow it in the tick.
    for (let i = 0; i < 100 && counted.socket.writableCorked === 0; i++) await Promise.resolve();
    expect(counted.socket.writableCorked).toBe(1);
    const set = client.set(own, '1');
    const incr = client.incr(own);
    await nextMacrotask();
    expect(counted.flushes).toBe(1);
    expect(await Promise.all([hit, set, incr])).toEqual(['v', 'OK', 2]);
    expect(counted.socket.writableCorked).toBe(0);
    await cache.close();
  });

  it('a connection not ready yet (lazyConnect) is left to ioredis: the first call still answers', async () => {
    const client = h.client({ lazyConnect: true });
    const cache = createCache({ redis: client, prefix: prefix() });
    expect(await cache.getOrCompute('k', () => 'loaded', 60_000)).toBe('loaded');
    expect(await cache.getOrCompute('k', () => 'again', 60_000)).toBe('loaded');
    expect((client as unknown as { stream: CountedSocket }).stream.writableCorked).toBe(0);
    await cache.close();
  });
});

describe('no node-redis per-command timer on the cache\'s commands', () => {
  const real = AbortSignal.timeout.bind(AbortSignal);
  afterEach(() => {
    AbortSignal.timeout = real;
  });

  it('fresh hits, a miss and its write arm no AbortSignal.timeout; the caller\'s own commands keep theirs', async () => {
    const client = createClient({ url: h.url });
    client.on('error', () => undefined);
    await client.connect();
    try {
      const cache = createCache({ redis: client, prefix: prefix() });
      await cache.ready();
      // Counted only inside the caller's client's sendCommand (node-redis arms the timer there, synchronously):
      // the cache's subscriber connection, a duplicate, sends its own heartbeat PINGs with node-redis's timer.
      let armed = 0;
      let inClient = false;
      AbortSignal.timeout = (ms: number) => {
        if (inClient) armed++;
        return real(ms);
      };
      const c = client as unknown as { sendCommand: (...a: unknown[]) => Promise<unknown> };
      const send = c.sendCommand.bind(client);
      c.sendCommand = (...a: unknown[]) => {
        inClient = true;
        try {
          return send(...a);
        } finally {
          inClient = false;
        }
      };
      expect(await cache.getOrCompute('k', () => 'loaded', 60_000)).toBe('loaded'); // read, lock, write
      for (let i = 0; i < 5; i++) expect(await cache.getOrCompute('k', () => 'again', 60_000)).toBe('loaded');
      expect(await cache.get('k')).toBe('loaded');
      await cache.delete('k');
      expect(armed).toBe(0);
      // The control: node-redis 6 does arm one for a command of the caller's own (its default commandOptions.timeout).
      await client.sendCommand(['PING']);
      expect(armed).toBe(1);
      await cache.close();
    } finally {
      client.destroy();
    }
  });
});
