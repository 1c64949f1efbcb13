import { INVALIDATE_CHANNEL, isNoScript, isUnknownCommand, prop, QUEUED, type PipelinePort, type RedisPort, type Script, type ScriptArg, type ShardSubscriberPort, type SubscriberPort, type TrackingPort } from './port.js';
import { Pending } from './pending.js';
import { slotOf } from './slot.js';

/**
 * The slice of a node-redis client (package `redis` / `@redis/client`, v5 and v6) the adapter uses:
 * `createClient()` or `createCluster()`, connected by the caller. Structural: never imported.
 */
export interface NodeRedisClient {
  /** node-redis `duplicate()`: a new, unconnected client with the same options; used once, for pub/sub only. */
  duplicate(...args: never[]): unknown;
  /** Standalone: `(args, options)`; Cluster: `(firstKey, isReadonly, args, options)`. */
  sendCommand(...args: never[]): Promise<unknown>;
  scriptLoad(...args: never[]): Promise<unknown>;
  on(event: never, listener: never): unknown;
  off(event: never, listener: never): unknown;
}

type Args = (string | Buffer)[];
/** node-redis command options: which JS type each RESP type maps to. 36 is RESP_TYPES.BLOB_STRING ('$'). */
interface CommandOptions {
  typeMapping: Record<number, unknown>;
  timeout: undefined;
}
type Send = (firstKey: string | undefined, args: Args, options: CommandOptions) => Promise<unknown>;
interface Emitter {
  on(event: string, listener: (...args: unknown[]) => void): unknown;
  off(event: string, listener: (...args: unknown[]) => void): unknown;
}
interface NodeRedisSubscriber extends Emitter {
  connect(): Promise<unknown>;
  subscribe(channel: string, listener: (message: string, channel: string) => void): Promise<unknown>;
  unsubscribe(channel: string, listener: (message: string, channel: string) => void): Promise<unknown>;
  sSubscribe(channel: string, listener: (message: string, channel: string) => void): Promise<unknown>;
  sUnsubscribe(channel: string, listener: (message: string, channel: string) => void): Promise<unknown>;
  ping?(): Promise<unknown>;
  destroy?(): void;
  disconnect?(): Promise<unknown>;
}

/*
 * Every command the cache sends carries `timeout: undefined`: node-redis's own per-command timer
 * (`commandOptions.timeout`, 5 s by default in node-redis 6: an AbortSignal.timeout and two listener
 * calls per command, about a sixth of a bare GET's client CPU in a profile of bench:hit) is not armed
 * for them. Each is bounded by `redisTimeout` already (Io), and one applied after that is
 * compensated there, as one ioredis sends late from its offline queue is.
 */
/** Bulk strings as Buffers (the entry bytes). */
const BYTES: CommandOptions = Object.freeze({ typeMapping: Object.freeze({ 36: Buffer }), timeout: undefined });
/** The default mapping (strings, numbers), whatever `withTypeMapping` the caller's client carries. */
const PLAIN: CommandOptions = Object.freeze({ typeMapping: Object.freeze({}), timeout: undefined });

/**
 * Per connection (a client's, or a Cluster node's), the scripts run there: EVAL the first time,
 * EVALSHA after. Sending EVALSHA first would make the first run of a script two round trips (EVALSHA,
 * NOSCRIPT, EVAL), and if the NOSCRIPT reply is lost the script never runs at all: an undo that must
 * land (a release by token after a timeout) would then be lost with it. Scripts are cached per
 * server, so on a Cluster the node is the master of the first key's slot (`nodeOf`): a script run on
 * one master is still sent with EVAL on the next. A connection that drops may come back to a server
 * that lost its scripts (a restart without persistence, a failover), so its record goes when it
 * starts reconnecting and again when it is ready (see `forgetOnReconnect`, attached while a cache
 * listens to the client's reconnections: `onReady`). Shared by every cache on
 * the client (a WeakMap: nothing is kept alive).
 */
const RAN = new WeakMap<object, Map<string, Set<string>>>();

/**
 * A connection that drops forgets the scripts it ran: the standalone client's 'reconnecting' and
 * 'ready', a Cluster's per-node 'node-reconnecting' and 'node-ready' (with the node's host and port,
 * as `nodeOf` names it). Returns the way to stop: the caller's client keeps no listener of ours once
 * the cache closed (NodeRedisPort.onReady attaches and detaches these with its own).
 */
function forgetOnReconnect(client: object, ran: Map<string, Set<string>>, cluster: boolean): () => void {
  const emitter = client as Emitter;
  if (typeof emitter.on !== 'function') return () => undefined;
  const forget = cluster
    ? (info: unknown): void => {
      const host = prop(info, 'host');
      if (typeof host === 'string') ran.delete(`${host}:${String(prop(info, 'port'))}`);
    }
    : (): void => void ran.delete('standalone');
  const events = cluster ? ['node-reconnecting', 'node-ready'] : ['reconnecting', 'ready'];
  for (const event of events) emitter.on(event, forget);
  return () => {
    for (const event of events) emitter.off(event, forget);
  };
}

/**
 * node-redis sets `isOpen` from connect() on (while it connects and reconnects) until close, destroy
 * or a reconnect strategy that gave up; unlike ioredis it never connects by itself. A client that is
 * not open answers every command "The client is closed". (A wrapper without `isOpen` is trusted.)
 */
export function isClosedNodeRedis(client: NodeRedisClient): boolean {
  return prop(client, 'isOpen') === false;
}

/** A node-redis Cluster (createCluster): it routes by key and knows each slot's master. */
function isNodeRedisCluster(v: unknown): boolean {
  return typeof prop(v, 'getSlotMaster') === 'function';
}

export function isNodeRedis(v: unknown): v is NodeRedisClient {
  return (
    typeof prop(v, 'sendCommand') === 'function' &&
    typeof prop(v, 'duplicate') === 'function' &&
    typeof prop(v, 'scriptLoad') === 'function' &&
    typeof prop(v, 'defineCommand') !== 'function'
  );
}

