import { provideRedis, startRedisServer, type ProvidedRedis, type RedisServer } from '../../test/support/redis-server.js';

/**
 * The Redis a bench that flushes between runs (FLUSHALL: every contender starts cold) runs against.
 * With REDIS_URL unset it is a redis-server of the bench's own, on a free port, stopped at the end
 * (or a testcontainers container). With REDIS_URL set the server is someone else's, and a FLUSHALL
 * there deletes every key of every database: the bench refuses to start unless `--flush` says that
 * is wanted. This is the one place that decides; the benches call it before any command is sent.
 */
export async function redisToFlush(bench: string, flushAllowed: boolean | undefined): Promise<ProvidedRedis> {
  if (process.env.REDIS_URL && !flushAllowed) {
    console.error(
      `${bench}: REDIS_URL is set (${redact(process.env.REDIS_URL)}), and this bench runs FLUSHALL on its server between runs, ` +
        `deleting every key there. Unset REDIS_URL to let the bench start a redis-server of its own, ` +
        `or pass --flush if that server holds nothing you need.`,
    );
    process.exit(2);
  }
  return provideRedis();
}

/** The URL without its password, for messages. */
function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparsable URL)';
  }
}

/**
 * The Redis a bench that reads server-wide counters (INFO commandstats, bytes sent) runs against:
 * always a redis-server of its own on a free port, stopped at the end, whatever REDIS_URL says (on a
 * shared server the counters would count the others' commands too). Needs the redis-server binary.
 */
export async function ownRedis(bench: string): Promise<RedisServer> {
  if (process.env.REDIS_URL) console.error(`${bench}: REDIS_URL is set (${redact(process.env.REDIS_URL)}) and not used: this bench starts a redis-server of its own.`);
  return startRedisServer();
}
