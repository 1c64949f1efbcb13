/**
 * A small in-repo TCP proxy for fault tests (stands in for toxiproxy): forwards a loopback port to a
 * Redis server and can, per direction, delay bytes, blackhole them (sockets stay open, bytes vanish),
 * hold them (sockets stay open, bytes are late, then delivered in order), or reset every connection.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

export type Direction = 'up' | 'down'; // up: client → server; down: server → client

export interface Proxy {
  readonly port: number;
  readonly url: string;
  /** Extra latency added to each chunk in one direction (0 = none). */
  delay(direction: Direction, ms: number): void;
  /** Drop every byte in one direction from now on (true) or forward again (false). */
  blackhole(direction: Direction, on: boolean): void;
  /** Queue every byte in one direction from now on (true); false delivers what was held, in order, and forwards again. */
  hold(direction: Direction, on: boolean): void;
  /**
   * Drop every byte, both ways, of the one connection whose upstream socket has local port
   * `serverSeenPort` (the port Redis's CLIENT LIST shows in `addr=`): that connection goes silently
   * dead while every other one keeps working. False if no such connection is open.
   */
  silence(serverSeenPort: number): boolean;
  /** Destroy every open connection (clients see ECONNRESET). */
  reset(): void;
  close(): Promise<void>;
}

export async function startProxy(target: { host: string; port: number }): Promise<Proxy> {
  const delays: Record<Direction, number> = { up: 0, down: 0 };
  const holes: Record<Direction, boolean> = { up: false, down: false };
  /** Per direction while held: the chunks to deliver on release, in arrival order. */
  const held: Record<Direction, (() => void)[] | undefined> = { up: undefined, down: undefined };
  const sockets = new Set<Socket>();
  /** Connections silenced one by one (silence()), by their upstream socket. */
  const silenced = new WeakSet<Socket>();
  const upstreams = new Set<Socket>();

  const pipe = (from: Socket, to: Socket, direction: Direction): void => {
    from.on('data', (chunk: Buffer) => {
      if (holes[direction] || silenced.has(direction === 'up' ? to : from)) return;
      const queue = held[direction];
      if (queue) queue.push(() => !to.destroyed && to.write(chunk));
      else if (delays[direction] === 0) to.write(chunk);
      else setTimeout(() => !to.destroyed && to.write(chunk), delays[direction]);
    });
  };

  const server: Server = createServer((client) => {
    const upstream = connect(target.port, target.host);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => undefined);
    }
    upstreams.add(upstream);
    upstream.on('close', () => upstreams.delete(upstream));
    pipe(client, upstream, 'up');
    pipe(upstream, client, 'down');
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    delay: (direction, ms) => void (delays[direction] = ms),
    blackhole: (direction, on) => void (holes[direction] = on),
    hold: (direction, on) => {
      const queue = held[direction];
      held[direction] = on ? (queue ?? []) : undefined;
      if (!on) for (const deliver of queue ?? []) deliver();
    },
    silence: (serverSeenPort) => {
      const upstream = [...upstreams].find((u) => u.localPort === serverSeenPort);
      if (upstream) silenced.add(upstream);
      return upstream !== undefined;
    },
    reset: () => {
      for (const s of sockets) s.destroy();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
