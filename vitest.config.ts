import { fileURLToPath } from 'node:url';
import { configDefaults, defineConfig } from 'vitest/config';

/**
 * `SG_TEST_CLIENT=node-redis` (the third pass of `npm test`) reruns only the files whose caches are
 * built on the client family under test (test/support/clients.ts): core, edges, fail-safe, fault,
 * coherence, stale-window, refresh-ahead, telemetry, review behaviours, batches, getOrComputeMany,
 * namespaces, loader control, grant releases, the degraded memo, the ACL and TLS tests
 * (security), the multi-process workers (test/support/worker.ts builds its cache with
 * familyClient), and the fault files of issue #13: release-retry, redlock-giveup, replica-ack and
 * cluster-breaker (a node-redis createCluster() there), shard-subscriber (the port's sharded pub/sub
 * on both majors of the family, standalone and Cluster), and cluster-failover (a node-redis 6
 * createCluster() here: ~75 s, alongside the campaign, which bounds this pass). The rest test the
 * library's own logic above the port (fence, model), pick their families themselves (client-versions,
 * cluster, redlock), or are on ioredis only (cluster-campaign), and already ran in the first two passes.
 * The fault campaign's workers follow SG_TEST_CLIENT too: campaign.test.ts runs here on node-redis
 * (as the ACL user). The second pass (ioredis as the ACL user) leaves it out: it is the suite's
 * longest file (~5 min on 2 cores), its ioredis run is the first pass, and its runs as the ACL user
 * are this pass's; the commands a fault path sends are the library's scripts whatever the family,
 * and the ioredis-specific ones (ready check, Cluster) are covered by the second pass's fault files.
 * It leaves out the Cluster campaign too (~150 s): its failover rounds send nothing that
 * cluster.test.ts and cluster-failover.test.ts (replicaAck's WAIT, release retries, a real failover)
 * do not send as the ACL user in this same pass; what it adds is schedules of faults, not commands.
 */
const FOLLOW_CLIENT_FAMILY = [
  'core', 'edges', 'failsafe', 'redis-faults', 'network-faults', 'coherence', 'stale-window',
  'refresh-ahead', 'telemetry', 'review', 'review-final', 'review-refresh',
  'batch-reads', 'many', 'namespace', 'clear', 'loader-control', 'grant', 'degraded-memo',
  'security', 'multiprocess', 'release-retry', 'redlock-giveup', 'replica-ack', 'cluster-breaker',
  'cluster-failover', 'campaign', 'sharded-notes', 'shard-subscriber',
].map((name) => `test/integration/${name}.test.ts`);
const ALL = ['test/**/*.test.ts'];
const otherFamily = process.env.SG_TEST_CLIENT !== undefined && process.env.SG_TEST_CLIENT !== 'ioredis';
/** The second pass (ioredis, ACL user): the campaign's ACL run is the node-redis pass's; the Cluster campaign's commands are covered (see above). */
const IOREDIS_ACL_PASS_SKIPS = !otherFamily && process.env.SG_TEST_ACL === '1' ? ['test/integration/campaign.test.ts', 'test/integration/cluster-campaign.test.ts'] : [];

export default defineConfig({
  // The examples import the package by its name, as a user's code does; in this repository that name
  // is the source (tsconfig.json "paths" says the same to tsc and to tsx, which runs the web examples).
  resolve: { alias: { 'stampede-guard': fileURLToPath(new URL('./src/index.ts', import.meta.url)) } },
  test: {
    include: otherFamily ? FOLLOW_CLIENT_FAMILY : ALL,
    exclude: [...configDefaults.exclude, ...IOREDIS_ACL_PASS_SKIPS],
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
