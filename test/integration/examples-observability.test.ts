/**
 * examples/opentelemetry.ts and examples/prometheus.ts, run against a real redis-server: a small
 * stampede, then the figures each exports (OTel through the SDK's in-memory exporters, Prometheus by
 * scraping the registry). Two caches on one server stand for two processes.
 */
import { context, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader, type DataPoint, type Histogram } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { observeCacheStats, traceGetOrCompute } from '../../examples/opentelemetry.js';
import { registerCacheMetrics } from '../../examples/prometheus.js';
import { createCache, type Cache } from '../../src/index.js';
import { deferred, heldRebuild, nextEvent, prefixOf, useRedis } from '../support/harness.js';

const h = useRedis();

/** `n` callers of one cold key, all started before any is awaited; the loader holds until every caller has joined. */
async function coldStampede(cache: Cache, key: string, n: number): Promise<unknown[]> {
  const gate = deferred<string>();
  const missed = nextEvent(cache, 'miss');
  const calls = Array.from({ length: n }, () => cache.getOrCompute(key, () => gate.promise, 60_000));
  await missed;
  gate.resolve(`value of ${key}`);
  return Promise.all(calls);
}

/** A second cache on the same prefix (another process) holds the rebuild; `n` callers of `cache` wait for it. */
async function waitOnOtherProcess(cache: Cache, key: string, n: number): Promise<unknown[]> {
  const other = createCache({ redis: h.client(), prefix: prefixOf(cache) });
  try {
    const held = await heldRebuild<string>(other, key);
    const missed = nextEvent(cache, 'miss');
    const calls = Array.from({ length: n }, () => cache.getOrCompute(key, () => 'not this one', { ttl: 60_000, waitTimeout: 30_000 }));
    await missed;
    held.open(`value of ${key}`);
    await held.call;
    return await Promise.all(calls);
  } finally {
    await other.close();
  }
}