/**
 * node-redis: scripts through `sendCommand`: EVAL on a script's first run on this client and node
 * (a Cluster's master), EVALSHA after it, and EVAL again on NOSCRIPT (SCRIPT FLUSH, a restart, a
 * failover; EVAL caches the script on the server again), with numbers sent as strings (node-redis
 * takes strings and Buffers only).
 * Replies: RESP2 or RESP3 (the caller's `RESP` option) give the same JS values for our scripts; a
 * per-command `typeMapping` asks for Buffers where the code needs bytes, and for the defaults
 * elsewhere. Like ioredis, node-redis keeps commands in its offline queue while disconnected (unless
 * `disableOfflineQueue`); `redisTimeout` bounds the caller either way (Io), and a command applied after
 * its timeout is compensated there.
 */
export class NodeRedisPort implements RedisPort {
  readonly family: string;
  private readonly send: Send;
  readonly cluster: boolean;
  /** Node → the shas of the scripts run on its current connection (RAN's entry for this client). */
  private readonly ran: Map<string, Set<string>>;

  constructor(private readonly client: NodeRedisClient) {
    this.cluster = isNodeRedisCluster(client);
    let ran = RAN.get(client);
    if (!ran) RAN.set(client, (ran = new Map<string, Set<string>>()));
    this.ran = ran;
    this.family = this.cluster ? 'node-redis cluster' : 'node-redis';
    const c = client as unknown as { sendCommand(...args: unknown[]): Promise<unknown> };
    // Looked up on every call (not bound once), so a wrapper the caller installs later still sees it.
    this.send = this.cluster
      ? (firstKey, args, options) => c.sendCommand(firstKey, false, args, options)
      : (_firstKey, args, options) => c.sendCommand(args, options);
  }

  run(script: Script, keys: readonly string[], args: readonly ScriptArg[], bytes = false): Promise<unknown> {
    const rest: Args = [String(keys.length), ...keys];
    for (const a of args) rest.push(typeof a === 'number' ? String(a) : a);
    const options = bytes ? BYTES : PLAIN;
    const firstKey = keys[0];
    // 'unknown': a Cluster whose slot map is not known yet (or no key to route by); nothing is recorded for it.
    const node = !this.cluster ? 'standalone' : firstKey === undefined ? 'unknown' : this.nodeOf(firstKey);
    if (node === 'unknown' || !this.ran.get(node)?.has(script.sha)) {
      return this.send(firstKey, ['EVAL', script.lua, ...rest], options).then((reply) => {
        if (node !== 'unknown') {
          let shas = this.ran.get(node);
          if (!shas) this.ran.set(node, (shas = new Set()));
          shas.add(script.sha);
        }
        return reply;
      });
    }
    return this.send(firstKey, ['EVALSHA', script.sha, ...rest], options).catch((err: unknown) => {
      if (!isNoScript(err)) throw err;
      return this.send(firstKey, ['EVAL', script.lua, ...rest], options);
    });
  }

  getRange(key: string, end: string): Promise<Buffer> {
    return this.send(key, ['GETRANGE', key, '0', end], BYTES) as Promise<Buffer>;
  }

  subscriber(): SubscriberPort {
    // A Cluster duplicate for pub/sub only needs the slot map and its one pub/sub node: without
    // minimizeConnections its connect() would wait for a connection to every master.
    if (this.cluster) return new NodeRedisClusterSubscriberPort(() => (this.client.duplicate as (o: object) => unknown)({ minimizeConnections: true }) as NodeRedisSubscriber);
    return new NodeRedisSubscriberPort(() => this.client.duplicate() as NodeRedisSubscriber);
  }

  shardSubscriber(): ShardSubscriberPort {
    // As subscriber(): a Cluster duplicate connects to no master until a SSUBSCRIBE needs one.
    if (this.cluster) return new NodeRedisClusterShardSubscriberPort(() => (this.client.duplicate as (o: object) => unknown)({ minimizeConnections: true }) as NodeRedisSubscriber);
    return new NodeRedisShardSubscriberPort(() => this.client.duplicate() as NodeRedisSubscriber);
  }

  tracking(): TrackingPort {
    const duplicate = (overrides: object) => (this.client.duplicate as (overrides: object) => NodeRedisSubscriber).call(this.client, overrides);
    // Neither connection may carry node-redis's own client-side cache (it turns tracking on by itself,
    // without REDIRECT) or its invalidation events. The listener is RESP2 (node-redis 6 defaults to
    // RESP3, where the server sends a push instead of a message on the channel; its maintenance
    // notifications need RESP3, so they are off there).
    const own = { clientSideCache: undefined, emitInvalidate: undefined };
    return new NodeRedisTrackingPort(
      () => duplicate(own),
      () => duplicate({ ...own, RESP: 2, maintNotifications: 'disabled' }),
    );
  }

  pipeline(): PipelinePort {
    // node-redis writes every command issued in one tick in one go (its own pipelining): queued runs
    // are sent at once, and exec() collects their answers in order.
    const sent: Promise<[Error | null, unknown]>[] = [];
    const answer = (reply: Promise<unknown>): Promise<[Error | null, unknown]> => reply.then((v): [null, unknown] => [null, v], (e: unknown): [Error, undefined] => [e instanceof Error ? e : new Error(String(e)), undefined]);
    return {
      run: (script, keys, args, bytes = false) => {
        sent.push(answer(this.run(script, keys, args, bytes)));
        return QUEUED;
      },
      getRange: (key, end) => {
        sent.push(answer(this.getRange(key, end)));
        return QUEUED;
      },
      exec: () => Promise.all(sent),
    };
  }

  command(key: string, args: readonly ScriptArg[]): Promise<unknown> {
    return this.send(key, args.map((a) => (typeof a === 'number' ? String(a) : a)), PLAIN);
  }

