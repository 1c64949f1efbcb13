import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCache, type Cache, type RedisClient } from '../../src/index.js';
import { APP_COMMANDS } from '../support/acl.js';
import { familyClient, type FamilyOptions, type TestClient } from '../support/clients.js';
import { countCommands, heldRebuild, missedCall } from '../support/harness.js';
import { freePort, startRedisServer, type RedisServer } from '../support/redis-server.js';

/**
 * The caches run on the client family under test (SG_TEST_CLIENT, test/support/clients.ts); the
 * test's own admin reads (ACL SETUSER, INFO) use ioredis.
 */
const clients: Redis[] = [];
const disposals: (() => void)[] = [];
const caches: Cache[] = [];
function admin(url: string): Redis {
  const c = new Redis(url, { maxRetriesPerRequest: 1 });
  c.on('error', () => undefined);
  clients.push(c);
  return c;
}
/** A client of the family under test, for a cache. */
function cacheClient(url: string, options: FamilyOptions = {}): RedisClient & TestClient {
  const { client, dispose } = familyClient(url, undefined, options);
  disposals.push(dispose);
  return client;
}
/** `url` authenticating as `username`. */
function as(url: string, username: string, password: string): string {
  const u = new URL(url);
  u.username = username;
  u.password = password;
  return u.toString();
}
afterAll(async () => {
  await Promise.all(caches.map((c) => c.close()));
  for (const c of clients) c.disconnect();
  for (const dispose of disposals) dispose();
});

/**
 * The least-privilege user the README documents: only the listed commands, only the cache's keys
 * (`~app:*`) and its channel (`&app:events`).
 */
const APP_ACL = ['on', '>app-password', 'resetkeys', '~app:*', 'resetchannels', '&app:events', '-@all', ...APP_COMMANDS];

describe('least-privilege ACL user', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedisServer();
    const root = admin(server.adminUrl);
    await root.acl('SETUSER', 'app', ...APP_ACL);
    await root.acl('SETUSER', 'noscript', 'on', '>pw', '~app:*', '&app:events', '-@all', '+ping', '+info', '+subscribe', '+get', '+set');
  });
  afterAll(async () => server.stop());

  const appCache = (extra: Record<string, unknown> = {}) => {
    const c = createCache({ redis: cacheClient(as(server.adminUrl, 'app', 'app-password')), prefix: 'app', ...extra });
    caches.push(c);
    return c;
  };

  it('runs the core behaviours: one loader for a stampede from two instances, woken by pub/sub, stale, set/get/delete, fencing', async () => {
    const a = appCache();
    const b = appCache({ defaults: { pollInterval: 3_600_000, waitTimeout: 3_600_000 } });
    const degraded: unknown[] = [];
    for (const c of [a, b]) c.on('degraded', (e) => degraded.push(e.error));
    await Promise.all([a.ready(), b.ready()]);
    let runs = 0;
    const held = await heldRebuild<string>(a, 'k', 60_000, () => runs++);
    const waiting = await missedCall(b, 'k', () => (runs++, 'b'));
    held.open('a');
    expect([await held.call, await waiting.call]).toEqual(['a', 'a']);
    expect(runs).toBe(1);
    await a.getOrCompute('s', () => 'old', { ttl: 30, staleTtl: 60_000 });
    await new Promise((r) => setTimeout(r, 60));
    expect(await b.getOrCompute('s', () => 'new', { ttl: 60_000, staleTtl: 60_000 })).toBe('old');
    await a.set('x', 1, 60_000);
    expect(await b.get('x')).toBe(1);
    await b.delete('x');
    expect(await a.get('x')).toBeUndefined();
    expect(degraded).toEqual([]);
  });

  it('a missing permission is a typed ERR_REDIS_NOPERM, not a retry storm', async () => {
    const redis = cacheClient(as(server.adminUrl, 'noscript', 'pw'));
    await redis.ping();
    const cache = createCache({ redis, prefix: 'app', breakerThreshold: 2, breakerCooldown: 60_000 });
    caches.push(cache);
    await expect(cache.set('k', 1, 1000)).rejects.toMatchObject({ code: 'ERR_REDIS_NOPERM' });
    // The breaker is open after two refusals: 50 more calls answer (degraded) without sending anything.
    await cache.get('k');
    const sent = countCommands(redis);
    const answers = await Promise.all(Array.from({ length: 50 }, (_, i) => cache.getOrCompute(`k${i}`, () => i, 1000)));
    expect(answers).toEqual(Array.from({ length: 50 }, (_, i) => i));
    expect(sent.count).toBe(0);
  });
});

