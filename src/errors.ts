/**
 * Every error the library throws is a `StampedeGuardError` with a stable `code`.
 * Callers match on `code` (or `instanceof`), never on message text; messages are
 * for humans and name the option to change.
 */
export type ErrorCode =
  | 'ERR_INVALID_OPTION'
  | 'ERR_INVALID_KEY'
  | 'ERR_WAIT_TIMEOUT'
  | 'ERR_LOCK_LOST'
  | 'ERR_ABORTED'
  | 'ERR_REDIS_UNAVAILABLE'
  | 'ERR_CLOSED'
  | 'ERR_NO_QUORUM'
  | 'ERR_TOO_MANY_WAITERS'
  | 'ERR_LOADER_TIMEOUT'
  | 'ERR_BACKOFF'
  | 'ERR_REDIS_NOPERM'
  | 'ERR_UNSTORABLE_VALUE';

export class StampedeGuardError extends Error {
  readonly code: ErrorCode;
  /** The user key the failing call was about, when there was one. */
  readonly key: string | undefined;

  constructor(code: ErrorCode, message: string, opts: { key?: string; cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = new.target.name;
    this.code = code;
    this.key = opts.key;
  }
}

/** Describes a value and its type for messages: `-5 (number)`, `"x" (string)`. */
export function describe(value: unknown): string {
  let shown: string;
  if (typeof value === 'string') shown = JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}…` : value);
  else if (typeof value === 'bigint') shown = `${value}n`;
  else if (typeof value === 'function') shown = '[function]';
  else if (value === null || value === undefined || typeof value !== 'object') shown = String(value);
  else shown = Array.isArray(value) ? '[array]' : '[object]';
  const type = value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value;
  return `${shown} (${type})`;
}

export class InvalidOptionError extends StampedeGuardError {
  readonly option: string;
  readonly value: unknown;
  constructor(option: string, value: unknown, expected: string, key?: string) {
    super('ERR_INVALID_OPTION', `Invalid option "${option}": got ${describe(value)}; expected ${expected}.`, { key });
    this.option = option;
    this.value = value;
  }
}

export class InvalidKeyError extends StampedeGuardError {
  readonly value: unknown;
  constructor(value: unknown, reason: string) {
    super('ERR_INVALID_KEY', `Invalid cache key ${describe(value)}: ${reason}.`, {
      key: typeof value === 'string' ? value : undefined,
    });
    this.value = value;
  }
}

export class WaitTimeoutError extends StampedeGuardError {
  constructor(key: string, waitTimeout: number) {
    super(
      'ERR_WAIT_TIMEOUT',
      `Waited ${waitTimeout} ms for another process to rebuild "${key}"; raise "waitTimeout" or set onWaitTimeout: 'compute'.`,
      { key },
    );
  }
}

/** The reason `ctx.signal` aborts with when the rebuild lock could not be kept. */
export class LockLostError extends StampedeGuardError {
  constructor(key: string, cause?: unknown) {
    super(
      'ERR_LOCK_LOST',
      `The rebuild lock for "${key}" was lost (expired or taken over); the loader's write will be rejected if a newer rebuild started. Raise "lockTtl" if loaders are this slow.`,
      { key, cause },
    );
  }
}

export class AbortedError extends StampedeGuardError {
  constructor(key: string, cause?: unknown) {
    super('ERR_ABORTED', `The call for "${key}" was aborted by its "signal".`, { key, cause });
  }
}

export class RedisUnavailableError extends StampedeGuardError {
  /** The library operation that failed, e.g. `read`, `acquire`. */
  readonly operation: string;
  constructor(operation: string, cause: unknown, key?: string, code: ErrorCode = 'ERR_REDIS_UNAVAILABLE', message?: string) {
    super(
      code,
      message ?? `Redis ${operation} failed or timed out${key === undefined ? '' : ` for "${key}"`}; see "redisTimeout" and the client's connection options.`,
      { key, cause },
    );
    this.operation = operation;
  }
}

/**
 * Redis refused a command for lack of permission (an ACL `NOPERM` reply): a configuration error.
 * It is never retried; the call degrades like any unavailability. The README lists the commands to grant.
 */
export class RedisPermissionError extends RedisUnavailableError {
  constructor(operation: string, cause: unknown, key?: string) {
    super(
      operation,
      cause,
      key,
      'ERR_REDIS_NOPERM',
      `Redis refused ${operation} for lack of permission (NOPERM); grant the ACL user the commands, keys "<prefix>:*" and channel "<prefix>:events" listed in the README.`,
    );
  }
}

export class CacheClosedError extends StampedeGuardError {
  constructor(key?: string) {
    super('ERR_CLOSED', 'The cache was closed with close(); create a new one with createCache().', { key });
  }
}

export class NoQuorumError extends StampedeGuardError {
  constructor(key: string, granted: number, needed: number, cause?: unknown) {
    super(
      'ERR_NO_QUORUM',
      `Redlock for "${key}" reached ${granted} of the ${needed} nodes it needs; check the redlock nodes or set redlock.onNoQuorum to 'single' or 'local'.`,
      { key, cause },
    );
  }
}

export class TooManyWaitersError extends StampedeGuardError {
  constructor(key: string, limit: number) {
    super('ERR_TOO_MANY_WAITERS', `More than ${limit} callers are waiting on "${key}"; raise "maxWaitersPerKey".`, { key });
  }
}

export class LoaderTimeoutError extends StampedeGuardError {
  constructor(key: string, hardTimeout: number) {
    super('ERR_LOADER_TIMEOUT', `The loader for "${key}" ran past hardTimeout (${hardTimeout} ms); raise "hardTimeout".`, { key });
  }
}

/** The loader failed recently for this key (somewhere in the fleet) and `failBackoff` has not passed; no fail-safe value was at hand. */
export class OriginBackoffError extends StampedeGuardError {
  /** How long the backoff still lasts, in ms (as Redis reported it). */
  readonly retryAfterMs: number;
  constructor(key: string, retryAfterMs: number) {
    super(
      'ERR_BACKOFF',
      `The loader for "${key}" failed recently; it is not called again for ${retryAfterMs} ms ("failBackoff"). Set "failSafeTtl" to serve the previous value meanwhile.`,
      { key },
    );
    this.retryAfterMs = retryAfterMs;
  }
}

/** TEMPORARY SHIM (replaced by the fence branch). */
export class UnstorableValueError extends StampedeGuardError {
  readonly reason: string;
  constructor(key: string, reason: string) {
    super('ERR_UNSTORABLE_VALUE', `The value for "${key}" cannot be stored: ${reason}.`, { key });
    this.reason = reason;
  }
}