  commandOnNodeOf(key: string, args: readonly ScriptArg[]): Promise<unknown> {
    // A standalone client is one connection: the command follows the script on it.
    if (!this.cluster) return this.command(key, args);
    // A Cluster sends a key's commands on its slot master's client (nodeClient(getSlotMaster(slot)),
    // public in node-redis 5 and 6): the same connection, so WAIT there counts the writes made on it.
    const c = this.client as unknown as { getSlotMaster(slot: number): unknown; nodeClient(node: unknown): unknown };
    const strings = args.map((a) => (typeof a === 'number' ? String(a) : a));
    return Promise.resolve()
      .then(() => c.nodeClient(c.getSlotMaster(slotOf(key))))
      .then((node) => (node as { sendCommand(args: Args, options: CommandOptions): Promise<unknown> }).sendCommand(strings, PLAIN));
  }

  readonly keyPrefix = '';

  eachNode(role: 'masters' | 'all'): ((args: readonly ScriptArg[]) => Promise<unknown>)[] {
    const strings = (args: readonly ScriptArg[]): Args => args.map((a) => (typeof a === 'number' ? String(a) : a));
    if (!this.cluster) return [(args) => this.send(undefined, strings(args), PLAIN)];
    // `masters` / `replicas` and `nodeClient(node)`: public in node-redis 5 and 6.
    const c = this.client as unknown as { masters: unknown[]; replicas: unknown[]; nodeClient(node: unknown): unknown };
    const nodes = role === 'masters' ? [...c.masters] : [...c.masters, ...c.replicas];
    return nodes.map((node) => (args) =>
      Promise.resolve()
        .then(() => c.nodeClient(node))
        .then((client) => (client as { sendCommand(args: Args, options: CommandOptions): Promise<unknown> }).sendCommand(strings(args), PLAIN)));
  }

  onReady(listener: () => void): () => void {
    // A standalone client emits 'ready' on every (re)connection; a Cluster emits 'node-ready' per node.
    const event = this.cluster ? 'node-ready' : 'ready';
    const emitter = this.client as unknown as Emitter;
    // Registered first: a reconnection's scripts are forgotten before `listener` runs.
    const stopForgetting = forgetOnReconnect(this.client, this.ran, this.cluster);
    emitter.on(event, listener);
    return () => {
      emitter.off(event, listener);
      stopForgetting();
    };
  }

  nodeOf(key: string): string {
    if (!this.cluster) return 'standalone';
    // Not getSlotMaster(): it throws until the Cluster has discovered its slots (before connect()).
    const master = prop(this.client, 'slots', String(slotOf(key)), 'master');
    const host = prop(master, 'host');
    const port = prop(master, 'port');
    return typeof host === 'string' ? `${host}:${String(port)}` : 'unknown';
  }

  get skipsTlsVerification(): boolean {
    // Client: options.socket; Cluster: _options.defaults.socket (each node's socket options; a Cluster
    // exposes its options only as `_options`, in node-redis 5 and 6).
    const socket = prop(this.client, 'options', 'socket') ?? prop(this.client, '_options', 'defaults', 'socket');
    return prop(socket, 'tls') !== undefined && prop(socket, 'tls') !== false && prop(socket, 'rejectUnauthorized') === false;
  }
}

/** The Bus's listeners on a subscriber port: 'ready', 'close' and 'error', each in the order given. */
class PortEvents {
  private readonly ready: (() => void)[] = [];
  private readonly closes: (() => void)[] = [];
  private readonly errors: ((err: unknown) => void)[] = [];

  on(event: 'ready' | 'close' | 'error', listener: (err: unknown) => void): void {
    if (event === 'ready') this.ready.push(() => listener(undefined));
    else if (event === 'close') this.closes.push(() => listener(undefined));
    else this.errors.push(listener);
  }

  up(): void {
    for (const l of this.ready) l();
  }

  down(): void {
    for (const l of this.closes) l();
  }

  error(err: unknown): void {
    for (const l of this.errors) l(err);
  }
}

/**
 * What both node-redis subscriber ports share: one duplicate of the caller's client at a time (`sub`),
 * the Bus's listeners, and "reconnect" as destroy-and-open-fresh (node-redis has no "drop the socket
 * and reconnect"). Subclasses open their duplicate in their constructor.
 */
abstract class DuplicateSubscriberPort implements SubscriberPort {
  protected sub: NodeRedisSubscriber | undefined;
  protected readonly events = new PortEvents();
  /** One listener instance, so a repeated SUBSCRIBE never registers a second copy. */
  protected listener: ((message: string, channel: string) => void) | undefined;
  protected closed = false;

  constructor(protected readonly duplicate: () => NodeRedisSubscriber) {}

  /** Opens the duplicate and starts it connecting; called by each subclass's constructor. */
  protected abstract open(): void;

  /** A new duplicate, now the current one (listeners check `this.sub === sub` to ignore older ones). */
  protected fresh(): NodeRedisSubscriber {
    const sub = this.duplicate();
    this.sub = sub;
    return sub;
  }

  abstract subscribe(channel: string, onMessage: (channel: string, message: string) => void): Promise<unknown>;
  abstract ping(): Promise<unknown>;

  on(event: 'ready' | 'close' | 'error', listener: (err: unknown) => void): void {
    this.events.on(event, listener);
  }

  reconnect(): void {
    if (this.closed) return;
    this.drop();
    this.events.down();
    this.open();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.drop();
  }

  private readonly connecting = new PendingConnects();

  /** Follows whether `sub`'s TCP connect is pending; call before its connect(). */
  protected track(sub: NodeRedisSubscriber): void {
    this.connecting.track(sub);
  }

  /**
   * Destroys the duplicate without waiting (Redis may be down); one already closed is left as it is.
   * While its TCP connect is pending, the destroy waits for that connect to succeed or fail.
   */
  protected drop(): void {
    const sub = this.sub;
    this.sub = undefined;
    if (sub) this.connecting.destroy(sub);
  }
}

