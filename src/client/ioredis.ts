import { INVALIDATE_CHANNEL, isNoScript, isUnknownCommand, prop, QUEUED, type PipelinePort, type RedisPort, type Script, type ScriptArg, type ShardSubscriberPort, type SubscriberPort, type TrackingPort } from './port.js';
import { InvalidOptionError } from '../errors.js';
import { Pending } from './pending.js';
import { slotOf } from './slot.js';
import { NO_TICK_WRITES, SocketTickWrites, type TickWrites } from './tick-writes.js';

/**
 * The slice of an ioredis client (`Redis` or `Cluster`, ioredis 5 or 6) the adapter uses.
 * Structural on purpose: the caller's ioredis version is theirs, so we never import its classes.
 */
export interface IoredisClient {
  defineCommand(name: string, definition: { numberOfKeys?: number; lua: string }): void;
  /**
   * EVALSHA as ioredis's own command (`evalshaBuffer`: bulk replies as Buffers): the read script's
   * path. Optional: a client without it (a wrapper, a mock) runs every script through defineCommand.
   */
  evalshaBuffer?(sha: string, numberOfKeys: number, ...args: ScriptArg[]): Promise<unknown>;
  evalsha?(sha: string, numberOfKeys: number, ...args: ScriptArg[]): Promise<unknown>;
  /** ioredis `duplicate()`: a new connection with the same options; used once, for pub/sub only. */
  duplicate(...args: never[]): unknown;
  /** ioredis emits 'ready' on every (re)connection; the cache listens (and stops listening on close()). */
  on?(event: 'ready', listener: () => void): unknown;
  off?(event: 'ready', listener: () => void): unknown;
  /** True on an ioredis `Cluster`. */
  readonly isCluster?: boolean;
}

/** What ioredis's subscriber connection (our duplicate) offers. */
interface IoredisSubscriber {
  readonly isCluster?: boolean;
  /** 'ready' once connected and past ioredis' own ready check (INFO). */
  readonly status?: string;
  readonly options?: { readonly enableOfflineQueue?: boolean };
  subscribe(...channels: string[]): Promise<unknown>;
  on(event: 'message', listener: (channel: string, message: string) => void): unknown;
  on(event: 'error', listener: (err: Error) => void): unknown;
  on(event: 'ready' | 'close', listener: () => void): unknown;
  ping(): Promise<unknown>;
  /** ioredis `connect()`: for a lazyConnect connection still in status 'wait'. */
  connect(): Promise<unknown>;
  disconnect(reconnect?: boolean): void;
}

type Command = (...args: ScriptArg[]) => Promise<unknown>;

export function isIoredis(v: unknown): v is IoredisClient {
  return typeof prop(v, 'defineCommand') === 'function' && typeof prop(v, 'duplicate') === 'function';
}

/**
 * ioredis: scripts through `defineCommand` (EVALSHA with a NOSCRIPT fallback built in; the `…Buffer`
 * variant returns bulk strings as Buffers), except the read-only read script (see read()).
 * Registration is idempotent and per client, under the script's versioned name, so two library
 * versions on one client never clash.
 * Trap (ioredis): after SCRIPT FLUSH a pipelined script is retried after the commands queued behind
 * it, so nothing relies on ordering between a script and other commands.
 */
export class IoredisPort implements RedisPort {
  readonly family = 'ioredis';
  private readonly commands: Record<string, Command | undefined>;
  /** The read-only scripts this port has sent once through defineCommand (see read()). */
  private readonly sent = new Set<string>();

  /** A tick's commands in one socket write (tick-writes.ts): on a single connection, not a Cluster's. */
  private readonly writes: TickWrites;

  constructor(private readonly client: IoredisClient) {
    this.commands = client as unknown as Record<string, Command | undefined>;
    this.writes = client.isCluster === true ? NO_TICK_WRITES : new SocketTickWrites(client as unknown as ConstructorParameters<typeof SocketTickWrites>[0]);
  }

  run(script: Script, keys: readonly string[], args: readonly ScriptArg[], bytes = false): Promise<unknown> {
    this.writes.gather();
    if (script.readOnly) return this.read(script, keys, args, bytes);
    return this.defined(script, keys, args, bytes);
  }

  /** Through defineCommand: EVAL on a script's first run on each connection, EVALSHA after, EVAL again on NOSCRIPT. */
  private defined(script: Script, keys: readonly string[], args: readonly ScriptArg[], bytes: boolean): Promise<unknown> {
    this.define(script);
    return (this.commands[bytes ? `${script.name}Buffer` : script.name] as Command).call(this.client, ...keys, ...args);
  }

