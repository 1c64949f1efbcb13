/**
 * The client family the cache is tested on (no vitest import here: forked workers use this file;
 * clients.ts re-exports it, with the per-file server helper). `SG_TEST_CLIENT` picks it for the whole run:
 *   ioredis (default, v5) · ioredis6 (the `ioredis6` alias) · node-redis (the `redis` package, v6) ·
 *   node-redis5 (the `redis5` alias, v5).
 * Only the cache's own client changes: tests keep ioredis for their raw reads and fault injection
 * (`h.admin`, `h.client()`), so the assertions read Redis the same way whatever the cache runs on.
 */
import { createRequire } from 'node:module';
import type { RedisClient } from '../../src/index.js';

/**
 * The client packages, each loaded on its first use (all four are CommonJS): a forked worker
 * (campaign-worker.ts, worker.ts) imports this file and pays only for the family it runs on, not
 * for all four plus vitest (about a second of start-up per worker, which a campaign's fault window
 * would lose).
 */
const load = createRequire(import.meta.url);
const ioredis = () => load('ioredis') as typeof import('ioredis');
const ioredis6 = () => load('ioredis6') as typeof import('ioredis6');
const redis = () => load('redis') as typeof import('redis');
const redis5 = () => load('redis5') as typeof import('redis5');

export type ClientFamily = 'ioredis' | 'ioredis6' | 'node-redis' | 'node-redis5';
const FAMILIES: readonly ClientFamily[] = ['ioredis', 'ioredis6', 'node-redis', 'node-redis5'];

function family(): ClientFamily {
  const given = process.env.SG_TEST_CLIENT ?? 'ioredis';
  if ((FAMILIES as readonly string[]).includes(given)) return given as ClientFamily;
  throw new Error(`SG_TEST_CLIENT=${given}: expected one of ${FAMILIES.join(', ')}`);
}

export const TEST_CLIENT: ClientFamily = family();

/** What tests do with a cache's client of either family (both answer these the same way). */
export interface TestClient {
  ping(): Promise<string>;
  listenerCount(event: string): number;
  sendCommand(...args: never[]): unknown;
}

/** How a test's client differs from the default one, said once for both families. */
export interface FamilyOptions {
  /** false: commands fail while disconnected (ioredis enableOfflineQueue: false, node-redis disableOfflineQueue). */
  offlineQueue?: boolean;
  /** TLS socket options (ioredis `tls`, node-redis `socket` with `tls: true`). */
  tls?: { ca?: Buffer; servername?: string; rejectUnauthorized?: boolean };
  /** A fixed wait between reconnection attempts (ioredis retryStrategy, node-redis reconnectStrategy). */
  retryDelay?: number;
  /** false: not connected (ioredis lazyConnect; node-redis connect() not called). */
  connect?: boolean;
  /**
   * false: a command written before the connection dropped is not sent again after the reconnect
   * (ioredis autoResendUnfulfilledCommands: false). node-redis never resends one: a closing socket
   * rejects every command it wrote and is waiting on, so this option changes nothing there.
   */
  resendUnanswered?: boolean;
  /**
   * false: ioredis re-sends no SUBSCRIBE of its own after a reconnect (autoResubscribe: false), as on
   * the cache's own pub/sub duplicate (a stand-in for it must match: ioredis's re-subscribe is not
   * awaited, and a close before its reply is an unhandled rejection). node-redis: no effect.
   */
  resubscribe?: boolean;
}