/** Commands the server has executed so far (INFO stats), read over its plain port as the default user. */
async function commandsProcessed(plainAdmin: Redis): Promise<number> {
  return Number(/total_commands_processed:(\d+)/.exec(await plainAdmin.info('stats'))?.[1]);
}

describe('TLS', () => {
  let dir: string;
  let port: number;
  /** The server's plain port, for the test's own INFO reads. */
  let plainAdmin: Redis;
  /** Unset if no server of ours could be started. */
  let server: RedisServer | undefined;
  let ca: Buffer | undefined;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sg-tls-'));
    const sh = (args: string[]) => {
      const r = spawnSync('openssl', args, { cwd: dir, encoding: 'utf8' });
      if (r.status !== 0) throw new Error(`openssl ${args.join(' ')}: ${r.stderr}`);
    };
    sh(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=sg-test-ca', '-keyout', 'ca.key', '-out', 'ca.crt']);
    sh(['req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=localhost', '-keyout', 'server.key', '-out', 'server.csr']);
    writeFileSync(join(dir, 'san.ext'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
    sh(['x509', '-req', '-in', 'server.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '1', '-out', 'server.crt', '-extfile', 'san.ext']);
    ca = readFileSync(join(dir, 'ca.crt'));
    // startRedisServer picks the plain port and checks that the server answering it is ours; a TLS
    // port another file's server took first makes ours exit, so try again on a new one.
    for (let attempt = 1; ; attempt++) {
      port = await freePort();
      try {
        server = await startRedisServer([
          '--tls-port', String(port), '--tls-cert-file', join(dir, 'server.crt'), '--tls-key-file', join(dir, 'server.key'),
          '--tls-ca-cert-file', join(dir, 'ca.crt'), '--tls-auth-clients', 'no',
        ]);
        break;
      } catch (err) {
        if (attempt >= 3) throw err;
      }
    }
    plainAdmin = admin(server.adminUrl);
  });
  afterAll(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const url = () => `rediss://127.0.0.1:${port}`;

  it('the cache works over TLS with a verified certificate, pub/sub included', async () => {
    const tls = { ca, servername: 'localhost' };
    const a = createCache({ redis: cacheClient(url(), { tls }), prefix: 'tls' });
    const b = createCache({ redis: cacheClient(url(), { tls }), prefix: 'tls', defaults: { pollInterval: 3_600_000, waitTimeout: 3_600_000 } });
    caches.push(a, b);
    const before = await commandsProcessed(plainAdmin);
    await Promise.all([a.ready(), b.ready()]);
    const held = await heldRebuild<string>(a, 'k');
    const waiting = await missedCall(b, 'k', () => 'b');
    held.open('over-tls');
    expect([await held.call, await waiting.call]).toEqual(['over-tls', 'over-tls']);
    // The count the refusal tests rely on sees TLS traffic (the INFO read itself is one command).
    expect((await commandsProcessed(plainAdmin)) - before).toBeGreaterThan(5);
    // Closed now, so their subscriber heartbeats do not count in the refusal tests below.
    await Promise.all([a.close(), b.close()]);
  });

  // Options are built lazily: the CA exists only once beforeAll has run.
  it.each([
    ['an untrusted certificate (no CA given)', () => ({ servername: 'localhost' })],
    ['a wrong server name', () => ({ ca, servername: 'not-the-server.example' })],
  ])('refuses %s: nothing reaches Redis, set() rejects, getOrCompute degrades to the loader', async (_what, tlsOptions) => {
    const tls = tlsOptions();
    expect(tls.servername).toBeDefined();
    const cache = createCache({ redis: cacheClient(url(), { tls, retryDelay: 1000 }), prefix: 'tls-bad', redisTimeout: 300 });
    caches.push(cache);
    const errors: unknown[] = [];
    cache.on('degraded', (e) => errors.push(e.error));
    const before = await commandsProcessed(plainAdmin);
    await expect(cache.set('k', 1, 1000)).rejects.toMatchObject({ code: 'ERR_REDIS_UNAVAILABLE' });
    expect(await cache.getOrCompute('k', () => 'local', 1000)).toBe('local');
    expect(errors.length).toBeGreaterThan(0);
    // Nothing reached Redis: the server executed no command but the previous INFO read.
    expect((await commandsProcessed(plainAdmin)) - before).toBe(1);
  });

  it('refuses a client that skips certificate verification unless allowInsecureTls is set', () => {
    // Connecting: node-redis clients never connected are refused (ERR_CLIENT_NOT_CONNECTED).
    const insecure = cacheClient(url(), { tls: { rejectUnauthorized: false } });
    expect(() => createCache({ redis: insecure, prefix: 'tls-insecure' })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'redis' }));
    const allowed = createCache({ redis: insecure, prefix: 'tls-insecure', allowInsecureTls: true });
    caches.push(allowed);
  });
});
