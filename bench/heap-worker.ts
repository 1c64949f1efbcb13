/**
 * One retained-heap measurement in a process of its own (started with --expose-gc by bench/lib/heap.ts,
 * so no other benchmark's garbage or warm caches sit in its heap). It runs `count` loader runs, each a
 * miss on a distinct key with an instant loader, and at each checkpoint drains every call in flight,
 * collects garbage until the heap stops shrinking, and reports heapUsed and RSS.
 */
import { Redis } from 'ioredis';
import { createCache } from '../src/index.js';
import type { HeapRequest, HeapSample } from './lib/heap.js';

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('bench/heap-worker.ts needs --expose-gc');
const collect: () => void = gc;
const WARM_UP = 2000;

/** Full collections until heapUsed stops falling (weak references and finalizers need more than one). */
async function settledHeap(): Promise<number> {
  let last = Number.POSITIVE_INFINITY;
  for (let i = 0; i < 10; i++) {
    collect();
    await new Promise((r) => setImmediate(r));
    const used = process.memoryUsage().heapUsed;
    if (used >= last - 64 * 1024) return used;
    last = used;
  }
  return process.memoryUsage().heapUsed;
}

async function measure(req: HeapRequest): Promise<HeapSample[]> {
  const redis = new Redis(req.url);
  const cache = createCache({ redis, prefix: req.prefix, ...(req.localMax > 0 ? { local: { max: req.localMax } } : {}) });
  const loader = () => 1;
  const samples: HeapSample[] = [];
  let done = 0;
  // Bounded concurrency: sequential calls would take minutes per variant; `inFlight` calls at a time,
  // drained before every checkpoint, so nothing in flight is counted as retained.
  const worker = async (until: number, keyPrefix: string) => {
    while (done < until) {
      const i = done++;
      await cache.getOrCompute(`${keyPrefix}${i}`, loader, req.ttlMs);
    }
  };
  // Warm-up outside the counted runs: compiled code, loaded scripts and the pub/sub connection are
  // part of the baseline, not of the growth.
  await Promise.all(Array.from({ length: req.inFlight }, () => worker(WARM_UP, 'warm')));
  done = 0;
  const started = performance.now();
  for (const checkpoint of req.checkpoints) {
    await Promise.all(Array.from({ length: req.inFlight }, () => worker(checkpoint, 'k')));
    const heapUsed = await settledHeap();
    samples.push({ runs: checkpoint, heapUsed, rss: process.memoryUsage().rss, seconds: (performance.now() - started) / 1000 });
  }
  await cache.close();
  redis.disconnect();
  return samples;
}

process.once('message', (req: HeapRequest) => {
  measure(req).then(
    (samples) => process.send?.({ ev: 'samples', samples }, () => process.exit(0)),
    (err: unknown) => process.send?.({ ev: 'failed', message: String(err) }, () => process.exit(1)),
  );
});
process.send?.({ ev: 'ready' });
