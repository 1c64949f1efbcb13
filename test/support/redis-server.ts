/**
 * Real Redis for tests and benchmarks. Three sources, in order:
 *   1. REDIS_URL (a server someone else runs; shared, so keys are prefixed per test),
 *   2. a local `redis-server` binary started on a free port (and stopped afterwards),
 *   3. testcontainers, when a container runtime is reachable.
 * Fault tests need a process they can pause, kill and restart, so they call `startRedisServer`
 * directly (local binary only).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { APP_COMMANDS, IOREDIS_CLUSTER_COMMANDS, NODE_REDIS_CLUSTER_COMMANDS, TRACKING_COMMANDS } from './acl.js';

/**
 * With SG_TEST_ACL=1 the whole suite runs as a Redis ACL user holding only the commands the README
 * lists (APP_COMMANDS): every server started here gets that user, `url` authenticates as it, and
 * `adminUrl` (the default user) is left for the test's own fault injection and bookkeeping.
 */
export const AS_ACL_USER = process.env.SG_TEST_ACL === '1';
export const ACL_USER = { username: 'sgapp', password: 'sgapp-password' };
/**
 * On the nodes of a test Cluster, ACL_USER also holds what an ioredis Cluster client needs, and
 * node-redis Cluster clients authenticate as this user, which holds what node-redis needs.
 */
export const NODE_REDIS_CLUSTER_ACL_USER = { username: 'sgapp-nr', password: 'sgapp-nr-password' };

/** `url` with the ACL user's credentials in ACL mode; unchanged otherwise. */
export function asAppUser(url: string): string {
  if (!AS_ACL_USER) return url;
  const u = new URL(url);
  u.username = ACL_USER.username;
  u.password = ACL_USER.password;
  return u.toString();
}

