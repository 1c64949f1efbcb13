/**
 * A forked "app server" process for the namespace tests: its own cache with an L1, on a client of the
 * family under test (SG_TEST_CLIENT), driven over IPC.
 *
 * Parent → worker: { id, op: 'get' | 'set' | 'delete' | 'clear' | 'knows', ns, key?, value? } | { id, op: 'subscribed' } | { op: 'exit' }
 * Worker → parent: { ev: 'ready' } | { id, ok: true, value? } | { id, ok: false, code, message }
 */
import { createCache } from '../../src/index.js';
import { familyClient } from './family.js';

interface Msg {
  id: number;
  op: 'get' | 'set' | 'delete' | 'clear' | 'subscribed' | 'knows' | 'exit';
  ns?: string;
  key?: string;
  value?: unknown;
}

const { client, dispose } = familyClient(process.env.SG_REDIS_URL ?? 'redis://127.0.0.1:6379');
const cache = createCache({ redis: client, prefix: process.env.SG_PREFIX ?? 'sg', local: { max: 1000 }, redisTimeout: Number(process.env.SG_REDIS_TIMEOUT ?? 1000) });
const bus = ((cache as unknown as { rt: unknown }).rt as { bus: { ready(ms: number): Promise<boolean> } }).bus;

async function run(msg: Msg): Promise<unknown> {
  const ns = cache.namespace(msg.ns ?? 'users');
  switch (msg.op) {
    case 'get':
      return ns.get(msg.key as string);
    case 'set':
      return ns.set(msg.key as string, msg.value, 600_000);
    case 'delete':
      return ns.delete(msg.key as string);
    case 'clear':
      return ns.clear();
    case 'subscribed':
      return bus.ready(5000);
    case 'knows':
      // Whether this process holds the namespace's generation cached (a clear note drops it).
      return ((cache as unknown as { rt: unknown }).rt as { generations: { known: Map<string, number> } }).generations.known.has(msg.ns ?? 'users');
    default:
      return undefined;
  }
}

process.on('message', (msg: Msg) => {
  if (msg.op === 'exit') {
    void cache.close().finally(() => {
      dispose();
      process.exit(0);
    });
    return;
  }
  run(msg).then(
    (value) => process.send?.({ id: msg.id, ok: true, value }),
    (error: unknown) => process.send?.({ id: msg.id, ok: false, code: (error as { code?: string }).code, message: (error as Error).message }),
  );
});

await bus.ready(5000);
process.send?.({ ev: 'ready' });