/**
 * The duplicates whose TCP connect is pending (from connect() or a 'reconnecting' to the next
 * 'connect' or 'error'). node-redis 5 and 6 assign the socket only once it connected: a destroy()
 * before that leaves it open, and it connects and goes ready anyway (a socket left after close());
 * node-redis 5 then refuses a second destroy(). Kept up to date by `track`; read by `destroy`.
 */
class PendingConnects {
  private readonly pending = new WeakSet<NodeRedisSubscriber>();

  /** Follows whether `sub`'s TCP connect is pending; call before its connect(). */
  track(sub: NodeRedisSubscriber): void {
    this.pending.add(sub);
    sub.on('reconnecting', () => this.pending.add(sub));
    const settled = () => void this.pending.delete(sub);
    sub.on('connect', settled);
    sub.on('error', settled);
    sub.on('end', settled);
  }

  /** destroyClient(sub) now, or once its pending TCP connect succeeded or failed. */
  destroy(sub: NodeRedisSubscriber): void {
    if (!this.pending.has(sub)) return destroyClient(sub);
    const later = () => {
      sub.off('connect', later);
      sub.off('error', later);
      destroyClient(sub);
    };
    sub.on('connect', later);
    sub.on('error', later);
  }
}

/** destroy() (or disconnect()) a node-redis client now; one already closed is left as it is. */
function destroyClient(sub: NodeRedisSubscriber): void {
  try {
    if (sub.destroy) sub.destroy();
    else void sub.disconnect?.().catch(() => undefined);
  } catch {
    // Already closed (node-redis throws ClientClosedError): nothing to drop.
  }
}

/**
 * The Bus's connection on node-redis. node-redis re-subscribes by itself on reconnect, before it emits
 * 'ready', and only for channels whose SUBSCRIBE reply registered the listener; a SUBSCRIBE for a
 * channel already registered sends nothing and resolves at once. So 'ready' followed by our own
 * subscribe() is exactly "subscribed on this connection". 'close' is node-redis's 'reconnecting'
 * (after every lost connection or failed attempt) or 'end' (destroyed).
 * node-redis has no "drop the socket and reconnect": reconnect() destroys this duplicate and opens a
 * fresh one (the same events follow: 'close', then 'ready' once the new one is up).
 */
class NodeRedisSubscriberPort extends DuplicateSubscriberPort {
  /** The channels a SUBSCRIBE reply registered on the current duplicate (node-redis keeps them across reconnects). */
  private readonly registered = new Set<string>();

  constructor(duplicate: () => NodeRedisSubscriber) {
    super(duplicate);
    this.open();
  }

  protected open(): void {
    const sub = this.fresh();
    this.registered.clear();
    const mine = (fn: () => void) => () => {
      if (this.sub === sub) fn();
    };
    // An 'error' listener before connect(): node-redis emits one per failed attempt, and an
    // unhandled 'error' event would crash the process.
    sub.on('error', (err) => {
      if (this.sub === sub) this.events.error(err);
    });
    const up = mine(() => this.events.up());
    const down = mine(() => this.events.down());
    sub.on('ready', up);
    sub.on('reconnecting', down);
    sub.on('end', down);
    this.track(sub);
    // connect() marks the client open at once (commands queue until ready) and settles when ready;
    // with a reconnect strategy that gives up, it rejects (already reported through 'error').
    sub.connect().then(
      () => undefined,
      (err: unknown) => {
        if (this.sub === sub) this.events.error(err);
      },
    );
  }

