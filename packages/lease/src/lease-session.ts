import type { Etcd3, Lease, Watcher } from 'etcd3';
import type { LeaseConfig } from './config.js';
import { deadlineIn, errorText, withTimeout } from './etcd-client.js';
import type { EtcdHistory } from './etcd-history.js';
import type { LastMsRecord } from './records.js';
import type { SpareGuard } from './slot-transactions.js';
import type { Tenure } from './tenure-ledger.js';
import type { LeaseTarget } from './types.js';

// The leaf of the etcd lease's parts (docs/style.md "Layers", no import circles): the session, its phases and what the
// collaborators (boot checks, slot claims, slot records, the session's keeper, registration) ask of the lifecycle.

/** The slot a session won, fixed from its claim: where it is, the floor it mints above, its spare-code guard. */
export interface SessionSlot {
  readonly region: number;
  readonly worker: number;
  /** Never mint at or below it (docs/design.md §5): the highest of the records' floor, the distrust floor and the start hold. */
  readonly floorMs: number;
  /** A slot under a borrowed spare code: its spare record as read when `lent`, compared by every refresh (§7). */
  readonly spare?: SpareGuard;
}

/**
 * Where a session is. `claiming`: the lease granted, no slot won yet. `holding`: a slot won, `last-ms` written and
 * keep-alives running while the floor is waited for; nothing is minted. `assigned`: the target mints on the slot.
 * `ended`: lost, given back or released, for good; the slot it held (if any) is kept for its final records.
 */
export type SessionPhase =
  | { readonly kind: 'claiming' }
  | { readonly kind: 'holding'; readonly slot: SessionSlot }
  | { readonly kind: 'assigned'; readonly slot: SessionSlot }
  | { readonly kind: 'ended'; readonly slot: SessionSlot | undefined };

/** One granted etcd lease and the slot claimed on it. A loss ends the session; a re-claim starts a new one. */
export interface Session {
  readonly lease: Lease;
  readonly leaseId: string;
  /** Ends the keep-alive loop and any floor wait of this session. */
  readonly abort: AbortController;
  phase: SessionPhase;
  /** Monotonic fence deadline: (send time of the last acknowledged keep-alive, or the grant) + TTL − margin. */
  deadline: number;
  /**
   * The mod revision of `last-ms` as this session last wrote it (or, before its first write, as the claim read
   * it; "0" when absent): every write compares it, so a write given up on cannot land after a newer one.
   */
  lastMsRevision: string;
  /** The highest `last-ms` etcd acknowledged for this session (-1 before the first): `L` of the wall ceiling. */
  ackedLastMs: number;
  /** The highest `last-ms` this session ever sent: a record it finds above this is not one of its own. */
  sentLastMs: number;
  /** Monotonic time of the last acknowledgement (or the grant), for the keep-alive age. */
  lastAckMono: number;
  fenceTimer: NodeJS.Timeout | undefined;
  /** The keep-alive loop, once started: a release waits for it so its last refresh cannot land after the final record. */
  loop?: Promise<void>;
  /** The watch on this session's own worker key (docs/design.md §5, root of trust). */
  watcher?: Watcher;
  /** This session's tenure as recorded at its claim (tenure-ledger.ts), closed at its end. */
  tenure?: Tenure;
  /** The tenure record's mod revision as this session's write left it: found at another, someone else wrote it. */
  tenureRevision?: string;
  /**
   * The history's epoch ({@link EtcdHistory.epoch}) when the session began: a distrust verdict after it covers the
   * claim's answer too (it may come from the etcd the verdict was about), so the claim is refused.
   */
  readonly historyEpoch: number;
}

/** A session on a lease just granted, claiming: `deadline` is the grant's send time + TTL − margin, `epoch` the history's then. */
export function newSession(lease: Lease, leaseId: string, deadline: number, sentMono: number, epoch: number): Session {
  return {
    lease,
    leaseId,
    abort: new AbortController(),
    phase: { kind: 'claiming' },
    deadline,
    lastMsRevision: '0',
    ackedLastMs: -1,
    sentLastMs: -1,
    lastAckMono: sentMono,
    fenceTimer: undefined,
    historyEpoch: epoch,
  };
}

/** Whether the session ended. Functions, not inline checks: a phase read after an `await` must not be narrowed by one read before it. */
export function ended(s: Session): boolean {
  return s.phase.kind === 'ended';
}

