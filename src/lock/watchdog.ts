import { LockLostError } from '../errors.js';
import { watchdogInterval, type Clock } from '../options.js';

/** The outcome of one extension round: still ours, known lost, or unknown (Redis did not answer). */
export type Extension = 'kept' | 'lost' | 'unknown';

/**
 * Keeps a grant alive while its loader runs: extends every `lockTtl / 3` and aborts `signal` with a
 * LockLostError once the grant is known lost — refused, or not confirmed before its last known
 * validity ran out. Shared by the store lock and Redlock; each supplies its own extension round.
 */
export class Watchdog {
  readonly signal: AbortSignal;
  private readonly controller = new AbortController();
  private readonly timer: NodeJS.Timeout;
  private stopped = false;
  /**
   * Invariant: at most one extension round is in flight. A round may outlast the interval (it is
   * bounded by redisTimeout, which may exceed lockTtl/3); ticks that find one in flight only check
   * the validity, so rounds never pile up on a slow Redis.
   */
  private inFlight = false;
  /**
   * Monotonic time until which the grant is known to be ours. Invariant: it never decreases — a
   * 'kept' round only ever extends it (a round proves validity from its own start, which may be
   * earlier than what is already known).
   */
  private validUntil: number;

  constructor(
    private readonly key: string,
    private readonly clock: Clock,
    ttl: number,
    validUntil: number,
    /** One extension round; `validFor` is how long a 'kept' round keeps the grant, counted from its start. */
    private readonly extendOnce: () => Promise<Extension>,
    private readonly validFor: number,
    private readonly onLost: (key: string, err: LockLostError) => void,
  ) {
    this.signal = this.controller.signal;
    this.validUntil = validUntil;
    this.timer = setInterval(() => this.tick(), watchdogInterval(ttl));
    this.timer.unref();
  }

  /** Stops extending (the grant was released or written); idempotent. */
  stop(): void {
    this.stopped = true;
    clearInterval(this.timer);
  }

  private tick(): void {
    if (this.inFlight) {
      this.checkValidity();
      return;
    }
    this.inFlight = true;
    void this.round().finally(() => {
      this.inFlight = false;
    });
  }

  private async round(): Promise<void> {
    const sentAt = this.clock.now();
    const outcome = await this.extendOnce().catch((): Extension => 'unknown');
    if (this.stopped) return;
    if (outcome === 'kept') this.validUntil = Math.max(this.validUntil, sentAt + this.validFor);
    else if (outcome === 'lost') this.lose(new Error('extension refused: the lock holds another token, or too few nodes kept it'));
    this.checkValidity();
  }

  private checkValidity(): void {
    if (!this.stopped && this.clock.now() >= this.validUntil) this.lose(new Error('validity ran out before an extension was confirmed'));
  }

  private lose(cause: unknown): void {
    this.stop();
    if (this.controller.signal.aborted) return;
    const err = new LockLostError(this.key, cause);
    this.controller.abort(err);
    this.onLost(this.key, err);
  }
}
