/**
 * The tests of a web-handler example (examples/express.ts, examples/fastify.ts), run as a user would:
 * real server processes on free ports, real HTTP, real redis-servers. The loader runs are counted by
 * each process's own `cache.stats()` (its /stats). One test file per framework calls this, so that
 * each file stays short.
 */
import { request } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectedReport, type ServiceStats } from '../../examples/report-service.js';
import { ExampleServer } from './example-server.js';
import { startRedisServer, type RedisServer } from './redis-server.js';

// Long enough that a disconnect (sent once the loader is seen running) lands while the query runs.
const ABANDONED_QUERY_MS = 1500;

/** Polls `read` until `done` holds (bounded: 15 s, then it fails the test with the last value). */
async function until<T>(read: () => Promise<T>, done: (v: T) => boolean): Promise<T> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const v = await read();
    if (done(v)) return v;
    if (Date.now() > deadline) throw new Error(`condition not reached; last value ${JSON.stringify(v)}`);
    await sleep(20);
  }
}

const sum = (all: ServiceStats[], pick: (s: ServiceStats) => number): number => all.reduce((n, s) => n + pick(s), 0);

/** A request whose client will go away: `leave()` destroys its socket and resolves with the client-side error. */
function leavingRequest(url: string): { leave(): Promise<Error> } {
  const req = request(url);
  const failed = new Promise<Error>((resolve) => req.once('error', resolve));
  req.end();
  return {
    leave() {
      req.destroy();
      return failed;
    },
  };
}

export function webExampleSuite(name: 'express' | 'fastify'): void {
  describe(`examples/${name}.ts`, () => {
    let redis: RedisServer;
    beforeAll(async () => {
      redis = await startRedisServer();
    });
    afterAll(async () => {
      await redis?.stop();
    });
    const start = (prefix: string, slowQueryMs: number) => ExampleServer.start(name, { redisUrl: redis.url, prefix: `${name}-${prefix}`, slowQueryMs });

    it('100 concurrent requests for a cold key over 2 server processes: one loader run in total and 100 correct answers', async () => {
      const servers = await Promise.all([start('fleet', 500), start('fleet', 500)]);
      try {
        const id = 'cold-42';
        // Every request is sent before any answer is awaited.
        const responses = Array.from({ length: 100 }, (_, i) => fetch((servers[i % 2] as ExampleServer).url(`/reports/${id}`)));
        const answered = await Promise.all(responses.map(async (r) => [(await r).status, await (await r).json()] as const));
        expect(answered).toEqual(Array(100).fill([200, expectedReport(id)]));
        const stats = await Promise.all(servers.map((s) => s.stats()));
        expect(sum(stats, (s) => s.cache.loaderRuns)).toBe(1);
        expect(sum(stats, (s) => s.origin.completed)).toBe(1);
        // Every other request was saved a rebuild (or, arriving after the write, was a plain hit).
        expect(sum(stats, (s) => s.cache.coalesced + s.cache.waited + s.cache.hits)).toBe(99);
        expect(sum(stats, (s) => s.origin.failures)).toBe(0);
        console.log(`${name}: per-process stats`, JSON.stringify(stats.map((s) => s.cache)));
      } finally {
        await Promise.all(servers.map((s) => s.stop()));
      }
    });

    it('a client that disconnects mid-query does not crash the server, cancels the query, and is no origin failure', async () => {
      const server = await start('abort', ABANDONED_QUERY_MS);
      try {
        const id = 'abandoned';
        const before = await server.stats();
        const client = leavingRequest(server.url(`/reports/${id}`));
        // The query is running once the cache counted its loader; then the client goes away.
        await until(() => server.stats(), (s) => s.cache.loaderRuns === before.cache.loaderRuns + 1);
        expect((await client.leave()).message).toMatch(/socket hang up|aborted/);
        // The query ended one way or the other: it must have been cancelled by the request's signal.
        const after = await until(() => server.stats(), (s) => s.origin.completed + s.origin.cancelled > before.origin.completed + before.origin.cancelled);
        expect(after.origin).toEqual({ completed: before.origin.completed, cancelled: before.origin.cancelled + 1, failures: 0 });
        expect(server.running).toBe(true);
        // No failure backoff was armed: the next request for the same key is computed and answered.
        const again = await fetch(server.url(`/reports/${id}`));
        expect([again.status, await again.json()]).toEqual([200, expectedReport(id)]);
        expect((await server.stats()).origin).toMatchObject({ completed: before.origin.completed + 1, failures: 0 });
        expect(server.stderr).toBe('');
      } finally {
        await server.stop();
      }
    });

    it('one of two clients sharing a rebuild disconnects: the query goes on and the other client gets the report', async () => {
      const server = await start('shared', ABANDONED_QUERY_MS);
      try {
        const id = 'shared';
        const before = await server.stats();
        const leaving = leavingRequest(server.url(`/reports/${id}`));
        const staying = fetch(server.url(`/reports/${id}`));
        // Both requests are in the handler and the query runs: the second joined the first's rebuild.
        await until(() => server.stats(), (s) => s.cache.loaderRuns === before.cache.loaderRuns + 1 && s.inProgress === 2);
        await leaving.leave();
        const answer = await staying;
        expect([answer.status, await answer.json()]).toEqual([200, expectedReport(id)]);
        // The loader must follow its ctx.signal (every caller gone), not the first caller's request.
        expect((await server.stats()).origin).toEqual({ completed: before.origin.completed + 1, cancelled: before.origin.cancelled, failures: 0 });
      } finally {
        await server.stop();
      }
    });

    it('with Redis gone, requests are still answered (degraded: the query runs here), the server stays up, and SIGTERM still exits with code 0', async () => {
      const own = await startRedisServer();
      const server = await ExampleServer.start(name, { redisUrl: own.url, prefix: `${name}-outage`, slowQueryMs: 50 });
      try {
        await own.kill();
        const answers = await Promise.all(Array.from({ length: 3 }, () => fetch(server.url('/reports/outage'))));
        expect(await Promise.all(answers.map(async (r) => [r.status, await r.json()]))).toEqual(Array(3).fill([200, expectedReport('outage')]));
        expect((await server.stats()).cache).toMatchObject({ degraded: 3 });
        expect(server.running).toBe(true);
      } finally {
        const exit = await server.stop();
        await own.stop();
        expect(exit).toEqual({ code: 0, signal: null });
        expect(server.lines.at(-1)).toEqual({ closed: true });
      }
    });

    it('shuts down on SIGTERM with a keep-alive connection open: server, cache and client closed, the process exits by itself with code 0', async () => {
      const server = await start('shutdown', 50);
      const answer = await fetch(server.url('/reports/bye'));
      expect(await answer.json()).toEqual(expectedReport('bye'));
      const exit = await server.stop();
      expect(exit).toEqual({ code: 0, signal: null });
      expect(server.lines.at(-1)).toEqual({ closed: true });
      expect(server.stderr).toBe('');
    });
  });
}
