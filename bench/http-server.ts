/**
 * The HTTP scenario's app: node:cluster with SG_HTTP_WORKERS workers sharing one port. Each request
 * `/item/<n>` wraps a slow origin call (SG_ORIGIN_MS) in getOrCompute under lock mode SG_MODE; the
 * origin counts its calls in Redis (a separate connection) so the driver can read origin calls.
 * node:http, not a framework: the figure should be the cache's cost, not a router's.
 */
import cluster from 'node:cluster';
import { createServer } from 'node:http';
import { Redis } from 'ioredis';
import { createCache, type LockMode } from '../src/index.js';

const workers = Number(process.env.SG_HTTP_WORKERS ?? 4);
const port = Number(process.env.SG_HTTP_PORT ?? 0);
const url = process.env.SG_REDIS_URL ?? 'redis://127.0.0.1:6379';
const mode = (process.env.SG_MODE ?? 'single') as LockMode;
const originMs = Number(process.env.SG_ORIGIN_MS ?? 50);
const ttl = Number(process.env.SG_TTL_MS ?? 500);
const prefix = process.env.SG_PREFIX ?? 'http';

if (cluster.isPrimary) {
  let listening = 0;
  for (let i = 0; i < workers; i++) {
    cluster.fork().on('listening', () => {
      if (++listening === workers) console.log('listening');
    });
  }
} else {
  const redis = new Redis(url, { maxRetriesPerRequest: 1 });
  const counter = new Redis(url, { maxRetriesPerRequest: 1 });
  const redlockUrls = (process.env.SG_REDLOCK_URLS ?? '').split(',').filter(Boolean);
  const nodes = redlockUrls.map((u) => new Redis(u, { maxRetriesPerRequest: 1 }));
  const cache = createCache({ redis, prefix, lock: mode, ...(nodes.length >= 3 ? { redlock: { nodes } } : {}) });
  const origin = (id: string) => async () => {
    await counter.incr(`${prefix}:origin-calls`);
    await new Promise((r) => setTimeout(r, originMs));
    return { id, at: Date.now() };
  };
  createServer((req, res) => {
    const id = (req.url ?? '/item/0').split('/')[2] ?? '0';
    cache.getOrCompute(`item:${id}`, origin(id), { ttl, waitTimeout: 10_000 }).then(
      (v) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(v));
      },
      () => {
        res.writeHead(500);
        res.end();
      },
    );
  }).listen(port, '127.0.0.1');
}