  /**
   * A read-only script (every fresh hit): ioredis's own EVALSHA command, and on NOSCRIPT the defined
   * command above (which loads it). ioredis's defineCommand wraps each call in a command subclass that
   * rebuilds its argument list and adds a NOSCRIPT handler and a callback adapter; the plain command
   * costs the client less per call (bench:hit's `evalsha` and `script` variants, and an A/B of this
   * change). Key prefix and Cluster routing are the same: ioredis finds EVALSHA's keys from its
   * numkeys argument. Not the generic `callBuffer('evalsha', …)`: with `enableAutoPipelining` ioredis
   * 5 and 6 drop a generic command's name on its way into the pipeline (redis/ioredis#1923).
   * The first run through this port goes through defineCommand, which sends EVAL on a connection
   * that has not run the script: a cache's first hit stays one round trip.
   * Cost (docs/operations.md, "Your client"): a read on a server that lost the script (a restart, a failover)
   * or on a Cluster master other than the first one read is answered NOSCRIPT, once per read in
   * flight until the fallback's EVAL lands. After SCRIPT FLUSH the fallback's registered command
   * first retries EVALSHA (its connection is marked as having run the script): two NOSCRIPTs. A
   * first run that never reached Redis still uses up `sent`. Both known, not fixed.
   */
  getRange(key: string, end: string): Promise<Buffer> {
    this.writes.gather();
    return (this.client as unknown as IoredisReads).getrangeBuffer(key, 0, end);
  }

  private read(script: Script, keys: readonly string[], args: readonly ScriptArg[], bytes: boolean): Promise<unknown> {
    if (!this.sent.has(script.sha)) {
      this.sent.add(script.sha);
      return this.defined(script, keys, args, bytes);
    }
    const c = this.client;
    const sent = bytes ? c.evalshaBuffer?.(script.sha, script.numberOfKeys, ...keys, ...args) : c.evalsha?.(script.sha, script.numberOfKeys, ...keys, ...args);
    if (sent === undefined) return this.defined(script, keys, args, bytes);
    return sent.catch((err: unknown) => {
      if (!isNoScript(err)) throw err;
      return this.defined(script, keys, args, bytes);
    });
  }

  /** Registers `script` on the client once (defineCommand adds both `name` and `nameBuffer`). */
  private define(script: Script): void {
    if (typeof this.commands[script.name] !== 'function') this.client.defineCommand(script.name, { numberOfKeys: script.numberOfKeys, lua: script.lua });
  }

  subscriber(): SubscriberPort {
    // The Bus owns the subscription: it sends its own SUBSCRIBE on every 'ready' (wait.ts). ioredis's
    // own re-subscribe on reconnecting is sent unawaited (readyHandler), so a connection closed before
    // its reply (close() at that moment) rejected it with no handler: an unhandled rejection, which
    // ends a Node process by default. It is off on our duplicate. A Cluster's subscriber connection is
    // ClusterSubscriber's, which never reconnects (it is replaced) and handles its re-subscribe's rejection.
    const sub = this.cluster ? this.client.duplicate() : (this.client.duplicate as (override: { autoResubscribe: boolean }) => unknown)({ autoResubscribe: false });
    return new IoredisSubscriberPort(sub as IoredisSubscriber);
  }

  tracking(): TrackingPort {
    const duplicate = (override: object) => (this.client.duplicate as (override: object) => unknown).call(this.client, override);
    // The reads' connection: the caller's options (keyPrefix included: the keys read are the cache's own).
    // The listener: RESP2 (ioredis 6 defaults to RESP3, where the server would send a push ioredis drops
    // instead of a message on the channel), and our own re-subscribe, as for the Bus (subscriber() above).
    return new IoredisTrackingPort(duplicate({}) as IoredisTracked, duplicate({ autoResubscribe: false, protocol: 2 }) as IoredisTracked);
  }

