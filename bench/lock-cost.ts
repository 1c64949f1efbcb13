/**
 * `npm run bench:locks`: acquire + release latency for `single` and Redlock over 3 and 5 local nodes,
 * and over 5 with one node frozen (SIGSTOP), side by side in one run; medians of 3 runs.
 */
import { lockCost } from './lib/micro.js';
import { provideRedis, startRedisServer } from '../test/support/redis-server.js';

const store = await provideRedis();
const nodes = await Promise.all(Array.from({ length: 5 }, () => startRedisServer()));
const last = nodes[4] as (typeof nodes)[number];
try {
  const figures = await lockCost(store.url, nodes.slice(0, 3).map((n) => n.url), nodes.map((n) => n.url), 2000, 3, {
    pause: () => last.pause(),
    resume: () => last.resume(),
  });
  console.log('npm run bench:locks (sequential operations, medians of 3 runs × 2000)\n\n| operation | p50 µs | p99 µs |\n|---|---:|---:|');
  for (const f of figures) console.log(`| ${f.name} | ${f.p50us.toFixed(1)} | ${f.p99us.toFixed(1)} |`);
} finally {
  await Promise.all(nodes.map((n) => n.stop()));
  await store.stop();
}