describe('examples/opentelemetry.ts', () => {
  const spans = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  const metrics = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const reader = new PeriodicExportingMetricReader({ exporter: metrics, exportIntervalMillis: 3_600_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });
  const meter = meterProvider.getMeter('test');
  let untrace: () => void = () => undefined;

  beforeAll(() => {
    // What an SDK setup registers: the active span follows async work (the parent of our spans).
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    untrace = traceGetOrCompute(tracerProvider.getTracer('test'), meter);
  });
  afterAll(async () => {
    untrace();
    context.disable();
    await Promise.all([meterProvider.shutdown(), tracerProvider.shutdown()]);
  });
  beforeEach(() => {
    spans.reset();
    metrics.reset();
  });

  /** The data points of metric `name` from a collection now, as [attributes, value] pairs. */
  async function points(name: string): Promise<[Record<string, unknown>, unknown][]> {
    await reader.forceFlush();
    const exported = metrics.getMetrics().at(-1);
    const metric = exported?.scopeMetrics.flatMap((s) => s.metrics).find((m) => m.descriptor.name === name);
    return (metric?.dataPoints ?? []).map((p: DataPoint<unknown>) => [p.attributes, p.value]);
  }
  const outcomesOf = (key: string) =>
    spans
      .getFinishedSpans()
      .filter((s) => s.attributes['stampede_guard.key'] === key)
      .map((s) => s.attributes['stampede_guard.outcome'])
      .sort();

  it('a cold stampede of 20 callers: 20 spans (1 computed, 19 coalesced), loader_runs 1, rebuilds_saved 19, calls by outcome', async () => {
    const cache = h.cache();
    const unobserve = observeCacheStats(meter, cache, { cache: 'otel-cold' });
    try {
      expect(await coldStampede(cache, 'cold', 20)).toEqual(Array(20).fill('value of cold'));
      expect(outcomesOf('cold')).toEqual([...Array<string>(19).fill('coalesced'), 'computed']);
      expect(spans.getFinishedSpans().every((s) => s.name === 'stampede-guard getOrCompute' && s.attributes['stampede_guard.lock'] === 'single')).toBe(true);
      const mine = { cache: 'otel-cold' };
      expect(await points('stampede_guard.loader_runs')).toContainEqual([mine, 1]);
      expect(await points('stampede_guard.rebuilds_saved')).toContainEqual([mine, 19]);
      expect(await points('stampede_guard.misses')).toContainEqual([mine, 20]);
      const calls = await points('stampede_guard.calls');
      expect(calls).toContainEqual([{ 'stampede_guard.lock': 'single', 'stampede_guard.outcome': 'computed' }, 1]);
      expect(calls).toContainEqual([{ 'stampede_guard.lock': 'single', 'stampede_guard.outcome': 'coalesced' }, 19]);
      const durations = (await points('stampede_guard.call.duration')).map(([a, v]) => [a['stampede_guard.outcome'], (v as Histogram).count]);
      expect(durations).toContainEqual(['coalesced', 19]);
    } finally {
      unobserve();
    }
  });

  it("callers answered by another process's load: their spans say waited and they count in rebuilds_saved", async () => {
    const cache = h.cache();
    const unobserve = observeCacheStats(meter, cache, { cache: 'otel-waited' });
    try {
      expect(await waitOnOtherProcess(cache, 'elsewhere', 5)).toEqual(Array(5).fill('value of elsewhere'));
      // The other cache's own call is the one computed span; this cache's 5 callers waited.
      expect(outcomesOf('elsewhere')).toEqual(['computed', 'waited', 'waited', 'waited', 'waited', 'waited']);
      expect(await points('stampede_guard.rebuilds_saved')).toContainEqual([{ cache: 'otel-waited' }, 5]);
      expect(await points('stampede_guard.loader_runs')).toContainEqual([{ cache: 'otel-waited' }, 0]);
    } finally {
      unobserve();
    }
  });

  it("a call's span is a child of the caller's active span", async () => {
    const cache = h.cache();
    const tracer = tracerProvider.getTracer('test');
    const handler = tracer.startSpan('GET /reports/:id');
    await context.with(trace.setSpan(context.active(), handler), () => cache.getOrCompute('child', () => 'v', 60_000));
    handler.end();
    const [span] = spans.getFinishedSpans().filter((s) => s.attributes['stampede_guard.key'] === 'child');
    expect(span?.parentSpanContext?.spanId).toBe(handler.spanContext().spanId);
    expect(span?.spanContext().traceId).toBe(handler.spanContext().traceId);
  });

  it('the function traceGetOrCompute returns unsubscribes: no more spans from it', async () => {
    const cache = h.cache();
    const other = new InMemorySpanExporter();
    const otherProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(other)] });
    const stop = traceGetOrCompute(otherProvider.getTracer('other'), meterProvider.getMeter('other'));
    await cache.getOrCompute('sub', () => 'v', 60_000);
    stop();
    await cache.getOrCompute('unsub', () => 'v', 60_000);
    expect(other.getFinishedSpans().map((s) => s.attributes['stampede_guard.key'])).toEqual(['sub']);
    // The subscription that stays keeps tracing.
    expect(outcomesOf('unsub')).toEqual(['computed']);
    await otherProvider.shutdown();
  });

  it('a rejected call: its span has status ERROR and the exception, and calls counts it by error.type (the code of a typed error)', async () => {
    const cache = h.cache();
    const failed = cache.getOrCompute('fails', () => Promise.reject(new TypeError('origin down')), 60_000);
    await expect(failed).rejects.toThrow('origin down');
    const [span] = spans.getFinishedSpans().filter((s) => s.attributes['stampede_guard.key'] === 'fails');
    expect(span?.status).toEqual({ code: SpanStatusCode.ERROR, message: 'origin down' });
    expect(span?.events.map((e) => e.name)).toEqual(['exception']);
    expect(span?.attributes['stampede_guard.outcome']).toBeUndefined();
    expect(await points('stampede_guard.calls')).toContainEqual([{ 'stampede_guard.lock': 'single', 'error.type': 'TypeError' }, 1]);
    // The library's own errors are typed by their stable code.
    await expect(cache.getOrCompute('aborted', () => 'v', { ttl: 60_000, signal: AbortSignal.abort() })).rejects.toMatchObject({ code: 'ERR_ABORTED' });
    expect(await points('stampede_guard.calls')).toContainEqual([{ 'stampede_guard.lock': 'single', 'error.type': 'ERR_ABORTED' }, 1]);
  });
});