  shardSubscriber(): ShardSubscriberPort {
    // Standalone: autoResubscribe off, as for the Bus (subscriber() above): ioredis' own re-subscribe
    // is unawaited, and the port's caller re-subscribes on onLost anyway. Cluster: a duplicate whose
    // sharded subscriber group keeps one connection per master (ClusterSubscriberGroup, ioredis ≥ 5.9
    // and 6), which routes SSUBSCRIBE by slot; the caller's own Cluster is left as it is.
    // No keyPrefix on either: ioredis takes a sharded channel for a key (SSUBSCRIBE and SUNSUBSCRIBE
    // have key positions, unlike SUBSCRIBE), so with the caller's `keyPrefix: 'app:'` it would
    // subscribe `app:<channel>` while the scripts SPUBLISH `<channel>` itself. A Cluster takes its
    // prefix from its own `keyPrefix` or, when that is empty, from `redisOptions.keyPrefix` (its
    // constructor, ioredis 5 and 6); its nodes and sharded connections are made from `redisOptions`:
    // both are emptied. (ioredis 5 replaces `redisOptions` in a duplicate, 6 merges it: a full copy
    // suits both.)
    if (!this.cluster) {
      const sub = (this.client.duplicate as (override: { autoResubscribe: boolean; keyPrefix: string }) => unknown)({ autoResubscribe: false, keyPrefix: '' });
      return new IoredisShardSubscriberPort(sub as IoredisShardSubscriber);
    }
    const redisOptions = prop(this.client, 'options', 'redisOptions');
    const override = {
      shardedSubscribers: true,
      keyPrefix: '',
      redisOptions: { ...(typeof redisOptions === 'object' && redisOptions !== null ? redisOptions : {}), keyPrefix: '' },
    };
    const sub = (this.client.duplicate as (nodes: never[], override: object) => unknown)([], override);
    // An ioredis Cluster older than 5.9 has no sharded subscriber group (the Cluster's
    // `shardedSubscribers` property) and ignores the option: its SSUBSCRIBE would go through its one
    // classic subscriber connection, to a random node, where a channel of another master's slot is
    // refused (MOVED) or never hears that master's SPUBLISH. Refused here, at createCache.
    // Untested against a real ioredis < 5.9 (only 5.11 and 6 are installed); the test simulates it
    // with a 5.11 duplicate made without the option, which lacks the property the same way.
    if (typeof prop(sub, 'shardedSubscribers') !== 'object' || prop(sub, 'shardedSubscribers') === null) {
      try {
        (sub as { disconnect(): void }).disconnect();
      } catch {
        // Nothing to release.
      }
      throw new InvalidOptionError('notes', 'sharded', "an ioredis Cluster client of version 5.9 or later (sharded pub/sub), or notes: 'broadcast'");
    }
    return new IoredisShardSubscriberPort(sub as IoredisShardSubscriber);
  }

  get cluster(): boolean {
    return this.client.isCluster === true;
  }

  pipeline(): PipelinePort {
    // An ioredis pipeline takes the client's registered scripts as methods when it is created, so the
    // calls are queued here and the pipeline is made at exec(), once every script they use is defined.
    // A queued GETRANGE is a script-less entry: [undefined, [key, '0', end], [], true].
    const queued: [Script | undefined, readonly ScriptArg[], readonly ScriptArg[], boolean][] = [];
    return {
      run: (script, keys, args, bytes = false) => {
        queued.push([script, keys, args, bytes]);
        return QUEUED;
      },
      getRange: (key, end) => {
        queued.push([undefined, [key, 0, end], [], true]);
        return QUEUED;
      },
      exec: async () => {
        for (const [script] of queued) if (script) this.define(script);
        const pipe = (this.client as unknown as { pipeline(): Record<string, Command> & { exec(): Promise<[Error | null, unknown][] | null> } }).pipeline();
        for (const [script, keys, args, bytes] of queued) {
          const name = script ? script.name : 'getrange';
          void (pipe[bytes ? `${name}Buffer` : name] as Command).call(pipe, ...keys, ...args);
        }
        return (await pipe.exec()) ?? [];
      },
    };
  }

  command(_key: string, args: readonly ScriptArg[]): Promise<unknown> {
    // ioredis routes by the command's key itself (Cluster) and replies with strings for bulk replies.
    this.writes.gather();
    return (this.client as unknown as { call(...a: ScriptArg[]): Promise<unknown> }).call(...args);
  }

  commandOnNodeOf(key: string, args: readonly ScriptArg[]): Promise<unknown> {
    if (!this.cluster) return this.command(key, args);
    // The master's own connection: ioredis Cluster `nodes('master')`, matched to the slot owner.
    const owner = this.nodeOf(key);
    const nodes = (this.client as unknown as { nodes(role: 'master'): { readonly options: { readonly host?: string; readonly port?: number }; call(...a: ScriptArg[]): Promise<unknown> }[] }).nodes('master');
    const node = nodes.find((n) => `${String(n.options.host)}:${String(n.options.port)}` === owner);
    if (!node) return Promise.reject(new Error(`no connection to ${owner}, the master of the key's slot`));
    return node.call(...args);
  }