  subscribe(channel: string, onMessage: (channel: string, message: string) => void): Promise<unknown> {
    const sub = this.sub;
    if (!sub) return Promise.reject(new Error('subscriber closed'));
    // One listener instance, so a repeated SUBSCRIBE never registers a second copy.
    this.listener ??= (message, ch) => onMessage(ch, message);
    // node-redis resolves a SUBSCRIBE for a channel it already registered (a SUBSCRIBE reply did) at
    // once, sending nothing, whatever its socket does: while it reconnects (a killed connection,
    // reconnects refused) that would say "held" with no subscription on the server, and the Bus would
    // trust L1 while notes are lost (a Bus retry after a refused SUBSCRIBE runs while the client is
    // down). Only a ready client holds such a channel (it re-subscribes before 'ready'): otherwise
    // refuse, and 'ready' retries. A channel not registered yet is really sent (queued until
    // connected), so its reply is a real confirmation, as at start while Redis is down.
    if (this.registered.has(channel) && (sub as { isReady?: boolean }).isReady === false) {
      return Promise.reject(new Error('subscriber connection not ready'));
    }
    try {
      return sub.subscribe(channel, this.listener).then((reply) => {
        if (this.sub === sub) this.registered.add(channel);
        return reply;
      });
    } catch (err) {
      // node-redis throws (ClientClosedError) instead of rejecting when the client is closed.
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  ping(): Promise<unknown> {
    return pingOn(this.sub);
  }
}

/** PING on one node-redis client; a missing one or a synchronous throw is a rejection (the heartbeat counts it unanswered). */
function pingOn(client: NodeRedisSubscriber | undefined): Promise<unknown> {
  if (typeof client?.ping !== 'function') return Promise.reject(new Error('no subscriber connection'));
  try {
    return client.ping();
  } catch (err) {
    return Promise.reject(err instanceof Error ? err : new Error(String(err)));
  }
}

/**
 * The Bus's connection on a node-redis Cluster. The Cluster subscribes on ONE node's client, its
 * `pubSubNode.client` (public in node-redis 5 and 6), created by the first SUBSCRIBE; that client, not
 * the Cluster, says whether the subscription holds. The Cluster's own node events do not: they come
 * from every node (v6: another node's 'node-ready' while the pub/sub socket still reconnects), and v5
 * emits 'node-ready' once per node, never after a reconnect. So:
 * - 'ready' when the duplicate's connect() (the slot map) resolves, and on each 'ready' of the pub/sub
 *   client (node-redis re-subscribes it before that event, as for a standalone client);
 * - 'close' on its 'reconnecting', 'end' (node-redis destroyed it: the node left the slot map) and
 *   'terminated' (v6: its reconnect strategy gave up);
 * - a SUBSCRIBE counts as held only on a ready client; until one holds, a timer opens a fresh
 *   duplicate (see `retryTimer`);
 * - the heartbeat PINGs that client; if the Cluster has replaced it (or has none), the PING rejects
 *   and the heartbeat's verdict opens a fresh duplicate.
 * Invariant: `watched` is the pub/sub client of `sub` that the last resolved SUBSCRIBE ran on.
 */
class NodeRedisClusterSubscriberPort extends DuplicateSubscriberPort {
  private watched: NodeRedisSubscriber | undefined;
  /**
   * Armed whenever the subscription is not known to hold (a duplicate opened, its pub/sub client
   * reconnecting, ended or given up); disarmed once a SUBSCRIBE resolved on a ready client. When it
   * fires, a fresh duplicate replaces this one: node-redis itself may never recover (a frozen node's
   * handshake has no timeout; node-redis 5 never refreshes the slot map of a client that only
   * subscribes; a client whose reconnect strategy gave up emits no 'end').
   */
  private retryTimer: NodeJS.Timeout | undefined;
  /** Fresh duplicates opened by the timer since the subscription last held: the next wait doubles. */
  private retries = 0;

  constructor(duplicate: () => NodeRedisSubscriber) {
    super(duplicate);
    this.open();
  }

  protected open(): void {
    const sub = this.fresh();
    this.watched = undefined;
    this.retryIn(STUCK_MS);
    // node-redis emits 'error' on a Cluster only for its own failures; an unhandled one would crash.
    sub.on('error', (err) => {
      if (this.sub === sub) this.events.error(err);
    });
    sub.connect().then(
      () => {
        if (this.sub === sub) this.events.up(); // the slot map is known: the Bus subscribes now
      },
      (err: unknown) => {
        if (this.sub !== sub) return;
        this.events.error(err);
        this.retryIn(REOPEN_MS); // no slot map (every root node failed): a fresh duplicate soon
      },
    );
  }

  subscribe(channel: string, onMessage: (channel: string, message: string) => void): Promise<unknown> {
    const sub = this.sub;
    if (!sub) return Promise.reject(new Error('subscriber closed'));
    this.listener ??= (message, ch) => onMessage(ch, message);
    let sent: Promise<unknown>;
    try {
      sent = sub.subscribe(channel, this.listener);
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    return sent.then((reply) => {
      if (this.sub !== sub) return reply;
      const client = this.watch(sub);
      // node-redis resolves a SUBSCRIBE for a channel it already has at once, whatever its socket
      // does: only a ready client means subscribed; otherwise its 'ready' (or the timer) follows.
      if (client?.isReady === false) this.down(STUCK_MS);
      else if (client) this.held();
      return reply;
    });
  }

  /** Follows the pub/sub client the subscription now runs on; returns it. */
  private watch(sub: NodeRedisSubscriber): (NodeRedisSubscriber & { isReady?: boolean }) | undefined {
    const client = prop(sub, 'pubSubNode', 'client') as (NodeRedisSubscriber & { isReady?: boolean }) | undefined;
    if (!client || client === this.watched) return client;
    this.watched = client;
    const current = () => this.sub === sub && this.watched === client;
    client.on('reconnecting', () => {
      if (current()) this.down(STUCK_MS);
    });
    client.on('ready', () => {
      if (!current()) return;
      this.held();
      this.events.up();
    });
    // Destroyed by node-redis (the node left the slot map), or given up (v6 'terminated').
    const gone = () => {
      if (current()) this.down(REOPEN_MS);
    };
    client.on('end', gone);
    client.on('terminated', gone);
    return client;
  }

  /** The subscription does not hold: tell the Bus, and open a fresh duplicate after `ms` unless it comes back. */
  private down(ms: number): void {
    this.events.down();
    this.retryIn(ms);
  }

  /** The subscription holds: no fresh duplicate is due. */
  private held(): void {
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    this.retries = 0;
  }

  private retryIn(ms: number): void {
    if (this.closed) return;
    clearTimeout(this.retryTimer);
    const wait = Math.min(ms * 2 ** this.retries, MAX_RETRY_MS);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.retries++;
      this.reconnect();
    }, wait);
    this.retryTimer.unref();
  }

  ping(): Promise<unknown> {
    const current = prop(this.sub, 'pubSubNode', 'client');
    if (!this.watched || current !== this.watched) return Promise.reject(new Error('the Cluster replaced its pub/sub connection'));
    return pingOn(this.watched);
  }

  override close(): void {
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    super.close();
  }

  protected override drop(): void {
    this.watched = undefined;
    super.drop();
  }
}

/** How long a new duplicate, or a pub/sub client that is reconnecting, has to subscribe before a fresh duplicate replaces it. */
const STUCK_MS = 5000;
/** How soon a fresh duplicate follows a failed slot-map load, or a pub/sub client node-redis destroyed. */
const REOPEN_MS = 1000;
/** The longest wait between fresh duplicates while none subscribes (doubling from the above). */
const MAX_RETRY_MS = 30_000;

type NodeRedisListener = (message: string, channel: string) => void;

/**
 * What both node-redis shard ports share: the caller's listeners, one node-redis listener instance
 * (node-redis keeps listeners in Sets, so a repeated SSUBSCRIBE never registers a second copy), the
 * fallback to classic pub/sub, and the reopening of a duplicate node-redis gave up on.
 * Invariants: `sub` is the current duplicate (undefined only once closed, or while a reopen is due);
 * listeners of older duplicates check `this.sub === sub`; `classic` never goes back to false.
 */
abstract class NodeRedisShardPort implements ShardSubscriberPort {
  protected sub: NodeRedisSubscriber | undefined;
  protected closed = false;
  /** The server has no sharded pub/sub: SUBSCRIBE / UNSUBSCRIBE from now on. */
  protected classic = false;
  private listener: ((channel: string, message: string) => void) | undefined;
  private readonly losts: (() => void)[] = [];
  protected readonly deliver: NodeRedisListener = (message, channel) => {
    if (!this.closed) this.listener?.(channel, message);
  };
  /** subscribe() and unsubscribe() not settled yet: close() settles them (see Pending). */
  private readonly pending = new Pending();
  private reopenTimer: NodeJS.Timeout | undefined;
  /** Reopens since the last duplicate that became ready: the next wait doubles. */
  private reopens = 0;

