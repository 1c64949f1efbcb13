/** Timing helpers shared by the fault campaigns and the failover tests (no vitest import: workers may use it). */

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Deterministic PRNG (mulberry32): a failing seed replays the same schedule. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Polls `check` until it returns true; throws (naming `what` and the last diagnostic) after `limit` tries. */
export async function until(what: string, check: () => Promise<boolean | string>, limit = 600, every = 50): Promise<void> {
  let last: boolean | string = false;
  for (let i = 0; i < limit; i++) {
    last = await check().catch((error: unknown) => String(error));
    if (last === true) return;
    await sleep(every);
  }
  throw new Error(`${what}: not reached (${String(last)})`);
}
