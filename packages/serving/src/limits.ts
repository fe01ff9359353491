/** An integer limit of the serving layer: its default, its bounds, and what it does. */
export interface ServingLimit {
  readonly default: number;
  readonly min: number;
  readonly max: number;
  /** What the value counts, as a flag's argument names it: `ms` or `n`. */
  readonly unit: 'ms' | 'n';
  readonly description: string;
}

/**
 * The serving layer's limits, each with its default and bounds: one table for {@link createServingPort} and
 * {@link createIdgenNode} (which fill what is not given from it) and for idgen-server, whose flags are these
 * keys in kebab case (`maxBodyBytes` → `--max-body-bytes`: docs/design.md §6).
 */
export const SERVING_LIMITS = {
  // 65536 is the clock guard's largest block request (16 ms of a 12-bit sequence).
  maxCount: { default: 4096, min: 1, max: 65_536, unit: 'n', description: 'largest count NextIds accepts' },
  requestTimeoutMs: {
    default: 5000,
    min: 100,
    max: 600_000,
    unit: 'ms',
    description: 'longest a request may take, body included, before it is cancelled',
  },
  shutdownTimeoutMs: {
    default: 5000,
    min: 100,
    max: 600_000,
    unit: 'ms',
    description: 'longest a graceful shutdown waits for in-flight requests and the lease release',
  },
  maxBodyBytes: {
    default: 65_536,
    min: 1024,
    max: 16 * 1024 * 1024,
    unit: 'n',
    description: 'largest request body accepted',
  },
  maxConnections: {
    default: 4096,
    min: 1,
    max: 1_000_000,
    unit: 'n',
    description:
      'most connections open at once on the serving port; lowered at start to the open-files limit less 128 (for etcd and chronyc)',
  },
  prefaceTimeoutMs: {
    default: 4000,
    min: 100,
    max: 600_000,
    unit: 'ms',
    description: 'an HTTP/2 connection that has not sent its preface and SETTINGS by then is closed',
  },
  idleTimeoutMs: {
    default: 30_000,
    min: 1000,
    max: 3_600_000,
    unit: 'ms',
    description: 'a connection with no request for this long is closed (HTTP/2: GOAWAY; HTTP/1.1: closed)',
  },
  maxStreamsInFlight: {
    default: 2_048,
    min: 128,
    max: 1_000_000,
    unit: 'n',
    description:
      'most requests in flight on the serving port (HTTP/2 streams, answered or waiting for the window to send it); past it a connection with more than 8 of its own gets REFUSED_STREAM',
  },
  stalledWriteTimeoutMs: {
    default: 10_000,
    min: 1000,
    max: 600_000,
    unit: 'ms',
    description: 'a connection whose peer takes none of its answers for this long is cut (a client that never reads)',
  },
} as const satisfies Record<string, ServingLimit>;

/** Every limit of {@link SERVING_LIMITS} with a value. */
export type ServingLimits = { readonly [K in keyof typeof SERVING_LIMITS]: number };

/**
 * The limits `given` sets, the rest at their defaults; throws a `RangeError` naming every value outside its
 * bounds (or not an integer). Other keys of `given` are ignored.
 */
export function resolveServingLimits(given: Partial<ServingLimits>): ServingLimits {
  const problems: string[] = [];
  const limits: Record<string, number> = {};
  for (const [key, limit] of Object.entries(SERVING_LIMITS) as [keyof ServingLimits, ServingLimit][]) {
    const value = given[key] ?? limit.default;
    if (!Number.isSafeInteger(value) || value < limit.min || value > limit.max)
      problems.push(`${key} must be an integer from ${limit.min} to ${limit.max}, got ${String(value)}`);
    limits[key] = value;
  }
  if (problems.length > 0) throw new RangeError(`serving limits: ${problems.join('; ')}`);
  return limits as ServingLimits;
}
