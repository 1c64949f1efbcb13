/**
 * OpenTelemetry for stampede-guard, with nothing but `@opentelemetry/api`: whatever SDK and exporter
 * the application registered receive the figures.
 *
 * - Spans and per-call metrics come from the `stampede-guard:getOrCompute` TracingChannel: one span
 *   per `getOrCompute` call, whose `stampede_guard.outcome` says how it was answered (`computed` is
 *   the call whose flight ran the loader; `coalesced` and `waited` are rebuilds saved).
 * - The cache's counters (`cache.stats()`) become observable counters, read at each collection, so
 *   nothing runs on the hot path beyond the library's own integer increments.
 *
 * Keys go on spans (one trace, one key) but never on metrics: a label per key would make a series
 * per key. Drop the span attribute if your keys carry personal data.
 *
 * Run (spans and metrics printed to the console): npm run example -- opentelemetry
 * (a throwaway redis-server unless REDIS_URL is set), or
 *   REDIS_URL=redis://127.0.0.1:6379 node --import tsx examples/opentelemetry.ts
 */
import { tracingChannel } from 'node:diagnostics_channel';
import { pathToFileURL } from 'node:url';
import { context, SpanKind, SpanStatusCode, trace, type Attributes, type BatchObservableResult, type Meter, type ObservableResult, type Span, type Tracer } from '@opentelemetry/api';
import { ConsoleMetricExporter, MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, ConsoleSpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { Redis } from 'ioredis';
import { createCache, GET_OR_COMPUTE_CHANNEL, type Cache, type CacheEvents, type CacheStats, type GetOrComputeContext } from 'stampede-guard';

/** What the span and the per-call metrics record of one call, between its `start` and its `asyncEnd`. */
interface InFlight {
  readonly span: Span;
  readonly startedAt: number;
}

/**
 * Subscribes to the TracingChannel: a span per call (parented to the caller's active span) and two
 * per-call metrics, `stampede_guard.calls` (counter) and `stampede_guard.call.duration` (histogram,
 * seconds), both by `stampede_guard.outcome` (or `error.type` for a rejected call).
 * Returns the unsubscribe function. The channel is process-wide: subscribe once, not per cache.
 */
export function traceGetOrCompute(tracer: Tracer, meter: Meter): () => void {
  const calls = meter.createCounter('stampede_guard.calls', { description: 'getOrCompute calls, by how they were answered' });
  const duration = meter.createHistogram('stampede_guard.call.duration', { description: 'getOrCompute duration, by how it was answered', unit: 's' });
  // Keyed by the channel's context object: one per call, alive exactly as long as the call.
  const inFlight = new WeakMap<GetOrComputeContext, InFlight>();

  const handlers = {
    start(ctx: GetOrComputeContext): void {
      const span = tracer.startSpan('stampede-guard getOrCompute', { kind: SpanKind.INTERNAL, attributes: { 'stampede_guard.key': ctx.key } }, context.active());
      inFlight.set(ctx, { span, startedAt: performance.now() });
    },
    // asyncEnd follows both a success and an `error`: the one place a span ends.
    asyncEnd(ctx: GetOrComputeContext): void {
      const call = inFlight.get(ctx);
      if (!call) return;
      inFlight.delete(ctx);
      const attributes: Attributes = {};
      if (ctx.lock !== undefined) attributes['stampede_guard.lock'] = ctx.lock;
      if (ctx.outcome !== undefined) {
        attributes['stampede_guard.outcome'] = ctx.outcome;
      } else {
        // A rejection: the library's typed errors carry a stable `code`.
        attributes['error.type'] = errorType(ctx.error);
        call.span.recordException(ctx.error instanceof Error ? ctx.error : String(ctx.error));
        call.span.setStatus({ code: SpanStatusCode.ERROR, message: ctx.error instanceof Error ? ctx.error.message : String(ctx.error) });
      }
      call.span.setAttributes(attributes);
      call.span.end();
      calls.add(1, attributes);
      duration.record((performance.now() - call.startedAt) / 1000, attributes);
    },
    end(): void {},
    asyncStart(): void {},
    error(): void {},
  };
  const channel = tracingChannel<string, GetOrComputeContext>(GET_OR_COMPUTE_CHANNEL);
  channel.subscribe(handlers);
  return () => void channel.unsubscribe(handlers);
}

function errorType(err: unknown): string {
  const code = (err as { code?: unknown } | undefined)?.code;
  if (typeof code === 'string') return code;
  return err instanceof Error ? err.name : typeof err;
}

/** The counters exported from `cache.stats()`, with the name and description each gets. */
const STATS: readonly { name: string; description: string; read: (s: CacheStats) => number }[] = [
  { name: 'stampede_guard.loader_runs', description: 'loaders started in this process', read: (s) => s.loaderRuns },
  { name: 'stampede_guard.rebuilds_saved', description: 'callers answered by another caller\'s load (coalesced + waited)', read: (s) => s.coalesced + s.waited },
  { name: 'stampede_guard.hits', description: 'callers answered with a fresh value (L1 or Redis)', read: (s) => s.hits },
  { name: 'stampede_guard.misses', description: 'callers whose lookup found no usable value', read: (s) => s.misses },
  { name: 'stampede_guard.stale_served', description: 'callers answered with an expired value', read: (s) => s.staleServed },
  { name: 'stampede_guard.lock_lost', description: 'rebuild locks lost while their loader ran', read: (s) => s.lockLost },
  { name: 'stampede_guard.write_rejected', description: 'writes the fence refused', read: (s) => s.writeRejected },
  { name: 'stampede_guard.degraded', description: 'callers answered without Redis', read: (s) => s.degraded },
];

/**
 * Exports `cache.stats()` as observable counters (cumulative since the cache was created), read once
 * per collection. `attributes` tell several caches of one process apart (e.g. `{ cache: 'users' }`).
 * Returns the function that stops observing.
 */
export function observeCacheStats(meter: Meter, cache: Cache, attributes: Attributes = {}): () => void {
  const counters = STATS.map((s) => ({ ...s, counter: meter.createObservableCounter(s.name, { description: s.description }) }));
  const callback = (result: BatchObservableResult): void => {
    const stats = cache.stats();
    for (const c of counters) result.observe(c.counter, c.read(stats), attributes);
  };
  const observables = counters.map((c) => c.counter);
  meter.addBatchObservableCallback(callback, observables);
  return () => meter.removeBatchObservableCallback(callback, observables);
}

/**
 * Exports each Redis node's health as the observable gauge `stampede_guard.redis.node.up` (1 healthy,
 * 0 suspect or open; attributes `node` and `state`), read from `cache.health()` at each collection,
 * and counts every change (`stampede_guard.redis.node.health_changes`, from the `health` event), so an
 * outage shorter than the collection interval still shows. Returns the function that stops both.
 */
export function observeNodeHealth(meter: Meter, cache: Cache, attributes: Attributes = {}): () => void {
  const up = meter.createObservableGauge('stampede_guard.redis.node.up', { description: 'whether the cache sends operations to the Redis node (1) or skips it as suspect or open (0)' });
  const observe = (result: ObservableResult): void => {
    for (const n of cache.health().nodes) result.observe(n.state === 'healthy' ? 1 : 0, { ...attributes, node: n.node, state: n.state });
  };
  up.addCallback(observe);
  const changes = meter.createCounter('stampede_guard.redis.node.health_changes', { description: 'Redis node health changes: suspect, open, recovered' });
  const onHealth = ({ node, state }: CacheEvents['health'][0]): void => changes.add(1, { ...attributes, node, state });
  cache.on('health', onHealth);
  return () => {
    up.removeCallback(observe);
    cache.off('health', onHealth);
  };
}

/** The demo (only when this file is run, not imported): a small cold stampede, printed by the SDK's console exporters. */
async function main(): Promise<void> {
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(new ConsoleSpanExporter())] });
  trace.setGlobalTracerProvider(tracerProvider);
  const reader = new PeriodicExportingMetricReader({ exporter: new ConsoleMetricExporter(), exportIntervalMillis: 60_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });

  const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
  const cache = createCache({ redis, prefix: 'example-otel' });
  const meter = meterProvider.getMeter('stampede-guard-example');
  const untrace = traceGetOrCompute(trace.getTracer('stampede-guard-example'), meter);
  const unobserve = observeCacheStats(meter, cache);

  const key = `report:${Date.now()}`;
  const slowQuery = () => new Promise<string>((resolve) => setTimeout(resolve, 200, 'the report'));
  await Promise.all(Array.from({ length: 20 }, () => cache.getOrCompute(key, slowQuery, 60_000)));

  untrace();
  unobserve();
  await Promise.all([meterProvider.shutdown(), tracerProvider.shutdown()]);
  await cache.close();
  await redis.quit();
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
