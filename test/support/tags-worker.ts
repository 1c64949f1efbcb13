/**
 * A forked process with its own cache (L1 on, the client family under test) for the tags tests:
 * it reads and writes tagged entries on request, so a test can see what ANOTHER process serves
 * (its L1 included) once a deleteByTag made elsewhere resolved.
 *
 * Parent → worker: { op: 'get', id, key } | { op: 'compute', id, key, value, tags? } | { op: 'stats', id } | { op: 'exit' }
 * Worker → parent: { ev: 'ready' } | { ev: 'result', id, value, loaded } | { ev: 'stats', id, stats }
 */
import { createCache } from '../../src/index.js';
import { familyClient } from './family.js';

type Msg =
  | { op: 'get'; id: number; key: string }
  | { op: 'compute'; id: number; key: string; value: unknown; tags?: string[] }
  | { op: 'stats'; id: number }
  | { op: 'exit' };

const send = (m: unknown): void => void process.send?.(m);
const { client: redis, dispose } = familyClient(process.env.SG_REDIS_URL ?? 'redis://127.0.0.1:6379');
const cache = createCache({ redis, prefix: process.env.SG_PREFIX ?? 'sg', local: { max: 100 }, redisTimeout: 1000 });

process.on('message', (msg: Msg) => {
  if (msg.op === 'get') void cache.get(msg.key).then((value) => send({ ev: 'result', id: msg.id, value }));
  else if (msg.op === 'compute') {
    let loaded = false;
    const loader = () => ((loaded = true), msg.value);
    void cache.getOrCompute(msg.key, loader, msg.tags ? { ttl: 60_000, tags: msg.tags } : 60_000).then((value) => send({ ev: 'result', id: msg.id, value, loaded }));
  } else if (msg.op === 'stats') send({ ev: 'stats', id: msg.id, stats: cache.stats() });
  else {
    void cache.close().then(() => {
      dispose();
      process.exit(0);
    });
  }
});

void Promise.all([redis.ping(), cache.ready()]).then(() => send({ ev: 'ready' }));
