/**
 * The commands a port handed out whose promise has not settled yet, so that close() can settle
 * them all: a client may keep a command it was given while disconnected and never settle it once
 * closed (ioredis 6 with a SUNSUBSCRIBE written as the connection dropped), and the caller of a
 * closed port must not wait forever. Invariant: a closer is in `closers` exactly while its promise
 * is unsettled.
 */
export class Pending {
  private readonly closers = new Set<() => void>();

  /** `work`, or what `whenClosed` gives if closeAll() comes first. Both always have a handler. */
  race<T>(work: Promise<T>, whenClosed: () => Promise<T>): Promise<T> {
    let close: () => void = () => undefined;
    const closed = new Promise<T>((resolve) => {
      close = () => resolve(whenClosed());
    });
    this.closers.add(close);
    const out = Promise.race([work, closed]);
    const done = () => void this.closers.delete(close);
    out.then(done, done);
    return out;
  }

  closeAll(): void {
    const all = [...this.closers];
    this.closers.clear();
    for (const close of all) close();
  }
}
