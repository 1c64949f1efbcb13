/**
 * `npm run bench:notes [-- --runs R]`: how many pub/sub note deliveries one Redis pushes per second
 * (issue 12 §2: every process receives every note of every key, so a fleet of P processes costs
 * Redis P deliveries per note). S subscribers (raw sockets that only count bytes: the receivers must
 * not be the bottleneck) on the cache's channel; `redis-benchmark` publishes a note of the cache's
 * size (the kind, the key and the 8-character sender id), pipelined, from 4 connections; medians of R runs.
 */
import { spawnSync } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { parseArgs } from 'node:util';
import { provideRedis } from '../test/support/redis-server.js';
import { median } from './lib/scenarios.js';

const { values: args } = parseArgs({ options: { runs: { type: 'string' }, subscribers: { type: 'string' } } });
const RUNS = args.runs === undefined ? 3 : Number(args.runs);
const SUBSCRIBERS = (args.subscribers ?? '1,8,32,128').split(',').map(Number);
const CHANNEL = 'sg:events';
/** A note as the cache sends it: kind, sender id (6 random bytes, base64url), key (wait.ts formatNote); "user:1234" stands for a typical key. */
const NOTE = 'w|Zk3vQ9xT|user:1234';
const PUBLISHES = 200_000;

const store = await provideRedis();
const { hostname, port } = new URL(store.url);
const subscribe = (): Promise<{ socket: Socket; bytes: () => number }> =>
  new Promise((resolve, reject) => {
    let received = 0;
    const socket = connect(Number(port), hostname, () => socket.write(`SUBSCRIBE ${CHANNEL}\r\n`));
    socket.on('error', reject);
    socket.once('data', (d) => {
      received += d.length;
      socket.on('data', (more) => (received += more.length));
      resolve({ socket, bytes: () => received });
    });
  });
// One delivered message on the wire: *3 $7 message $<channel> $<note>.
const delivered = `*3\r\n$7\r\nmessage\r\n$${CHANNEL.length}\r\n${CHANNEL}\r\n$${NOTE.length}\r\n${NOTE}\r\n`.length;

try {
  const rows: string[] = [];
  for (const s of SUBSCRIBERS) {
    const rates: number[] = [];
    for (let r = 0; r < RUNS; r++) {
      const subs = await Promise.all(Array.from({ length: s }, subscribe));
      const before = subs.map((x) => x.bytes());
      const t0 = performance.now();
      const out = spawnSync('redis-benchmark', ['-h', hostname, '-p', port, '-c', '4', '-P', '16', '-n', String(PUBLISHES), '-q', 'PUBLISH', CHANNEL, NOTE], { encoding: 'utf8' });
      const publishedIn = (performance.now() - t0) / 1000;
      // Wait until every subscriber has what was published (the deliveries are the measure).
      const want = PUBLISHES * delivered;
      for (let i = 0; i < 400 && subs.some((x, j) => x.bytes() - (before[j] as number) < want); i++) await new Promise((res) => setTimeout(res, 25));
      const elapsed = (performance.now() - t0) / 1000;
      const got = subs.reduce((n, x, j) => n + (x.bytes() - (before[j] as number)), 0) / delivered;
      rates.push(got / elapsed);
      console.error(`notes · ${s} subscribers · run ${r + 1}/${RUNS}: ${Math.round(got)} deliveries in ${elapsed.toFixed(2)} s (publishing took ${publishedIn.toFixed(2)} s; redis-benchmark: ${out.stdout.trim().split('\n').pop() ?? ''})`);
      for (const x of subs) x.socket.destroy();
    }
    rows.push(`| ${s} | ${Math.round(median(rates)).toLocaleString('en-US')} | ${Math.round(median(rates) / s).toLocaleString('en-US')} |`);
  }
  console.log(`\nnpm run bench:notes -- ${process.argv.slice(2).join(' ')}`.trim());
  console.log(`\n**Note deliveries one Redis pushes** (${PUBLISHES.toLocaleString('en-US')} notes of ${NOTE.length} bytes published pipelined from 4 connections; S raw subscribers; medians of ${RUNS} runs):\n`);
  console.log('| subscribers S | deliveries/s | notes/s (= deliveries ÷ S) |');
  console.log('|---:|---:|---:|');
  for (const r of rows) console.log(r);
} finally {
  await store.stop();
}
