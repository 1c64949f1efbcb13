/** Runs a web example (examples/express.ts, examples/fastify.ts) as a child process and talks HTTP to it. */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { ServiceStats } from '../../examples/report-service.js';

export interface ExampleEnv {
  redisUrl: string;
  prefix: string;
  slowQueryMs: number;
}

export class ExampleServer {
  /** Every JSON line the example printed on stdout, in order. */
  readonly lines: Record<string, unknown>[] = [];
  stderr = '';
  private readonly waiters = new Set<() => void>();
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

  /** Known once the example printed `{ listening: port }`. */
  port = 0;

  private constructor(readonly child: ChildProcess) {
    this.exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      try {
        this.lines.push(JSON.parse(line) as Record<string, unknown>);
      } catch {
        this.lines.push({ text: line });
      }
      for (const w of this.waiters) w();
    });
    child.stderr?.on('data', (d: Buffer) => (this.stderr += d.toString()));
  }

  /** Starts `examples/<name>.ts` on a free port (it listens on port 0 and prints the port it got). */
  static async start(name: 'express' | 'fastify', env: ExampleEnv): Promise<ExampleServer> {
    const file = fileURLToPath(new URL(`../../examples/${name}.ts`, import.meta.url));
    const child = spawn(process.execPath, ['--import', 'tsx', file], {
      // The example reads the conventional REDIS_URL; here it is this test's own redis-server.
      env: { ...process.env, REDIS_URL: env.redisUrl, PORT: '0', CACHE_PREFIX: env.prefix, SLOW_QUERY_MS: String(env.slowQueryMs) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const server = new ExampleServer(child);
    server.port = (await server.line((l) => typeof l.listening === 'number')).listening as number;
    return server;
  }

  /** The first JSON line (printed already or later) matching `pred`; rejects if the process exits first. */
  line(pred: (l: Record<string, unknown>) => boolean): Promise<Record<string, unknown>> {
    return new Promise((resolve, reject) => {
      const check = (): boolean => {
        const found = this.lines.find(pred);
        if (found) {
          this.waiters.delete(waiter);
          resolve(found);
        }
        return found !== undefined;
      };
      const waiter = (): void => void check();
      if (check()) return;
      this.waiters.add(waiter);
      void this.exited.then(({ code }) => reject(new Error(`example exited (${code}) before printing the line; stderr: ${this.stderr}`)));
    });
  }

  url(path: string): string {
    return `http://127.0.0.1:${this.port}${path}`;
  }

  async stats(): Promise<ServiceStats> {
    return (await (await fetch(this.url('/stats'))).json()) as ServiceStats;
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** SIGTERM, then the exit. SIGKILL after 10 s so a hung example cannot outlive the test. */
  async stop(): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    if (!this.running) return this.exited;
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
    this.child.kill('SIGTERM');
    const exit = await this.exited;
    clearTimeout(timer);
    return exit;
  }
}
