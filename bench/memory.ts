/**
 * `npm run bench:memory [-- --keys N] [--waiters W] [--breakdown DIR]`: heap per cached key (L1 on and off) and per
 * waiting caller (issue 12 §2), each in a fresh `--expose-gc` process (this file re-runs itself) on
 * the compiled library (dist/), against a redis-server started here:
 * - per key: N distinct keys through getOrCompute (a 5-field object each), heap after full GC minus
 *   the heap before, ÷ N — with L1 (`local: { max: 2N }`, so every key stays) and without;
 * - per waiting caller: another cache holds the lock of W keys (its loaders wait on a gate); this
 *   cache then starts W callers, one per key, that wait to be woken; heap while they all wait minus
 *   the heap before, ÷ W. Then the gate opens and every caller must get the value.
 * `--breakdown DIR`: the waiter child also writes heap snapshots before and while the callers wait
 * (DIR/before.heapsnapshot, DIR/during.heapsnapshot), and the table of what grew per waiter by kind
 * of object follows (bench/lib/heap-diff.ts: self sizes of reachable objects, so its total can be
 * below the heapUsed figure).
 * The 1,000,000-distinct-keys figure is `npm run bench:heap`.
 */
import { fork } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { writeHeapSnapshot } from 'node:v8';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { provideRedis } from '../test/support/redis-server.js';
import { heapGrowth } from './lib/heap-diff.js';
import { library } from './lib/library.js';

const { values: args } = parseArgs({ options: { keys: { type: 'string' }, waiters: { type: 'string' }, child: { type: 'string' }, url: { type: 'string' }, breakdown: { type: 'string' } } });
const N = Number(args.keys ?? 20_000);
const W = Number(args.waiters ?? 5_000);
const VALUE = { id: 42, name: 'Ada Lovelace', roles: ['admin', 'author'], profile: { city: 'London', since: 1843 } };

async function settledHeap(): Promise<number> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('needs --expose-gc');
  let last = Number.POSITIVE_INFINITY;
  for (let i = 0; i < 10; i++) {
    gc();
    await new Promise((r) => setImmediate(r));
    const used = process.memoryUsage().heapUsed;
    if (used >= last - 16 * 1024) return used;
    last = used;
  }
  return process.memoryUsage().heapUsed;
}

async function child(kind: string, url: string): Promise<number> {
  const { createCache } = (await library()).lib;
  const redis = new Redis(url);
  const prefix = `mem-${kind}-${process.pid}`;
  if (kind === 'waiter') {
    const holderRedis = new Redis(url);
    // A long lease: a full GC or a heap snapshot blocks this process (holder and waiters alike) for a while.
    const holder = createCache({ redis: holderRedis, prefix, defaults: { lockTtl: 600_000 } });
    const cache = createCache({ redis, prefix, defaults: { waitTimeout: 600_000 } });
    await Promise.all([holder.ready(), cache.ready()]);
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    const held = Array.from({ length: W }, (_, i) => holder.getOrCompute(`w${i}`, async () => (await gate, VALUE), 60_000));
    // Every lock is held before the waiters start (the holder's loaders run once each grant is taken).
    for (let tries = 0; tries < 600 && (await redis.eval(`return #redis.call('KEYS', ARGV[1])`, 0, `${prefix}:*:l:*`)) !== W; tries++) await new Promise((r) => setTimeout(r, 50));
    const before = await settledHeap();
    if (args.breakdown) writeHeapSnapshot(join(args.breakdown, 'before.heapsnapshot'));
    const waiting = Array.from({ length: W }, (_, i) => cache.getOrCompute(`w${i}`, () => 'not this', 60_000));
    await new Promise((r) => setTimeout(r, 1000)); // every caller has read, tried the lock and registered
    const during = await settledHeap();
    if (args.breakdown) writeHeapSnapshot(join(args.breakdown, 'during.heapsnapshot'));
    open();
    const got = await Promise.all(waiting);
    await Promise.all(held);
    // A stall past lockTtl (a loaded machine, or a heap snapshot blocking this one process) lets a
    // waiter take the lock over: then the measurement did not hold every caller waiting, so say so.
    const others = got.filter((v) => JSON.stringify(v) !== JSON.stringify(VALUE));
    if (others.length > 0) throw new Error(`${others.length} of ${W} waiters did not get the holder's value (e.g. ${JSON.stringify(others[0])}): a lock lapsed while they waited; run on a quieter machine`);
    await Promise.all([holder.close(), cache.close()]);
    holderRedis.disconnect();
    redis.disconnect();
    return (during - before) / W;
  }
  const cache = createCache({ redis, prefix, ...(kind === 'key-l1' ? { local: { max: 2 * N } } : {}) });
  const loader = () => ({ ...VALUE });
  for (let i = 0; i < 2000; i++) await cache.getOrCompute(`warm${i % 100}`, loader, 600_000); // compiled code, scripts, connections
  const before = await settledHeap();
  for (let i = 0; i < N; i += 100) await Promise.all(Array.from({ length: 100 }, (_, j) => cache.getOrCompute(`k${i + j}`, loader, 600_000)));
  const after = await settledHeap();
  await cache.close();
  redis.disconnect();
  return (after - before) / N;
}

