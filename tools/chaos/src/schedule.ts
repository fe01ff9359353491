/**
 * The fault schedule: seeded, printed up front, reproducible with `--seed` (issue 7). Faults run one at a
 * time, each in its own window (begin, an effect that lasts `effectMs`, then time to recover), so every
 * outage can be charged to the fault that caused it.
 */

/** Every kind of fault issue 7 asks for. */
export const FAULT_KINDS = [
  'kill-node',
  'pause-node',
  'etcd-leader-stop',
  'etcd-cluster-stop',
  'etcd-pause-short',
  'etcd-pause-long',
  'clock-jump-small',
  'clock-jump-large',
  'sigterm-node',
] as const;

/** One kind of fault. */
export type FaultKind = (typeof FAULT_KINDS)[number];

/** One scheduled fault. Times are milliseconds from the start of the load (callers minting). */
export interface Fault {
  /** 1-based position in the schedule. */
  readonly index: number;
  readonly kind: FaultKind;
  /** When the fault begins. */
  readonly atMs: number;
  /** How long it lasts before it is undone (restart, SIGCONT, etcd back, clock back to +0). */
  readonly effectMs: number;
  /** The window charged to this fault: from `atMs` until the next fault (or the end). */
  readonly windowMs: number;
  /** Picks the target among the nodes serving at that moment (a fraction in [0, 1)). */
  readonly pick: number;
  /** For clock jumps: the offset written to the node's faketime file, in seconds (negative: back). */
  readonly clockOffsetSeconds?: number;
}

/** Options of {@link createSchedule}. */
export interface ScheduleOptions {
  /** Length of the load phase in ms. */
  readonly durationMs: number;
  readonly seed: number;
  /** Lease TTL of the nodes in ms: the effects are sized against it. */
  readonly leaseTtlMs: number;
  /** Load before the first fault, so every node is serving (default 3500). */
  readonly warmupMs?: number;
  /** Quiet time after the last fault's window (default 3000). */
  readonly tailMs?: number;
}

/** A schedule and what it did not fit. */
export interface Schedule {
  readonly seed: number;
  readonly faults: readonly Fault[];
  /** Kinds that did not fit into the duration at all (empty from 60 s on). */
  readonly missing: readonly FaultKind[];
}

/**
 * mulberry32: a small, well-mixed 32-bit PRNG. The same seed gives the same sequence on every machine,
 * which is all the schedule needs (not cryptographic).
 */
export function createRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Shape {
  /** How long the fault lasts. */
  effectMs: number;
  /** Effect plus recovery: the fault's share of the timeline. */
  windowMs: number;
}

/**
 * Effect and window per kind, against the lease TTL (3 s in the chaos run). A node needs about one TTL for
 * its lease to expire in etcd and one more to wait out the floor (DESIGN §5), so a takeover needs ~2 TTL.
 */
function shapeOf(kind: FaultKind, ttl: number, random: () => number): Shape {
  const jitter = (ms: number): number => Math.round(ms * (0.9 + 0.2 * random()));
  switch (kind) {
    case 'kill-node':
      // SIGKILL, restart later: the restarted process waits for a free slot (or the spare has it).
      return { effectMs: jitter(ttl * 0.8), windowMs: ttl * 5 / 3 };
    case 'pause-node':
      // SIGSTOP past the TTL: the lease expires, the spare (restarted every 2 s by the supervisor, or
      // re-claiming in-process with a backoff up to 5 s) takes the slot after the floor wait, then SIGCONT.
      // `effectMs` is the longest stop; the run resumes the node a second after the takeover.
      return { effectMs: jitter(ttl * 2.8), windowMs: ttl * 3.5 };
    case 'etcd-leader-stop':
      return { effectMs: jitter(ttl * 0.8), windowMs: ttl * 5 / 3 };
    case 'etcd-cluster-stop':
      // Recovery is slow: the old leases come back with etcd and must expire, then claims retry with
      // backoff and the floors are waited out (measured: 8-14 s with a 3 s TTL).
      return { effectMs: jitter(ttl), windowMs: ttl * 11 / 3 };
    case 'etcd-pause-short':
      // Well inside the fence window (TTL − margin − one keep-alive interval): nothing should fence.
      return { effectMs: Math.round(ttl / 6), windowMs: ttl * 2 / 3 };
    case 'etcd-pause-long':
      // Longer than the TTL: every node must fence before etcd can expire its lease.
      return { effectMs: jitter(ttl * 4 / 3), windowMs: ttl * 8 / 3 };
    case 'clock-jump-small':
      return { effectMs: jitter(ttl * 0.4), windowMs: ttl * 5 / 6 };
    case 'clock-jump-large':
      return { effectMs: jitter(ttl * 5 / 3), windowMs: ttl * 13 / 6 };
    case 'sigterm-node':
      // SIGTERM mid-load (graceful release), a replacement starts as soon as it has exited.
      return { effectMs: 0, windowMs: ttl };
  }
}

/** Small jumps are waited out (≤ 10 ms, DESIGN §4); large ones are seconds and fence. */
function clockOffsetOf(kind: FaultKind, random: () => number): number | undefined {
  if (kind === 'clock-jump-small') return -(0.005 + Math.floor(random() * 5) / 1000); // −5 … −9 ms
  if (kind === 'clock-jump-large') return -(2 + Math.floor(random() * 3)); // −2 … −4 s
  return undefined;
}

/**
 * Builds the schedule: rounds of every fault kind in a seeded order, one after another, each in its own
 * window, repeated while the next one still fits before `durationMs − tailMs`. A 60 s run with the 3 s
 * TTL holds exactly one full round.
 */
export function createSchedule(options: ScheduleOptions): Schedule {
  const random = createRandom(options.seed);
  const warmupMs = options.warmupMs ?? 3500;
  const tailMs = options.tailMs ?? 3000;
  const endMs = options.durationMs - tailMs;
  const faults: Fault[] = [];
  let at = warmupMs;
  let full = true;
  while (full) {
    const order = [...FAULT_KINDS];
    for (let i = order.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [order[i], order[j]] = [order[j] as FaultKind, order[i] as FaultKind];
    }
    for (const kind of order) {
      const shape = shapeOf(kind, options.leaseTtlMs, random);
      const windowMs = Math.round(Math.max(shape.windowMs, shape.effectMs + 1000));
      const pick = random();
      const clockOffsetSeconds = clockOffsetOf(kind, random);
      if (at + windowMs > endMs) {
        full = false;
        break;
      }
      faults.push({
        index: faults.length + 1,
        kind,
        atMs: at,
        effectMs: shape.effectMs,
        windowMs,
        pick,
        ...(clockOffsetSeconds !== undefined ? { clockOffsetSeconds } : {}),
      });
      at += windowMs;
    }
  }
  const present = new Set(faults.map((f) => f.kind));
  return { seed: options.seed, faults, missing: FAULT_KINDS.filter((k) => !present.has(k)) };
}

/** One line per fault, for the printed schedule and the report. */
export function formatFault(f: Fault): string {
  const clock = f.clockOffsetSeconds !== undefined ? ` offset ${f.clockOffsetSeconds}s` : '';
  return `#${String(f.index).padStart(2)} t+${(f.atMs / 1000).toFixed(1).padStart(6)}s ${f.kind.padEnd(18)} effect ${(f.effectMs / 1000).toFixed(1)}s window ${(f.windowMs / 1000).toFixed(1)}s pick ${f.pick.toFixed(3)}${clock}`;
}
