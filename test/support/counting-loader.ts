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
  | { kind: 'undefined' }
  /** Waits for `gate`, then writes `value` to a fenced resource (see FENCED_WRITE) with ctx.fencingToken. */
  | { kind: 'fenced-resource'; gate: string; resource: string };

/**
 * A resource outside the cache that protects itself with the grant's fencing token: it accepts a
 * write only if the token is newer than the last one it accepted (as a SQL `UPDATE … WHERE fence < $1`
 * would). KEYS[1]=resource hash; ARGV[1]=fence ARGV[2]=value. → 1 accepted | 0 stale token.
 */
export const FENCED_WRITE = `
local last = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) <= last then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1`;

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
        case 'fenced-resource': {
          const value = await (hooks.waitGate as (g: string) => Promise<unknown>)(spec.gate);
          const accepted = await counters.eval(FENCED_WRITE, 1, spec.resource, String(ctx.fencingToken), String(value));
          return { value, fence: ctx.fencingToken, accepted: accepted === 1 };
        }
      }
    } finally {
      await counters.decr(activeKey(ctx.key));
    }
  };
}