export interface RedisServer {
  readonly host: string;
  readonly port: number;
  /** What the cache connects with (the least-privilege user in ACL mode). */
  readonly url: string;
  /** The default (all-powerful) user: for the test's own commands (CONFIG, DEBUG, counters…). */
  readonly adminUrl: string;
  /** The server's PID (local binary only). */
  readonly pid: number | undefined;
  /** SIGSTOP: the socket stays open and commands hang. */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  /** SIGKILL, then wait for the exit. Data is gone (no persistence unless args say otherwise). */
  kill(): Promise<void>;
  /** Start again on the same port and directory (e.g. after kill). */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

export function hasRedisBinary(): boolean {
  const r = spawnSync('redis-server', ['--version'], { stdio: 'ignore' });
  return r.status === 0;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const address = srv.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Resolves once the server answers PING (or rejects after ~10 s). `alive`: whether the process meant
 * to answer still runs; once it says no, rejects at once (a server that could not bind exits).
 */
export async function waitForPing(host: string, port: number, timeoutMs = 10_000, alive: () => boolean = () => true): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (!alive()) throw new Error(`the redis-server meant for ${host}:${port} exited before it answered PING`);
    const ok = await new Promise<boolean>((resolve) => {
      const socket = createConnection({ host, port });
      let buf = '';
      socket.setTimeout(500, () => {
        socket.destroy();
        resolve(false);
      });
      socket.once('error', () => resolve(false));
      socket.on('data', (d) => {
        buf += d.toString();
        if (buf.includes('\r\n')) {
          socket.destroy();
          resolve(buf.startsWith('+PONG'));
        }
      });
      socket.once('connect', () => socket.write('PING\r\n'));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`redis-server on ${host}:${port} did not answer PING within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Starts a throwaway redis-server on a free loopback port. Extra `args` are passed through (e.g. cluster flags). */
export async function startRedisServer(args: string[] = [], options: { port?: number; clusterNode?: boolean } = {}): Promise<RedisServer> {
  if (!hasRedisBinary()) throw new Error('redis-server is not installed; install it (Debian: apt-get install redis-server) or set REDIS_URL');
  let port = options.port ?? (await freePort());
  const dir = mkdtempSync(join(tmpdir(), 'sg-redis-'));
  const host = '127.0.0.1';
  let child: ChildProcess | undefined;

  const launch = async (): Promise<void> => {
    const c = spawn(
      'redis-server',
      ['--port', String(port), '--bind', host, '--save', '', '--appendonly', 'no', '--dir', dir, '--enable-debug-command', 'yes', '--protected-mode', 'no', ...args],
      { stdio: 'ignore' },
    );
    child = c;
    live.add(c);
    c.once('exit', () => live.delete(c));
    await waitForPing(host, port, 10_000, () => c.exitCode === null && c.signalCode === null);
    // The server answering may be another's that took the port first (ours then exits at once).
    const answering = serverPid(host, port);
    if (answering !== c.pid) {
      c.kill('SIGKILL'); // ours could not bind (and exits on its own), or does not answer INFO
      await exited(c);
      throw new Error(`port ${port} is answered by redis-server pid ${String(answering)}, not ours (${String(c.pid)})`);
    }
    if (AS_ACL_USER) {
      if (!options.clusterNode) createAppUser(host, port, ACL_USER, [...APP_COMMANDS, ...TRACKING_COMMANDS]);
      else {
        createAppUser(host, port, ACL_USER, [...APP_COMMANDS, ...IOREDIS_CLUSTER_COMMANDS]);
        createAppUser(host, port, NODE_REDIS_CLUSTER_ACL_USER, [...APP_COMMANDS, ...NODE_REDIS_CLUSTER_COMMANDS]);
      }
    }
  };
  const exited = (c: ChildProcess): Promise<void> =>
    c.exitCode !== null || c.signalCode !== null ? Promise.resolve() : new Promise((r) => c.once('exit', () => r()));

  // freePort() closes the port before redis-server binds it: a server started at the same moment
  // (a Cluster's nodes start side by side) can take it. Then this one exits at once; pick another.
  for (let attempt = 1; ; attempt++) {
    try {
      await launch();
      break;
    } catch (err) {
      const c = child;
      const died = c !== undefined && (c.exitCode !== null || c.signalCode !== null);
      c?.kill('SIGKILL');
      if (!died || options.port !== undefined || attempt >= 3) {
        rmSync(dir, { recursive: true, force: true });
        throw err;
      }
      port = await freePort();
    }
  }
  return {
    host,
    port,
    url: asAppUser(`redis://${host}:${port}`),
    adminUrl: `redis://${host}:${port}`,
    get pid() {
      return child?.pid;
    },
    pause: () => void child?.kill('SIGSTOP'),
    resume: () => void child?.kill('SIGCONT'),
    async kill() {
      const c = child;
      if (!c) return;
      c.kill('SIGCONT');
      c.kill('SIGKILL');
      await exited(c);
    },
    restart: launch,
    async stop() {
      const c = child;
      if (c) {
        c.kill('SIGCONT');
        c.kill('SIGKILL');
        await exited(c);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The process_id the redis-server on host:port reports (INFO server), or undefined if it does not answer. */
function serverPid(host: string, port: number): number | undefined {
  const r = spawnSync('redis-cli', ['-h', host, '-p', String(port), 'INFO', 'server'], { encoding: 'utf8' });
  const m = /process_id:(\d+)/.exec(r.stdout ?? '');
  return m ? Number(m[1]) : undefined;
}

/** ACL SETUSER for a least-privilege user (ACL rules are per server, and lost on restart). */
function createAppUser(host: string, port: number, user: { username: string; password: string }, commands: readonly string[]): void {
  const r = spawnSync('redis-cli', ['-h', host, '-p', String(port), 'ACL', 'SETUSER', user.username, 'on', `>${user.password}`, '~*', '&*', '-@all', ...commands], { encoding: 'utf8' });
  if (r.status !== 0 || !r.stdout.includes('OK')) throw new Error(`ACL SETUSER failed on ${port}: ${r.stdout} ${r.stderr}`);
}

export interface ProvidedRedis {
  readonly url: string;
  readonly adminUrl: string;
  readonly source: 'REDIS_URL' | 'redis-server' | 'testcontainers';
  stop(): Promise<void>;
}

/** The provider: REDIS_URL, else a local redis-server, else testcontainers, else a clear error. */
export async function provideRedis(): Promise<ProvidedRedis> {
  const fromEnv = process.env.REDIS_URL;
  if (fromEnv) return { url: fromEnv, adminUrl: fromEnv, source: 'REDIS_URL', stop: async () => undefined };
  if (hasRedisBinary()) {
    const server = await startRedisServer();
    return { url: server.url, adminUrl: server.adminUrl, source: 'redis-server', stop: () => server.stop() };
  }
  try {
    const { GenericContainer } = await import('testcontainers');
    const container = await new GenericContainer('redis:7').withExposedPorts(6379).start();
    return {
      url: `redis://${container.getHost()}:${container.getMappedPort(6379)}`,
      adminUrl: `redis://${container.getHost()}:${container.getMappedPort(6379)}`,
      source: 'testcontainers',
      stop: async () => {
        await container.stop();
      },
    };
  } catch (err) {
    throw new Error(
      `No Redis available: REDIS_URL is unset, redis-server is not installed, and testcontainers could not start a container (${(err as Error).message}). ` +
        'Install redis-server (apt-get install redis-server), or set REDIS_URL=redis://host:port.',
    );
  }
}

export interface RedisClusterHandle {
  readonly nodes: RedisServer[];
  /** Startup nodes for ioredis `new Cluster(...)`. */
  readonly startup: { host: string; port: number }[];
  stop(): Promise<void>;
}

/**
 * A real Redis Cluster of `masters` masters, each with `replicas` replicas (none by default), on free
 * ports, created with `redis-cli --cluster create`. `nodeTimeoutMs`: how long a dead node goes
 * unnoticed (a long one: no failure detection during the test).
 */
export async function startRedisCluster(masters = 3, nodeTimeoutMs = 5000, replicas = 0): Promise<RedisClusterHandle> {
  // A free port can be taken between freePort() and our server's bind by another file's node.
  // startRedisServer checks the answering server's process_id; should another's node still slip
  // through, `--cluster create` sees it "not empty": start again on new ports.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startRedisClusterOnce(masters, nodeTimeoutMs, replicas);
    } catch (err) {
      if (attempt >= 3 || !String((err as Error).message).includes('is not empty')) throw err;
    }
  }
}

async function startRedisClusterOnce(masters: number, nodeTimeoutMs: number, replicas: number): Promise<RedisClusterHandle> {
  const started = await Promise.allSettled(
    Array.from({ length: masters * (1 + replicas) }, () =>
      startRedisServer(['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', String(nodeTimeoutMs)], { clusterNode: true }),
    ),
  );
  const nodes = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed) {
    // No node of a cluster that could not start is left running.
    await Promise.all(nodes.map((n) => n.stop()));
    throw failed.reason;
  }
  const addrs = nodes.map((n) => `${n.host}:${n.port}`);
  const created = spawnSync('redis-cli', ['--cluster', 'create', ...addrs, '--cluster-replicas', String(replicas), '--cluster-yes'], { encoding: 'utf8' });
  if (created.status !== 0) {
    await Promise.all(nodes.map((n) => n.stop()));
    throw new Error(`redis-cli --cluster create failed: ${created.stdout}\n${created.stderr}`);
  }
  // Wait until every node agrees the cluster is up.
  const deadline = Date.now() + 20_000;
  for (const n of nodes) {
    for (;;) {
      const info = spawnSync('redis-cli', ['-h', n.host, '-p', String(n.port), 'cluster', 'info'], { encoding: 'utf8' }).stdout;
      if (info.includes('cluster_state:ok')) break;
      if (Date.now() > deadline) throw new Error(`cluster node ${n.port} not ok: ${info}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return {
    nodes,
    startup: nodes.map((n) => ({ host: n.host, port: n.port })),
    stop: async () => {
      await Promise.all(nodes.map((n) => n.stop()));
    },
  };
}
