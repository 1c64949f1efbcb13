/**
 * `npm run example -- <name>`: runs examples/<name>.ts with what it needs.
 *
 * - Redis: REDIS_URL when set; otherwise a throwaway `redis-server` on a free port (the local binary,
 *   else testcontainers), stopped when the example ends.
 * - The web examples (express, fastify) listen on PORT (default 3000); once they listen, this prints
 *   the `curl` commands to try. The others run once, print their output and exit.
 * - Ctrl-C or SIGTERM: the example gets one SIGTERM and shuts down in order (server, cache, client);
 *   then the throwaway Redis is stopped. The example runs in a process group of its own, so a
 *   terminal's Ctrl-C reaches it only through this forwarding (a second signal would cut its orderly
 *   shutdown short).
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { provideRedis } from '../test/support/redis-server.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
/** Shared modules, not examples of their own. */
const LIBRARIES = new Set(['report-service']);
const examples = readdirSync(join(root, 'examples'))
  .filter((f) => f.endsWith('.ts'))
  .map((f) => f.slice(0, -3))
  .filter((n) => !LIBRARIES.has(n))
  .sort();

const WEB = new Set(['express', 'fastify']);
const WHAT_IT_DOES: Record<string, string> = {
  express: 'getOrCompute in an Express 5 handler (a 500 ms query cached for 60 s)',
  fastify: 'getOrCompute in a Fastify 5 handler (a 500 ms query cached for 60 s)',
  prometheus: 'prom-client metrics: one scrape printed after a small cold stampede',
  opentelemetry: 'OpenTelemetry spans and metrics from the tracing channel, printed to the console',
  'fenced-resource': "a loader's own side effect guarded by ctx.fencingToken",
};

const name = process.argv[2];
if (name === undefined || !examples.includes(name) || !existsSync(join(root, 'examples', `${name}.ts`))) {
  console.error(`usage: npm run example -- <name>\n\nexamples:\n${examples.map((n) => `  ${n.padEnd(16)} ${WHAT_IT_DOES[n] ?? ''}`).join('\n')}`);
  process.exit(name === undefined ? 0 : 1);
}

const redis = await provideRedis();
const port = process.env.PORT ?? '3000';
console.log(`example ${name}: ${WHAT_IT_DOES[name] ?? ''}`);
console.log(`redis: ${redis.source === 'REDIS_URL' ? 'REDIS_URL' : `a throwaway ${redis.source} at ${redis.url} (stopped on exit)`}`);

const child = spawn(process.execPath, ['--import', 'tsx', join(root, 'examples', `${name}.ts`)], {
  cwd: root,
  env: { ...process.env, REDIS_URL: redis.url, PORT: port },
  stdio: ['ignore', 'pipe', 'inherit'],
  detached: true, // its own process group: Ctrl-C is forwarded once, below
});

createInterface({ input: child.stdout }).on('line', (line) => {
  console.log(line);
  if (!WEB.has(name)) return;
  let listening: unknown;
  try {
    listening = (JSON.parse(line) as { listening?: unknown }).listening;
  } catch {
    return;
  }
  if (typeof listening !== 'number') return;
  console.log(`\ntry:\n  curl localhost:${listening}/reports/42     # the first call takes the slow query's time, the next ones are cached\n  curl localhost:${listening}/stats          # cache.stats() and what the origin saw\nCtrl-C to stop.\n`);
});

let stopping = false;
const stop = (): void => {
  if (stopping) return;
  stopping = true;
  if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
// If this process dies anyway, do not leave the example behind.
process.once('exit', () => {
  if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});

const code = await new Promise<number>((done) => child.once('exit', (c, signal) => done(c ?? (signal ? 1 : 0))));
await redis.stop();
process.exit(code);
