/**
 * The commands the cache needs, as the README's least-privilege ACL lists them. One list, used by the
 * security test and by the ACL run of the suite (`npm test` runs core and fail-safe tests again as a
 * user with exactly these commands).
 */
export const APP_COMMANDS = [
  '+evalsha', '+eval', '+script|load', '+subscribe', '+unsubscribe', '+ping', '+info',
  '+get', '+set', '+del', '+type', '+pttl', '+pexpire', '+strlen', '+exists',
  '+hset', '+hget', '+hexists', '+hincrby', '+time', '+publish',
  // Namespaces: clear() bumps a generation counter and counts acknowledgements (in scripts).
  '+incr',
  // ioredis' Cluster client reads the slot map (CLUSTER SLOTS) and checks readiness (CLUSTER INFO);
  // neither is needed on a standalone server.
  '+cluster|slots', '+cluster|info',
];
