/**
 * Prometheus metrics for stampede-guard with prom-client: loader runs, rebuilds saved, stale values
 * served, hits and misses (read from `cache.stats()` at each scrape, so the hot path pays nothing
 * more), and a histogram of how long callers waited for another process's rebuild (from the
 * `waited` event).
 *
 * Useful queries:
 *   sum(rate(stampede_guard_rebuilds_saved_total[5m]))   rebuilds the stampede protection saved
 *   sum(rate(stampede_guard_loader_runs_total[5m]))      rebuilds that hit your origin
 *   histogram_quantile(0.99, sum by (le) (rate(stampede_guard_lock_wait_seconds_bucket[5m])))
 *   min by (node) (stampede_guard_redis_node_up) == 0       a Redis node is hung or refused (alert)
 *   increase(stampede_guard_redis_node_health_changes_total{state="suspect"}[10m])   hangs, even short ones
 *
 * Run (prints one scrape after a small cold stampede): npm run example -- prometheus
 * (a throwaway redis-server unless REDIS_URL is set), or
 *   REDIS_URL=redis://127.0.0.1:6379 node --import tsx examples/prometheus.ts
 */
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { createCache, type Cache, type CacheEvents, type CacheStats } from 'stampede-guard';

/** Counters whose value is the cache's own counter, read when the registry is scraped. */
const STATS_COUNTERS: readonly { name: string; help: string; read: (s: CacheStats) => number }[] = [
  { name: 'stampede_guard_loader_runs_total', help: 'Loaders started in this process (rebuilds that reached the origin).', read: (s) => s.loaderRuns },
  { name: 'stampede_guard_stale_served_total', help: 'Callers answered with an expired value (stale window or fail-safe).', read: (s) => s.staleServed },
  { name: 'stampede_guard_hits_total', help: 'Callers answered with a fresh value (L1 or Redis).', read: (s) => s.hits },
  { name: 'stampede_guard_misses_total', help: 'Callers whose lookup found no usable value.', read: (s) => s.misses },
];
const REBUILDS_SAVED = 'stampede_guard_rebuilds_saved_total';
const NODE_UP = 'stampede_guard_redis_node_up';
const NODE_HEALTH = 'stampede_guard_redis_node_health_changes_total';
const LOCK_WAIT = 'stampede_guard_lock_wait_seconds';

/**
 * Registers the cache's metrics in `registry` (one cache per registry: the names are fixed) and
 * returns the function that removes them again.
 */
export function registerCacheMetrics(cache: Cache, registry: Registry): () => void {
  for (const { name, help, read } of STATS_COUNTERS) {
    new Counter({
      name,
      help,
      registers: [registry],
      collect() {
        // stats() is cumulative since the cache was created: the counter takes its value as it is.
        this.reset();
        this.inc(read(cache.stats()));
      },
    });
  }
  new Counter({
    name: REBUILDS_SAVED,
    help: "Callers answered by another caller's load instead of running their own: in this process (via=coalesced) or in another (via=waited).",
    labelNames: ['via'] as const,
    registers: [registry],
    collect() {
      const s = cache.stats();
      this.reset();
      this.inc({ via: 'coalesced' }, s.coalesced);
      this.inc({ via: 'waited' }, s.waited);
    },
  });
  const lockWait = new Histogram({
    name: LOCK_WAIT,
    help: "Time spent waiting for another process's rebuild, one observation per wait (callers sharing a flight share its wait), by how the wait ended.",
    labelNames: ['outcome'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });
  const onWaited = ({ ms, outcome }: CacheEvents['waited'][0]): void => lockWait.observe({ outcome }, ms / 1000);
  cache.on('waited', onWaited);
  // Each Redis node's health, read at each scrape (cache.health() is a walk over the few nodes seen):
  // 1 while healthy, 0 while suspect (hung: nothing sent, calls answered from memory) or open (breaker).
  new Gauge({
    name: NODE_UP,
    help: 'Whether the cache sends operations to this Redis node (1) or skips it as suspect or with its breaker open (0).',
    labelNames: ['node', 'state'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const n of cache.health().nodes) this.set({ node: n.node, state: n.state }, n.state === 'healthy' ? 1 : 0);
    },
  });
  // Every change, so an outage shorter than the scrape interval still shows (alert on increase of state="suspect").
  const healthChanges = new Counter({
    name: NODE_HEALTH,
    help: 'Redis node health changes: suspect (no reply within redisTimeout), open (breaker opened), recovered.',
    labelNames: ['node', 'state'] as const,
    registers: [registry],
  });
  const onHealth = ({ node, state }: CacheEvents['health'][0]): void => healthChanges.inc({ node, state });
  cache.on('health', onHealth);

  return () => {
    cache.off('waited', onWaited);
    cache.off('health', onHealth);
    for (const name of [...STATS_COUNTERS.map((c) => c.name), REBUILDS_SAVED, LOCK_WAIT, NODE_UP, NODE_HEALTH]) registry.removeSingleMetric(name);
  };
}

/** The demo (only when this file is run, not imported): a small cold stampede, then one scrape. */
async function main(): Promise<void> {
  const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
  const cache = createCache({ redis, prefix: 'example-prom' });
  const registry = new Registry();
  const unregister = registerCacheMetrics(cache, registry);

  const key = `report:${Date.now()}`;
  const slowQuery = () => new Promise<string>((resolve) => setTimeout(resolve, 200, 'the report'));
  await Promise.all(Array.from({ length: 20 }, () => cache.getOrCompute(key, slowQuery, 60_000)));
  // In a server, answer GET /metrics with this text (content type: registry.contentType).
  console.log(await registry.metrics());

  unregister();
  await cache.close();
  await redis.quit();
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
