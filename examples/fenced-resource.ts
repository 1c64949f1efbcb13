/**
 * Fencing a loader's own side effect. The cache fences its own write; anything else your loader
 * writes must check `ctx.fencingToken` itself. Here the "resource" is a Redis hash guarded by a
 * script; in SQL the same guard is
 *
 *   UPDATE accounts SET balance = $2, fence = $1 WHERE id = $3 AND fence < $1
 *
 * and zero updated rows means "a newer rebuild already wrote: drop this result".
 *
 * Run: npm run example -- fenced-resource    (a throwaway redis-server unless REDIS_URL is set)
 *   or: REDIS_URL=redis://127.0.0.1:6379 node --import tsx examples/fenced-resource.ts
 */
import { Redis } from 'ioredis';
import { createCache } from 'stampede-guard';

const FENCED_WRITE = `
local last = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) <= last then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1`;

const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
const cache = createCache({ redis, prefix: 'example' });

const summary = await cache.getOrCompute('account:7:summary', async (ctx) => {
  const computed = `balance computed at ${new Date().toISOString()}`;
  // The side effect carries the grant's token; an older (paused, lapsed) rebuilder is refused.
  const accepted = await redis.eval(FENCED_WRITE, 1, 'example:resource:account:7', String(ctx.fencingToken), computed);
  if (accepted !== 1) throw new Error('a newer rebuild already wrote the resource');
  return computed;
}, 60_000);

console.log(summary);
await cache.close();
redis.disconnect();
