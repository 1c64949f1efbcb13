/**
 * `npm run bench:tracing`: the cost of the `stampede-guard:getOrCompute` tracing channel on the
 * fresh-hit paths, with nobody subscribed and with one subscriber; medians of 5 runs. `npm run bench`
 * measures the same figures (the "Tracing channel" table).
 */
import { tracingCost } from './lib/micro.js';
import { provideRedis } from '../test/support/redis-server.js';

const RUNS = 5;
const OPS = 5000;
const store = await provideRedis();
try {
  const figures = await tracingCost(store.url, OPS, RUNS);
  console.log(`npm run bench:tracing (sequential operations; medians of ${RUNS} runs × ${OPS} Redis hits, × ${OPS * 10} L1 hits, L1 timed in batches of 100)\n\n| operation | p50 µs | p99 µs |\n|---|---:|---:|`);
  for (const f of figures) console.log(`| ${f.name} | ${f.p50us.toFixed(2)} | ${f.p99us.toFixed(2)} |`);
} finally {
  await store.stop();
}