  constructor(protected readonly duplicate: () => NodeRedisSubscriber) {}

  /** Opens a fresh duplicate as `sub` and starts it connecting. */
  protected abstract open(): void;

  /** The duplicate `channel`'s subscription runs on, once `sub` can take the command (Cluster: connected). */
  protected abstract ready(sub: NodeRedisSubscriber, channel: string): Promise<void>;

  /**
   * True when node-redis would answer a SUBSCRIBE for `channel` at once without sending it (a
   * SUBSCRIBE reply registered its listener) while the connection holding it is not ready: node-redis
   * re-subscribes it before its next 'ready', so until then it is not held.
   */
  protected abstract heldButNotReady(sub: NodeRedisSubscriber, channel: string): boolean;

  /** Called with the duplicate a subscribe was confirmed on. */
  protected confirmed(_sub: NodeRedisSubscriber, _channel: string): void {}

  subscribe(channel: string): Promise<void> {
    const sub = this.sub;
    if (this.closed) return Promise.reject(new Error('shard subscriber closed'));
    if (!sub) return Promise.reject(new Error('shard subscriber connection is being reopened'));
    const sent = this.ready(sub, channel)
      .then(() => this.send(sub, channel, this.classic))
      .catch((err: unknown) => {
        if (this.classic || !isUnknownCommand(err)) throw err;
        // No sharded pub/sub here (Redis < 7.0, or SSUBSCRIBE renamed away): SUBSCRIBE, now and after.
        this.classic = true;
        return this.send(sub, channel, true);
      })
      .then(() => this.confirmed(sub, channel));
    return this.pending.race(sent, () => Promise.reject(new Error('shard subscriber closed')));
  }

  private send(sub: NodeRedisSubscriber, channel: string, classic: boolean): Promise<unknown> {
    if (this.heldButNotReady(sub, channel)) return Promise.reject(new Error('shard subscriber connection not ready'));
    // node-redis throws (ClientClosedError) instead of rejecting when the client is closed.
    return attempt(() => (classic ? sub.subscribe(channel, this.deliver) : sub.sSubscribe(channel, this.deliver)));
  }

  unsubscribe(channel: string): Promise<void> {
    const sub = this.sub;
    if (this.closed || !sub) return Promise.resolve();
    const sent = attempt(() => (this.classic ? sub.unsubscribe(channel, this.deliver) : sub.sUnsubscribe(channel, this.deliver))).then(
      () => undefined,
      () => undefined,
    );
    return this.pending.race(sent, () => Promise.resolve());
  }

  onMessage(listener: (channel: string, message: string) => void): void {
    this.listener = listener;
  }

  onLost(listener: () => void): void {
    this.losts.push(listener);
  }

  /** Reports a possible loss, if `sub` is still the current duplicate. */
  protected lost(sub: NodeRedisSubscriber): void {
    if (this.closed || this.sub !== sub) return;
    for (const l of this.losts) l();
  }

  /** `sub` connected: the reopen backoff starts over, and what was refused meanwhile may be tried again. */
  protected up(sub: NodeRedisSubscriber): void {
    if (this.sub !== sub) return;
    this.reopens = 0;
    this.lost(sub);
  }

  /**
   * node-redis gave `sub` up (its connect() rejected, or its reconnect strategy gave up): nothing
   * would ever subscribe on it again. A fresh duplicate replaces it after a backoff; its 'ready'
   * reports the loss (so the caller subscribes again).
   */
  protected gaveUp(sub: NodeRedisSubscriber): void {
    if (this.closed || this.sub !== sub) return;
    this.lost(sub);
    this.sub = undefined;
    this.destroy(sub);
    this.reopenLater();
  }

  /** Opens a fresh duplicate after a backoff (none is current meanwhile). */
  private reopenLater(): void {
    const wait = Math.min(REOPEN_MS * 2 ** this.reopens++, MAX_RETRY_MS);
    this.reopenTimer = setTimeout(() => {
      this.reopenTimer = undefined;
      if (!this.closed) this.open();
    }, wait);
    this.reopenTimer.unref();
  }

  protected abstract destroy(sub: NodeRedisSubscriber): void;

  /**
   * node-redis has no "drop the socket and reconnect" (as for the Bus's ports: DuplicateSubscriberPort):
   * the duplicate is destroyed (its commands in flight are rejected into handlers of ours) and a fresh
   * one opened; the loss is reported on the next tick (the caller subscribes again, on the fresh one,
   * where node-redis queues the commands until it is ready), and again at its 'ready'. A no-op while
   * a reopen is due (node-redis gave the duplicate up: the reopen reports the loss) and after close().
   */
  reconnect(): void {
    if (this.closed) return;
    const old = this.sub;
    if (!old) return;
    this.sub = undefined;
    try {
      this.destroy(old);
    } catch {
      // destroy() catches what node-redis throws; nothing must reach the caller.
    }
    try {
      this.open();
    } catch {
      // Not seen (duplicate() and connect() report failures by rejecting): tried again after a backoff.
      const half = this.sub;
      this.sub = undefined;
      if (half) this.destroy(half);
      this.reopenLater();
      return;
    }
    const fresh = this.sub;
    if (fresh) process.nextTick(() => this.lost(fresh));
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.reopenTimer);
    this.pending.closeAll();
    const sub = this.sub;
    this.sub = undefined;
    if (sub) this.destroy(sub);
  }
}