/** Whether the session's slot is assigned to the target (it mints). */
export function assigned(s: Session): boolean {
  return s.phase.kind === 'assigned';
}

/** The slot a session won (kept after its end), or `undefined` while it is still claiming one. */
export function slotOf(s: Session): SessionSlot | undefined {
  return s.phase.kind === 'claiming' ? undefined : s.phase.slot;
}

/**
 * Why a `last-ms` write left the slot: `lost` (not ours any more, or etcd cannot be trusted: fence) or `withdrawn`
 * (the borrowed code's spare record changed: the slot is given back, not lost, docs/design.md §7).
 */
export interface SlotLoss {
  readonly kind: 'lost' | 'withdrawn';
  readonly why: string;
}

/**
 * Ends session `s` for good: its phase (the slot kept for its final records), its fence timer, its floor wait and
 * keep-alive loop, and its watch, whose cancel goes into `watchCancels` (awaited, bounded, before the client closes).
 */
export function endSession(s: Session, watchCancels: Set<Promise<unknown>>): void {
  if (ended(s)) return;
  s.phase = { kind: 'ended', slot: slotOf(s) };
  clearTimeout(s.fenceTimer);
  const w = s.watcher;
  s.watcher = undefined;
  if (w !== undefined) watchCancels.add(w.cancel().catch(() => undefined));
  s.abort.abort(new SessionLostError('session ended'));
}

/** Revokes a lease given up, within the request timeout; a failure is logged (etcd expires the lease). */
export async function revokeQuietly(
  lease: Lease,
  cfg: Pick<LeaseConfig, 'requestTimeoutMs' | 'logger'>,
): Promise<void> {
  try {
    await withTimeout(lease.revoke(deadlineIn(cfg.requestTimeoutMs)), cfg.requestTimeoutMs, 'revoke');
  } catch (e) {
    cfg.logger.warn({ err: errorText(e) }, 'lease: revoking a lost lease failed (etcd will expire it)');
  }
}

/** A {@link SlotLoss} of kind `lost`. */
export function lost(why: string): SlotLoss {
  return { kind: 'lost', why };
}

/** The session was lost while claiming or waiting for the floor: the claim loop tries again. */
export class SessionLostError extends Error {
  constructor(why: string) {
    super(why);
    this.name = 'SessionLostError';
  }
}

/** Throws {@link SessionLostError} once session `s` has ended. */
export function checkSession(s: Session): void {
  if (ended(s)) throw new SessionLostError('the lease was lost while claiming');
}

/**
 * Refuses session `s` when etcd was found untrustworthy since it began ({@link Session.historyEpoch}): the answers
 * it went on (its claim's, its first records') may be the very ones the verdict was about, and a claim must never
 * stand on a history this holder does not trust (docs/design.md §5).
 */
export function checkTrustedSince(history: EtcdHistory, s: Session, while_: string): void {
  if (history.epoch === s.historyEpoch) return;
  throw new SessionLostError(
    `etcd was found untrustworthy while ${while_}: no claim on this history; claiming again (docs/design.md §5)`,
  );
}

/** A slot won by a claim: its record as read in the claim's transaction, and the spare-code guard it was claimed under. */
export interface ClaimedSlot {
  readonly region: number;
  readonly worker: number;
  readonly last: LastMsRecord | undefined;
  readonly revision: string;
  readonly spare?: SpareGuard;
}

/** What the lease's collaborators ask of its lifecycle (etcd-lease.ts): its settings, its state, its verdicts. */
export interface LeaseHost {
  readonly cfg: LeaseConfig;
  readonly target: LeaseTarget;
  /** What this holder has seen of etcd's history: a revision that goes back or another cluster ID fences. */
  readonly history: EtcdHistory;
  /** Aborted when the lease is released (or its start aborted): claim nothing more. */
  readonly lifetime: AbortSignal;
  /** The lease's etcd client; throws before it is created. */
  client(): Etcd3;
  /** The delay before retry `attempt` (jittered exponential backoff). */
  backoff(attempt: number): number;
  /** etcd cannot be trusted any more (docs/design.md §5, "a rewound etcd is never trusted"), found by session `from`. */
  distrust(why: string, from: Session): void;
  /** Lease lost or expired: fence at once and claim again (docs/design.md §5). */
  lose(s: Session, why: string): void;
  /** A borrowed slot whose spare code is being reclaimed: give it back and claim again (docs/design.md §7). */
  giveBack(s: Session, why: string): void;
}
