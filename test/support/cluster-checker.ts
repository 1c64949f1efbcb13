/**
 * Offline checks of the Cluster fault campaign (test/integration/cluster-campaign.test.ts), on top
 * of checker.ts. Pure (no I/O); unit-tested in test/unit/cluster-checker.test.ts on hand-made
 * histories that must fail and ones that must pass.
 */
import type { Violation } from './checker.js';

/** A fencing token handed to a loader: the worker records `ctx.fencingToken` when its loader starts. */
export interface Grant {
  proc: number;
  key: string;
  fence: number;
  /** When the loader started (performance.timeOrigin-based ms). */
  at: number;
}

/**
 * The tokens handed to loaders for a key never repeat or go backwards:
 * - **no repeat**: across all processes, no token is handed to two loader runs of the same key
 *   (each grant takes the next value of the key's counter; a failover to a replica that lacks some
 *   grants would hand them out again);
 * - **no backwards**: within one process, a loader of a key never gets a token smaller than one an
 *   earlier loader of that key in that process got (in loader-start order).
 * `checked` counts the grants judged.
 */
export function grantsNeverRepeat(grants: Grant[]): { checked: number; repeats: Violation[]; backwards: Violation[] } {
  const repeats: Violation[] = [];
  const backwards: Violation[] = [];
  const seen = new Map<string, Grant>();
  for (const g of grants) {
    const id = `${g.key}\u0000${g.fence}`;
    const first = seen.get(id);
    if (first) repeats.push({ property: 'no repeated token', detail: `key ${g.key}: token ${g.fence} handed to proc ${first.proc} at ${first.at.toFixed(0)} and again to proc ${g.proc} at ${g.at.toFixed(0)}` });
    else seen.set(id, g);
  }
  const byProcKey = new Map<string, Grant[]>();
  for (const g of grants) {
    const id = `${g.proc}\u0000${g.key}`;
    let list = byProcKey.get(id);
    if (!list) byProcKey.set(id, (list = []));
    list.push(g);
  }
  for (const list of byProcKey.values()) {
    let highest: Grant | undefined;
    for (const g of [...list].sort((a, b) => a.at - b.at)) {
      if (highest && g.fence < highest.fence) {
        backwards.push({ property: 'no backwards token', detail: `proc ${g.proc} key ${g.key}: token ${g.fence} at ${g.at.toFixed(0)} after ${highest.fence} at ${highest.at.toFixed(0)}` });
      }
      if (!highest || g.fence > highest.fence) highest = g;
    }
  }
  return { checked: grants.length, repeats, backwards };
}

/** A call that ran degraded (no lock, no store): a `degraded` event or a `computed` event with lock 'degraded'. */
export interface DegradedEvent {
  proc: number;
  key: string;
  at: number;
  what: string;
}

/** One shard's outage: its master SIGKILLed at `from`, running again at `restarted`. */
export interface Outage {
  node: number;
  from: number;
  restarted: number;
}

/** A call served from the store (a fenced value) by `proc`, for the recovery point of each process. */
export interface Served {
  proc: number;
  key: string;
  start: number;
  end: number;
  fence?: number;
}

/**
 * Healthy shards never degrade: a degraded call on a key is allowed only while the key's shard is
 * out for that process — from the kill of its master to the end of the first call of that process
 * on a key of that shard that started after the restart and returned a fenced (stored) value (until
 * then the process may not have learnt the shard is back: its breaker waits out a cooldown). Any
 * other degraded call (a key on a live master, or on a recovered one) is a violation. No timing
 * allowance: the recovery point is read from the history itself.
 */
export function healthyShardsNeverDegrade(
  events: DegradedEvent[],
  ownerOf: (key: string) => number,
  outages: Outage[],
  served: Served[],
): { checked: number; exempt: number; violations: Violation[] } {
  const violations: Violation[] = [];
  let exempt = 0;
  /** The end of `proc`'s outage of `outage.node`: its first fenced call on that shard started after the restart. */
  const recovered = (proc: number, outage: Outage): number => {
    let first = Infinity;
    for (const s of served) {
      if (s.proc === proc && s.fence !== undefined && s.start >= outage.restarted && s.end < first && ownerOf(s.key) === outage.node) first = s.end;
    }
    return first;
  };
  const memo = new Map<string, number>();
  for (const e of events) {
    const node = ownerOf(e.key);
    const covered = outages.some((o, i) => {
      if (o.node !== node || e.at < o.from) return false;
      const id = `${e.proc}\u0000${i}`;
      let until = memo.get(id);
      if (until === undefined) memo.set(id, (until = recovered(e.proc, o)));
      return e.at <= until;
    });
    if (covered) exempt++;
    else violations.push({ property: 'healthy shards never degrade', detail: `proc ${e.proc} key ${e.key} (node ${node}): ${e.what} at ${e.at.toFixed(0)}, its shard not out` });
  }
  return { checked: events.length, exempt, violations };
}