describe('examples/prometheus.ts', () => {
  /** One scrape of `registry`, in the text format Prometheus reads: `name{labels}` → value (comments left out). */
  async function scrape(registry: Registry): Promise<Map<string, number>> {
    const samples = new Map<string, number>();
    for (const line of (await registry.metrics()).split('\n')) {
      if (line === '' || line.startsWith('#')) continue;
      const at = line.lastIndexOf(' ');
      samples.set(line.slice(0, at), Number(line.slice(at + 1)));
    }
    return samples;
  }
  /** A cache with its metrics in a registry of its own (as one process would have). */
  function instrumented(options: Parameters<typeof h.cache>[0] = {}): { cache: Cache; registry: Registry } {
    const cache = h.cache(options);
    const registry = new Registry();
    registerCacheMetrics(cache, registry);
    return { cache, registry };
  }

  it('after a cold stampede of 20 callers: loader runs 1, rebuilds saved 19 (coalesced), misses 20, no lock wait; a second scrape the same', async () => {
    const { cache, registry } = instrumented();
    expect(await coldStampede(cache, 'cold', 20)).toEqual(Array(20).fill('value of cold'));
    const samples = await scrape(registry);
    expect({
      loaderRuns: samples.get('stampede_guard_loader_runs_total'),
      coalesced: samples.get('stampede_guard_rebuilds_saved_total{via="coalesced"}'),
      waited: samples.get('stampede_guard_rebuilds_saved_total{via="waited"}'),
      misses: samples.get('stampede_guard_misses_total'),
      hits: samples.get('stampede_guard_hits_total'),
      staleServed: samples.get('stampede_guard_stale_served_total'),
    }).toEqual({ loaderRuns: 1, coalesced: 19, waited: 0, misses: 20, hits: 0, staleServed: 0 });
    expect([...samples.keys()].some((k) => k.startsWith('stampede_guard_lock_wait_seconds'))).toBe(false);
    // The one Redis node answered: up, healthy; no health change counted.
    expect(samples.get('stampede_guard_redis_node_up{node="standalone",state="healthy"}')).toBe(1);
    expect([...samples.keys()].some((k) => k.startsWith('stampede_guard_redis_node_health_changes_total'))).toBe(false);
    // Counters read from stats() at each scrape: scraped again, they say the same (they do not add up).
    expect(await scrape(registry)).toEqual(samples);
  });

  it("callers answered by another process's load: rebuilds saved via waited, and their one wait in the lock-wait histogram", async () => {
    const { cache, registry } = instrumented();
    expect(await waitOnOtherProcess(cache, 'elsewhere', 5)).toEqual(Array(5).fill('value of elsewhere'));
    const samples = await scrape(registry);
    expect(samples.get('stampede_guard_loader_runs_total')).toBe(0);
    expect(samples.get('stampede_guard_rebuilds_saved_total{via="waited"}')).toBe(5);
    // The 5 callers shared one flight, hence one wait; it ended with the other process's value.
    expect(samples.get('stampede_guard_lock_wait_seconds_count{outcome="value"}')).toBe(1);
    expect(samples.get('stampede_guard_lock_wait_seconds_bucket{le="+Inf",outcome="value"}')).toBe(1);
    expect(samples.get('stampede_guard_lock_wait_seconds_sum{outcome="value"}')).toBeGreaterThan(0);
  });

  it('callers served an expired value inside staleTtl count in stale served; the one background refresh in loader runs', async () => {
    const { cache, registry } = instrumented();
    await cache.getOrCompute('st', () => 'v1', { ttl: 50, staleTtl: 60_000 });
    await new Promise((r) => setTimeout(r, 120)); // past the 50 ms ttl, well inside staleTtl
    const refreshed = nextEvent(cache, 'computed');
    const answers = await Promise.all(Array.from({ length: 3 }, () => cache.getOrCompute('st', () => 'v2', { ttl: 60_000, staleTtl: 60_000 })));
    expect(answers).toEqual(['v1', 'v1', 'v1']);
    await refreshed;
    const samples = await scrape(registry);
    expect([samples.get('stampede_guard_stale_served_total'), samples.get('stampede_guard_loader_runs_total')]).toEqual([3, 2]);
  });

  it('the function it returns removes every metric and the listener', async () => {
    const cache = h.cache();
    const registry = new Registry();
    const unregister = registerCacheMetrics(cache, registry);
    expect(registry.getMetricsAsArray().length).toBe(8);
    unregister();
    expect([registry.getMetricsAsArray().length, cache.listenerCount('waited'), cache.listenerCount('health')]).toEqual([0, 0, 0]);
  });
});
