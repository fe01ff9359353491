import { createRandom } from '@idgen/testing';

/**
 * The fault schedule: seeded, printed up front, reproducible with `--seed` (issue 7). Faults run one at a
 * time, each in its own window (begin, an effect that lasts `effectMs`, then time to recover), so every
 * outage can be charged to the fault that caused it.
 */

/**
 * Every kind of fault: issue 7's nine, then issue 12's five (a node cut off from etcd while its callers
 * still reach it, wall clocks stepped forward, alone and under a partition, and a slow etcd), then issue 21's
 * deployment-level two (a node given another region's code, one etcd follower down).
 * Issue 21's standalone three: a holder paused past the old lock's stale time while a second node waits on its
 * state file, both clocks stepped +10 s, and an empty state file (faults/standalone.ts).
 * Issue 21's two after `etcd-slow-long`: one spare code lent to two regions through two etcds (faults/double-loan.ts),
 * and the run's etcd restored from a snapshot with a new cluster token (faults/snapshot-restore.ts).
 * Issue 31's `disaster-recovery`: a restore between etcds on a deployment of the fault's own (faults/disaster-recovery.ts).
 */
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
  'partition-node',
  'clock-forward',
  'partition-clock-forward',
  'etcd-slow-short',
  'etcd-slow-long',
  'double-loan',
  'etcd-snapshot-restore',
  'wrong-region-node',
  'etcd-member-down',
  'standalone-pause',
  'standalone-step',
  'standalone-empty-state',
  'disaster-recovery',
] as const;

/**
 * The kinds that take a whole region away (issue 25, item 2): scheduled only in a run over regions (`--regions` ≥ 2,
 * src/regions.ts), never in the one-region default, whose rounds stay {@link FAULT_KINDS}.
 */
export const REGION_FAULT_KINDS = ['region-pool-down', 'region-etcd-down'] as const;

/**
 * The kind that needs a node in its own network namespace (issue 25, item 5): scheduled only with `--netns`
 * (src/netns/netns-node-link.ts), never in the default rounds.
 */
export const NETNS_FAULT_KINDS = ['netns-partition'] as const;

/**
 * Kinds outside the default rounds (issue 25, items 1 and 4): scheduled only when `--faults` names them, or with
 * `--previous-server` (a rolling upgrade and rollback across versions), so CI's {@link FULL_ROUND_SECONDS} stays.
 */
export const OPT_IN_FAULT_KINDS = ['rolling-restart'] as const;

/** One kind of fault. */
export type FaultKind =
  | (typeof FAULT_KINDS)[number]
  | (typeof REGION_FAULT_KINDS)[number]
  | (typeof NETNS_FAULT_KINDS)[number]
  | (typeof OPT_IN_FAULT_KINDS)[number];

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
  /** For a slow etcd: the delay added each way on every node's link to etcd, ms. */
  readonly latencyMs?: number;
}

/** Options of {@link createSchedule}. */
export interface ScheduleOptions {
  /** Length of the load phase in ms. */
  readonly durationMs: number;
  readonly seed: number;
  /** Lease TTL of the nodes in ms: the effects are sized against it. */
  readonly leaseTtlMs: number;
  /** Load before the first fault, so every node is serving (default 2000; the run starts the load once they are ready). */
  readonly warmupMs?: number;
  /**
   * Quiet time after the last fault's window (default 1000; the run itself keeps the load up 3 s after the last
   * fault has ended, whatever the schedule says).
   */
  readonly tailMs?: number;
  /** Only these kinds (default every kind), e.g. to aim a run at one fault (`--faults`). */
  readonly kinds?: readonly FaultKind[];
  /** Regions of the run (default 1): from 2 on, the default kinds include {@link REGION_FAULT_KINDS}. */
  readonly regions?: number;
  /** A node in its own network namespace (`--netns`): the default kinds include {@link NETNS_FAULT_KINDS}. */
  readonly netns?: boolean;
  /** The default kinds include {@link OPT_IN_FAULT_KINDS} (a run with `--previous-server`). */
  readonly optIn?: boolean;
}

