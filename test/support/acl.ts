/**
 * The commands the cache needs, as the least-privilege ACL of docs/operations.md lists them ("## Least
 * privilege"). One list, used by the security test and by the ACL runs of the suite (`npm test` runs
 * both its passes as a user with exactly these commands); test/unit/acl-commands.test.ts checks that
 * that block says the same.
 */
export const APP_COMMANDS = [
  '+evalsha', '+eval', '+script|load', '+subscribe', '+unsubscribe', '+ping', '+info',
  '+get', '+getrange', '+set', '+del', '+type', '+pttl', '+pexpire', '+strlen', '+exists',
  '+hset', '+hget', '+hexists', '+hincrby', '+time', '+publish',
  // Namespaces: clear() bumps a generation counter and counts acknowledgements (in scripts).
  '+incr',
  // The cache's own clear() walks the keys (never KEYS).
  '+scan',
  // notes: 'sharded': the per-key wake channels (SPUBLISH from the scripts, SSUBSCRIBE while waiting).
  '+ssubscribe', '+sunsubscribe', '+spublish',
];

/**
 * With `local: { invalidation: 'tracking' }`, also (the docs' "with local.invalidation 'tracking', also:"
 * line): CLIENT TRACKING on the reads connection, redirected to the listener, whose CLIENT ID it needs;
 * and the channel `__redis__:invalidate` (the test users hold every channel). Granted to the test user in
 * every run, so the tracking tests run as a least-privilege user too.
 */
export const TRACKING_COMMANDS = ['+client|tracking', '+client|id'];

/**
 * What a Cluster client needs on top, per family (the docs' "with an … Cluster client, also:"
 * lines): ioredis reads the slot map (CLUSTER SLOTS) and checks readiness (CLUSTER INFO); node-redis
 * reads the slot map only. Granted only on the nodes of a test Cluster, each family's clients as a
 * user of its own (redis-server.ts).
 */
export const IOREDIS_CLUSTER_COMMANDS = ['+cluster|slots', '+cluster|info', '+pubsub|numsub', '+readonly'];
export const NODE_REDIS_CLUSTER_COMMANDS = ['+cluster|slots', '+pubsub|numsub'];