  get keyPrefix(): string {
    // A Cluster keeps its per-node options (keyPrefix among them) in `redisOptions`.
    const prefix = prop(this.client, 'options', 'keyPrefix') ?? prop(this.client, 'options', 'redisOptions', 'keyPrefix');
    return typeof prefix === 'string' ? prefix : '';
  }

  eachNode(role: 'masters' | 'all'): ((args: readonly ScriptArg[]) => Promise<unknown>)[] {
    type Node = { call(...a: ScriptArg[]): Promise<unknown> };
    if (!this.cluster) return [(args) => this.command('', args)];
    const nodes = (this.client as unknown as { nodes(role: 'master' | 'all'): Node[] }).nodes(role === 'masters' ? 'master' : 'all');
    return nodes.map((n) => (args) => n.call(...args));
  }

  onReady(listener: () => void): () => void {
    this.client.on?.('ready', listener);
    return () => void this.client.off?.('ready', listener);
  }

  nodeOf(key: string): string {
    if (!this.client.isCluster) return 'standalone';
    // ioredis Cluster: `slots[slot]` lists the "host:port" of the slot's master first (then replicas).
    const owners = prop(this.client, 'slots', String(slotOf(key)));
    return Array.isArray(owners) && typeof owners[0] === 'string' ? owners[0] : 'unknown';
  }

  get skipsTlsVerification(): boolean {
    // Redis: options.tls; Cluster: options.redisOptions.tls.
    const tls = prop(this.client, 'options', 'tls') ?? prop(this.client, 'options', 'redisOptions', 'tls');
    return prop(tls, 'rejectUnauthorized') === false;
  }
}

/**
 * "Drop the connection and reconnect" on an ioredis connection (a subscriber duplicate, standalone or
 * Cluster), at most once until that drop is seen through: each disconnect(true) ends the socket again
 * and arms another destroy timer with a 'close' listener on it, and a socket whose server hangs (no
 * FIN back) stays open for ioredis' `disconnectTimeout` (2 s by default), so a heartbeat asking every
 * period would stack listeners (MaxListenersExceededWarning) and bounce nothing more. Invariant:
 * `dropping` is true from a disconnect(true) until the connection's next 'close'.
 * Only from a state with a connection to drop: not while ioredis reconnects already, not before a
 * lazy connection is made ('wait'), not once it ended. A Cluster only when 'ready': its disconnect()
 * while it is still connecting may leave it in 'disconnecting' with nothing to reconnect it (its
 * connect() then aborts).
 */
class Redial {
  private dropping = false;

  constructor(private readonly conn: { readonly isCluster?: boolean; readonly status?: string; on(event: 'close', listener: () => void): unknown; disconnect(reconnect?: boolean): void }) {
    conn.on('close', () => (this.dropping = false));
  }

  now(): void {
    if (this.dropping) return;
    const status = this.conn.status;
    const live = this.conn.isCluster ? status === 'ready' : status === 'ready' || status === 'connect' || status === 'connecting';
    if (!live) return;
    this.dropping = true;
    try {
      this.conn.disconnect(true);
    } catch {
      // Never thrown by ioredis 5 or 6; a reconnect must not throw into the caller's timer.
      this.dropping = false;
    }
  }
}

/** What the tracking port uses of its two ioredis duplicates. */
interface IoredisTracked extends IoredisClient {
  readonly status?: string;
  call(command: string, ...args: string[]): Promise<unknown>;
  subscribe(channel: string): Promise<unknown>;
  ping(): Promise<unknown>;
  on(event: string, listener: (...args: never[]) => void): unknown;
  disconnect(reconnect?: boolean): void;
}

/**
 * TrackingPort on a standalone ioredis client. ioredis reconnects each duplicate by itself and emits
 * 'close' then 'ready' (on nextTick after the status change) for every connection: both are reported.
 * The listener's invalidations come as 'messageBuffer' (the key list as Buffers, or null): its
 * 'message' would join the keys with commas.
 * Invariant: `listening` is the CLIENT ID + SUBSCRIBE of the listener's current connection (undefined
 * until asked, and again after each 'close').
 */
class IoredisTrackingPort implements TrackingPort {
  readonly reads: IoredisPort;
  private listening: Promise<string> | undefined;
  private closed = false;
  private readonly redial: Redial;

