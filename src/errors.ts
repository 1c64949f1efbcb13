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
  | 'ERR_UNSTORABLE_VALUE'
  | 'ERR_CLIENT_NOT_CONNECTED';

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

/**
 * The reason `ctx.signal` aborts with when the rebuild lock could not be kept. Its message quotes the
 * fence rule (src/lock/scripts.ts), which decides whether the late write lands.
 */
export class LockLostError extends StampedeGuardError {
  constructor(key: string, cause?: unknown) {
    super(
      'ERR_LOCK_LOST',
      `The rebuild lock for "${key}" was lost (expired or taken over). The loader's write is still fenced: it is refused once a newer write, set() or delete() was accepted for the key, or the fence was re-created (lapsed, evicted, Redis restarted); a newer grant alone does not refuse it. Raise "lockTtl" if loaders are this slow.`,
      { key, cause },
    );
  }
}

export class AbortedError extends StampedeGuardError {
  constructor(key: string, cause?: unknown) {
    super('ERR_ABORTED', `The call for "${key}" was aborted by its "signal".`, { key, cause });
  }
}

/**
 * How a Redis operation failed:
 *   timeout     no reply within `redisTimeout` (the command may still run later);
 *   reply       Redis answered with an error (OOM, READONLY, MISCONF, a script error…): not a timeout;
 *   connection  the client could not send it (connection closed, retries exhausted, offline queue off);
 *   breaker     not sent: the circuit breaker is open after consecutive failures;
 *   replicaAck  applied on the primary, but fewer replicas than `replicaAck.replicas` acknowledged it
 *               within `replicaAck.timeout`: not trusted (a failover could lose it).
 */
export type RedisFailure = 'timeout' | 'reply' | 'connection' | 'breaker' | 'replicaAck';

/** The cause `Io` gives a timed-out operation (so the error can tell a timeout from an error reply). */
export class RedisTimeout extends Error {
  constructor(readonly ms: number) {
    super(`no reply within ${ms} ms`);
    this.name = 'RedisTimeout';
  }
}

/**
 * The cause `Io` gives an operation it did not send because its node is suspect: an operation to that
 * node went unanswered for `redisTimeout` while the node answered nothing else. A kind of timeout
 * (`failure` 'timeout'): the node is not answering in time, so nothing more is queued behind it until
 * it answers again (a background probe, or a late reply, ends it).
 */
export class NodeSuspect extends RedisTimeout {
  constructor(readonly node: string, readonly silentMs: number, timeoutMs: number) {
    super(timeoutMs);
    this.message = `not sent: node ${node === '' ? '' : `"${node}" `}has answered nothing for ${Math.round(silentMs)} ms (suspect after ${timeoutMs} ms; probed in the background)`;
    this.name = 'NodeSuspect';
  }
}

/** The cause `Io` gives an operation it did not send because the breaker is open; carries the last failure's text. */
export class BreakerOpen extends Error {
  constructor(readonly failures: number, readonly last: string) {
    super(`circuit breaker open after ${failures} consecutive failures (last: ${last})`);
    this.name = 'BreakerOpen';
  }
}

/** The cause of an operation the primary applied but too few replicas acknowledged in time (`WAIT`). */
export class ReplicaAckShort extends Error {
  constructor(readonly acked: number, readonly wanted: number, readonly ms: number) {
    super(`${acked} of ${wanted} replicas acknowledged within ${ms} ms`);
    this.name = 'ReplicaAckShort';
  }
}

/** Redis's own error text for a message: first line, bounded. */
export function redisText(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  const line = text.split('\n')[0] ?? '';
  return line.length > 200 ? `${line.slice(0, 200)}…` : line;
}

function failureOf(cause: unknown): RedisFailure {
  if (cause instanceof RedisTimeout) return 'timeout';
  if (cause instanceof BreakerOpen) return 'breaker';
  if (cause instanceof ReplicaAckShort) return 'replicaAck';
  if (isErrorReply(cause)) return 'reply';
  return 'connection';
}

/**
 * Redis answered with an error reply (OOM, READONLY, NOPERM, a script's error…), as opposed to a
 * command that was not sent or not answered. ioredis (4–6) reports every error reply as a
 * `ReplyError` (from redis-errors, by name); node-redis (4–6) as an instance of its `ErrorReply`
 * class or a subclass (`SimpleError`, `BlobError`), whose `name` stays 'Error' — so its class is
 * matched by the constructor names up the prototype chain, without importing the optional client.
 */
function isErrorReply(cause: unknown): boolean {
  if (!(cause instanceof Error)) return false;
  if (cause.name === 'ReplyError') return true;
  for (let proto: unknown = Object.getPrototypeOf(cause); proto !== null && proto !== Error.prototype; proto = Object.getPrototypeOf(proto)) {
    if ((proto as { constructor?: { name?: unknown } }).constructor?.name === 'ErrorReply') return true;
  }
  return false;
}

