/**
 * getOrCompute in a Fastify 5 handler: a slow query cached for 60 s, rebuilt once per expiry across
 * every process, cancelled when every client waiting for it disconnected (`request.signal`), and an
 * orderly shutdown.
 *
 * Run: npm run example -- fastify    (a throwaway redis-server unless REDIS_URL is set; PORT, default 3000)
 *   or: REDIS_URL=redis://127.0.0.1:6379 PORT=3000 node --import tsx examples/fastify.ts
 *   curl localhost:3000/reports/42      # the report (the first call takes SLOW_QUERY_MS, 500 by default)
 *   curl localhost:3000/stats           # cache.stats() and what the origin saw
 */
import Fastify from 'fastify';
import { clientWentAway, createReportService, onShutdownSignal } from './report-service.js';

const service = createReportService();
const app = Fastify();

app.get<{ Params: { id: string } }>('/reports/:id', async (request, reply) => {
  try {
    // request.signal aborts when the client disconnects.
    return await service.report(request.params.id, request.signal);
  } catch (err) {
    // Nobody is left to answer; the cache already counted no origin failure for it.
    if (clientWentAway(err)) return reply.hijack();
    // The origin failed, timed out or is in failBackoff: say so without exposing its error.
    console.error('report failed:', err);
    return reply.code(503).send({ error: 'report unavailable, try again later' });
  }
});

app.get('/stats', () => service.stats());

// The cache is closed after the server stopped taking requests, and our client after the cache.
app.addHook('onClose', () => service.close());

const address = await app.listen({ port: Number(process.env.PORT ?? 3000), host: '127.0.0.1' });
console.log(JSON.stringify({ listening: Number(new URL(address).port) }));

onShutdownSignal(async () => {
  await app.close();
  console.log(JSON.stringify({ closed: true }));
});