  constructor(
    private readonly readsClient: IoredisTracked,
    private readonly listener: IoredisTracked,
  ) {
    this.reads = new IoredisPort(readsClient);
    this.redial = new Redial(listener);
    listener.on('close', () => (this.listening = undefined));
  }

  track(): Promise<void> {
    if (this.closed) return Promise.reject(new Error('tracking closed'));
    const listening = (this.listening ??= this.listen());
    return listening.then(
      (id) => this.readsClient.call('CLIENT', 'TRACKING', 'on', 'REDIRECT', id).then(() => undefined),
      (err: unknown) => {
        if (this.listening === listening) this.listening = undefined;
        throw err;
      },
    );
  }

  private async listen(): Promise<string> {
    const id = String(await this.listener.call('CLIENT', 'ID'));
    await this.listener.subscribe(INVALIDATE_CHANNEL);
    return id;
  }

  on(event: 'ready' | 'close' | 'error', listener: (err: unknown) => void): void {
    for (const c of [this.readsClient, this.listener]) c.on(event, listener);
  }

  onInvalidate(listener: (keys: readonly string[] | null) => void): void {
    this.listener.on('messageBuffer', ((channel: Buffer, keys: Buffer[] | null) => {
      if (!this.closed && channel.toString() === INVALIDATE_CHANNEL) listener(keys === null ? null : keys.map(String));
    }));
  }

  ping(): Promise<unknown> {
    return this.listener.ping();
  }

  reconnect(): void {
    if (!this.closed) this.redial.now();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.readsClient.disconnect();
    this.listener.disconnect();
  }
}

/**
 * ioredis's event contract, which the Bus relies on: 'ready' after every (re)connection's ready check,
 * 'close' after every closed or failed connection, both on nextTick after the status change.
 *
 * An ioredis Cluster breaks it for pub/sub: its subscriber is one internal connection (ClusterSubscriber)
 * that, when it ends, is replaced by a new one to a random node and re-subscribed silently — the
 * Cluster itself emits neither 'close' nor 'ready', so the notes published in the gap were lost
 * without the Bus knowing (L1 kept copies a delete had dropped elsewhere). The port therefore watches
 * that connection (ClusterSubscriber.getInstance(), which ioredis exposes for debugging and tests)
 * and reports its end as 'close' then 'ready' (the Bus subscribes again), as for a plain client; the
 * heartbeat PINGs that connection itself.
 */
class IoredisSubscriberPort implements SubscriberPort {
  private listening = false;
  private readonly readies: (() => void)[] = [];
  private readonly closes: (() => void)[] = [];
  /** The ClusterSubscriber connection holding the subscription (Cluster only): its loss bounces. */
  private readonly watch: ClusterSubscriberWatch;
  private readonly redial: Redial;
  private closed = false;

  constructor(private readonly sub: IoredisSubscriber) {
    this.redial = new Redial(sub);
    this.watch = new ClusterSubscriberWatch(sub, () => {
      if (!this.closed) this.bounce();
    });
    sub.on('ready', () => this.readies.forEach((l) => l()));
    sub.on('close', () => this.closes.forEach((l) => l()));
  }

  subscribe(channel: string, onMessage: (channel: string, message: string) => void): Promise<unknown> {
    // With enableOfflineQueue off, not before ioredis' 'ready': ioredis then writes a command as soon
    // as the socket connects, so our SUBSCRIBE could reach Redis ahead of ioredis' ready check, whose
    // INFO then fails in subscriber mode and makes ioredis drop the connection; seen to leave a
    // subscription that Redis counts but whose messages never reach us. The Bus subscribes on 'ready'.
    // (With the offline queue on, ioredis holds the SUBSCRIBE until it is ready: nothing to do.)
    if (!this.sub.isCluster && this.sub.options?.enableOfflineQueue === false && this.sub.status !== 'ready') {
      // A duplicate of a lazyConnect client waits for a first command to connect, and this refusal
      // sends none: connect it here (its 'ready' makes the Bus try again; a failure retries on its own).
      if (this.sub.status === 'wait') this.sub.connect().catch(() => undefined);
      return Promise.reject(new Error(`subscriber connection not ready (${this.sub.status})`));
    }
    if (!this.listening) {
      this.listening = true;
      this.sub.on('message', onMessage);
    }
    // Cluster: the connection the SUBSCRIBE goes to (undefined until ioredis has made one).
    const sentOn = this.watch.current();
    return this.sub.subscribe(channel).then((reply) => {
      if (this.sub.isCluster && !this.closed) this.watch.confirmed(sentOn);
      return reply;
    });
  }

