import { Breaker } from './breaker.js';
import type { RedisPort } from './client/port.js';
import { entryKeys } from './keys.js';
import type { OwnKey } from './node-of.js';

/**
 * The health of each Redis node as the cache sees it (the `health` event and `cache.health()`).
 *
 * healthy  operations are sent.
 * suspect  an operation went unanswered for `redisTimeout` while its node answered nothing else in
 *          that time: the node is hung (a paused server, a full network buffer, a dead socket with no
 *          FIN). Nothing more is sent to it — operations fail at once (`NodeSuspect`), so calls answer
 *          from memory (L1, the degraded memo) or run their loader here — and a probe (`EXISTS` on a
 *          key the node owns) is sent in the background, one at a time (a new one only once the last
 *          was answered or failed). Any reply from the node (the probe's, or a late reply to an
 *          operation already given up on) ends it. Also when the subscriber finds the node silent
 *          and the cache's own operations heard nothing from it since (Io.silent).
 * open     the node's circuit breaker is open (breaker.ts): `breakerThreshold` consecutive failures
 *          (refused connections, error replies, separate suspicions); closed by a success after the
 *          cooldown, or by the client's reconnection.
 *
 * Reading it costs a walk over the few nodes seen so far: cheap enough for a health endpoint.
 */
export type NodeState = 'healthy' | 'suspect' | 'open';

/** A node's health changed: the payload of the `health` event. */
export interface HealthChange {
  /** The node: `'standalone'` for a plain client, `host:port` of the master on a Cluster, `redlock[i]` for the i-th Redlock node. */
  readonly node: string;
  /** `suspect` or `open`: the node became so; `recovered`: it answers again (healthy). */
  readonly state: 'suspect' | 'open' | 'recovered';
  /** Why: the failure that caused it (`no reply within 500 ms`, a connection error), or what ended it. */
  readonly cause: string;
  /**
   * `suspect`: how long its oldest unanswered operation had waited; `open` and `recovered`: how long
   * the node has been (was) unhealthy, from its first unanswered operation or failure.
   */
  readonly ms: number;
}

/** One node in `cache.health()`. */
export interface NodeHealthReport {
  readonly node: string;
  readonly state: NodeState;
  /** How long it has been unhealthy (ms); 0 when healthy. */
  readonly forMs: number;
  /** The failure that made it unhealthy; undefined when healthy. */
  readonly cause: string | undefined;
}

/** What `cache.health()` returns. */
export interface CacheHealth {
  /** Every node seen so far is healthy (true before any operation). */
  readonly healthy: boolean;
  /** The nodes this cache sent operations to, each with its state. */
  readonly nodes: readonly NodeHealthReport[];
}

/** Where a background probe of a suspect node is sent: the target of the operation that found it hung. */
export type ProbeTarget = string | OwnKey | undefined;
/** Sends a cheap command to the node that owns `target`; its reply (even an error reply) shows the node answers. */
export type Probe = (target: ProbeTarget) => Promise<unknown>;

/** The probe the cache uses: `EXISTS` on the Redis key of the target (routed to its slot's master on a Cluster). */
export function nodeProbe(port: RedisPort, prefix: string): Probe {
  return (target) => {
    const redisKey = typeof target === 'object' ? target.redisKey : target === undefined ? `${prefix}:probe` : entryKeys(prefix, target).value;
    return port.command(redisKey, ['EXISTS', redisKey]);
  };
}

/** One node's breaker, suspicion and reported state (Io keeps one per node). */
export class NodeHealth {
  readonly breaker: Breaker;
  /** When the node last answered anything (a reply or an error reply, timely or late); clock ms. */
  lastAnswer = Number.NEGATIVE_INFINITY;
  /** Hung: nothing is sent but the background probe. */
  suspect = false;
  /** When its oldest unanswered operation was sent (while suspect). */
  silentSince = 0;
  /** A background probe is in flight. */
  probing = false;
  /** Where probes go: the target of the operation that found the node hung. */
  probeTarget: ProbeTarget;
  /** From the first unanswered operation or failure until healthy again; undefined while healthy. */
  private unhealthySince: number | undefined;
  private cause: string | undefined;
  /** The state last reported (event), so each change is reported once. */
  private reported: NodeState = 'healthy';

  constructor(
    readonly name: string,
    threshold: number,
    cooldownMs: number,
    private readonly report: (change: HealthChange) => void,
  ) {
    this.breaker = new Breaker(threshold, cooldownMs);
  }

  state(): NodeState {
    if (this.breaker.isOpen) return 'open';
    return this.suspect ? 'suspect' : 'healthy';
  }

  /** An operation sent at `since` went unanswered; the node answered nothing since. */
  becameSuspect(since: number, target: ProbeTarget): void {
    this.suspect = true;
    this.silentSince = since;
    this.probeTarget = target;
  }

  /**
   * Reports a change of state (the `health` event), once per change. `since`: when the trouble began
   * (for a first unhealthy state); `cause`: the failure, or what ended it.
   */
  sync(now: number, since: number, cause: string): void {
    const state = this.state();
    if (state === this.reported) return;
    const from = this.unhealthySince ?? since;
    this.reported = state;
    if (state === 'healthy') {
      this.unhealthySince = undefined;
      this.cause = undefined;
      this.report({ node: this.name, state: 'recovered', cause, ms: Math.max(0, now - from) });
      return;
    }
    this.unhealthySince = from;
    this.cause = cause;
    this.report({ node: this.name, state, cause, ms: Math.max(0, now - (state === 'suspect' ? this.silentSince : from)) });
  }

  snapshot(now: number): NodeHealthReport {
    const state = this.state();
    const healthy = state === 'healthy';
    return { node: this.name, state, forMs: healthy || this.unhealthySince === undefined ? 0 : Math.max(0, now - this.unhealthySince), cause: healthy ? undefined : this.cause };
  }
}
