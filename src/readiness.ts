import type { RedisPort } from './client/port.js';
import { RedisTimeout, RedisUnavailableError } from './errors.js';
import type { Bus } from './wait.js';

/**
 * `ready()`'s answer: true only when calls can reach Redis — the cache's pub/sub subscription holds
 * (waiters are woken, L1 is coherent) and every master of the caller's client answered a PING on the
 * client's own connections (a subscriber duplicate can be up while the caller's client is not: a
 * node-redis client whose connect() failed, an ioredis client that gave up reconnecting). Both are
 * asked at once, so the answer comes within `timeoutMs`. Each part that did not hold is reported to
 * `why` as a RedisUnavailableError (operation `'subscribe'` or `'ping'`): the boolean stays the whole
 * answer, and the reason reaches the `degraded` event. Never rejects.
 */
export async function ready(port: RedisPort, bus: Bus, timeoutMs: number, why: (error: RedisUnavailableError) => void): Promise<boolean> {
  const [subscribed, answered] = await Promise.all([bus.ready(timeoutMs), pingEveryMaster(port, timeoutMs)]);
  if (!subscribed) why(new RedisUnavailableError('subscribe', new Error(`the pub/sub subscription did not hold within ${timeoutMs} ms ("redisTimeout")`)));
  if (answered !== true) why(answered);
  return subscribed && answered === true;
}

/** How long a refused PING waits before it is sent again (a client still connecting, offline queue off). */
const RETRY_MS = 25;

/**
 * True once every master answered PING within `timeoutMs`; else the last failure. A refusal (a client
 * still connecting with its offline queue off, a Cluster that knows no master yet) is tried again
 * until the deadline: ready() waits for a connecting client as it waits for the subscription. Leaves
 * no timer behind.
 */
async function pingEveryMaster(port: RedisPort, timeoutMs: number): Promise<true | RedisUnavailableError> {
  const deadline = Date.now() + timeoutMs;
  let last = new RedisUnavailableError('ping', new RedisTimeout(timeoutMs));
  for (;;) {
    const left = deadline - Date.now();
    if (left <= 0) return last;
    const answer = await within(left, timeoutMs, async () => {
      const nodes = port.eachNode('masters');
      if (nodes.length === 0) throw new Error('the client knows no master yet');
      await Promise.all(nodes.map((send) => send(['PING'])));
    });
    if (answer === true) return true;
    last = answer;
    if (answer.failure === 'timeout') return answer;
    await new Promise((resolve) => setTimeout(resolve, Math.min(RETRY_MS, Math.max(0, deadline - Date.now()))));
  }
}

/** `work`'s outcome within `ms`: true, or the failure (a timeout names `timeoutMs`, the whole budget). */
async function within(ms: number, timeoutMs: number, work: () => Promise<void>): Promise<true | RedisUnavailableError> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<RedisUnavailableError>((resolve) => {
    timer = setTimeout(() => resolve(new RedisUnavailableError('ping', new RedisTimeout(timeoutMs))), ms);
  });
  const done = work().then(
    () => true as const,
    (error: unknown) => new RedisUnavailableError('ping', error),
  );
  try {
    return await Promise.race([done, expired]);
  } finally {
    clearTimeout(timer);
  }
}
