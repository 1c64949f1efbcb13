/**
 * The part of the web-handler examples (express.ts, fastify.ts) that has nothing to do with the
 * framework: a slow "database query" behind `getOrCompute`, the caller-owned Redis client, the
 * counters a `/stats` endpoint reports, and an orderly shutdown.
 *
 * Ownership: the application creates the ioredis client, so the application quits it; `cache.close()`
 * never touches the caller's connection (only the duplicate it made for pub/sub).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { AbortedError, createCache, type CacheStats } from 'stampede-guard';

export interface Report {
  readonly id: string;
  readonly total: number;
}

/** What `GET /stats` answers: the cache's counters plus what the origin saw. */
export interface ServiceStats {
  readonly cache: CacheStats;
  /** Report requests waiting for their answer right now (a gauge). */
  readonly inProgress: number;
  readonly origin: {
    /** Queries that ran to the end. */
    readonly completed: number;
    /** Queries stopped because every caller waiting for them went away (the loader's `ctx.signal`). */
    readonly cancelled: number;
    /** Real origin failures (`loaderError`): a cancellation is never one. */
    readonly failures: number;
  };
}

export interface ReportService {
  /** The report, computed at most once per expiry across every process; `signal` is the request's. */
  report(id: string, signal: AbortSignal): Promise<Report>;
  stats(): ServiceStats;
  /** Stops the cache, then quits (or, with Redis unreachable, disconnects) the client this service created. */
  close(): Promise<void>;
}

/** The answer every caller must get for `id`, however it was computed. */
export function expectedReport(id: string): Report {
  let total = 0;
  for (const ch of id) total = (total * 31 + ch.charCodeAt(0)) % 1_000_003;
  return { id, total };
}

/** A caller whose own signal aborted: the client disconnected, there is nobody to answer. */
export function clientWentAway(err: unknown): boolean {
  return err instanceof AbortedError;
}

export function createReportService(env: NodeJS.ProcessEnv = process.env): ReportService {
  const queryMs = Number(env.SLOW_QUERY_MS ?? 500);
  // What the README recommends for the caller's client: one retry per command (the cache bounds every
  // operation itself anyway) and an error listener, so a Redis outage is logged, never thrown.
  const redis = new Redis(env.REDIS_URL ?? 'redis://127.0.0.1:6379', { maxRetriesPerRequest: 1 });
  redis.on('error', (err: Error) => console.error('redis:', err.message));
  const cache = createCache({ redis, prefix: env.CACHE_PREFIX ?? 'reports' });
  const origin = { completed: 0, cancelled: 0, failures: 0 };
  let inProgress = 0;
  cache.on('loaderError', () => void origin.failures++);

  /** The slow query. It honours `signal` like a real driver would (pg, mysql2, fetch all take one). */
  async function slowQuery(id: string, signal: AbortSignal): Promise<Report> {
    try {
      await sleep(queryMs, undefined, { signal });
    } catch (err) {
      if (signal.aborted) origin.cancelled++;
      throw err;
    }
    origin.completed++;
    return expectedReport(id);
  }

  return {
    // failBackoff: after a real failure, nobody in the fleet hits the origin for this key for 5 s.
    // A query cancelled because its callers left is no failure and arms no backoff.
    async report(id, signal) {
      inProgress++;
      try {
        // The loader follows ctx.signal (aborted once every caller sharing this rebuild left), never
        // one request's signal: one client leaving must not cancel the query the others wait for.
        return await cache.getOrCompute(`report:${id}`, (ctx) => slowQuery(id, ctx.signal), { ttl: 60_000, failBackoff: 5_000, signal });
      } finally {
        inProgress--;
      }
    },
    stats: () => ({ cache: cache.stats(), inProgress, origin: { ...origin } }),
    async close() {
      await cache.close();
      // QUIT lets replies in flight arrive. With Redis unreachable it cannot be sent (it would fail
      // after the retries, or wait in the offline queue) while the client keeps reconnecting and the
      // process alive: then drop the connection instead.
      if (redis.status !== 'ready') return redis.disconnect();
      await redis.quit().catch(() => redis.disconnect());
    },
  };
}

/**
 * Runs `shutdown` once on SIGTERM or SIGINT. Nothing calls process.exit: once the server, the cache
 * and the client are closed, no handle is left and the process ends by itself (a leak would keep it
 * alive, which is what the example's test checks).
 */
export function onShutdownSignal(shutdown: () => Promise<void>): void {
  const once = (): void => {
    process.off('SIGTERM', once);
    process.off('SIGINT', once);
    shutdown().catch((err: unknown) => {
      console.error('shutdown failed', err);
      process.exitCode = 1;
    });
  };
  process.on('SIGTERM', once);
  process.on('SIGINT', once);
}
