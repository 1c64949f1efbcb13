/** Drives bench/http-server.ts with autocannon, one lock mode at a time, and reads origin calls from Redis. */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { Redis } from 'ioredis';
import type { LockMode } from '../../src/index.js';
import { freePort } from '../../test/support/redis-server.js';

export interface HttpFigure {
  mode: LockMode;
  requestsPerSec: number;
  p50ms: number;
  p99ms: number;
  originCalls: number;
  originCallsPerExpiry: number;
  errors: number;
}

const SERVER = fileURLToPath(new URL('../http-server.ts', import.meta.url));

export async function httpRun(opts: {
  url: string;
  redlockUrls: string[];
  mode: LockMode;
  workers: number;
  connections: number;
  durationSec: number;
  keys: number;
  originMs: number;
  ttlMs: number;
}): Promise<HttpFigure> {
  const port = await freePort();
  const prefix = `http${Date.now()}${opts.mode}`;
  const child = spawn(process.execPath, ['--import', 'tsx', SERVER], {
    env: {
      ...process.env,
      SG_HTTP_WORKERS: String(opts.workers),
      SG_HTTP_PORT: String(port),
      SG_REDIS_URL: opts.url,
      SG_MODE: opts.mode,
      SG_ORIGIN_MS: String(opts.originMs),
      SG_TTL_MS: String(opts.ttlMs),
      SG_PREFIX: prefix,
      SG_REDLOCK_URLS: opts.redlockUrls.join(','),
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => d.toString().includes('listening') && resolve());
    child.once('exit', () => reject(new Error('http server exited')));
  });
  const result = await autocannon({
    url: `http://127.0.0.1:${port}`,
    connections: opts.connections,
    duration: opts.durationSec,
    requests: [{ setupRequest: (req) => ({ ...req, path: `/item/${Math.floor(Math.random() * opts.keys)}` }) }],
  });
  const redis = new Redis(opts.url);
  const originCalls = Number(await redis.get(`${prefix}:origin-calls`));
  redis.disconnect();
  child.kill('SIGTERM');
  await new Promise((r) => child.once('exit', r));
  const expiries = opts.keys * Math.ceil((opts.durationSec * 1000) / opts.ttlMs);
  return {
    mode: opts.mode,
    requestsPerSec: result.requests.average,
    p50ms: result.latency.p50,
    p99ms: result.latency.p99,
    originCalls,
    originCallsPerExpiry: originCalls / expiries,
    errors: result.errors + result.non2xx,
  };
}