  on(event: 'ready' | 'close' | 'error', listener: (err: unknown) => void): void {
    if (event === 'error') this.sub.on('error', listener);
    else (event === 'ready' ? this.readies : this.closes).push(() => listener(undefined));
  }

  /**
   * The watched connection is gone (or not the one we think): report 'close' now and 'ready' on the
   * next tick. The Bus then re-subscribes through the Cluster, which sends to ClusterSubscriber's
   * current connection — queued there until it is ready, or refused (the Bus retries with backoff) —
   * and goes up only once that SUBSCRIBE is answered. ('ready' is not awaited on the replacement: it
   * may have been made, and be ready, before the old connection's end is seen.)
   */
  private bounce(): void {
    this.watch.forget();
    this.closes.forEach((l) => l());
    process.nextTick(() => {
      if (!this.closed) this.readies.forEach((l) => l());
    });
  }

  ping(): Promise<unknown> {
    const watched = this.watch.watched;
    if (this.sub.isCluster && watched) {
      // The heartbeat must reach the subscriber connection itself (a Cluster's own PING goes to
      // another node's); and a connection ioredis replaced meanwhile counts as a reconnection.
      if (this.watch.current() !== watched) {
        this.bounce();
        return Promise.resolve('PONG');
      }
      return watched.ping();
    }
    return this.sub.ping();
  }

  reconnect(): void {
    if (!this.closed) this.redial.now();
  }

  close(): void {
    this.closed = true;
    // disconnect, not quit: quit waits for a reply that never comes while Redis is down.
    this.sub.disconnect();
  }
}

/**
 * An ioredis Cluster's classic pub/sub connection (ClusterSubscriber.getInstance(), which ioredis
 * exposes for debugging and tests), or undefined (not a Cluster, none yet, or an ioredis without it).
 */
function clusterSubscriberConnection(cluster: unknown): WatchedConnection | undefined {
  const cs = prop(cluster, 'subscriber') as { getInstance?: () => unknown } | undefined;
  const instance = typeof cs?.getInstance === 'function' ? cs.getInstance() : undefined;
  return instance && typeof (instance as WatchedConnection).once === 'function' ? (instance as WatchedConnection) : undefined;
}

/**
 * Watches an ioredis Cluster's classic subscriber connection, which ClusterSubscriber replaces
 * silently when it ends (the Cluster emits nothing). After a SUBSCRIBE is answered, `confirmed`
 * watches the connection that holds it, once per connection; its end is a loss, and so is a
 * replacement while the SUBSCRIBE was on the wire (the replacement's re-subscribe list was taken
 * before the reply, so it may not hold the channel). Used by the Bus's port and the shard port's
 * classic fallback.
 */
class ClusterSubscriberWatch {
  /** The connection being watched, or undefined (none yet, or forgotten after a loss). */
  watched: WatchedConnection | undefined;

  constructor(
    private readonly cluster: unknown,
    private readonly onLoss: () => void,
  ) {}

  /** The Cluster's current subscriber connection, or undefined (not a Cluster, none yet, or an ioredis without it). */
  current(): WatchedConnection | undefined {
    return clusterSubscriberConnection(this.cluster);
  }

  /** A SUBSCRIBE sent on `sentOn` (undefined: no connection yet) was answered. */
  confirmed(sentOn: WatchedConnection | undefined): void {
    const connection = this.current();
    if (!connection || connection === this.watched) return;
    if (sentOn !== undefined && sentOn !== connection) {
      this.onLoss();
      return;
    }
    this.watched = connection;
    connection.once('end', () => {
      if (this.watched === connection) this.onLoss();
    });
  }

  forget(): void {
    this.watched = undefined;
  }
}

/** What the port uses of ioredis's ClusterSubscriber connection. */
interface WatchedConnection {
  once(event: 'end', listener: () => void): unknown;
  ping(): Promise<unknown>;
}


/** What ioredis's sharded pub/sub duplicate (a `Redis` or a `Cluster` with `shardedSubscribers`) offers. */
interface IoredisShardSubscriber {
  readonly isCluster?: boolean;
  readonly status?: string;
  readonly options?: { readonly enableOfflineQueue?: boolean };
  ssubscribe(channel: string): Promise<unknown>;
  sunsubscribe(channel: string): Promise<unknown>;
  subscribe(channel: string): Promise<unknown>;
  unsubscribe(channel: string): Promise<unknown>;
  on(event: string, listener: (...args: unknown[]) => void): unknown;
  connect(): Promise<unknown>;
  disconnect(reconnect?: boolean): void;
}