/** Runs a node-redis command; a synchronous throw is a rejection. */
function attempt(send: () => Promise<unknown>): Promise<unknown> {
  try {
    return send();
  } catch (err) {
    return Promise.reject(err instanceof Error ? err : new Error(String(err)));
  }
}

/**
 * ShardSubscriberPort on a standalone node-redis client. node-redis re-subscribes (SSUBSCRIBE too) by
 * itself on reconnect, before its 'ready'; still, the messages of the gap are lost. Lost: every
 * 'reconnecting' (a connection closed or an attempt failed), 'end' not of our making, and 'ready'
 * (what was refused while it was down may be subscribed now).
 * Invariant: `registered` holds the channels a SUBSCRIBE reply registered on the current duplicate.
 */
class NodeRedisShardSubscriberPort extends NodeRedisShardPort {
  private readonly registered = new Set<string>();
  private readonly connecting = new PendingConnects();

  constructor(duplicate: () => NodeRedisSubscriber) {
    super(duplicate);
    this.open();
  }

  protected open(): void {
    const sub = this.duplicate();
    this.sub = sub;
    this.registered.clear();
    // An 'error' listener before connect(): node-redis emits one per failed attempt, and an
    // unhandled 'error' event would crash the process. Losses are told by the events below.
    sub.on('error', () => undefined);
    sub.on('ready', () => this.up(sub));
    sub.on('reconnecting', () => this.lost(sub));
    sub.on('end', () => this.lost(sub));
    sub.on('terminated', () => this.gaveUp(sub)); // v6: its reconnect strategy gave up
    this.connecting.track(sub);
    // connect() opens the client at once (commands queue until ready) and settles when ready; it
    // rejects when the reconnect strategy gives up before a first connection.
    sub.connect().catch(() => this.gaveUp(sub));
  }

  protected ready(): Promise<void> {
    return Promise.resolve();
  }

  protected heldButNotReady(sub: NodeRedisSubscriber, channel: string): boolean {
    return this.registered.has(channel) && (sub as { isReady?: boolean }).isReady === false;
  }

  protected override confirmed(sub: NodeRedisSubscriber, channel: string): void {
    if (this.sub === sub) this.registered.add(channel);
  }

  override unsubscribe(channel: string): Promise<void> {
    this.registered.delete(channel);
    return super.unsubscribe(channel);
  }

  protected destroy(sub: NodeRedisSubscriber): void {
    this.connecting.destroy(sub);
  }
}

/**
 * ShardSubscriberPort on a node-redis Cluster (createCluster): a duplicate with minimizeConnections,
 * whose SSUBSCRIBE goes to one pub/sub client per master (`slots[slot].master.pubSub.client`, made on
 * the first SSUBSCRIBE of its slots; MOVED is followed by node-redis). Lost, conservatively:
 * - from the duplicate, on any node client: 'node-reconnecting', 'node-disconnect' (destroyed: it left
 *   the slot map), 'node-ready' (v6 on every ready, v5 on the first: what was refused meanwhile may be
 *   subscribed now), node-redis' re-subscribe of listeners taken from a node that left or answered
 *   MOVED ('__resubscribeListeners'), and a failed move of a sharded channel (v6
 *   'sharded-channel-moved-error', v5 'sharded-shannel-moved-error');
 * - from each pub/sub client a subscription was confirmed on: 'reconnecting', 'ready' (v5's Cluster
 *   says nothing after a node's first), 'end', and a SUNSUBSCRIBE sent by the server when the slot
 *   left that master ('sharded-channel-moved'; v5's Cluster listens under another name, so there
 *   node-redis moves nothing and only this report makes the channel subscribed again).
 * Invariant: `connected` is the connect() of the current duplicate.
 */
class NodeRedisClusterShardSubscriberPort extends NodeRedisShardPort {
  private connected: Promise<unknown> = Promise.resolve();
  /** The pub/sub clients already watched (a WeakSet: a destroyed one is not kept). */
  private readonly watched = new WeakSet<object>();

  constructor(duplicate: () => NodeRedisSubscriber) {
    super(duplicate);
    this.open();
  }

  protected open(): void {
    const sub = this.duplicate();
    this.sub = sub;
    // A Cluster emits 'error' for its own failures; an unhandled one would crash.
    sub.on('error', () => undefined);
    sub.on('node-error', () => undefined);
    for (const event of CLUSTER_LOST_EVENTS) sub.on(event, () => this.lost(sub));
    const connected = sub.connect();
    this.connected = connected;
    connected.then(
      () => this.up(sub),
      () => this.gaveUp(sub), // no slot map: every root node failed
    );
  }

  protected ready(): Promise<void> {
    // Before the slot map is known node-redis cannot route a SSUBSCRIBE (v6 throws "not ready").
    return this.connected.then(() => undefined);
  }

  /** The pub/sub client of `channel`'s master, if the duplicate has made one. */
  private pubSubClient(sub: NodeRedisSubscriber, channel: string): (NodeRedisSubscriber & { isReady?: boolean }) | undefined {
    const client = this.classic ? prop(sub, 'pubSubNode', 'client') : prop(sub, 'slots', String(slotOf(channel)), 'master', 'pubSub', 'client');
    return typeof prop(client, 'on') === 'function' ? (client as NodeRedisSubscriber & { isReady?: boolean }) : undefined;
  }

  protected heldButNotReady(sub: NodeRedisSubscriber, channel: string): boolean {
    const client = this.pubSubClient(sub, channel);
    if (client?.isReady !== false) return false;
    const listeners = (client as { getPubSubListeners?: (type: string) => Map<string, unknown> }).getPubSubListeners?.(this.classic ? 'CHANNELS' : 'SHARDED');
    // Without getPubSubListeners, assume it is registered: refusing costs a retry at the next loss report.
    return listeners === undefined || listeners.has(channel);
  }

