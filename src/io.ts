import { RedisPermissionError, RedisUnavailableError } from './errors.js';
import type { Clock } from './options.js';

/**
 * Every Redis operation goes through `Io.run`: it is bounded by `redisTimeout` (ioredis may keep a
 * command in its offline queue far longer), and a circuit breaker stops sending commands after
 * `threshold` consecutive failures, so an outage costs callers nothing but the degraded path.
 *
 * Invariant: a timed-out command may still run on the server later. Callers whose command creates
 * state (a lock) pass `onLateSuccess` to undo it when the late reply arrives.
 */
export class Io {
  private failures = 0;
  /** While now < openUntil the breaker is open; after it, exactly one probe is let through. */
  private openUntil = 0;
  private probing = false;

  constructor(
    private readonly timeoutMs: number,
    private readonly threshold: number,
    private readonly cooldownMs: number,
    private readonly clock: Clock,
  ) {}

  /** True while the breaker skips Redis. */
  get isOpen(): boolean {
    return this.failures >= this.threshold && (this.clock.now() < this.openUntil || this.probing);
  }

  async run<T>(operation: string, fn: () => Promise<T>, key?: string, onLateSuccess?: (value: T) => void): Promise<T> {
    if (this.failures >= this.threshold) {
      if (this.clock.now() < this.openUntil || this.probing) {
        throw new RedisUnavailableError(operation, new Error('circuit breaker open'), key);
      }
      this.probing = true;
    }
    let timer: NodeJS.Timeout | undefined;
    let timedOut = false;
    const pending = fn();
    try {
      const result = await Promise.race([
        pending,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            timedOut = true;
            reject(new Error(`timed out after ${this.timeoutMs} ms`));
          }, this.timeoutMs);
        }),
      ]);
      this.succeeded();
      return result;
    } catch (err) {
      this.failed();
      if (timedOut) {
        pending.then((late) => onLateSuccess?.(late), () => undefined);
      }
      if (err instanceof RedisUnavailableError) throw err;
      if (err instanceof Error && err.message.startsWith('NOPERM')) throw new RedisPermissionError(operation, err, key);
      throw new RedisUnavailableError(operation, err, key);
    } finally {
      clearTimeout(timer);
    }
  }

  private succeeded(): void {
    this.failures = 0;
    this.probing = false;
  }

  private failed(): void {
    this.failures++;
    this.probing = false;
    if (this.failures >= this.threshold) this.openUntil = this.clock.now() + this.cooldownMs;
  }
}