/** A schedule and what it did not fit. */
export interface Schedule {
  readonly seed: number;
  readonly faults: readonly Fault[];
  /** Kinds that did not fit into the duration at all (empty from 60 s on). */
  readonly missing: readonly FaultKind[];
}

/** The schedule's PRNG (mulberry32, seeded), shared with the other seeded specs and tools. */
export { createRandom };

interface Shape {
  /** How long the fault lasts. */
  effectMs: number;
  /** Effect plus recovery: the fault's share of the timeline. */
  windowMs: number;
}

/**
 * Keep-alive interval and timeout of a node's lease for a TTL: the server sends keep-alives every TTL/3, at
 * most every 2 s, and packages/lease gives one keep-alive plus its `last-ms` refresh (two round trips to
 * etcd, four one-way trips) 3/4 of the interval. With the chaos run's 3 s TTL: every 1,000 ms, 750 ms.
 */
export function keepAliveOf(ttlMs: number): { intervalMs: number; timeoutMs: number } {
  const intervalMs = Math.min(2000, Math.floor(ttlMs / 3));
  return { intervalMs, timeoutMs: Math.floor((intervalMs * 3) / 4) };
}

/**
 * Effect and window per kind, against the lease TTL (3 s in the chaos run). A node needs about one TTL for
 * its lease to expire in etcd and one more to wait out the floor (docs/design.md §5), so a takeover needs ~2 TTL.
 * `offsetSeconds` is the clock offset of a forward jump (the window holds the fence that follows it).
 */