  protected override confirmed(sub: NodeRedisSubscriber, channel: string): void {
    const client = this.pubSubClient(sub, channel);
    if (!client || this.watched.has(client)) return;
    this.watched.add(client);
    for (const event of PUBSUB_CLIENT_LOST_EVENTS) client.on(event, () => this.lost(sub));
  }

  protected destroy(sub: NodeRedisSubscriber): void {
    // With minimizeConnections, a connect() still reading the slot map makes no node client after
    // the destroy: destroying now leaves nothing behind.
    destroyClient(sub);
  }
}

const CLUSTER_LOST_EVENTS = ['node-reconnecting', 'node-disconnect', 'node-ready', '__resubscribeListeners', 'sharded-channel-moved-error', 'sharded-shannel-moved-error'];
const PUBSUB_CLIENT_LOST_EVENTS = ['reconnecting', 'ready', 'end', 'sharded-channel-moved', 'server-sunsubscribe'];

/**
 * TrackingPort on a standalone node-redis client. The reads' duplicate reconnects by itself ('ready'
 * after each reconnection; 'reconnecting' and 'end' are closes). The listener does not: node-redis
 * re-subscribes a reconnected connection before its 'ready', and a subscribed RESP2 connection takes no
 * CLIENT ID; so every loss of the listener (or node-redis giving it up) destroys it and opens a fresh
 * one, as the Bus's port does on reconnect(). Invariant: `listener` is the current listener duplicate,
 * `listening` the CLIENT ID + SUBSCRIBE sent on it (undefined until asked).
 */
class NodeRedisTrackingPort implements TrackingPort {
  readonly reads: NodeRedisPort;
  private readonly readsClient: NodeRedisSubscriber;
  /** Undefined between a loss and the fresh listener. */
  private listener: NodeRedisSubscriber | undefined;
  private listening: Promise<string> | undefined;
  private readonly events = new PortEvents();
  private readonly connecting = new PendingConnects();
  private invalidated: (keys: readonly string[] | null) => void = () => undefined;
  private reopenTimer: NodeJS.Timeout | undefined;
  /** Listeners replaced since one was last ready: the next wait doubles. */
  private reopens = 0;
  private closed = false;

  constructor(
    readsDuplicate: () => NodeRedisSubscriber,
    private readonly listenerDuplicate: () => NodeRedisSubscriber,
  ) {
    const reads = readsDuplicate();
    this.readsClient = reads;
    this.reads = new NodeRedisPort(reads as unknown as NodeRedisClient);
    reads.on('error', (err) => this.events.error(err));
    reads.on('ready', () => this.events.up());
    reads.on('reconnecting', () => this.events.down());
    reads.on('end', () => this.events.down());
    this.connecting.track(reads);
    reads.connect().catch((err: unknown) => this.events.error(err));
    this.openListener();
  }

  private openListener(): void {
    const sub = this.listenerDuplicate();
    this.listener = sub;
    this.listening = undefined;
    const mine = (fn: () => void) => () => {
      if (this.listener === sub && !this.closed) fn();
    };
    sub.on('error', (err) => {
      if (this.listener === sub) this.events.error(err);
    });
    sub.on(
      'ready',
      mine(() => {
        this.reopens = 0;
        this.events.up();
      }),
    );
    const lost = mine(() => this.replaceListener(sub));
    sub.on('reconnecting', lost);
    sub.on('end', lost);
    this.connecting.track(sub);
    sub.connect().catch(lost);
  }

  /**
   * The listener lost its connection (or never had one): report the close, destroy it, and open a fresh
   * one: at once after a listener that was ready, then after a backoff doubling from 50 ms (Redis down).
   */
  private replaceListener(sub: NodeRedisSubscriber): void {
    this.listener = undefined; // its later events are not ours
    this.events.down();
    this.connecting.destroy(sub);
    const wait = this.reopens === 0 ? 0 : Math.min(50 * 2 ** this.reopens, MAX_RETRY_MS);
    this.reopens++;
    clearTimeout(this.reopenTimer);
    this.reopenTimer = setTimeout(() => {
      if (!this.closed) this.openListener();
    }, wait);
    this.reopenTimer.unref();
  }

  track(): Promise<void> {
    if (this.closed) return Promise.reject(new Error('tracking closed'));
    const sub = this.listener;
    if (!sub) return Promise.reject(new Error('tracking listener connection is being reopened'));
    const listening = (this.listening ??= this.listen(sub));
    return listening.then(
      (id) => attempt(() => (this.readsClient as unknown as { sendCommand(args: string[]): Promise<unknown> }).sendCommand(['CLIENT', 'TRACKING', 'on', 'REDIRECT', id])).then(() => undefined),
      (err: unknown) => {
        if (this.listening === listening) this.listening = undefined;
        throw err;
      },
    );
  }

  private async listen(sub: NodeRedisSubscriber): Promise<string> {
    const id = String(await attempt(() => (sub as unknown as { sendCommand(args: string[]): Promise<unknown> }).sendCommand(['CLIENT', 'ID'])));
    // node-redis hands this channel's message over as the key list (or null), not as a string.
    await attempt(() => sub.subscribe(INVALIDATE_CHANNEL, (keys) => {
      if (this.listener === sub && !this.closed) this.invalidated(keys as unknown as readonly string[] | null);
    }));
    return id;
  }

  on(event: 'ready' | 'close' | 'error', listener: (err: unknown) => void): void {
    this.events.on(event, listener);
  }

  onInvalidate(listener: (keys: readonly string[] | null) => void): void {
    this.invalidated = listener;
  }

  ping(): Promise<unknown> {
    return pingOn(this.listener);
  }

  reconnect(): void {
    if (!this.closed && this.listener) this.replaceListener(this.listener);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.reopenTimer);
    this.connecting.destroy(this.readsClient);
    if (this.listener) this.connecting.destroy(this.listener);
  }
}
