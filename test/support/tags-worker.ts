/**
 * A forked process with its own cache (L1 on, the client family under test) for the tags tests:
 * it reads and writes tagged entries on request, so a test can see what ANOTHER process serves
 * (its L1 included) once a deleteByTag made elsewhere resolved.
 *
 * Parent → worker: { op: 'get', id, key } | { op: 'compute', id, key, value, tags?, staleTtl?, delayMs? } | { op: 'stats', id } | { op: 'exit' }
 * (`delayMs`: the loader takes that long before it returns `value`).
 * Worker → parent: { ev: 'ready' } | { ev: 'result', id, value, loaded } | { ev: 'stats', id, stats }
 */
import { createCache } from '../../src/index.js';
import { familyClient } from './family.js';

type Msg =
  | { op: 'get'; id: number; key: string }
  | { op: 'compute'; id: number; key: string; value: unknown; tags?: string[]; staleTtl?: number; delayMs?: number }
  | { op: 'stats'; id: number }
  | { op: 'exit' };

const send = (m: unknown): void => void process.send?.(m);
const { client: redis, dispose } = familyClient(process.env.SG_REDIS_URL ?? 'redis://127.0.0.1:6379');
const cache = createCache({ redis, prefix: process.env.SG_PREFIX ?? 'sg', local: { max: 100 }, redisTimeout: 1000 });

process.on('message', (msg: Msg) => {
  if (msg.op === 'get') void cache.get(msg.key).then((value) => send({ ev: 'result', id: msg.id, value }));
  else if (msg.op === 'compute') {
    let loaded = false;
    const delayMs = msg.delayMs ?? 0;
    const loader = async () => ((loaded = true), delayMs > 0 && (await new Promise((r) => setTimeout(r, delayMs))), msg.value);
    const options = { ttl: 60_000, ...(msg.tags ? { tags: msg.tags } : {}), ...(msg.staleTtl ? { staleTtl: msg.staleTtl } : {}) };
    void cache.getOrCompute(msg.key, loader, options).then((value) => send({ ev: 'result', id: msg.id, value, loaded }));
  } else if (msg.op === 'stats') send({ ev: 'stats', id: msg.id, stats: cache.stats() });
  else {
    void cache.close().then(() => {
      dispose();
      process.exit(0);
    });
  }
});

void Promise.all([redis.ping(), cache.ready()]).then(() => send({ ev: 'ready' }));
