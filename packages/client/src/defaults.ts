/**
 * Every default of the client's options in one table (docs/style.md "Defaults and contracts"), for a caller who
 * wants to see or derive from them (a deadline twice the default: `2 * CLIENT_DEFAULTS.deadlineMs`). The values
 * follow docs/design.md §3 (a buffer of 100 IDs, discarded after 1 s) and §7 (deadlines, failover).
 */
export const CLIENT_DEFAULTS = {
  /** IDs kept at hand. */
  bufferSize: 100,
  /** IDs not handed out within this long of arriving are discarded. */
  maxAgeMs: 1000,
  /** Largest `NextIds` count a refill asks for. */
  maxBatch: 4096,
  /** Deadline of one `nextId()` / `nextIds()` call. */
  deadlineMs: 2000,
  /** Budget of one attempt on one node before the next is tried. */
  attemptTimeoutMs: 500,
  /** A failed node is retried after this … */
  backoffInitialMs: 200,
  /** … doubling up to this. */
  backoffMaxMs: 2000,
  /** An idle HTTP/2 connection is sent a PING this often (0: never). */
  keepAliveIntervalMs: 10_000,
  /** A PING unanswered this long closes the connection. */
  keepAliveTimeoutMs: 5000,
  /** Hedged refills: the delay is this multiple of the node's p90 answer time … */
  hedgeLatencyMultiple: 3,
  /** … kept within these bounds: a loaded loopback answers within a few ms, a GC pause takes more. */
  hedgeMinMs: 15,
  hedgeMaxMs: 100,
} as const;
