/**
 * A grant's release on a real Redis: each outcome's note and backoff (the one mapping in
 * src/lock/grant.ts), the typed result, and idempotence (a second release sends nothing).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { Io } from '../../src/io.js';
import { entryKeys } from '../../src/keys.js';
import { portFor } from '../../src/client/detect.js';
import { defineScripts } from '../../src/lock/scripts.js';
import { StoreLock, type LockDeps } from '../../src/lock/single.js';
import type { Grant, ReleaseOutcome } from '../../src/lock/types.js';
import { resolveCacheOptions, resolveCallOptions, systemClock } from '../../src/options.js';
import { Store } from '../../src/store.js';
import { NodeClocks } from '../../src/node-clock.js';
import { Bus } from '../../src/wait.js';
import { broadcastNotes } from '../../src/wake.js';
import { dropConnection, familyClient, whenReady } from '../support/clients.js';
import { useRedis } from '../support/harness.js';
import type { RedisClient } from '../../src/index.js';

const h = useRedis();
let prefixes = 0;
const disposals: (() => void)[] = [];
afterAll(() => {
  for (const dispose of disposals) dispose();
});

/** Locks on a fresh prefix (on a client of the family under test), and every note published on its channel (in order). */
async function setup(client: RedisClient = h.cacheClient()) {
  const prefix = `grant${++prefixes}`;
  const bus = new Bus(prefix);
  const io = new Io(500, 5, 1000, systemClock);
  const deps: LockDeps = { io, scripts: defineScripts(portFor(client)), notes: broadcastNotes(bus), clock: systemClock, onLost: () => undefined };
  const call = resolveCallOptions(resolveCacheOptions({ redis: client }).defaults, { ttl: 60_000, lockTtl: 10_000, failBackoff: 5_000 }, 'k');
  const notes: string[] = [];
  const sub = h.adminClient();
  sub.on('message', (_channel: string, message: string) => notes.push(message));
  await sub.subscribe(bus.channel);
  /** Resolves once every note published before it has arrived: publishes a sentinel and waits for it. */
  const settled = async (): Promise<string[]> => {
    const sentinel = `sentinel-${notes.length}-${Math.random()}`;
    await h.admin.publish(bus.channel, sentinel);
    while (!notes.includes(sentinel)) await new Promise((r) => setTimeout(r, 5));
    return notes.filter((n) => !n.startsWith('sentinel-')).map((n) => `${n[0]}:${n.slice(n.lastIndexOf('|') + 1)}`);
  };
  const single = new StoreLock(deps, 'single', true);
  const acquire = async (key: string): Promise<Grant> => {
    const grant = await single.acquire(key, entryKeys(prefix, key), call);
    if (!grant) throw new Error('not granted');
    return grant;
  };
  const store = new Store(io, deps.scripts, deps.notes, 1 << 20, { decodeError: () => undefined }, new NodeClocks(systemClock, () => 'standalone'));
  return { prefix, bus, deps, call, acquire, settled, store, keys: (key: string) => entryKeys(prefix, key), local: new StoreLock(deps, 'local', false) };
}

describe('grant release outcomes', () => {
  it.each([
    ['empty', 'r', false],
    ['failed', 'e', true],
    ['cancelled', 'r', false], // a cancelled load is not an origin failure: no backoff
    ['unstorable', 'u', false],
  ] as const)("'%s' frees our lock, announces '%s', sets the failure backoff: %s", async (outcome, note, backoff) => {
    const s = await setup();
    const grant = await s.acquire('k');
    expect(await h.admin.get(s.keys('k').lock)).toBe(grant.token);
    expect(await grant.release(outcome)).toBe('released');
    expect(await h.admin.exists(s.keys('k').lock)).toBe(0);
    expect(await s.settled()).toEqual([`${note}:k`]);
    const pttl = await h.admin.pttl(s.keys('k').backoff);
    if (backoff) expect(pttl).toBeGreaterThan(0);
    else expect(pttl).toBe(-2);
  });

  it("'written' sends nothing more: the fenced write already freed the lock and announced the value", async () => {
    const s = await setup();
    const grant = await s.acquire('w');
    expect(await s.store.write('w', s.keys('w'), grant, 'v', s.call, 0, 'w')).toBe('accepted');
    expect(await grant.release('written')).toBe('released');
    expect(await h.admin.exists(s.keys('w').lock)).toBe(0);
    expect(await s.settled()).toEqual(['w:w']);
  });

  it("a refused write announces 'r' from the write script itself (waiters are woken); the release after it ('written') sends nothing more", async () => {
    const s = await setup();
    const grant = await s.acquire('x');
    const newer = await s.local.acquire('x', s.keys('x'), s.call);
    expect(await s.store.write('x', s.keys('x'), newer as Grant, 'newer', s.call, 0, 's')).toBe('accepted');
    await newer?.release('written');
    expect(await s.store.write('x', s.keys('x'), grant, 'older', s.call, 0, 'w')).toBe('superseded');
    await grant.release('written');
    expect(await s.settled()).toEqual(['s:x', 'r:x']);
  });

  it('release is idempotent: a second call returns the first result and sends nothing', async () => {
    const s = await setup();
    const grant = await s.acquire('i');
    const first = grant.release('failed');
    const second = grant.release('empty');
    expect(await first).toBe('released');
    expect(await second).toBe('released');
    expect(await grant.release('cancelled')).toBe('released');
    expect(await s.settled()).toEqual(['e:i']);
  });

  it("'not-ours' when the lock lapsed and another holder took it: their lock is left alone", async () => {
    const s = await setup();
    const grant = await s.acquire('n');
    await h.admin.set(s.keys('n').lock, 'someone-else', 'PX', 10_000);
    expect(await grant.release('empty')).toBe('not-ours');
    expect(await h.admin.get(s.keys('n').lock)).toBe('someone-else');
  });

  it("a release whose lock another holder took announces nothing (that holder's waiters wait on it, not on a stale 'u'); one whose lock lapsed unheld still does", async () => {
    const s = await setup();
    const grant = await s.acquire('t');
    await h.admin.set(s.keys('t').lock, 'someone-else', 'PX', 10_000);
    expect(await grant.release('unstorable')).toBe('not-ours');
    const lapsed = await s.acquire('l');
    await h.admin.del(s.keys('l').lock);
    expect(await lapsed.release('unstorable')).toBe('not-ours');
    expect(await s.settled()).toEqual(['u:l']);
  });

  it("'unknown' when Redis does not answer, and release still does not throw", async () => {
    const { client, dispose } = familyClient(h.url, undefined, { offlineQueue: false });
    disposals.push(dispose);
    await whenReady(client);
    const s = await setup(client);
    const grant = await s.acquire('u');
    dropConnection(client);
    expect(await grant.release('failed' satisfies ReleaseOutcome)).toBe('unknown');
  });
});