/**
 * What a Redis operation was about: a user key, or a namespace (its path, `users` or `users/admins`),
 * whose generation counter is a Redis key of its own. Messages must not present a namespace as a key.
 */
export type Subject = string | { readonly namespace: string } | undefined;

/** ` for "key"`, ` for namespace "users"`, or nothing. */
function forSubject(subject: Subject): string {
  if (subject === undefined) return '';
  return typeof subject === 'string' ? ` for "${subject}"` : ` for namespace "${subject.namespace}"`;
}

function unavailableMessage(operation: string, failure: RedisFailure, cause: unknown, subject: Subject): string {
  const what = `Redis ${operation}${forSubject(subject)}`;
  switch (failure) {
    case 'timeout':
      return `${what} timed out: ${redisText(cause)}; raise "redisTimeout" or check the server and the client's connection options.`;
    case 'reply':
      return `${what} failed: Redis replied "${redisText(cause)}" (an error reply, not a timeout).`;
    case 'breaker':
      return `${what} was not sent: ${redisText(cause)}; it is retried after "breakerCooldown" or when the client reconnects.`;
    case 'connection':
      return `${what} failed: ${redisText(cause)} (not sent or no connection); check the client's connection options.`;
    case 'replicaAck':
      return `${what} is not trusted: ${redisText(cause)}; check the replicas, or raise "replicaAck.timeout".`;
  }
}

export class RedisUnavailableError extends StampedeGuardError {
  /** The library operation that failed, as its caller named it: `read`, `acquire`, `write`, `set`, `delete`, … */
  readonly operation: string;
  /** A timeout, an error reply (Redis's text is in the message and in `cause`), no connection, or the open breaker. */
  readonly failure: RedisFailure;
  /** The namespace (its path) whose own Redis key the operation was on (its `clear()`), when it was about one; `key` is then undefined. */
  readonly namespace: string | undefined;
  constructor(operation: string, cause: unknown, subject?: Subject, code: ErrorCode = 'ERR_REDIS_UNAVAILABLE', message?: string) {
    const failure = failureOf(cause);
    const key = typeof subject === 'string' ? subject : undefined;
    super(code, message ?? unavailableMessage(operation, failure, cause, subject), { key, cause });
    this.operation = operation;
    this.failure = failure;
    this.namespace = typeof subject === 'object' ? subject.namespace : undefined;
  }
}

/**
 * Redis refused a command for lack of permission (an ACL `NOPERM` reply): a configuration error.
 * It is never retried; the call degrades like any unavailability. The README and docs/operations.md list the commands to grant.
 */
export class RedisPermissionError extends RedisUnavailableError {
  constructor(operation: string, cause: unknown, subject?: Subject) {
    super(
      operation,
      cause,
      subject,
      'ERR_REDIS_NOPERM',
      `Redis refused ${operation}${forSubject(subject)} for lack of permission: Redis replied "${redisText(cause)}"; grant the ACL user the commands, keys "<prefix>:*" and channel "<prefix>:events" listed in the README.`,
    );
  }
}

export class CacheClosedError extends StampedeGuardError {
  constructor(key?: string) {
    super('ERR_CLOSED', 'The cache was closed with close(); create a new one with createCache().', { key });
  }
}

/**
 * `createCache` was given a node-redis client that is neither open nor opening (`connect()` was never
 * called, or the client was closed): every call would degrade with "The client is closed" and the
 * cache would never reach Redis. node-redis, unlike ioredis, does not connect on its own.
 */
export class ClientNotConnectedError extends StampedeGuardError {
  /** Where the client was given: `redis`, or `redlock.nodes[i]`. */
  readonly option: string;
  constructor(option: string, family: string) {
    super(
      'ERR_CLIENT_NOT_CONNECTED',
      `The ${family} client given as "${option}" is not open: call its connect() before createCache() (no need to await it; with Redis down at start-up, see docs/operations.md), or pass a client that is connecting.`,
    );
    this.option = option;
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

const UNSTORABLE_ADVICE =
  'Store plain data only (primitives, bigint, arrays, plain objects, Map, Set, Date, Buffer/typed arrays; no functions, symbols, cycles, RegExp or Error), or raise "maxValueBytes" if it is only too large.';

/**
 * A value that could never be read back from Redis, refused before anything was sent: a function or
 * a symbol inside it, a cycle, a type the reader's allow-list refuses, a size above `maxValueBytes`,
 * or an encoder failure. `reason` is short and stable enough to log ('function', 'symbol', 'cycle',
 * 'type RegExp', 'too large (N > maxValueBytes M)', 'encode failed: …').
 */
export class UnstorableValueError extends StampedeGuardError {
  readonly reason: string;
  declare readonly key: string;
  constructor(key: string, reason: string, cause?: unknown) {
    super(
      'ERR_UNSTORABLE_VALUE',
      `The value for "${key}" cannot be stored in Redis (${reason}): it could never be read back, so it was not written. ${UNSTORABLE_ADVICE}`,
      { key, cause },
    );
    this.reason = reason;
  }
}
