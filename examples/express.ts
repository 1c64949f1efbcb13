/**
 * getOrCompute in an Express 5 handler: a slow query cached for 60 s, rebuilt once per expiry across
 * every process, cancelled when every client waiting for it disconnected, and an orderly shutdown.
 *
 * Run: npm run example -- express    (a throwaway redis-server unless REDIS_URL is set; PORT, default 3000)
 *   or: REDIS_URL=redis://127.0.0.1:6379 PORT=3000 node --import tsx examples/express.ts
 *   curl localhost:3000/reports/42      # the report (the first call takes SLOW_QUERY_MS, 500 by default)
 *   curl localhost:3000/stats           # cache.stats() and what the origin saw
 */
import type { AddressInfo } from 'node:net';
import express, { type Request, type Response } from 'express';
import { clientWentAway, createReportService, onShutdownSignal } from './report-service.js';

/**
 * Express has no per-request AbortSignal: make one that aborts when the connection closes before the
 * response was sent (the client went away). A response that finished closes too; that is no abort.
 */
function requestSignal(res: Response): AbortSignal {
  const controller = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) controller.abort();
  });
  return controller.signal;
}

const service = createReportService();
const app = express();

app.get('/reports/:id', async (req: Request<{ id: string }>, res) => {
  try {
    res.json(await service.report(req.params.id, requestSignal(res)));
  } catch (err) {
    // Nobody is left to answer; the cache already counted no origin failure for it.
    if (clientWentAway(err)) return;
    // The origin failed, timed out or is in failBackoff: say so without exposing its error.
    console.error('report failed:', err);
    res.status(503).json({ error: 'report unavailable, try again later' });
  }
});

app.get('/stats', (_req, res) => {
  res.json(service.stats());
});

const server = app.listen(Number(process.env.PORT ?? 3000), '127.0.0.1', (err) => {
  if (err) throw err; // e.g. the port is taken: nothing to serve, let the process fail
  console.log(JSON.stringify({ listening: (server.address() as AddressInfo).port }));
});

onShutdownSignal(async () => {
  // Stop accepting, let requests in progress finish (idle keep-alive sockets are closed), then the cache, then our client.
  await new Promise<void>((resolve, reject) => server.close((err) => (err ? reject(err) : resolve())));
  await service.close();
  console.log(JSON.stringify({ closed: true }));
});
