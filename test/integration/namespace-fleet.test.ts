/**
 * Namespaces across processes (forked workers, each with an L1, on the family under test): a lost
 * generation counter is a clear that every process sees; clear() is confirmed by replicaAck.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createCache } from '../../src/index.js';
import { familyClient } from '../support/clients.js';
import { startRedisServer, type RedisServer } from '../support/redis-server.js';
import { until } from '../support/schedule.js';

const WORKER = fileURLToPath(new URL('../support/namespace-worker.ts', import.meta.url));

class NsWorker {
  private next = 1;
  private readonly pending = new Map<number, (reply: { ok: boolean; value?: unknown; code?: string; message?: string }) => void>();
  private constructor(private readonly child: ChildProcess) {
    child.on('message', (m: { id?: number; ok: boolean; value?: unknown }) => {
      if (m.id !== undefined) this.pending.get(m.id)?.(m);
    });
  }
  static async start(url: string, prefix: string): Promise<NsWorker> {
    const child = fork(WORKER, [], { execArgv: ['--import', 'tsx'], env: { ...process.env, SG_REDIS_URL: url, SG_PREFIX: prefix }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    await new Promise<void>((resolve) => child.once('message', () => resolve()));
    return new NsWorker(child);
  }
  async send(op: string, key?: string, value?: unknown): Promise<unknown> {
    const id = this.next++;
    const reply = await new Promise<{ ok: boolean; value?: unknown; code?: string; message?: string }>((resolve) => {
      this.pending.set(id, resolve);
      this.child.send({ id, op, ns: 'users', key, value });
    });
    this.pending.delete(id);
    if (!reply.ok) throw Object.assign(new Error(reply.message), { code: reply.code });
    return reply.value;
  }
  get = (key: string) => this.send('get', key);
  set = (key: string, value: unknown) => this.send('set', key, value);
  delete = (key: string) => this.send('delete', key);
  async stop(): Promise<void> {
    const exited = new Promise((resolve) => this.child.once('exit', resolve));
    this.child.send({ op: 'exit' });
    await exited;
  }
}

let server: RedisServer;
let admin: Redis;
let workers: NsWorker[] = [];
let prefixes = 0;
beforeAll(async () => {
  server = await startRedisServer();
  admin = new Redis(server.adminUrl, { maxRetriesPerRequest: 1 });
  admin.on('error', () => undefined);
});
afterEach(async () => {
  await Promise.all(workers.map((w) => w.stop()));
  workers = [];
});
afterAll(async () => {
  admin.disconnect();
  await server.stop();
});

async function fleet(n: number, prefix: string): Promise<NsWorker[]> {
  const started = await Promise.all(Array.from({ length: n }, () => NsWorker.start(server.url, prefix)));
  workers.push(...started);
  return started;
}

/** Ways a generation counter goes missing while processes hold it cached. */
const LOSSES: readonly [string, (counter: string) => Promise<void>][] = [
  ['DEL', async (counter) => void (await admin.del(counter))],
  [
    'eviction (allkeys-lru under maxmemory)',
    async (counter) => {
      await admin.config('SET', 'maxmemory-policy', 'allkeys-lru');
      const used = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))?.[1]);
      await admin.config('SET', 'maxmemory', String(used + 2_000_000));
      try {
        // Filler until Redis has evicted the counter (it is the least recently used of the old keys).
        const filler = 'x'.repeat(1000);
        for (let i = 0; (await admin.exists(counter)) === 1; i++) {
          if (i > 20_000) throw new Error('the counter was never evicted');
          const pipe = admin.pipeline();
          for (let j = 0; j < 100; j++) pipe.set(`filler:${i}:${j}`, filler);
          await pipe.exec();
        }
      } finally {
        await admin.config('SET', 'maxmemory', '0');
        await admin.config('SET', 'maxmemory-policy', 'noeviction');
        // The filler goes (this file's own server): the next test starts with room.
        await admin.flushall();
      }
    },
  ],
];

describe('a lost namespace generation counter is a clear every process sees', () => {
  it.each(LOSSES)('%s: afterwards a set and a delete made by one process are seen by the others (L1 on)', async (_name, lose) => {
    const prefix = `nsf${++prefixes}`;
    const [a, b] = await fleet(2, prefix);
    await a!.set('k', 'v1');
    expect(await b!.get('k')).toBe('v1'); // b caches the generation, and 'v1' in its L1
    expect(await a!.get('k')).toBe('v1');
    await lose(`${prefix}:ns:{users}`);
    expect(await a!.send('knows')).toBe(true);
    expect(await b!.send('knows')).toBe(true);
    // A process that did not cache the generation finds the counter missing and re-creates it; its
    // note reaches the others as a clear's does (nobody waits for it: wait here until they dropped it).
    const [c] = await fleet(1, prefix);
    expect(await c!.get('k')).toBeUndefined();
    for (const w of [a!, b!]) {
      for (let i = 0; i < 1000 && (await w.send('knows')) === true; i++) await sleep(10);
      expect(await w.send('knows')).toBe(false);
    }
    await c!.set('k', 'v2');
    expect(await a!.get('k')).toBe('v2');
    expect(await b!.get('k')).toBe('v2');
    await a!.delete('k');
    // b's and c's L1 copies go with a's note (never older than the note delay): asked until it has arrived.
    await until("b's and c's gets after a's delete", async () => (await b!.get('k')) === undefined && (await c!.get('k')) === undefined, 500, 10);
  });

  it('a restart without persistence: afterwards a set and a delete made by one process are seen by the others (L1 on)', async () => {
    const prefix = `nsf${++prefixes}`;
    const [a, b] = await fleet(2, prefix);
    await a!.set('k', 'v1');
    expect(await b!.get('k')).toBe('v1');
    await server.kill();
    await server.restart();
    // Both subscriptions come back (every cached generation and L1 copy dropped on the way).
    expect(await a!.send('subscribed')).toBe(true);
    expect(await b!.send('subscribed')).toBe(true);
    expect(await a!.get('k')).toBeUndefined();
    await a!.set('k', 'v2');
    expect(await b!.get('k')).toBe('v2');
    await b!.delete('k');
    // The other process's L1 copy goes with b's note, which travels apart from the reply to b
    // (README: an L1 copy is never older than the note delay): asked until it has arrived.
    await until("a's get after b's delete", async () => (await a!.get('k')) === undefined, 500, 10);
  });
});

describe('clear() is a write like any other', () => {
  it('with replicaAck and no replica to acknowledge, a namespace clear() rejects as delete() does, after one WAIT', async () => {
    const { client, dispose } = familyClient(server.adminUrl); // WAIT is granted to the default user only
    const cache = createCache({ redis: client, prefix: `nsra${++prefixes}`, replicaAck: { replicas: 1, timeout: 50 } });
    try {
      const before = Number(/cmdstat_wait:calls=(\d+)/.exec(await admin.info('commandstats'))?.[1] ?? 0);
      await expect(cache.delete('k')).rejects.toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE', failure: 'replicaAck' });
      await expect(cache.namespace('users').clear()).rejects.toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE', failure: 'replicaAck', namespace: 'users' });
      const after = Number(/cmdstat_wait:calls=(\d+)/.exec(await admin.info('commandstats'))?.[1] ?? 0);
      expect(after - before).toBe(2); // one for the delete, one for the clear
    } finally {
      await cache.close();
      dispose();
    }
  });
});
