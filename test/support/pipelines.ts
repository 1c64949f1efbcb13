/** Counts the pipelines a real client executes (each is one round trip to its node); the server is still real. */
import type { Redis } from 'ioredis';
import { isNodeRedis, NodeRedisPort } from '../../src/client/node-redis.js';
import type { TestClient } from './clients.js';

/** node-redis: the pipeline counts per client (the port's pipeline() is patched once, for every client). */
const nodeRedisCounts = new WeakMap<object, { count: number }>();
let nodeRedisPatched = false;

function patchNodeRedisPort(): void {
  if (nodeRedisPatched) return;
  nodeRedisPatched = true;
  const proto = NodeRedisPort.prototype;
  const original = Object.getOwnPropertyDescriptor(proto, 'pipeline')?.value as (this: NodeRedisPort) => ReturnType<NodeRedisPort['pipeline']>;
  proto.pipeline = function (this: NodeRedisPort) {
    const p = original.call(this);
    const counter = nodeRedisCounts.get((this as unknown as { client: object }).client);
    const exec = p.exec.bind(p);
    p.exec = () => (counter && counter.count++, exec());
    return p;
  };
}

/**
 * ioredis: each `pipeline().exec()` of the client. node-redis has no pipeline object: it writes every
 * command issued in one tick in one go, and the port sends a pipeline's commands in one synchronous
 * run; counted here is each pipeline the port executes on the client.
 */
export function countPipelines(client: Redis | TestClient): { readonly count: number } {
  if (isNodeRedis(client)) {
    patchNodeRedisPort();
    const counter = { count: 0 };
    nodeRedisCounts.set(client, counter);
    return counter;
  }
  const redis = client as Redis;
  let count = 0;
  const original = redis.pipeline.bind(redis);
  redis.pipeline = ((...args: Parameters<Redis['pipeline']>) => {
    const p = original(...args);
    const exec = p.exec.bind(p);
    p.exec = ((...a: Parameters<typeof p.exec>) => (count++, exec(...a)));
    return p;
  });
  return {
    get count() {
      return count;
    },
  };
}
