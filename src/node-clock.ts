/**
 * What this process knows of each Redis node's clock, so that a fresh hit can be one plain read.
 *
 * An entry carries the instant its fresh time ends, in its node's own clock (`freshUntil`, written by
 * the write script from the server's TIME: codec.ts). A plain read (GETRANGE) returns those bytes but
 * not the server's time, so the reader needs the node's time at the moment the read ran. It keeps,
 * per node, the offset between the node's clock and this process's monotonic clock as an interval:
 * a sample is the server's TIME read by the read script (store.ts), which ran at some instant between
 * the script's send (`sent`) and its reply (`received`), so `server = local + offset` with
 * `offset ∈ [time − received, time − sent]`. The interval then widens with age:
 *   - by CLOCK_DRIFT per elapsed ms (the two clocks' rates may differ: NTP slews a clock by at most
 *     500 ppm), and
 *   - by how far this process's monotonic clock and its wall clock disagree since the sample (a VM
 *     suspended and resumed, a clock stepped): such a jump is then uncertainty, never an error.
 * A plain read sent at `a0` and answered at `a1` ran at a server time within
 * `[a0 + lo − widen, a1 + hi + widen]`: the window `timeWindow` returns. Store decides the entry's state
 * at both ends; where they differ, the read is made again with the script, whose answer (PTTL) is the
 * server's own, and which takes a new sample. So the
 * bound is the measurement's: an entry is treated as fresh no later than its node's clock says it
 * expires, provided the node's clock did not jump by more than the window since the last sample
 * (a step of the server's clock moves Redis's own expiry too; samples are re-taken every few seconds
 * and after every reconnection, a failover among them). An entry that moved to another server (a
 * failover, a slot migration) carries the old server's `freshUntil`: judged against the new one's
 * clock, it is off by the two clocks' difference, as Redis's own expiry is (replicated as an
 * absolute time).
 */
import type { NodeOf } from './node-of.js';
import type { Clock } from './options.js';

/** How fast the two clocks may drift apart, per ms (500 ppm: the most NTP slews a clock). */
export const CLOCK_DRIFT = 5e-4;
/**
 * A sample is re-taken (the next read of its node is the script) once it has widened by this much
 * since it was taken: after 20 s at the drift bound, sooner if the clocks disagree. Its own round trip
 * does not count: a node far away has wide samples, and judging a read at both ends of a wide window
 * is as sound as of a narrow one (an entry only ever moves fresh → stale → kept), only more often
 * undecided near a boundary.
 */
export const RESAMPLE_AFTER_MS = 10;

/**
 * What a Cluster port calls the owner of a slot it has no map for yet (client/port.ts nodeOf): such a
 * read may run on any master, so no sample is kept or used under this name.
 */
const UNKNOWN = 'unknown';

interface Sample {
  /** The offset interval: server time = local monotonic time + offset. */
  readonly lo: number;
  readonly hi: number;
  /** Local monotonic and wall time of the reply that gave it. */
  readonly at: number;
  readonly wall: number;
}

/** [earliest, latest] server time (ms since the epoch, the node's clock) at which a read ran. */
export type TimeWindow = readonly [number, number];

export class NodeClocks {
  private readonly samples = new Map<string, Sample>();
  /** Nodes whose next read is to take a new sample (a script read in flight claims it). */
  private readonly sampling = new Set<string>();

  constructor(
    private readonly clock: Clock,
    /** The node that owns a user key (the same as Io's breakers). */
    readonly nodeOf: NodeOf,
    /** Negative control only (`unsafe.clockSkewMs`): every sample is wrong by this much. */
    private readonly skewMs = 0,
    private readonly wall: () => number = Date.now,
  ) {}

  now(): number {
    return this.clock.now();
  }

  /**
   * May a read of `node` sent now (`now`, clock time) be a plain read? No when there is no usable sample, or when one is
   * due (the caller then sends the script, which re-takes it: one such read per node at a time).
   */
  plainReadable(node: string, now = this.clock.now()): boolean {
    if (node === UNKNOWN) return false;
    const s = this.samples.get(node);
    if (s !== undefined && this.widening(s, now) <= RESAMPLE_AFTER_MS) return true;
    if (this.sampling.has(node)) return s !== undefined;
    this.sampling.add(node);
    return false;
  }

  /** The server-time window of a plain read of `node` sent at `sent` and answered at `received`; undefined without a sample. */
  timeWindow(node: string, sent: number, received: number): TimeWindow | undefined {
    const s = this.samples.get(node);
    if (s === undefined) return undefined;
    const widen = this.widening(s, received);
    return [sent + s.lo - widen, received + s.hi + widen];
  }

  /**
   * A script read of `node` sent at `sent`, answered at `received`, ran at server time `serverMs`.
   * Kept if it is tighter than the current sample (aged to now), or contradicts it (the intervals do
   * not meet: the server's clock stepped, or another server answers under the node's name); the claim
   * on the node ends either way.
   */
  sample(node: string, sent: number, received: number, serverMs: number): void {
    this.sampling.delete(node);
    if (node === UNKNOWN) return;
    const skewed = serverMs + this.skewMs;
    const next: Sample = { lo: skewed - received, hi: skewed - sent, at: received, wall: this.wall() };
    const current = this.samples.get(node);
    if (current === undefined || this.width(next, received) <= this.width(current, received) || !this.meet(current, next)) this.samples.set(node, next);
  }

  /** Do the offset intervals of `current` (aged to `next`'s time) and `next` overlap? */
  private meet(current: Sample, next: Sample): boolean {
    const widen = this.widening(current, next.at);
    return next.lo <= current.hi + widen && current.lo - widen <= next.hi;
  }

  /** A script read that failed: the node's claim ends (the next read tries again). */
  unclaim(node: string): void {
    this.sampling.delete(node);
  }

  /** Every sample goes: the client reconnected (maybe to another server: a failover, a restart). */
  forget(): void {
    this.samples.clear();
    this.sampling.clear();
  }

  private width(s: Sample, now: number): number {
    return s.hi - s.lo + 2 * this.widening(s, now);
  }

  private widening(s: Sample, now: number): number {
    const elapsed = Math.max(0, now - s.at);
    return elapsed * CLOCK_DRIFT + Math.abs(this.wall() - s.wall - elapsed);
  }
}
