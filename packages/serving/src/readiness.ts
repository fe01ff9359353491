import type { FenceReason, GuardStatus, TimeSourceProblem, TimeSourceReading } from '@idgen/clock-guard';
import type { LeaseSnapshot, LeaseState } from '@idgen/lease';

/** Where the process is in its life, as the server (not the guard) knows it. */
export type Phase = 'starting' | 'running' | 'draining';

/**
 * Why a node may or may not mint now: one answer for `/readyz`'s body, the
 * `grpc.health.v1.Health/Check` response headers, GetStatus (`readiness_*`, fields 19-23) and the
 * `readiness:` log lines, so an operator reads the cause where they look first instead of in the log.
 * - `ready`: may mint;
 * - `starting`: booting, nothing wrong found yet;
 * - `time-source-unavailable`: chrony is missing, failing, unsynchronised or too far off (`cause` says which);
 * - `etcd-unreachable`: the lease's last etcd request (connect, layout check, grant, claim) failed; it retries;
 * - `waiting-for-slot`: every slot this node may claim is held: a spare (README: it waits, not ready);
 * - `waiting-for-floor`: holds a slot, waits out the previous holder's floor (`waitMs` left);
 * - `fenced`: refuses to mint after having held a slot (`cause` is the guard's fence reason);
 * - `draining`: shutting down.
 */
export type ReadinessReason =
  | 'ready'
  | 'starting'
  | 'time-source-unavailable'
  | 'etcd-unreachable'
  | 'waiting-for-slot'
  | 'waiting-for-floor'
  | 'fenced'
  | 'draining';

/** Every {@link ReadinessReason}, in the order of the wire enum (`ReadinessReason` in idgen.proto, from 1). */
export const READINESS_REASONS: readonly ReadinessReason[] = [
  'ready',
  'starting',
  'time-source-unavailable',
  'etcd-unreachable',
  'waiting-for-slot',
  'waiting-for-floor',
  'fenced',
  'draining',
];

/** The node's readiness and why. */
export interface Readiness {
  readonly ready: boolean;
  readonly reason: ReadinessReason;
  /** Which way: the time source's problem (`time-source-unavailable`) or the fence reason (`fenced`). */
  readonly cause?: TimeSourceProblem | FenceReason;
  /** In words: chronyc's error, etcd's error, who holds the slots, the fence message. */
  readonly detail: string;
  /** `waiting-for-floor`: milliseconds until the clock passes the floor. */
  readonly waitMs?: number;
}

/** Trouble the lease reported while (re)claiming, remembered across its retry attempts. */
export interface LeaseTrouble {
  readonly reason: 'etcd-unreachable' | 'waiting-for-slot';
  readonly detail: string;
}

/** Everything readiness is judged from; plain values so the judgement is a pure function. */
export interface ReadinessInputs {
  readonly phase: Phase;
  /** `guard.canMint()`. */
  readonly canMint: boolean;
  readonly guard: Pick<GuardStatus, 'reason' | 'message' | 'floorMs'>;
  readonly timeSourceMode: 'chrony' | 'none';
  readonly timeSource: Pick<TimeSourceReading, 'healthy' | 'problem' | 'message'>;
  readonly lease: Pick<LeaseSnapshot, 'state' | 'message' | 'floorMs'>;
  /** The lease's last trouble while (re)claiming ({@link createLeaseTroubleTracker}). */
  readonly leaseTrouble: LeaseTrouble | undefined;
  /** Wall-clock Unix milliseconds now. */
  readonly nowMs: number;
}

/**
 * Judges readiness, most specific cause first: draining; ready; the time source (boot checks it first and
 * it fences a running node); the floor wait; etcd or slot trouble while (re)claiming; a lease or guard
 * fence; else starting.
 */
