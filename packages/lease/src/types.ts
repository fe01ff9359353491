import type { LeaseExtension, WorkerAssignment } from '@idgen/core';

// What the lease hands the guard, the contract both packages share, is declared once, in @idgen/core.
export type { LeaseExtension, WorkerAssignment } from '@idgen/core';

/**
 * The part of the clock guard the lease drives. `GuardedMinter` from `@idgen/clock-guard` satisfies it
 * structurally; tests use a recording one.
 */
export interface LeaseTarget {
  /** The lease holds a slot and the wall clock has passed the floor: minting may start. */
  assign(a: WorkerAssignment): void;
  /**
   * After each acknowledged keep-alive and `last-ms` refresh: minting may go on until the monotonic deadline,
   * and never above the wall ceiling (docs/design.md §5).
   */
  extend(e: LeaseExtension): void;
  /** The lease is lost, expired or released: stop minting at once. */
  unassign(reason: 'lease' | 'draining' | 'not-assigned', message: string): void;
  /** Last Unix millisecond minted in, -1 if none: `last-ms` is never written below it. */
  lastMintedMs(): number;
}

/**
 * Where the lease is in its life (docs/design.md §5):
 * `idle → claiming → waiting-for-floor → alive → fenced → claiming … → released`.
 */
export type LeaseState = 'idle' | 'claiming' | 'waiting-for-floor' | 'alive' | 'fenced' | 'released';

/** A point-in-time view of the lease, for status endpoints and logs. */
export interface LeaseSnapshot {
  readonly state: LeaseState;
  readonly nodeId: string;
  readonly region: number | undefined;
  readonly worker: number | undefined;
  /** etcd lease id (decimal string), while one is granted. */
  readonly leaseId: string | undefined;
  /** Seconds since the last acknowledged keep-alive (or grant); `undefined` without a lease. */
  readonly keepAliveAgeSeconds: number | undefined;
  /** Milliseconds until the fence deadline (negative once passed); `undefined` without a lease. */
  readonly deadlineInMs: number | undefined;
  readonly floorMs: number | undefined;
  /** Why the lease is in this state, in words. */
  readonly message: string;
  readonly mode: 'etcd' | 'standalone';
}

/** A worker-ID lease: etcd-backed ({@link createEtcdLease}) or in-process ({@link createStandaloneLease}). */
export interface WorkerLease {
  /**
   * Boot steps 3-5 (docs/design.md §5): connect (retrying while etcd is unreachable), check the layout record, grant
   * a lease, claim a slot, wait for the floor. Resolves when first alive (the target is assigned). Rejects
   * on a layout mismatch, on garbage in the layout record, when no slot is free, or when `signal` aborts.
   * After a later loss the lease re-claims by itself, forever, until {@link release}.
   */
  start(signal?: AbortSignal): Promise<void>;
  /** Advertised `host:port` for discovery; may be set before start or at any time. */
  setAddress(address: string): void;
  /** Boot step 6: put `{prefix}/regions/{code}/nodes/{nodeId}` on the lease (kept across re-claims). */
  register(): Promise<void>;
  /** Shutdown: stop minting, deregister, write the final `last-ms` marked released, revoke. Idempotent. */
  release(): Promise<void>;
  snapshot(): LeaseSnapshot;
  /** Calls `fn` on every state change; returns an unsubscribe function. */
  on(event: 'state', fn: (s: LeaseSnapshot) => void): () => void;
}

/** A serving node as listed under `{prefix}/regions/{code}/nodes/`. */
export interface ServingNode {
  readonly nodeId: string;
  readonly region: number;
  readonly worker: number;
  /** `host:port` the node serves on. */
  readonly address: string;
  /** ISO time the node started serving. */
  readonly startedAt: string;
}

/** Structured logger; pino's `logger.info(fields, msg)` fits. */
export interface LeaseLogger {
  info(fields: Record<string, unknown>, msg: string): void;
  warn(fields: Record<string, unknown>, msg: string): void;
  error(fields: Record<string, unknown>, msg: string): void;
}

/** A logger that drops everything (the default). */
export const silentLogger: LeaseLogger = Object.freeze({
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
});