function shapeOf(kind: FaultKind, ttl: number, random: () => number, offsetSeconds: number): Shape {
  const jitter = (ms: number): number => Math.round(ms * (0.9 + 0.2 * random()));
  switch (kind) {
    case 'kill-node':
      // SIGKILL, restart later: the restarted process waits for a free slot (or the spare has it).
      return { effectMs: jitter(ttl * 0.8), windowMs: (ttl * 5) / 3 };
    case 'pause-node':
      // SIGSTOP past the TTL: the lease expires, the spare (restarted every 2 s by the supervisor, or
      // re-claiming in-process with a backoff up to 5 s) takes the slot after the floor wait, then SIGCONT.
      // `effectMs` is the longest stop; the run resumes the node a second after the takeover.
      return { effectMs: jitter(ttl * 2.8), windowMs: ttl * 3.5 };
    case 'etcd-leader-stop':
      return { effectMs: jitter(ttl * 0.8), windowMs: (ttl * 5) / 3 };
    case 'etcd-cluster-stop':
      // Recovery is slow: the old leases come back with etcd and must expire, then claims retry with
      // backoff and the floors are waited out (measured: 8-14 s with a 3 s TTL).
      return { effectMs: jitter(ttl), windowMs: (ttl * 11) / 3 };
    case 'etcd-pause-short':
      // Well inside the fence window (TTL − margin − one keep-alive interval): nothing should fence.
      return { effectMs: Math.round(ttl / 6), windowMs: (ttl * 2) / 3 };
    case 'etcd-pause-long':
      // Longer than the TTL: every node must fence before etcd can expire its lease.
      return { effectMs: jitter((ttl * 4) / 3), windowMs: (ttl * 8) / 3 };
    case 'clock-jump-small':
      return { effectMs: jitter(ttl * 0.4), windowMs: (ttl * 5) / 6 };
    case 'clock-jump-large':
      return { effectMs: jitter((ttl * 5) / 3), windowMs: (ttl * 13) / 6 };
    case 'sigterm-node':
      // SIGTERM mid-load (graceful release), a replacement starts as soon as it has exited.
      return { effectMs: 0, windowMs: ttl };
    case 'partition-node':
      // Its link to etcd cut (callers still reach it) until the spare holds its slot, like pause-node: the
      // node must fence on its own deadline while it is still up and asked for IDs. `effectMs` is the longest cut.
      return { effectMs: jitter(ttl * 2.8), windowMs: ttl * 3.5 };
    case 'clock-forward': {
      // Wall clock ahead for longer than a keep-alive interval (the holder must write last-ms from the clock
      // it mints from), then back to true time: the node fences on the rollback until true time passes its
      // last millisecond, `offsetSeconds` later.
      const effectMs = Math.max(jitter(ttl * 1.2), 2 * keepAliveOf(ttl).intervalMs + 500);
      return { effectMs, windowMs: effectMs + offsetSeconds * 1000 + 1500 };
    }
    case 'netns-partition':
      // The netns node cut off from etcd in the router namespace (silence: src/faults/netns-partition.ts) until the
      // spare holds its slot, like partition-node; the window also holds handing the netns node a slot first (a
      // holder SIGTERMed, when the netns node is the spare: ≤ one claim backoff, 5 s) and the wait, after the heal,
      // for its first answer from etcd (the kernel's retransmission backoff). `effectMs` is the longest cut.
      return { effectMs: jitter(ttl * 2.8), windowMs: ttl * 5.5 };
    case 'partition-clock-forward': {
      // The holder cut off from etcd, then its wall clock stepped ahead while its monotonic deadline still
      // runs (it believes it holds the slot); the spare takes the slot a TTL later. The holder's fault ends
      // once the takeover is seen and the successor's clock has passed everything the holder could have
      // minted (offset + TTL − margin after the cut), so a stale ID meets the successor's.
      const effectMs = Math.max(jitter(ttl * 2.8), offsetSeconds * 1000 + ttl + 500);
      return { effectMs, windowMs: effectMs + 2000 };
    }
    case 'etcd-slow-short':
      // Every node's link to etcd delayed, a keep-alive round (keep-alive + last-ms: 4 one-way trips) well
      // inside the keep-alive timeout, for more than one keep-alive interval: nothing should fence.
      // (A reconnect adds a round trip for the HTTP/2 settings: 6 one-way trips still fit.)
      return { effectMs: jitter(ttl), windowMs: ttl * 1.5 };
    case 'etcd-slow-long':
      // Delayed past the keep-alive timeout for longer than the TTL: keep-alives still arrive, late, so the
      // leases live on in etcd, but no node can prove its lease in time: every serving node must fence.
      return { effectMs: jitter((ttl * 4) / 3), windowMs: (ttl * 8) / 3 };
    case 'double-loan':
      // Two extra etcds (a registry and a second region's), four CLI runs: nothing of the run's fleet is touched;
      // the window is their time (a slow start delays the next fault).
      return { effectMs: 0, windowMs: 6000 };
    case 'etcd-snapshot-restore':
      // A holder stopped and the snapshot taken, a claim after it (~2 TTL), the cluster killed and restored (back
      // within ~1 TTL), every node fenced (≤ TTL + 1 s), then idgen region restored: each next holder waits out
      // its marker (TTL) after a backoff or a supervisor restart: ~7 TTL with the 3 s TTL.
      return { effectMs: ttl, windowMs: ttl * 7 };
    case 'disaster-recovery':
      // Two etcds and two nodes of its own, apart from the fleet (measured ~15-25 s with the 3 s TTL: two etcd starts, a
      // snapshot restore, region restored's hold, two node starts and 2 s of overlap): like wrong-region-node, its
      // window is only its start, and its handler's time delays the next fault (a late start: bounded at 1.5 × the
      // duration), so CI's one round still fits its duration.
      return { effectMs: 0, windowMs: 1000 };
    case 'wrong-region-node':
      // An extra node with another region's code, refused by the binding during its start (it exits 2 before it
      // claims a slot): nothing else is touched, so its window is just its start (a slow start delays the next fault).
      return { effectMs: 0, windowMs: 1000 };
    case 'etcd-member-down':
      // One follower stopped longer than TTL − fence margin (a node still talking to it would fence), then
      // started again: it rejoins in well under a second.
      return { effectMs: ttl - FENCE_MARGIN_MS + 400, windowMs: ttl - FENCE_MARGIN_MS + 1400 };
    // The three standalone faults run their own processes on their own state file (faults/standalone.ts), apart
    // from the fleet: their windows are their own start-ups (0.6-1.5 s each; the two of a pair start at once), the
    // effect, and the stops (measured: 9.7, 4.7 and 6.0-6.7 s). Not against the TTL: the standalone lock's times
    // are fixed.
    case 'standalone-pause':
      // The holder stopped past the old lock's stale time (5 s by mtime, refreshed every 2.5 s) + 1 s, then both
      // pulled 2 s after the resume.
      return { effectMs: 6000, windowMs: 6000 + 4000 };
    case 'standalone-step':
      // Both clocks +10 s while the holder holds and the waiter waits; both pulled 2 s after the step.
      return { effectMs: 2000, windowMs: 2000 + 3000 };
    case 'standalone-empty-state':
      // The first run mints 2.5 s and stops; two more starts on the truncated file (one refused, one --fresh-state
      // pulled 1 s if it serves).
      return { effectMs: 2500, windowMs: 2500 + 4000 };
    case 'region-pool-down':
      // Every node of one region killed past a TTL, then restarted: each newcomer waits out last-ms + TTL before it
      // serves (~2 TTL), while the region's callers mint from a fallback region.
      return { effectMs: jitter(ttl * 1.5), windowMs: ttl * 4.5 };
    case 'rolling-restart':
      // Every position in turn: SIGTERM (a clean release), a replacement, until it serves (or parks as the spare):
      // ~2-3 s a position with 4 nodes. Its handler takes as long as it takes; the next fault waits for it.
      return { effectMs: 0, windowMs: ttl * 4 };
    case 'region-etcd-down':
      // The region's etcd killed past the TTL (its nodes fence at their deadline), then started again: the old
      // leases come back and must expire, the claims retry and wait out the floors (like etcd-cluster-stop).
      return { effectMs: jitter(ttl * 1.5), windowMs: ttl * 5.5 };
  }
}