export function judgeReadiness(i: ReadinessInputs): Readiness {
  if (i.phase === 'draining' || i.lease.state === 'released') {
    return { ready: false, reason: 'draining', detail: i.guard.message ?? 'shutting down' };
  }
  if (i.phase === 'running' && i.canMint) return { ready: true, reason: 'ready', detail: i.lease.message };
  if (i.timeSourceMode === 'chrony' && !i.timeSource.healthy && i.timeSource.problem !== 'not-read') {
    return {
      ready: false,
      reason: 'time-source-unavailable',
      cause: i.timeSource.problem,
      detail: i.timeSource.message,
    };
  }
  if (i.lease.state === 'waiting-for-floor') {
    const floorMs = i.lease.floorMs ?? i.guard.floorMs;
    return {
      ready: false,
      reason: 'waiting-for-floor',
      detail: i.lease.message,
      waitMs: Math.max(0, floorMs - i.nowMs + 1),
    };
  }
  // The lease is alive but the guard's floor (the slot's, or this process's own last millisecond after a
  // clock step back) is still ahead: the guard says so only once a mint was tried, so compare here.
  if (
    i.lease.state === 'alive' &&
    (i.guard.reason === 'waiting-for-floor' || (i.guard.reason === undefined && i.guard.floorMs >= i.nowMs))
  ) {
    const detail =
      i.guard.message ??
      `the wall clock has not passed the floor ${new Date(i.guard.floorMs).toISOString()}, a millisecond this slot may have used`;
    return { ready: false, reason: 'waiting-for-floor', detail, waitMs: Math.max(0, i.guard.floorMs - i.nowMs + 1) };
  }
  if (i.leaseTrouble !== undefined && RECLAIMING.has(i.lease.state)) {
    return { ready: false, reason: i.leaseTrouble.reason, detail: i.leaseTrouble.detail };
  }
  if (i.lease.state === 'fenced') {
    return { ready: false, reason: 'fenced', cause: i.guard.reason ?? 'lease', detail: i.lease.message };
  }
  if (i.phase === 'running' && i.guard.reason !== undefined) {
    return { ready: false, reason: 'fenced', cause: i.guard.reason, detail: i.guard.message ?? i.lease.message };
  }
  if (i.timeSourceMode === 'chrony' && i.timeSource.problem === 'not-read') {
    return { ready: false, reason: 'starting', detail: 'reading the time source' };
  }
  return { ready: false, reason: 'starting', detail: i.lease.message };
}

const RECLAIMING: ReadonlySet<LeaseState> = new Set<LeaseState>(['idle', 'claiming', 'fenced']);

/**
 * What a lease message says went wrong. `@idgen/lease` reports a failed etcd step as
 * `<step> failed (<error>); retrying in <n> ms` and a full range with `NoFreeWorkerError`'s message,
 * `no free worker slot: …` (its own spec and readiness.spec.ts pin both).
 */
export function classifyLeaseMessage(message: string): LeaseTrouble | undefined {
  if (/\bno free worker slot\b/.test(message)) return { reason: 'waiting-for-slot', detail: message };
  if (/ failed \(.*\); retrying in \d+ ms$/s.test(message)) {
    return { reason: 'etcd-unreachable', detail: message };
  }
  return undefined;
}

/** Remembers the lease's last trouble while it (re)claims. */
export interface LeaseTroubleTracker {
  current(): LeaseTrouble | undefined;
  stop(): void;
}

/**
 * Follows the lease's state events: a failure message is kept through the retry attempt that follows it
 * (whose message is only `claiming a worker slot (attempt n)`), so readiness does not flicker between
 * `etcd-unreachable` and `starting`; a slot held (`waiting-for-floor`, `alive`) clears it.
 */
export function createLeaseTroubleTracker(lease: {
  on(event: 'state', fn: (s: LeaseSnapshot) => void): () => void;
}): LeaseTroubleTracker {
  let trouble: LeaseTrouble | undefined;
  const unsubscribe = lease.on('state', (s) => {
    if (s.state === 'waiting-for-floor' || s.state === 'alive' || s.state === 'released') {
      trouble = undefined;
      return;
    }
    trouble = classifyLeaseMessage(s.message) ?? trouble;
  });
  return { current: () => trouble, stop: unsubscribe };
}

/** The readiness as one line of words (`/readyz` consumers that only log, the `readiness:` log lines). */
export function describeReadiness(r: Readiness): string {
  const cause = r.cause === undefined ? '' : ` (${r.cause})`;
  const wait = r.waitMs === undefined ? '' : `, ${r.waitMs} ms left`;
  return `${r.reason}${cause}${wait}: ${r.detail}`;
}

/**
 * Calls `onChange` with the readiness whenever its reason or cause changes (not its detail: a retry's
 * delay changes every attempt), checking every `intervalMs` and whenever `poke` is called (a lease event).
 * For the `readiness:` log lines; off the request path.
 */
export function watchReadiness(
  compute: () => Readiness,
  onChange: (r: Readiness, previous: Readiness | undefined) => void,
  intervalMs = 1000,
): { poke(): void; stop(): void } {
  let last: Readiness | undefined;
  const poke = (): void => {
    const r = compute();
    if (last !== undefined && last.reason === r.reason && last.cause === r.cause) return;
    const previous = last;
    last = r;
    onChange(r, previous);
  };
  const timer = setInterval(poke, intervalMs);
  timer.unref();
  poke();
  return { poke, stop: () => clearInterval(timer) };
}