if (args.child !== undefined) {
  const bytes = await child(args.child, args.url as string);
  process.send?.({ bytes }, () => process.exit(0));
} else {
  if (args.breakdown) mkdirSync(args.breakdown, { recursive: true });
  const store = await provideRedis();
  try {
    const run = (kind: string) =>
      new Promise<number>((resolve, reject) => {
        const c = fork(fileURLToPath(import.meta.url), ['--child', kind, '--url', store.url, '--keys', String(N), '--waiters', String(W), ...(args.breakdown ? ['--breakdown', args.breakdown] : [])], { execArgv: ['--expose-gc', '--import', 'tsx'] });
        c.once('message', (m: { bytes: number }) => resolve(m.bytes));
        c.once('exit', (code) => (code === 0 ? undefined : reject(new Error(`${kind} exited with ${String(code)}`))));
      });
    const rows: [string, number][] = [];
    for (const [label, kind] of [['per cached key, L1 off', 'key'], ['per cached key, L1 on', 'key-l1'], ['per waiting caller', 'waiter']] as const) {
      rows.push([label, await run(kind)]);
      console.error(`memory · ${label}: ${(rows.at(-1)?.[1] ?? 0).toFixed(0)} bytes`);
    }
    console.log(`\nnpm run bench:memory -- ${process.argv.slice(2).join(' ')}`.trim());
    console.log(`\n**Heap per key and per waiter** (dist/, ${N.toLocaleString('en-US')} keys, ${W.toLocaleString('en-US')} waiters, heap used after full GC, one fresh process each; Node ${process.version}):\n`);
    console.log('| what | bytes of heap |');
    console.log('|---|---:|');
    for (const [label, bytes] of rows) console.log(`| ${label} | ${Math.round(bytes).toLocaleString('en-US')} |`);
    if (args.breakdown) {
      const growth = heapGrowth(join(args.breakdown, 'before.heapsnapshot'), join(args.breakdown, 'during.heapsnapshot'), W);
      const total = growth.reduce((s, g) => s + g.bytes, 0);
      console.log(`\n**What grew per waiting caller** (heap snapshots, self sizes of reachable objects: ${Math.round(total).toLocaleString('en-US')} bytes in all):\n`);
      console.log('| kind of object | count | bytes |');
      console.log('|---|---:|---:|');
      for (const g of growth.filter((x) => x.bytes >= 32)) console.log(`| ${g.kind} | ${g.count.toFixed(2)} | ${Math.round(g.bytes).toLocaleString('en-US')} |`);
    }
  } finally {
    await store.stop();
  }
}
