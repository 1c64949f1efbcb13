import { defineConfig } from 'vitest/config';

/**
 * `SG_TEST_CLIENT=node-redis` (the third pass of `npm test`) reruns only the files whose caches are
 * built on the client family under test (test/support/clients.ts): core, edges, fail-safe, fault,
 * coherence, stale-window, refresh-ahead, telemetry, review behaviours, batches, getOrComputeMany,
 * namespaces, loader control, grant releases, the degraded memo, the ACL and TLS tests
 * (security), the multi-process workers (test/support/worker.ts builds its cache with
 * familyClient), and the fault files of issue #13: release-retry, redlock-giveup, replica-ack and
 * cluster-breaker (a node-redis createCluster() there). The rest test the library's own logic above
 * the port (fence, model), pick their families themselves (client-versions, cluster, redlock), or
 * are on ioredis only (cluster-failover), and already ran in the first two passes.
 * The fault campaign's workers follow SG_TEST_CLIENT too, but campaign.test.ts is not here yet: on
 * node-redis one of three runs failed (issue #9: a worker's sockets left open after close(), and
 * superseded L1 reads in the boot-down campaign); SG_TEST_CAMPAIGN=1 adds it to this pass by hand.
 */
const FOLLOW_CLIENT_FAMILY = [
  'core', 'edges', 'failsafe', 'redis-faults', 'network-faults', 'coherence', 'stale-window',
  'refresh-ahead', 'telemetry', 'review', 'review-final', 'review-refresh',
  'batch-reads', 'many', 'namespace', 'clear', 'loader-control', 'grant', 'degraded-memo',
  'security', 'multiprocess', 'release-retry', 'redlock-giveup', 'replica-ack', 'cluster-breaker',
  ...(process.env.SG_TEST_CAMPAIGN === '1' ? ['campaign'] : []),
].map((name) => `test/integration/${name}.test.ts`);
const ALL = ['test/**/*.test.ts'];
const otherFamily = process.env.SG_TEST_CLIENT !== undefined && process.env.SG_TEST_CLIENT !== 'ioredis';

export default defineConfig({
  test: {
    include: otherFamily ? FOLLOW_CLIENT_FAMILY : ALL,
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
