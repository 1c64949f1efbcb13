import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { CacheClosedError, LoaderTimeoutError } from '../../src/errors.js';
import { linkSignals, runLoader, type LoadRequest } from '../../src/loader.js';
import { systemClock } from '../../src/options.js';

const req = (over: Partial<LoadRequest> = {}): LoadRequest => ({ key: 'k', fencingToken: 7, staleValue: undefined, signals: [], lifetime: new AbortController().signal, hardTimeout: 0, clock: systemClock, ...over });

describe('runLoader outcomes', () => {
  it('once the lifetime aborted (close()), a rejection is a cancellation with CacheClosedError, whatever the loader rejected with', async () => {
    const lifetime = new AbortController();
    const running = runLoader(
      (ctx) => new Promise((_, reject) => ctx.signal.addEventListener('abort', () => reject(Object.assign(new Error('The operation was aborted'), { name: 'AbortError' })))),
      req({ lifetime: lifetime.signal }),
    );
    await new Promise((r) => setTimeout(r, 5));
    lifetime.abort(new CacheClosedError());
    const r = await running;
    expect(r.kind).toBe('cancelled');
    expect(r.kind === 'cancelled' && r.error).toBeInstanceOf(CacheClosedError);
    expect(r.kind === 'cancelled' && (r.error as CacheClosedError).key).toBe('k');
  });

  it('a value, with its load time and the fencing token handed to the loader', async () => {
    let token: number | undefined;
    const r = await runLoader((ctx) => ((token = ctx.fencingToken), 'v'), req());
    expect(r).toMatchObject({ kind: 'value', value: 'v' });
    expect(token).toBe(7);
  });

  it('a throw (also a synchronous one) is a failure when no signal aborted', async () => {
    const boom = new Error('boom');
    expect(await runLoader(() => { throw boom; }, req())).toEqual({ kind: 'failed', error: boom });
    expect(await runLoader(() => Promise.reject(boom), req())).toEqual({ kind: 'failed', error: boom });
  });

  it('a throw after one of its signals aborted is a cancellation, not a failure', async () => {
    const caller = new AbortController();
    const running = runLoader((ctx) => new Promise((_, reject) => ctx.signal.addEventListener('abort', () => reject(new Error('stopped')))), req({ signals: [caller.signal] }));
    await new Promise((r) => setTimeout(r, 5)); // the loader is running and listening
    caller.abort(new Error('caller left'));
    expect(await running).toMatchObject({ kind: 'cancelled' });
  });

  it('hardTimeout rejects with LoaderTimeoutError, aborts the signal with it, and counts as a failure', async () => {
    let seen: AbortSignal | undefined;
    const r = await runLoader((ctx) => ((seen = ctx.signal), new Promise(() => undefined)), req({ hardTimeout: 20 }));
    expect(r.kind).toBe('failed');
    expect((r as { error: unknown }).error).toBeInstanceOf(LoaderTimeoutError);
    expect(seen?.reason).toBeInstanceOf(LoaderTimeoutError);
  });

  it('detaches from every input signal when the run ends (success, failure and timeout)', async () => {
    const long = new AbortController();
    await runLoader(() => 1, req({ signals: [long.signal], hardTimeout: 1000 }));
    await runLoader(() => Promise.reject(new Error('x')), req({ signals: [long.signal] }));
    await runLoader(() => new Promise(() => undefined), req({ signals: [long.signal], hardTimeout: 5 }));
    expect(getEventListeners(long.signal, 'abort')).toHaveLength(0);
  });
});

describe('linkSignals', () => {
  it('aborts with the reason of the first input that aborts', () => {
    const a = new AbortController();
    const b = new AbortController();
    const linked = linkSignals([a.signal, b.signal]);
    b.abort('b-reason');
    a.abort('a-reason');
    expect(linked.signal.reason).toBe('b-reason');
    expect(getEventListeners(a.signal, 'abort')).toHaveLength(0);
  });

  it('an input already aborted aborts it at once', () => {
    const linked = linkSignals([AbortSignal.abort('early')]);
    expect(linked.signal.aborted).toBe(true);
    expect(linked.signal.reason).toBe('early');
  });
});