/** A client of `kind`, connecting (node-redis: connect() already called, commands queue until ready), plus its disposal. */
export function familyClient(
  url: string,
  kind: ClientFamily = TEST_CLIENT,
  options: FamilyOptions = {},
): { client: RedisClient & TestClient; dispose: () => void } {
  const { offlineQueue = true, tls, retryDelay, connect = true, resendUnanswered = true, resubscribe = true } = options;
  if (kind === 'ioredis' || kind === 'ioredis6') {
    // A bounded retry count: the cache's own redisTimeout bounds every call anyway.
    const o = {
      maxRetriesPerRequest: 1,
      enableOfflineQueue: offlineQueue,
      lazyConnect: !connect,
      autoResendUnfulfilledCommands: resendUnanswered,
      autoResubscribe: resubscribe,
      ...(tls ? { tls } : {}),
      ...(retryDelay !== undefined ? { retryStrategy: () => retryDelay } : {}),
    };
    const c = kind === 'ioredis' ? new (ioredis().Redis)(url, o) : new (ioredis6().Redis)(url, o);
    c.on('error', () => undefined); // the caller's client: its connection errors are the caller's to log
    return { client: c, dispose: () => c.disconnect() };
  }
  const socket = {
    ...(tls ? { tls: true as const, ...tls } : {}),
    ...(retryDelay !== undefined ? { reconnectStrategy: () => retryDelay } : {}),
  };
  const o = { url, disableOfflineQueue: !offlineQueue, socket };
  const c = kind === 'node-redis' ? redis().createClient(o) : redis5().createClient(o);
  c.on('error', () => undefined);
  // node-redis (v5, v6) assigns a connecting socket only once it connected: a destroy() while a
  // (re)connect's TCP connect is pending leaves that socket open (it connects and goes ready; v5 then
  // refuses a second destroy()). So a dispose in that window waits for the connect to end.
  let connecting = connect;
  c.on('reconnecting', () => (connecting = true));
  for (const settled of ['connect', 'error', 'end'] as const) c.on(settled, () => (connecting = false));
  // The caller connects a node-redis client; connect() opens it at once (commands queue until ready).
  if (connect) c.connect().catch(() => undefined);
  const destroy = () => {
    if (c.isOpen) c.destroy();
  };
  return {
    client: c,
    dispose: () => {
      if (!connecting) return destroy();
      const later = () => {
        c.off('connect', later);
        c.off('error', later);
        destroy();
      };
      c.on('connect', later);
      c.on('error', later);
    },
  };
}

/** Closes a client's connection for good, as a crash of its socket would (ioredis disconnect(), node-redis destroy()). */
export function dropConnection(client: TestClient): void {
  const c = client as unknown as { disconnect?: () => void; destroy?: () => void; isOpen?: boolean };
  if (typeof c.destroy === 'function') {
    if (c.isOpen !== false) c.destroy();
  } else c.disconnect?.();
}

/**
 * Sends the cache's pub/sub connection (its one duplicate()) to `url` instead: what `client.duplicate()`
 * would return, on another address (ioredis: connecting already; node-redis: unconnected, the cache
 * connects it). Returns a disposal for the subscriber made.
 */
export function subscribeVia(client: TestClient, url: string, kind: ClientFamily = TEST_CLIENT): () => void {
  let made: { client: RedisClient & TestClient; dispose: () => void } | undefined;
  (client as unknown as { duplicate: () => unknown }).duplicate = () => {
    if (kind === 'ioredis' || kind === 'ioredis6') {
      made = familyClient(url, kind, { resubscribe: false }); // as the cache's own duplicate (client/ioredis.ts)
      return made.client;
    }
    const c = kind === 'node-redis' ? redis().createClient({ url }) : redis5().createClient({ url });
    made = { client: c, dispose: () => dropConnection(c) };
    return c;
  };
  return () => made?.dispose();
}

/** Resolves once `client` (either family) is connected and ready for commands. */
export async function whenReady(client: TestClient): Promise<void> {
  const c = client as unknown as { status?: string; isReady?: boolean; once(event: 'ready', listener: () => void): unknown };
  if (c.status === 'ready' || c.isReady === true) return;
  await new Promise<void>((resolve) => c.once('ready', resolve));
}

/**
 * Resolves at `client`'s next 'ready' (either family), whatever errors come first: unlike events.once,
 * which rejects on the 'error' a node-redis client emits when its socket is reset.
 */
export function nextReady(client: TestClient): Promise<void> {
  const c = client as unknown as { once(event: 'ready', listener: () => void): unknown };
  return new Promise<void>((resolve) => c.once('ready', resolve));
}
