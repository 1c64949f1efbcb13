/**
 * The benches that FLUSHALL between runs never do it to a server they did not start unless told to:
 * with REDIS_URL set and no --flush they exit before sending a command, and the server's data stays.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedisServer, type RedisServer } from '../support/redis-server.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedisServer();
  admin = new Redis(server.adminUrl, { maxRetriesPerRequest: 1 });
});
afterAll(async () => {
  admin.disconnect();
  await server.stop();
});

/** Runs a bench script as `npm run …` would (tsx), with REDIS_URL at this file's server; its exit code and stderr. */
function runBench(script: string, args: string[] = []): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', script, ...args], {
      cwd: ROOT,
      env: { ...process.env, REDIS_URL: server.adminUrl },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('exit', (code) => resolve({ code, stderr }));
  });
}

describe('benches with REDIS_URL and without --flush', () => {
  it.each(['bench/run.ts', 'bench/fleet.ts', 'bench/batch.ts'])('%s refuses to start, naming --flush, and the server keeps its data', async (script) => {
    await admin.set('someone-elses-key', 'kept');
    const { code, stderr } = await runBench(script);
    expect(code).toBe(2);
    expect(stderr).toContain('--flush');
    expect(stderr).toContain('FLUSHALL');
    expect(await admin.get('someone-elses-key')).toBe('kept');
  });
});
