import { DEFAULT_LAYOUT } from '@idgen/core';
import type { Layout } from '@idgen/core';
import { systemClock } from '@idgen/clock-guard';
import type { ClockSource } from '@idgen/clock-guard';
import { defaultNodeId, parseWorkerRange } from './config.js';
import type { WorkerRange } from './config.js';
import { LeaseConfigError, LeaseError } from './errors.js';
import type { LeaseSnapshot, LeaseState, LeaseTarget, WorkerLease } from './types.js';

/** Options of {@link createStandaloneLease}. */
export interface StandaloneLeaseOptions {
  readonly region: number;
  /** The first worker of this range is used; default 0-127 (so worker 0). */
  readonly workers?: WorkerRange | string;
  readonly nodeId?: string;
  readonly layout?: Layout;
  readonly clock?: ClockSource;
}

/**
 * The in-process lease for standalone mode: **one node only**, no etcd (DESIGN §5, §6). It assigns the first
 * worker of the range with floor = the wall clock at start and no deadline. Nothing coordinates with other
 * processes: two standalone nodes with the same region and worker WILL mint duplicates. A restart is safe
 * only because the floor is the clock at start (and the clock guard catches rollbacks while running).
 */
export function createStandaloneLease(options: StandaloneLeaseOptions, target: LeaseTarget): WorkerLease {
  const layout = options.layout ?? DEFAULT_LAYOUT;
  const clock = options.clock ?? systemClock;
  const problems: string[] = [];
  const region = options.region;
  if (!Number.isSafeInteger(region) || region < 0 || region > layout.maxRegion) {
    problems.push(`region must be an integer from 0 to ${layout.maxRegion}, got ${String(region)}`);
  }
  let workers: WorkerRange = { first: 0, last: layout.maxWorker };
  try {
    if (typeof options.workers === 'string') workers = parseWorkerRange(options.workers);
    else if (options.workers !== undefined) workers = options.workers;
  } catch (e) {
    problems.push(...(e as LeaseConfigError).problems);
  }
  if (!Number.isSafeInteger(workers.first) || !Number.isSafeInteger(workers.last) || workers.first < 0 || workers.last > layout.maxWorker || workers.first > workers.last) {
    problems.push(`workers must be a range within 0-${layout.maxWorker} with first ≤ last, got ${String(workers.first)}-${String(workers.last)}`);
  }
  const nodeId = options.nodeId ?? defaultNodeId();
  if (problems.length > 0) throw new LeaseConfigError(problems);

  let state: LeaseState = 'idle';
  let message = 'not started (standalone: one node only, no etcd)';
  let floorMs: number | undefined;
  const listeners = new Set<(s: LeaseSnapshot) => void>();
  const snapshot = (): LeaseSnapshot => ({
    state,
    nodeId,
    region: state === 'alive' ? region : undefined,
    worker: state === 'alive' ? workers.first : undefined,
    leaseId: undefined,
    keepAliveAgeSeconds: undefined,
    deadlineInMs: undefined,
    floorMs,
    message,
    mode: 'standalone',
  });
  const set = (s: LeaseState, m: string): void => {
    state = s;
    message = m;
    const snap = snapshot();
    for (const fn of listeners) fn(snap);
  };

  return {
    async start(signal?: AbortSignal) {
      signal?.throwIfAborted();
      if (state === 'released') throw new LeaseError('released', 'this lease was released; create a new one', false);
      if (state === 'alive') return;
      floorMs = clock.nowMs();
      target.assign({ region, worker: workers.first, floorMs, deadlineMonoMs: Number.POSITIVE_INFINITY });
      set('alive', `standalone (one node only, no etcd): worker ${workers.first} of region ${region}`);
    },
    setAddress() {
      // no discovery in standalone mode
    },
    async register() {
      // no discovery in standalone mode: callers connect to the one node directly
    },
    async release() {
      if (state === 'released') return;
      target.unassign('draining', 'standalone lease released (shutting down)');
      set('released', 'released');
    },
    snapshot,
    on(_event, fn) {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
  };
}