/** The nodes' fence margin (`@idgen/lease` DEFAULT_FENCE_MARGIN_MS): they fence TTL − margin after a keep-alive. */
export const FENCE_MARGIN_MS = 1000;

/**
 * Forward offsets alternate between rounds, +2 s and +8 s, so every round has both (one on a node alone,
 * one under a partition) and the next swaps them: +2 s is inside a TTL, +8 s well past it.
 */
export const FORWARD_OFFSETS_SECONDS = [2, 8] as const;

function forwardOffsetOf(kind: FaultKind, round: number): number | undefined {
  if (kind === 'clock-forward') return FORWARD_OFFSETS_SECONDS[round % 2];
  if (kind === 'partition-clock-forward') return FORWARD_OFFSETS_SECONDS[(round + 1) % 2];
  return undefined;
}

/**
 * One-way delay of a slow etcd, against the 750 ms keep-alive timeout of the 3 s TTL: below (20-80 ms: a
 * keep-alive round of 4 one-way trips takes 80-320 ms) or above (800-1,200 ms: one round trip is already
 * twice the timeout).
 */
function latencyOf(kind: FaultKind, random: () => number): number | undefined {
  if (kind === 'etcd-slow-short') return 20 + Math.floor(random() * 61);
  if (kind === 'etcd-slow-long') return 800 + Math.floor(random() * 401);
  return undefined;
}

/** Small jumps are waited out (≤ 10 ms, docs/design.md §4); large ones are seconds and fence. */
function clockOffsetOf(kind: FaultKind, random: () => number): number | undefined {
  if (kind === 'clock-jump-small') return -(5 + Math.floor(random() * 5)) / 1000; // −5 … −9 ms (whole ms: prints as −0.009, not −0.009000000000000001)
  if (kind === 'clock-jump-large') return -(2 + Math.floor(random() * 3)); // −2 … −4 s
  return undefined;
}

/**
 * Builds the schedule: rounds of every fault kind (or of `kinds`) in a seeded order, one after another,
 * each in its own window, repeated while the next one still fits before `durationMs − tailMs`. A run of
 * {@link FULL_ROUND_SECONDS} with the 3 s TTL holds one full round of every kind.
 */