/**
 * The events after which a subscription of this port may not hold any more; each one is reported
 * through onLost (over-reporting costs the caller a SSUBSCRIBE per held channel, under-reporting a
 * waiter that sleeps through its note).
 * - Both: 'close' (a connection closed: a standalone client reconnects without re-subscribing,
 *   autoResubscribe being off; a Cluster closes all its connections) and 'ready' (a connection became
 *   usable: a subscribe refused meanwhile — offline queue off, not ready — can be tried again now).
 * - Cluster (ClusterSubscriberGroup): '-node' (a master's sharded connection ended: it has no retry
 *   strategy, and the group replaces it only after a slot-map refresh; also a node leaving the pool),
 *   '-subscriber' (the group stopped a master's connection: the master left or owns no slot any more),
 *   'subscribersReady' (the group re-subscribed after a topology change or a replaced connection: a
 *   slot moved, or the gap before it lost messages).
 */
const IOREDIS_LOST_EVENTS = ['close', 'ready'] as const;
const IOREDIS_CLUSTER_LOST_EVENTS = ['-node', '-subscriber', 'subscribersReady'] as const;

/**
 * ShardSubscriberPort on ioredis, standalone or Cluster (see IOREDIS_LOST_EVENTS for what counts as
 * lost). Invariants: `pending` holds every subscribe() not yet settled, with the master its SSUBSCRIBE
 * went to on a Cluster (undefined: not sent yet, or standalone); `classic` never goes back to false.
 */
class IoredisShardSubscriberPort implements ShardSubscriberPort {
  /** The server has no sharded pub/sub: SUBSCRIBE / UNSUBSCRIBE from now on. */
  private classic = false;
  private closed = false;
  private listener: ((channel: string, message: string) => void) | undefined;
  private readonly losts: (() => void)[] = [];
  private readonly pending = new Map<(err?: Error) => void, { readonly channel: string; readonly sentTo: string | undefined }>();
  private readonly unsubscribing = new Pending();
  /** Cluster in classic mode: the ClusterSubscriber connection holding the subscriptions. */
  private readonly watch: ClusterSubscriberWatch;
  private readonly redial: Redial;

  constructor(private readonly sub: IoredisShardSubscriber) {
    this.redial = new Redial(sub);
    this.watch = new ClusterSubscriberWatch(sub, () => this.lost());
    const deliver = (channel: unknown, message: unknown) => {
      if (!this.closed && typeof channel === 'string' && typeof message === 'string') this.listener?.(channel, message);
    };
    sub.on('smessage', deliver);
    sub.on('message', deliver);
    // A Cluster emits 'error' with a plain emit (a sharded connection that failed to connect): without
    // a listener that throws. Errors are not losses by themselves: the events below say what was lost.
    sub.on('error', () => undefined);
    // ioredis drops a SSUBSCRIBE answered MOVED without settling it (DataHandler.returnError emits
    // 'moved', which refreshes the slot map and re-subscribes through the group): once the group has
    // re-subscribed, a subscribe still pending that went to a master no longer owning its slot never
    // settles by itself, so it is rejected (the lost event reported next makes the caller retry).
    if (sub.isCluster) sub.on('subscribersReady', () => this.rejectMoved());
    const events: readonly string[] = sub.isCluster ? [...IOREDIS_LOST_EVENTS, ...IOREDIS_CLUSTER_LOST_EVENTS] : IOREDIS_LOST_EVENTS;
    for (const event of events) sub.on(event, () => this.lost());
  }

  subscribe(channel: string): Promise<void> {
    if (this.closed) return Promise.reject(new Error('shard subscriber closed'));
    // As the Bus's subscriber (IoredisSubscriberPort.subscribe): with the offline queue off, nothing
    // before ioredis' ready check, whose INFO would fail in subscriber mode. 'ready' reports a loss,
    // which makes the caller subscribe again.
    if (!this.sub.isCluster && this.sub.options?.enableOfflineQueue === false && this.sub.status !== 'ready') {
      if (this.sub.status === 'wait') this.sub.connect().catch(() => undefined);
      return Promise.reject(new Error(`shard subscriber connection not ready (${String(this.sub.status)})`));
    }
    return new Promise<void>((resolve, reject) => {
      const settle = (err?: Error) => {
        if (!this.pending.delete(settle)) return;
        if (err) reject(err);
        else resolve();
      };
      const classic = this.classic;
      // A Cluster routes the command when it is sent, now if it is ready (else from its offline queue).
      this.pending.set(settle, { channel, sentTo: !classic && this.sub.status === 'ready' ? this.ownerOf(channel) : undefined });
      const sentOn = classic ? this.clusterConnection() : undefined;
      call(() => (classic ? this.sub.subscribe(channel) : this.sub.ssubscribe(channel))).then(
        () => {
          if (classic) this.watchClusterSubscriber(sentOn);
          settle();
        },
        (err: unknown) => {
          if (classic || !isUnknownCommand(err)) return settle(asError(err));
          // No sharded pub/sub here (Redis < 7.0, or SSUBSCRIBE renamed away): SUBSCRIBE, now and after.
          this.classic = true;
          const on = this.clusterConnection();
          call(() => this.sub.subscribe(channel)).then(
            () => {
              this.watchClusterSubscriber(on);
              settle();
            },
            (e: unknown) => settle(asError(e)),
          );
        },
      );
    });
  }

