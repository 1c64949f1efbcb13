/**
 * getOrCompute's store read is made before any trip and shared by the calls of the key that start
 * while it is out (call.ts, Calls.read). What that must keep: concurrent hits of a key send one read;
 * a call that starts after a change of the key never shares a read sent before it; a read that finds
 * no fresh value, or fails, goes on as the trip of the call (one loader run, no second read).
 * ioredis only: the sharing is the library's, not the client's, and the reply is held back through
 * ioredis's Command (its resolve is called by the reply parser).
 */
import { describe, expect, it, vi } from 'vitest';
import { commandCalls, deferred, keysOf, nextEvent, useRedis } from '../support/harness.js';
import { heldPair } from '../support/holding-client.js';

const h = useRedis();
let n = 0;

const pair = () => heldPair(h.url, `shr${process.pid}x${++n}`);

describe('a store read shared by the calls that start while it is out', () => {
  it('concurrent hits of a key send one read and all get its value', async () => {
    const { a, b, held, done } = await pair();
    try {
      await b.set('k', 'v', 60_000);
      const before = (await commandCalls(h.admin)).calls('getrange');
      held.hold();
      const calls = Array.from({ length: 5 }, () => a.getOrCompute('k', () => 'loaded', 60_000));
      held.release();
      expect(await Promise.all(calls)).toEqual(['v', 'v', 'v', 'v', 'v']);
      expect((await commandCalls(h.admin)).calls('getrange') - before).toBe(1);
      expect(a.stats().hits).toBe(1 + 5); // the warm-up's hit, then each caller's
    } finally {
      await done();
    }
  });

  it('a call that starts after a change of the key does not share a read sent before it', async () => {
    const { a, b, held, done } = await pair();
    try {
      await b.set('k', 'old', 60_000);
      held.hold();
      const early = a.getOrCompute('k', () => 'loaded', 60_000); // its read runs now, answers 'old', held
      await new Promise((r) => setTimeout(r, 20)); // the read has run in Redis
      const heard = nextEvent(a, 'remoteChange');
      await b.set('k', 'new', 60_000);
      await heard; // a knows the key changed
      const late = a.getOrCompute('k', () => 'loaded', 60_000); // must send a read of its own
      held.release();
      expect(await early).toBe('old'); // it started before the change
      expect(await late).toBe('new');
    } finally {
      await done();
    }
  });

  it('a shared read that finds no value: one loader run for every call, and no second read', async () => {
    const { a, held, done } = await pair();
    try {
      let runs = 0;
      const gate = deferred<void>();
      const loader = async () => {
        runs++;
        await gate.promise;
        return 'loaded';
      };
      const before = (await commandCalls(h.admin)).calls('getrange');
      held.hold();
      const calls = Array.from({ length: 4 }, () => a.getOrCompute('absent', loader, 60_000));
      held.release();
      await new Promise((r) => setTimeout(r, 50));
      gate.resolve();
      expect(await Promise.all(calls)).toEqual(['loaded', 'loaded', 'loaded', 'loaded']);
      expect(runs).toBe(1);
      // One plain read shared by the four; the trip went on from it (its re-read under the lock is the
      // lock script's, not a GETRANGE).
      expect((await commandCalls(h.admin)).calls('getrange') - before).toBe(1);
      expect(a.stats()).toMatchObject({ misses: 4 });
    } finally {
      await done();
    }
  });
});

describe('concurrent plain reads of different keys', () => {
  it('each gets its own answer (a key of the wrong type is a decodeError and a miss)', async () => {
    const { a, b, done } = await pair();
    try {
      await b.set('x', 'X', 60_000);
      await b.set('y', 'Y', 60_000);
      await h.admin.rpush(keysOf(a, 'wrong').value, 'not an entry');
      const decodeErrors: string[] = [];
      a.on('decodeError', (e) => decodeErrors.push(e.key));
      const answers = Promise.all([a.getOrCompute('x', () => 'loaded', 60_000), a.getOrCompute('y', () => 'loaded', 60_000), a.getOrCompute('wrong', () => 'loaded', 60_000)]);
      expect(await answers).toEqual(['X', 'Y', 'loaded']);
      // Only the wrong key's reads report it (its re-read under the lock reports it again).
      expect(new Set(decodeErrors)).toEqual(new Set(['wrong']));
    } finally {
      await done();
    }
  });
});

describe('a tag note detaches the reads out', () => {
  it('a call that starts after deleteByTag resolved does not share a read whose tag check ran before it', async () => {
    const { a, b, held, done } = await pair();
    try {
      await b.set('k', 'old', { ttl: 60_000, tags: ['t'] });
      // A tagged hit first: the tag check's script is loaded on a's connection (EVALSHA from now on).
      await b.set('w2', 'x', { ttl: 60_000, tags: ['other'] });
      expect(await a.getOrCompute('w2', () => 'loaded', 60_000)).toBe('x');
      // Hold the reply of the first script a sends: the tag check of the read below (its GETRANGE went through).
      held.holdNext('evalsha');
      const early = a.getOrCompute('k', () => 'loaded', 60_000);
      await vi.waitFor(() => expect(held.holding()).toBe(true));
      await b.deleteByTag('t'); // resolves once a acknowledged the note
      const late = a.getOrCompute('k', () => 'loaded', 60_000);
      held.release();
      expect(await early).toBe('old'); // it started before the deleteByTag
      expect(await late).toBe('loaded'); // its own read: the entry is invalid by the tag
    } finally {
      await done();
    }
  });
});
