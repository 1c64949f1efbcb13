/**
 * The tag records' states a process keeps (src/tag-states.ts): a tagged hit from Redis whose records
 * this process read recently costs no second round trip, and the kept states are exactly as coherent
 * as L1 — a tag note drops them before it is acknowledged (so once deleteByTag resolves, no call that
 * starts here is judged by a state from before it), and a records read overtaken by a note keeps
 * nothing. ioredis only: the replies are held back through ioredis's Command.
 */
import { describe, expect, it } from 'vitest';
import type { CacheOptions } from '../../src/index.js';
import { UNSAFE } from '../../src/unsafe.js';
import { useRedis } from '../support/harness.js';
import { heldPair } from '../support/holding-client.js';

const h = useRedis();
let n = 0;
const tagged = (tag: string) => ({ ttl: 60_000, tags: [tag] });

/** `a` on a client whose replies can be held, `b` another process; L1 off in both (every hit from Redis). */
const pair = (options: Partial<CacheOptions> = {}) => heldPair(h.url, `tgs${process.pid}x${++n}`, options, false);

describe('tag states kept in the process', () => {
  it('a tagged hit from Redis whose records this process read recently sends one command: the entry read (no records script)', async () => {
    const { a, b, sent, done } = await pair();
    try {
      await b.set('k', 'v', tagged('org:3'));
      await b.set('warm', 'w', 60_000);
      expect(await a.get('warm')).toBe('w'); // the node's clock sampled: hits are plain reads from now on
      sent();
      expect(await a.get('k')).toBe('v');
      expect(sent()).toEqual(['getrange', 'evalsha']); // the entry, then its records
      expect(await a.get('k')).toBe('v');
      expect(sent()).toEqual(['getrange']);
    } finally {
      await done();
    }
  });

  it('deleteByTag in another process: once it resolves, a hit here is judged afresh (its note dropped the kept states) and misses', async () => {
    const { a, b, done } = await pair();
    try {
      await b.set('k', 'v', tagged('org:3'));
      expect(await a.get('k')).toBe('v');
      expect(await a.get('k')).toBe('v'); // judged by the kept state
      await b.deleteByTag('org:3');
      expect(await a.get('k')).toBeUndefined();
      expect(await a.getOrCompute('k', () => 'new', tagged('org:3'))).toBe('new');
    } finally {
      await done();
    }
  });

  it('negative control: with the note not dropping the kept states (UNSAFE tagStatesUndropped), the same hit serves the entry after deleteByTag resolved', async () => {
    const { a, b, done } = await pair({ [UNSAFE]: { tagStatesUndropped: true } } as Partial<CacheOptions>);
    try {
      await b.set('k', 'v', tagged('org:3'));
      expect(await a.get('k')).toBe('v');
      await b.deleteByTag('org:3');
      expect(await a.get('k')).toBe('v');
    } finally {
      await done();
    }
  });

  it('a records read whose reply arrives after a tag note keeps nothing: the next hit reads the records again and misses', async () => {
    const { a, b, held, done } = await pair();
    try {
      await b.set('warm', 'w', tagged('warm'));
      expect(await a.get('warm')).toBe('w'); // the records script sent once (EVAL), and the node's clock sampled
      await b.set('k', 'v', tagged('org:3'));
      held.holdNext('evalsha'); // the next records script's reply waits
      const first = a.get('k');
      while (!held.holding()) await new Promise((r) => setImmediate(r));
      await b.deleteByTag('org:3'); // a acknowledges on its own connection meanwhile
      held.release();
      await first; // started before the deleteByTag resolved: either answer is allowed
      expect(await a.get('k')).toBeUndefined();
    } finally {
      await done();
    }
  });
});
