import type { RedisPort } from './client/port.js';
import { RedisTimeout, RedisUnavailableError } from './errors.js';
import type { Bus } from './wait.js';

/** What ready() asks of its cache. */
export interface Readiness {
  readonly port: RedisPort;
  readonly bus: Bus;
  /** Server-assisted tracking holds within `timeoutMs` (tracking.ts); true at once where L1 is not tracked. */
  tracked(timeoutMs: number): Promise<boolean>;
  readonly timeoutMs: number;
  /** Aborts at close(): ready() then resolves false at once, and reports nothing. */
  readonly lifetime: AbortSignal;
  /** Why the cache refuses operations now (an open circuit breaker), or undefined. */
  refusal(): RedisUnavailableError | undefined;
  /** Where a part that did not hold is reported (the `degraded` event). */
  why(error: RedisUnavailableError): void;
  /**
   * The PINGs an earlier ready() sent that are still unanswered (one holder per cache): a later
   * ready() joins them instead of sending more. A client keeps a PING sent while Redis is down in its
   * offline queue until it reconnects (node-redis 5; node-redis 6 for the cache's own commands, which
   * carry no per-command timer; ioredis up to its retries), so a health check polling ready()
   * through an outage queues at most one PING per master, not one per call.
   */
  readonly pings: { current: Promise<void> | undefined };
}

/**
 * `ready()`'s answer: true only when calls can reach Redis — the cache's pub/sub subscription holds
 * (waiters are woken, L1 is coherent; under tracking, the server's tracking holds too), every master of the caller's client answered a PING on the
 * client's own connections (a subscriber duplicate can be up while the caller's client is not: a
 * node-redis client whose connect() failed, an ioredis client that gave up reconnecting), and no
 * circuit breaker refuses operations. The subscription and the PINGs are asked at once, so the answer
 * comes within `timeoutMs`; close() ends it at once with false. Each part that did not hold is
 * reported to `why` as a RedisUnavailableError (operation `'subscribe'`, `'ping'` or `'ready'` for
 * the breaker): the boolean stays the whole answer, the reason reaches the `degraded` event. Never rejects.
 */
export async function ready(r: Readiness): Promise<boolean> {
  if (r.lifetime.aborted) return false;
  const [subscribed, answered, tracked] = await Promise.all([r.bus.ready(r.timeoutMs), pingEveryMaster(r), r.tracked(r.timeoutMs)]);
  if (r.lifetime.aborted) return false;
  const refused = r.refusal();
  if (!subscribed) r.why(new RedisUnavailableError('subscribe', new Error(`the pub/sub subscription did not hold within ${r.timeoutMs} ms ("redisTimeout")`)));
  if (!tracked) r.why(new RedisUnavailableError('subscribe', new Error(`server-assisted tracking (local.invalidation 'tracking') did not hold within ${r.timeoutMs} ms ("redisTimeout")`)));
  if (answered !== true) r.why(answered);
  if (refused) r.why(refused);
  return subscribed && tracked && answered === true && !refused;
}

/** How long a refused PING waits before it is sent again (a client still connecting, offline queue off). */
const RETRY_MS = 25;

/**
 * True once every master answered PING within `timeoutMs`; else the last failure. A refusal (a client
 * still connecting with its offline queue off, a Cluster that knows no master yet) is tried again
 * until the deadline: ready() waits for a connecting client as it waits for the subscription. Leaves
 * no timer behind.
 */
async function pingEveryMaster(r: Readiness): Promise<true | RedisUnavailableError> {
  const deadline = Date.now() + r.timeoutMs;
  let last = new RedisUnavailableError('ping', new RedisTimeout(r.timeoutMs));
  for (;;) {
    const left = deadline - Date.now();
    if (left <= 0 || r.lifetime.aborted) return last;
    const answer = await within(left, r, () => (r.pings.current ??= pingMasters(r)));
    if (answer === true) return true;
    // A timeout of a PING queued behind a refusal says less than the refusal: keep the first reason that is not a timeout.
    if (answer.failure !== 'timeout' || last.failure === 'timeout') last = answer;
    if (answer.failure === 'timeout') return last;
    await within(Math.min(RETRY_MS, Math.max(0, deadline - Date.now())), r, () => new Promise<void>(() => undefined));
  }
}

/** One PING to every master; `r.pings.current` until it settles (see Readiness.pings). */
function pingMasters(r: Readiness): Promise<void> {
  const sent = (async () => {
    const nodes = r.port.eachNode('masters');
    if (nodes.length === 0) throw new Error('the client knows no master yet');
    await Promise.all(nodes.map((send) => send(['PING'])));
  })();
  const done = (): void => {
    if (r.pings.current === sent) r.pings.current = undefined;
  };
  sent.then(done, done);
  return sent;
}

/**
 * `work`'s outcome within `ms`, or sooner once close() ran: true, or the failure (a timeout names the
 * whole budget, `timeoutMs`). Its timer is unref'd and cleared: it never holds the process open.
 */
async function within(ms: number, r: Readiness, work: () => Promise<void>): Promise<true | RedisUnavailableError> {
  let timer: NodeJS.Timeout | undefined;
  let onClose: (() => void) | undefined;
  const expired = new Promise<RedisUnavailableError>((resolve) => {
    const timeout = (): void => resolve(new RedisUnavailableError('ping', new RedisTimeout(r.timeoutMs)));
    timer = setTimeout(timeout, ms);
    timer.unref();
    onClose = timeout;
    r.lifetime.addEventListener('abort', onClose, { once: true });
  });
  const done = work().then(
    () => true as const,
    (error: unknown) => new RedisUnavailableError('ping', error),
  );
  try {
    return await Promise.race([done, expired]);
  } finally {
    clearTimeout(timer);
    if (onClose) r.lifetime.removeEventListener('abort', onClose);
  }
}
