/** Counts the pipelines a real client executes (each is one round trip to its node); the server is still real. */
import type { Redis } from 'ioredis';

export function countPipelines(client: Redis): { readonly count: number } {
  let count = 0;
  const original = client.pipeline.bind(client);
  client.pipeline = ((...args: Parameters<Redis['pipeline']>) => {
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