  unsubscribe(channel: string): Promise<void> {
    if (this.closed) return Promise.resolve();
    // Sent even while disconnected (the offline queue keeps it behind a SSUBSCRIBE queued for the
    // same channel); it settles when ioredis answers or drops it, or at close().
    const sent = call(() => (this.classic ? this.sub.unsubscribe(channel) : this.sub.sunsubscribe(channel))).then(
      () => undefined,
      () => undefined,
    );
    return this.unsubscribing.race(sent, () => Promise.resolve());
  }

  onMessage(listener: (channel: string, message: string) => void): void {
    this.listener = listener;
  }

  onLost(listener: () => void): void {
    this.losts.push(listener);
  }

  /**
   * disconnect(true) (Redial): ioredis closes the connection(s) and reconnects by the caller's retry
   * strategy (`retryStrategy`, a Cluster's `clusterRetryStrategy`), as when a socket drops; its 'close'
   * then 'ready' report the loss (IOREDIS_LOST_EVENTS). A socket that does not answer its FIN is
   * destroyed after ioredis' `disconnectTimeout` (2 s by default). A Cluster drops every connection,
   * its sharded subscriber group's too; the group makes new ones after the reconnection and
   * re-subscribes what it held ('subscribersReady', also reported). Commands in flight are sent again
   * after the reconnection (autoResendUnfulfilledCommands) or rejected by ioredis, into handlers of ours.
   */
  reconnect(): void {
    if (!this.closed) this.redial.now();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    const closed = new Error('shard subscriber closed');
    for (const settle of [...this.pending.keys()]) settle(closed);
    this.unsubscribing.closeAll();
    // disconnect, not quit: quit waits for a reply that never comes while Redis is down. Commands in
    // flight are rejected by ioredis into handlers of ours (subscribe, unsubscribe).
    this.sub.disconnect();
  }

  private lost(): void {
    if (this.closed) return;
    this.watch.forget();
    for (const l of this.losts) l();
  }

  /** The "host:port" of the master of `channel`'s slot in the Cluster's current slot map. */
  private ownerOf(channel: string): string | undefined {
    const owners = prop(this.sub, 'slots', String(slotOf(channel)));
    return Array.isArray(owners) && typeof owners[0] === 'string' ? owners[0] : undefined;
  }

  private rejectMoved(): void {
    for (const [settle, { channel, sentTo }] of [...this.pending]) {
      if (sentTo !== undefined && this.ownerOf(channel) !== sentTo) settle(new Error(`SSUBSCRIBE ${channel} was redirected (its slot moved); subscribe again`));
    }
  }

  /** Cluster, classic mode: the ClusterSubscriber's current connection (see ClusterSubscriberWatch). */
  private clusterConnection(): WatchedConnection | undefined {
    return this.sub.isCluster ? this.watch.current() : undefined;
  }

  /** Cluster, classic mode: a SUBSCRIBE sent on `sentOn` was answered: watch its connection. */
  private watchClusterSubscriber(sentOn: WatchedConnection | undefined): void {
    if (this.sub.isCluster && !this.closed) this.watch.confirmed(sentOn);
  }
}

/** Runs an ioredis command; a synchronous throw (a Cluster whose slot map is not known yet) is a rejection. */
function call(send: () => Promise<unknown>): Promise<unknown> {
  try {
    return send();
  } catch (err) {
    return Promise.reject(asError(err));
  }
}

function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

/** What a plain read uses of an ioredis client: GETRANGE as Buffers. */
interface IoredisReads {
  getrangeBuffer(key: string, start: number, end: string): Promise<Buffer>;
}
