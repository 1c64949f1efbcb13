/** Parent side of test/support/worker.ts: fork, drive, collect events, kill/pause by PID. */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, beforeAll } from 'vitest';
import type { CacheStats, CallOptions } from '../../src/index.js';
import type { LoaderSpec } from './counting-loader.js';
import { startRedisServer, type RedisServer } from './redis-server.js';
import type { CallResult } from './worker.js';

const WORKER = fileURLToPath(new URL('./worker.ts', import.meta.url));

export interface WorkerEvent {
  ev: string;
  id?: number;
  name?: string;
  data?: Record<string, unknown>;
  results?: CallResult[];
  key?: string;
  fence?: number;
  stats?: CacheStats;
  /** On 'ready': the port family the worker's cache picked ('ioredis' | 'node-redis'). */
  family?: string;
}

export class Worker {
  readonly events: WorkerEvent[] = [];
  private nextId = 1;
  private listeners = new Set<(e: WorkerEvent) => void>();
  /** The port family of this worker's cache (SG_TEST_CLIENT's: see test/support/clients.ts). */
  family: string | undefined;

  private constructor(readonly child: ChildProcess) {
    child.on('message', (m: WorkerEvent) => {
      this.events.push(m);
      for (const l of this.listeners) l(m);
    });
  }

  static async start(env: WorkerEnv): Promise<Worker> {
    const child = fork(WORKER, [], {
      execArgv: ['--import', 'tsx'],
      env: { ...process.env, SG_REDIS_URL: env.url, SG_ADMIN_URL: env.adminUrl ?? env.url, SG_PREFIX: env.prefix ?? 'sg', SG_REDIS_TIMEOUT: String(env.redisTimeout ?? 1000), SG_REDLOCK_URLS: (env.redlock ?? []).join(',') },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const w = new Worker(child);
    w.family = (await w.next((e) => e.ev === 'ready')).family;
    return w;
  }

  get pid(): number {
    return this.child.pid as number;
  }

  /** Resolves with the first event (already seen or future) matching `pred`. */
  next(pred: (e: WorkerEvent) => boolean): Promise<WorkerEvent> {
    const seen = this.events.find(pred);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const onExit = () => reject(new Error(`worker ${this.child.pid} exited while waiting`));
      const l = (e: WorkerEvent) => {
        if (!pred(e)) return;
        this.listeners.delete(l);
        this.child.off('exit', onExit);
        resolve(e);
      };
      this.listeners.add(l);
      this.child.once('exit', onExit);
    });
  }

  /** Starts `callers` concurrent getOrCompute calls in the worker; returns their id (await results with `results`). */
  call(key: string, callers: number, options: CallOptions, loader: LoaderSpec): number {
    const id = this.nextId++;
    this.child.send({ op: 'call', id, key, callers, options, loader });
    return id;
  }

  async results(id: number): Promise<CallResult[]> {
    const e = await this.next((m) => m.ev === 'result' && m.id === id);
    return e.results as CallResult[];
  }

  /** The worker's cache.stats(). */
  async stats(): Promise<CacheStats> {
    const id = this.nextId++;
    this.child.send({ op: 'stats', id });
    const e = await this.next((m) => m.ev === 'stats' && m.id === id);
    return e.stats as CacheStats;
  }

  loaderStarted(id: number): Promise<WorkerEvent> {
    return this.next((m) => m.ev === 'loader-start' && m.id === id);
  }

  open(gate: string, value: unknown): void {
    this.child.send({ op: 'open', gate, value });
  }

  cacheEvents(name: string): Record<string, unknown>[] {
    return this.events.filter((e) => e.ev === 'cache' && e.name === name).map((e) => e.data as Record<string, unknown>);
  }

  pause(): void {
    process.kill(this.pid, 'SIGSTOP');
  }

  resume(): void {
    process.kill(this.pid, 'SIGCONT');
  }

  async kill(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    process.kill(this.pid, 'SIGCONT');
    this.child.kill('SIGKILL');
    await exited;
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    // The callback takes a send that races the child's own exit (EPIPE) instead of an uncaught error.
    this.child.send({ op: 'exit' }, () => undefined);
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  }
}

export interface WorkerEnv {
  url: string;
  /** For the loader's counters (the test's bookkeeping); defaults to `url`. */
  adminUrl?: string;
  prefix?: string;
  redisTimeout?: number;
  /** URLs of Redlock nodes (independent masters). */
  redlock?: string[];
}

export async function startWorkers(n: number, env: WorkerEnv): Promise<Worker[]> {
  return Promise.all(Array.from({ length: n }, () => Worker.start(env)));
}

/**
 * `n` forked workers on a Redis server of their own, started in beforeAll and stopped in afterAll;
 * `admin` is the default user, for the test's bookkeeping (the loader's counters).
 */
export function useWorkerFleet(n: number): { readonly workers: Worker[]; readonly admin: Redis } {
  let server: RedisServer | undefined;
  let admin: Redis | undefined;
  let workers: Worker[] = [];
  beforeAll(async () => {
    server = await startRedisServer();
    admin = new Redis(server.adminUrl);
    workers = await startWorkers(n, { url: server.url, adminUrl: server.adminUrl });
  });
  afterAll(async () => {
    await Promise.all(workers.map((w) => w.stop()));
    admin?.disconnect();
    await server?.stop();
  });
  return {
    get workers() {
      return workers;
    },
    get admin() {
      return admin as Redis;
    },
  };
}
