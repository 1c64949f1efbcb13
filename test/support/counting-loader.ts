/**
 * The loader used by multi-process tests and the benchmarks: it counts its runs and its concurrent
 * runs per key in Redis (a separate connection from the cache's), so the parent can check
 * "exactly one run" and "never two at once" across processes.
 */
import type { Redis } from 'ioredis';
import type { LoaderContext } from '../../src/index.js';

export type LoaderSpec =
  | { kind: 'sleep'; ms: number; value?: unknown }
  | { kind: 'gate'; gate: string }
  | { kind: 'throw'; ms: number; message: string }
  | { kind: 'undefined' };

export const runsKey = (key: string) => `test:runs:${key}`;
export const activeKey = (key: string) => `test:active:${key}`;
export const maxActiveKey = (key: string) => `test:maxactive:${key}`;

// Raises the max-concurrency mark atomically.
const RAISE_MAX = `
local n = redis.call('INCR', KEYS[1])
local m = tonumber(redis.call('GET', KEYS[2]) or '0')
if n > m then redis.call('SET', KEYS[2], n) end
return n`;

export function countingLoader(
  counters: Redis,
  spec: LoaderSpec,
  hooks: { onStart?: (ctx: LoaderContext) => void; waitGate?: (gate: string) => Promise<unknown> } = {},
) {
  return async (ctx: LoaderContext): Promise<unknown> => {
    const run = await counters.incr(runsKey(ctx.key));
    await counters.eval(RAISE_MAX, 2, activeKey(ctx.key), maxActiveKey(ctx.key));
    hooks.onStart?.(ctx);
    try {
      switch (spec.kind) {
        case 'sleep':
          await new Promise((r) => setTimeout(r, spec.ms));
          return spec.value ?? { run, pid: process.pid };
        case 'gate':
          return await (hooks.waitGate as (g: string) => Promise<unknown>)(spec.gate);
        case 'throw':
          await new Promise((r) => setTimeout(r, spec.ms));
          throw new Error(spec.message);
        case 'undefined':
          return undefined;
      }
    } finally {
      await counters.decr(activeKey(ctx.key));
    }
  };
}
