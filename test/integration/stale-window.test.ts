/**
 * The stale window under load (issue 10's open-loop tail): L1 serves a stale copy briefly instead of
 * sending every call of the window to Redis, and a process that lost the refresh lock does not retry
 * it on every stale read. Real Redis throughout.
 */
import { createCache, type CallOptions } from '../../src/index.js';
import { describe, expect, it } from 'vitest';
import { countCommands, nextEvent, useRedis, prefixOf } from '../support/harness.js';

const h = useRedis();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('stale window', () => {
  it('with L1, a stale value read from Redis is served from L1 for the next call (no Redis command), flagged stale; get() never returns it', async () => {
    const writer = h.cache();
    const options: CallOptions = { ttl: 50, staleTtl: 60_000, pollInterval: 3_600_000 };
    await writer.getOrCompute('s', () => 'v1', options);
    await sleep(80); // past the fresh time: stale now
    const client = h.client();
    // The stale L1 copy lives 50 ms of the reader's clock: held still across the two calls, so a busy
    // machine's pause between them cannot outlast it (the property is the copy, not its lifetime).
    let held: number | undefined;
    const clock = { now: () => held ?? performance.now() };
    const reader = createCache({ redis: client, prefix: prefixOf(writer), local: { max: 10 }, clock });
    expect(await reader.ready()).toBe(true);
    const stale: string[] = [];
    reader.on('stale', (e) => stale.push(e.reason));
    held = performance.now();
    // The reader's own refresh starts here and never lands, so the window stays open.
    expect(await reader.getOrCompute('s', () => new Promise<string>(() => undefined), options)).toBe('v1');
    const sent = countCommands(client);
    expect(await reader.getOrCompute('s', () => new Promise<string>(() => undefined), options)).toBe('v1');
    held = undefined;
    expect(sent.count).toBe(0);
    expect(stale).toEqual(['window', 'window']);
    expect(await reader.get('s')).toBeUndefined(); // get() returns fresh values only
    await reader.close();
  });

  it("another process's write drops the stale L1 copy: the next call gets the new value", async () => {
    const writer = h.cache();
    const options: CallOptions = { ttl: 50, staleTtl: 60_000, pollInterval: 3_600_000 };
    await writer.getOrCompute('n', () => 'v1', options);
    await sleep(80);
    const reader = createCache({ redis: h.client(), prefix: prefixOf(writer), local: { max: 10 } });
    expect(await reader.ready()).toBe(true);
    const never = () => new Promise<string>(() => undefined); // the reader's own refresh never lands
    expect(await reader.getOrCompute('n', never, options)).toBe('v1'); // stale copy now in L1
    const heard = nextEvent(reader, 'remoteChange');
    await writer.set('n', 'v2', 60_000);
    await heard;
    expect(await reader.getOrCompute('n', never, options)).toBe('v2');
    await reader.close();
  });

  it('a process that lost the refresh lock does not retry it on every stale read (once per pollInterval)', async () => {
    const a = h.cache();
    const options: CallOptions = { ttl: 50, staleTtl: 60_000, pollInterval: 3_600_000 };
    await a.getOrCompute('r', () => 'v1', options);
    await sleep(80);
    // a holds the refresh (its loader never lands during the test).
    expect(await a.getOrCompute('r', () => new Promise<string>(() => undefined), options)).toBe('v1');
    const client = h.client();
    const b = createCache({ redis: client, prefix: prefixOf(a) });
    await client.ping();
    let acquires = 0;
    const original = client.sendCommand.bind(client);
    client.sendCommand = (cmd, ...rest) => {
      if (/^evalsha$|^eval$/i.test(cmd.name) && String(cmd.args[2]).includes(':l:')) acquires++;
      return original(cmd, ...rest);
    };
    for (let i = 0; i < 20; i++) {
      expect(await b.getOrCompute('r', () => 'from-b', options)).toBe('v1');
      await sleep(2);
    }
    expect(acquires).toBe(1);
    await b.close();
  });
});
