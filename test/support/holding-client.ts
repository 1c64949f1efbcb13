/**
 * An ioredis client whose replies can be held back: the command ran in Redis, its answer waits until
 * released (ioredis's Command resolve is called by the reply parser, so wrapping it delays only the
 * answer). For tests of what a call does while a read is out.
 */
import { Redis } from 'ioredis';
import { createCache, type CacheOptions } from '../../src/index.js';
import { deferred } from './harness.js';

type Sent = { name: string; resolve: (v: unknown) => void };
type Gate = ReturnType<typeof deferred<void>>;

export function holdingClient(url: string) {
  const client = new Redis(url);
  let gate: Gate | undefined; // holds replies of `holds` (only the next one when `once`)
  let holds = 'getrange';
  let once = false;
  let holding = false;
  let released: Gate | undefined;
  let all: Gate | undefined; // holds every other reply
  const send = client.sendCommand.bind(client);
  client.sendCommand = ((command: Sent, ...rest: unknown[]): unknown => {
    const g = gate !== undefined && command.name === holds ? gate : all;
    if (g !== undefined) {
      const answer = command.resolve;
      const held = g.promise;
      command.resolve = (v: unknown) => void held.then(() => answer(v));
      if (g === gate) {
        holding = true;
        if (once) gate = undefined;
      }
    }
    return (send as (...a: unknown[]) => unknown)(command, ...rest);
  });
  return {
    client,
    /** Holds every GETRANGE reply until `release()`. */
    hold: (): Gate => {
      holds = 'getrange';
      once = false;
      return (released = gate = deferred<void>());
    },
    /** Holds the reply of the next command named `name` only. */
    holdNext: (name: string): void => {
      holds = name;
      once = true;
      released = gate = deferred<void>();
    },
    /** A held command was sent. */
    holding: (): boolean => holding,
    release: (): void => {
      released?.resolve();
      gate = undefined;
    },
    /** Holds the replies of every other command too (a Redis slow to answer the rest). */
    holdAll: (): Gate => (all = deferred<void>()),
    releaseAll: (): void => {
      all?.resolve();
      all = undefined;
    },
  };
}

/**
 * Two caches on one prefix, two processes of one service: `a` on a holding client (its command names
 * recorded: `sent()` takes them), `b` on a plain one. `warm`: `a` has read once, so the node's clock is
 * sampled and its next hits are plain reads (the first read of a node is the read script).
 */
export async function heldPair(url: string, prefix: string, options: Partial<CacheOptions> = {}, warm = true) {
  const held = holdingClient(url);
  const other = new Redis(url);
  const a = createCache({ redis: held.client, prefix, ...options });
  const b = createCache({ redis: other, prefix });
  if (!(await a.ready()) || !(await b.ready())) throw new Error('heldPair: a cache is not ready');
  if (warm) {
    await b.set('warm', 'w', 60_000);
    if ((await a.getOrCompute('warm', () => 'loaded', 60_000)) !== 'w') throw new Error('heldPair: the warm-up read missed');
  }
  const names: string[] = [];
  const send = held.client.sendCommand.bind(held.client);
  held.client.sendCommand = ((command: { name: string }, ...rest: unknown[]): unknown => {
    names.push(command.name);
    return (send as (...a: unknown[]) => unknown)(command, ...rest);
  });
  return {
    a,
    b,
    held,
    /** The command names `a`'s client sent since the last call. */
    sent: (): string[] => names.splice(0),
    done: async (): Promise<void> => {
      await a.close();
      await b.close();
      held.client.disconnect();
      other.disconnect();
    },
  };
}
