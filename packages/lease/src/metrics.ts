/** Metric names of `@idgen/lease` (docs/style.md "Metrics": one file, `as const`, dot-namespaced). */
export const LeaseMetrics = {
  /** Counter: lease churn, attribute `event`. */
  churn: 'idgen.lease.churn',
  /** Counter: keep-alives (or their `last-ms` refresh) that failed or timed out. */
  keepAliveFailures: 'idgen.lease.keepalive.failures',
  /** Observable gauge: seconds since the last acknowledged keep-alive. */
  keepAliveAge: 'idgen.lease.keepalive.age',
} as const;

/** Attribute keys and values (low cardinality). */
export const LeaseAttributes = {
  event: 'event',
  acquired: 'acquired',
  lost: 'lost',
  released: 'released',
} as const;

/** The `event` values of {@link LeaseMetrics.churn}. */
export type ChurnEvent =
  typeof LeaseAttributes.acquired | typeof LeaseAttributes.lost | typeof LeaseAttributes.released;
