import { describe, expect, it } from 'vitest';
import { AbortedError } from '../../src/errors.js';
import { NoFlight, SingleFlight, type Stop } from '../../src/flight.js';

function deferred<T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

describe('SingleFlight', () => {
  it('1000 concurrent calls on one key run the work once and all get its value', async () => {
    const flight = new SingleFlight();
    let runs = 0;
    const gate = deferred<string>();
    const calls = Array.from({ length: 1000 }, () => flight.run('k', undefined, () => (runs++, gate.promise)));
    gate.resolve('v');
    expect(await Promise.all(calls)).toEqual(Array(1000).fill('v'));
    expect(runs).toBe(1);
    expect(flight.size).toBe(0);
  });

  it('an error reaches every caller sharing the flight, and the key is free again after', async () => {
    const flight = new SingleFlight();
    const boom = new Error('boom');
    const calls = Array.from({ length: 10 }, () => flight.run('k', undefined, () => Promise.reject(boom)));
    const results = await Promise.allSettled(calls);
    expect(results.every((r) => r.status === 'rejected' && r.reason === boom)).toBe(true);
    expect(flight.size).toBe(0);
    await expect(flight.run('k', undefined, () => Promise.resolve(1))).resolves.toBe(1);
  });

  it('different keys do not share a flight', async () => {
    const flight = new SingleFlight();
    let runs = 0;
    await Promise.all([flight.run('a', undefined, async () => ++runs), flight.run('b', undefined, async () => ++runs)]);
    expect(runs).toBe(2);
  });

  it('one caller aborting rejects only that caller; the work goes on for the others', async () => {
    const flight = new SingleFlight();
    const gate = deferred<string>();
    let work: Stop | undefined;
    const ac = new AbortController();
    const a = flight.run('k', ac.signal, (s) => ((work = s), gate.promise));
    const b = flight.run('k', undefined, () => gate.promise);
    ac.abort();
    await expect(a).rejects.toBeInstanceOf(AbortedError);
    expect(work?.signal.aborted).toBe(false);
    gate.resolve('v');
    await expect(b).resolves.toBe('v');
  });

  it('when every caller aborted, the work signal aborts', async () => {
    const flight = new SingleFlight();
    const gate = deferred<string>();
    let work: Stop | undefined;
    const a1 = new AbortController();
    const a2 = new AbortController();
    const p1 = flight.run('k', a1.signal, (s) => ((work = s), gate.promise));
    const p2 = flight.run('k', a2.signal, () => gate.promise);
    a1.abort();
    a2.abort();
    await expect(p1).rejects.toMatchObject({ code: 'ERR_ABORTED' });
    await expect(p2).rejects.toMatchObject({ code: 'ERR_ABORTED' });
    expect(work?.signal.aborted).toBe(true);
    gate.resolve('late');
  });

  it('the work signal is made on first use, and one first read after every caller aborted is already aborted', async () => {
    const flight = new SingleFlight();
    const gate = deferred<string>();
    let work: Stop | undefined;
    const ac = new AbortController();
    const p = flight.run('k', ac.signal, (s) => ((work = s), gate.promise));
    await Promise.resolve(); // the work starts on the next microtask
    ac.abort();
    await expect(p).rejects.toMatchObject({ code: 'ERR_ABORTED' });
    expect(work?.signal.aborted).toBe(true); // first read only now
    expect(work?.signal.reason).toMatchObject({ code: 'ERR_ABORTED' });
    gate.resolve('late');
  });
});

describe('NoFlight', () => {
  it('runs the work once per call', async () => {
    const none = new NoFlight();
    let runs = 0;
    await Promise.all(Array.from({ length: 5 }, () => none.run('k', undefined, async () => ++runs)));
    expect(runs).toBe(5);
  });
});

describe('aborted callers (issue 8 item 1)', () => {
  it('an already-aborted caller starts no work and leaves no flight behind', async () => {
    for (const c of [new SingleFlight(), new NoFlight()]) {
      let runs = 0;
      await expect(c.run('k', AbortSignal.abort(), async () => ++runs)).rejects.toBeInstanceOf(AbortedError);
      expect(runs).toBe(0);
    }
  });

  it('a flight abandoned by all its callers is not joinable: the next caller starts new work', async () => {
    const flight = new SingleFlight();
    const gate = deferred<string>();
    const ac = new AbortController();
    const first = flight.run('k', ac.signal, () => gate.promise);
    ac.abort();
    await expect(first).rejects.toBeInstanceOf(AbortedError);
    expect(flight.size).toBe(0);
    await expect(flight.run('k', undefined, async () => 'new work')).resolves.toBe('new work');
    gate.reject(new Error('the abandoned work fails later: observed, never unhandled'));
  });
});

describe('close() guard (the heap figure: npm run bench:heap)', () => {
  it('settled flights leave nothing behind in the close() guard; close() still rejects a running one', async () => {
    const lifetime = new AbortController();
    const flight = new SingleFlight(Number.POSITIVE_INFINITY, lifetime.signal);
    for (let i = 0; i < 100; i++) await flight.run(`k${i}`, undefined, async () => i);
    const closing = (flight as unknown as { closed: { first: unknown } }).closed;
    expect(closing.first).toBeUndefined(); // the guards' list is empty
    const hanging = flight.run('hang', undefined, () => new Promise(() => undefined));
    await Promise.resolve();
    expect(closing.first).toBeDefined(); // the running flight is guarded
    lifetime.abort();
    await expect(hanging).rejects.toMatchObject({ code: 'ERR_CLOSED', key: 'hang' });
  });
});
