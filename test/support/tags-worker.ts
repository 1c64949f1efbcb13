/**
 * A forked process with its own cache (L1 on, the client family under test) for the tags tests:
 * it reads and writes tagged entries on request, so a test can see what ANOTHER process serves
 * (its L1 included) once a deleteByTag made elsewhere resolved.
 *
 * Parent → worker: { op: 'get', id, key } | { op: 'compute', id, key, value, tags?, staleTtl?, delayMs? }
 *   | { op: 'computeMany', id, values, tags?, keyTags?, gated? } | { op: 'open', id } | { op: 'stats', id } | { op: 'exit' }
 * (`delayMs`: the loader takes that long before it returns `value`; `computeMany`: getOrComputeMany of
 * the keys of `values`, each loaded as its value, the call tagged `tags`, and each key `k` tagged
 * `keyTags[k]` by loadMany's `ctx.setOptions(k, { tags })`; `gated`: loadMany says `started` and
 * returns only once the parent sends `open` with the call's id.)
 * Worker → parent: { ev: 'ready' } | { ev: 'started', id } | { ev: 'result', id, value, loaded } | { ev: 'stats', id, stats }
 * With SG_TAG_SNAPSHOT_AT_WRITE=1 the cache runs the negative control UNSAFE.tagSnapshotAtWrite.
 */
import { createCache, type CacheOptions } from '../../src/index.js';
import { UNSAFE } from '../../src/unsafe.js';
import { familyClient } from './family.js';

type Msg =
  | { op: 'get'; id: number; key: string }
  | { op: 'compute'; id: number; key: string; value: unknown; tags?: string[]; staleTtl?: number; delayMs?: number }
  | { op: 'computeMany'; id: number; values: Record<string, unknown>; tags?: string[]; keyTags?: Record<string, string[]>; gated?: boolean }
  | { op: 'open'; id: number }
  | { op: 'stats'; id: number }
  | { op: 'exit' };

const send = (m: unknown): void => void process.send?.(m);
const { client: redis, dispose } = familyClient(process.env.SG_REDIS_URL ?? 'redis://127.0.0.1:6379');
const unsafe = process.env.SG_TAG_SNAPSHOT_AT_WRITE === '1' ? ({ [UNSAFE]: { tagSnapshotAtWrite: true } } as Partial<CacheOptions>) : {};
const cache = createCache({ redis, prefix: process.env.SG_PREFIX ?? 'sg', local: { max: 100 }, redisTimeout: 1000, ...unsafe });
/** The gated batches' loaders, waiting for the parent's `open`. */
const gates = new Map<number, () => void>();

function computeMany(msg: Extract<Msg, { op: 'computeMany' }>): void {
  let loaded = false;
  let gated = msg.gated === true; // the first loadMany only (a key loaded on its own later runs at once)
  const keys = Object.keys(msg.values);
  const loadMany = async (missing: string[], ctx: { setOptions(key: string, options: { tags: string[] }): void }) => {
    loaded = true;
    if (gated) {
      gated = false;
      const open = new Promise<void>((resolve) => gates.set(msg.id, resolve));
      send({ ev: 'started', id: msg.id });
      await open;
    }
    for (const k of missing) if (msg.keyTags?.[k]) ctx.setOptions(k, { tags: msg.keyTags[k] });
    return new Map(missing.map((k) => [k, msg.values[k]]));
  };
  const options = { ttl: 60_000, ...(msg.tags ? { tags: msg.tags } : {}) };
  void cache.getOrComputeMany(keys, loadMany, options).then((value) => send({ ev: 'result', id: msg.id, value, loaded }));
}

process.on('message', (msg: Msg) => {
  if (msg.op === 'get') void cache.get(msg.key).then((value) => send({ ev: 'result', id: msg.id, value }));
  else if (msg.op === 'compute') {
    let loaded = false;
    const delayMs = msg.delayMs ?? 0;
    const loader = async () => ((loaded = true), delayMs > 0 && (await new Promise((r) => setTimeout(r, delayMs))), msg.value);
    const options = { ttl: 60_000, ...(msg.tags ? { tags: msg.tags } : {}), ...(msg.staleTtl ? { staleTtl: msg.staleTtl } : {}) };
    void cache.getOrCompute(msg.key, loader, options).then((value) => send({ ev: 'result', id: msg.id, value, loaded }));
  } else if (msg.op === 'computeMany') computeMany(msg);
  else if (msg.op === 'open') gates.get(msg.id)?.();
  else if (msg.op === 'stats') send({ ev: 'stats', id: msg.id, stats: cache.stats() });
  else {
    void cache.close().then(() => {
      dispose();
      process.exit(0);
    });
  }
});

void Promise.all([redis.ping(), cache.ready()]).then(() => send({ ev: 'ready' }));
