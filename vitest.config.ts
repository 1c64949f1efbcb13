import { fileURLToPath } from 'node:url';
import { configDefaults, defineConfig } from 'vitest/config';

/**
 * `SG_TEST_CLIENT=node-redis` (the second pass of `npm test`) reruns only the files whose caches are
 * built on the client family under test (test/support/clients.ts): core, edges, fail-safe, fault,
 * coherence, stale-window, refresh-ahead, telemetry, review behaviours, batches, getOrComputeMany,
 * namespaces, loader control, grant releases, the grant's read of the entry (acquire-read), the degraded memo, the ACL and TLS tests
 * (security), the multi-process workers (test/support/worker.ts builds its cache with
 * familyClient), and the fault files of issue #13: release-retry, redlock-giveup, replica-ack and
 * cluster-breaker (a node-redis createCluster() there), tags (deleteByTag, its forked worker too), shard-subscriber (the port's sharded pub/sub
 * on both majors of the family, standalone and Cluster), and cluster-failover (a node-redis 6
 * createCluster() here: ~75 s, alongside the campaign, which bounds this pass). The rest test the
 * library's own logic above the port (fence, model), pick their families themselves (client-versions,
 * cluster, redlock), or are on ioredis only (cluster-campaign), and ran in the first pass.
 * The fault campaign's workers follow SG_TEST_CLIENT too: campaign.test.ts runs in both passes.
 * There is no pass as the default user: the first pass's ACL user holds every command the library
 * sends (a command missing from the README's least-privilege line fails there with NOPERM), and the
 * library sends the same commands whoever it authenticates as; the tests' own fault injection uses
 * the admin connection in both passes.
 */
const FOLLOW_CLIENT_FAMILY = [
  'core', 'edges', 'failsafe', 'redis-faults', 'network-faults', 'coherence', 'stale-window',
  'refresh-ahead', 'telemetry', 'review', 'review-final', 'review-refresh',
  'batch-reads', 'many', 'namespace', 'clear', 'loader-control', 'grant', 'acquire-read', 'degraded-memo',
  'security', 'multiprocess', 'release-retry', 'redlock-giveup', 'replica-ack', 'cluster-breaker',
  'cluster-failover', 'campaign', 'sharded-notes', 'shard-subscriber', 'lifecycle', 'namespace-fleet', 'hung-node', 'fresh-read', 'fresh-read-edges', 'tags',
].map((name) => `test/integration/${name}.test.ts`);
const ALL = ['test/**/*.test.ts'];
const otherFamily = process.env.SG_TEST_CLIENT !== undefined && process.env.SG_TEST_CLIENT !== 'ioredis';

export default defineConfig({
  // The examples import the package by its name, as a user's code does; in this repository that name
  // is the source (tsconfig.json "paths" says the same to tsc and to tsx, which runs the web examples).
  resolve: { alias: { 'stampede-guard': fileURLToPath(new URL('./src/index.ts', import.meta.url)) } },
  test: {
    include: otherFamily ? FOLLOW_CLIENT_FAMILY : ALL,
    exclude: configDefaults.exclude,
    pool: 'forks',
    // Integration files start their own redis-server processes and child workers; two files at a time fit 2 cores.
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // The suite itself must not leave unhandled rejections behind; vitest fails the run if it sees one.
    dangerouslyIgnoreUnhandledErrors: false,
    // test/types/*.test.ts are compile-time assertions (expectTypeOf, @ts-expect-error): vitest also
    // type-checks them with tsc, so a wrong type fails `npm test`, not only `npm run typecheck`.
    typecheck: { enabled: !otherFamily, include: ['test/types/**/*.test.ts'], tsconfig: './tsconfig.json' },
  },
});
