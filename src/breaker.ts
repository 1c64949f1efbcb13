import { breakerCooldown, breakerOpenings } from './options.js';

/**
 * One circuit breaker: the failure policy of one Redis node (the Io keeps one per node; see io.ts).
 * Pure state over an injected time (`now` is passed in) and an injected random draw.
 *
 * closed    operations pass; `threshold` consecutive failures open it.
 * open      operations are refused until the cooldown passes. The cooldown is jittered and grows with
 *           each opening that follows the last closing within the judgement window (`breakerCooldown`,
 *           `breakerOpenings`): a Redis that stalls periodically can never keep every probe in phase
 *           with its stalls — the failure mode of a fixed cooldown whose cooldown + timeout equals
 *           the stall period, where every probe lands in the next stall.
 * half-open after the cooldown exactly one probe passes at a time; its success closes the breaker,
 *           its failure opens it again. A closing is judged over the window that follows it: if the
 *           breaker opens again within `breakerJudgementWindow(breakerCooldown)` the openings keep counting (and the
 *           cooldown keeps growing); once it stayed closed that long, the count starts over.
 */
export class Breaker {
  /** Consecutive failures; reset by any success. */
  failures = 0;
  /** The last failure's text, quoted when the open breaker refuses an operation. */
  lastFailure = '';
  /** Open or half-open (from an opening until the next success). */
  private open = false;
  /** While now < openUntil the open breaker refuses everything; after it, it is half-open. */
  private openUntil = 0;
  private probing = false;
  /** Openings since the breaker last stayed closed for a whole judgement window. */
  private openings = 0;
  /** When the breaker last closed after being open (-Infinity: never opened). */
  private closedAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly threshold: number,
    private readonly cooldownMs: number,
    private readonly rand: () => number = Math.random,
  ) {}

  /** Open or half-open: from an opening until the next success (the node's health reads it). */
  get isOpen(): boolean {
    return this.open;
  }

  /** May an operation be sent at `now`? True also for the one half-open probe (which then blocks the others). */
  admit(now: number): boolean {
    if (this.failures < this.threshold) return true;
    if (now < this.openUntil || this.probing) return false;
    this.probing = true;
    return true;
  }

  /** Open and refusing every operation at `now` (not yet half-open). Pure: unlike admit(), it claims no probe. */
  refusing(now: number): boolean {
    return this.failures >= this.threshold && now < this.openUntil;
  }

  /** True when this success closes the open breaker (the node answers again after an outage). */
  succeeded(now: number): boolean {
    const recovered = this.open;
    if (this.open) this.closedAt = now;
    this.open = false;
    this.failures = 0;
    this.probing = false;
    return recovered;
  }

  failed(text: string, now: number): void {
    this.lastFailure = text;
    this.failures++;
    this.probing = false;
    if (this.failures < this.threshold) return;
    // Already open: a straggler sent before it opened. It neither prolongs nor grows the cooldown.
    if (this.open && now < this.openUntil) return;
    // A failed half-open probe opens again with a longer cooldown; a fresh opening is judged against the last closing.
    this.openings = this.open ? this.openings + 1 : breakerOpenings(this.openings, now - this.closedAt, this.cooldownMs);
    this.open = true;
    this.openUntil = now + breakerCooldown(this.cooldownMs, this.openings, this.rand());
  }

  /** The client reconnected: close now and forget the history (a restart is not a periodic stall). */
  reset(): void {
    this.failures = 0;
    this.probing = false;
    this.open = false;
    this.openUntil = 0;
    this.openings = 0;
    this.closedAt = Number.NEGATIVE_INFINITY;
  }
}