export function createSchedule(options: ScheduleOptions): Schedule {
  const random = createRandom(options.seed);
  const kinds = options.kinds ?? [
    ...FAULT_KINDS,
    ...((options.regions ?? 1) >= 2 ? REGION_FAULT_KINDS : []),
    ...(options.netns === true ? NETNS_FAULT_KINDS : []),
    ...(options.optIn === true ? OPT_IN_FAULT_KINDS : []),
  ];
  if (kinds.length === 0) throw new RangeError('createSchedule: no fault kinds');
  const warmupMs = options.warmupMs ?? 2000;
  const tailMs = options.tailMs ?? 1000;
  const endMs = options.durationMs - tailMs;
  const faults: Fault[] = [];
  let at = warmupMs;
  let full = true;
  for (let round = 0; full; round++) {
    const order = [...kinds];
    for (let i = order.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [order[i], order[j]] = [order[j] as FaultKind, order[i] as FaultKind];
    }
    for (const kind of order) {
      const forward = forwardOffsetOf(kind, round);
      const shape = shapeOf(kind, options.leaseTtlMs, random, forward ?? 0);
      const windowMs = Math.round(Math.max(shape.windowMs, shape.effectMs + 1000));
      const pick = random();
      const clockOffsetSeconds = forward ?? clockOffsetOf(kind, random);
      const latencyMs = latencyOf(kind, random);
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
        ...(latencyMs !== undefined ? { latencyMs } : {}),
      });
      at += windowMs;
    }
  }
  const present = new Set(faults.map((f) => f.kind));
  return { seed: options.seed, faults, missing: kinds.filter((k) => !present.has(k)) };
}

/**
 * A `--duration` (s) whose schedule holds one full round of every kind, for every seed, with the 3 s TTL: what CI
 * runs. The first round has the +2 s `clock-forward` and the +8 s `partition-clock-forward`. With the 21 kinds a round
 * ends by 152.4 s (20,000 seeds tried; the schedule keeps a 1 s tail), so 154 s is the shortest; 155 s leaves 1 s.
 */
export const FULL_ROUND_SECONDS = 155;

/** Parses a `--faults` list (`kill-node,partition-clock-forward`); throws on an unknown kind. */
export function parseFaultKinds(list: string): FaultKind[] {
  const out: FaultKind[] = [];
  for (const raw of list.split(',')) {
    const k = raw.trim();
    if (k === '') continue;
    if (![...FAULT_KINDS, ...REGION_FAULT_KINDS, ...NETNS_FAULT_KINDS, ...OPT_IN_FAULT_KINDS].includes(k as FaultKind))
      throw new RangeError(
        `unknown fault kind ${JSON.stringify(k)} (kinds: ${FAULT_KINDS.join(', ')}; with --regions: ${REGION_FAULT_KINDS.join(', ')}; with --netns: ${NETNS_FAULT_KINDS.join(', ')}; opt-in: ${OPT_IN_FAULT_KINDS.join(', ')})`,
      );
    if (!out.includes(k as FaultKind)) out.push(k as FaultKind);
  }
  if (out.length === 0) throw new RangeError('--faults names no fault kind');
  return out;
}

/** One line per fault, for the printed schedule and the report. */
export function formatFault(f: Fault): string {
  const clock =
    f.clockOffsetSeconds !== undefined
      ? ` offset ${f.clockOffsetSeconds > 0 ? '+' : ''}${f.clockOffsetSeconds}s`
      : f.latencyMs !== undefined
        ? ` latency ${f.latencyMs}ms each way`
        : '';
  return `#${String(f.index).padStart(2)} t+${(f.atMs / 1000).toFixed(1).padStart(6)}s ${f.kind.padEnd(23)} effect ${(f.effectMs / 1000).toFixed(1)}s window ${(f.windowMs / 1000).toFixed(1)}s pick ${f.pick.toFixed(3)}${clock}`;
}
