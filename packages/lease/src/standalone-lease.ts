import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { DEFAULT_LAYOUT } from '@idgen/core';
import type { Layout } from '@idgen/core';
import { lock } from 'proper-lockfile';
import { systemClock } from './clock.js';
import type { ClockSource } from './clock.js';
import { defaultNodeId, parseWorkerRange } from './config.js';
import type { WorkerRange } from './config.js';
import { errorText } from './etcd-client.js';
import { CorruptRecordError, LeaseConfigError, LeaseError } from './errors.js';
import { computeFloor, parseLastMsRecord } from './records.js';
import type { LastMsRecord } from './records.js';
import type { LeaseSnapshot, LeaseState, LeaseTarget, WorkerLease } from './types.js';

/**
 * How a standalone node bounds itself between two writes of its state file, as an etcd holder does between
 * two `last-ms` refreshes (docs/design.md §5): the wall ceiling is the last written millisecond + TTL − margin, and a
 * restart after a crash starts above the last written millisecond + TTL + the clock bound.
 */
export const STANDALONE_STATE_TTL_MS = 3_000;
export const STANDALONE_STATE_MARGIN_MS = 1_000;
/** How often the state file is rewritten with the clock (ms). */
export const STANDALONE_STATE_INTERVAL_MS = 1_000;
/** A lock not refreshed for this long belongs to a dead process (proper-lockfile's minimum is 5 s). */
const LOCK_STALE_MS = 5_000;

/** Options of {@link createStandaloneLease}. */
export interface StandaloneLeaseOptions {
  readonly region: number;
  /** The first worker of this range is used; default 0-127 (so worker 0). */
  readonly workers?: WorkerRange | string;
  /**
   * The state file: the last millisecond this node may have minted in, in the `last-ms` record format. It is
   * locked while the node runs (a second standalone node on it refuses to start) and read at start (a restart
   * never mints at or below what the previous run may have minted, whatever the clock says).
   */
  readonly stateFile: string;
  readonly nodeId?: string;
  readonly layout?: Layout;
  readonly clock?: ClockSource;
  /** Clock bound added to the floor after an unclean end (docs/design.md §5: 10 ms). */
  readonly clockBoundMs?: number;
  /** How often the state file is rewritten; default {@link STANDALONE_STATE_INTERVAL_MS}. */
  readonly stateIntervalMs?: number;
  /**
   * How long to keep trying for a lock another process holds before refusing, in ms. Default 15 s, well over
   * the 5 s after which a crashed holder's lock is stale, so a restart right after a crash still starts.
   */
  readonly lockWaitMs?: number;
}

/**
 * The in-process lease for standalone mode: **one node only**, no etcd (docs/design.md §5, §6), asked for by name.
 * It assigns the first worker of the range. What keeps it from minting duplicates on its own:
 * - the state file is locked: a second standalone node on the same file refuses to start;
 * - the state file holds the last millisecond this node may mint in, rewritten every second; the node never
 *   mints above it + TTL − margin (the wall ceiling), and a restart starts above it (+ TTL + clock bound after
 *   a crash), so a clock stepped back across a restart cannot repeat an ID.
 * Nothing coordinates with nodes on other state files: two of them with the same region and worker WILL mint
 * duplicates. That is what etcd is for.
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
  if (
    !Number.isSafeInteger(workers.first) ||
    !Number.isSafeInteger(workers.last) ||
    workers.first < 0 ||
    workers.last > layout.maxWorker ||
    workers.first > workers.last
  ) {
    problems.push(
      `workers must be a range within 0-${layout.maxWorker} with first ≤ last, got ${String(workers.first)}-${String(workers.last)}`,
    );
  }
  if (typeof options.stateFile !== 'string' || options.stateFile === '') {
    problems.push('stateFile must be a file path (standalone mode keeps its last millisecond there)');
  }
  const nodeId = options.nodeId ?? defaultNodeId();
  const clockBoundMs = options.clockBoundMs ?? 10;
  const intervalMs = options.stateIntervalMs ?? STANDALONE_STATE_INTERVAL_MS;
  // Staleness is judged on the lock's mtime (file-system time) against Date.now(): a clock stepped back after a
  // crash makes the dead holder's lock look younger, so wait well past the stale time before refusing.
  const lockWaitMs = options.lockWaitMs ?? 3 * LOCK_STALE_MS;
  if (problems.length > 0) throw new LeaseConfigError(problems);
  const stateFile = options.stateFile;

  let state: LeaseState = 'idle';
  let message = 'not started (standalone: one node only, no etcd)';
  let floorMs: number | undefined;
  /** The highest millisecond written to the state file: `L` of the wall ceiling. */
  let writtenMs = -1;
  let unlock: (() => Promise<void>) | undefined;
  let timer: NodeJS.Timeout | undefined;
  let starting: Promise<void> | undefined;
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
  const ceiling = (): number => writtenMs + STANDALONE_STATE_TTL_MS - STANDALONE_STATE_MARGIN_MS;

  /** Writes the state file atomically (a temporary file renamed over it) with a value never below the last. */
  const writeState = (released: boolean): void => {
    const now = clock.nowMs();
    const ms = Math.max(now, floorMs ?? -1, target.lastMintedMs(), writtenMs);
    const record: LastMsRecord = {
      ms,
      released,
      nodeId,
      at: new Date(now).toISOString(),
      ttlMs: STANDALONE_STATE_TTL_MS,
    };
    const tmp = `${stateFile}.${process.pid}.tmp`;
    writeFileSync(tmp, `${JSON.stringify(record)}\n`, { mode: 0o600 });
    renameSync(tmp, stateFile);
    writtenMs = ms;
  };

  const readState = (): LastMsRecord | undefined => {
    let raw: string;
    try {
      raw = readFileSync(stateFile, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw new LeaseError('state-file', `cannot read the standalone state file ${stateFile}: ${errorText(e)}`, false);
    }
    if (raw.trim() === '') return undefined; // created empty by the lock step, never written
    try {
      return parseLastMsRecord(stateFile, raw.trim());
    } catch (e) {
      // Never guess a floor lower than the truth: a garbled file stops the node; an operator removes it.
      const why = e instanceof CorruptRecordError ? e.message : errorText(e);
      throw new LeaseError(
        'state-file',
        `the standalone state file is unreadable (${why}); remove it only if no node minted from it in the last minutes`,
        false,
      );
    }
  };

  const takeLock = async (): Promise<void> => {
    mkdirSync(dirname(stateFile), { recursive: true });
    const tries = Math.max(0, Math.ceil(lockWaitMs / 500));
    try {
      unlock = await lock(stateFile, {
        realpath: false,
        stale: LOCK_STALE_MS,
        retries: { retries: tries, factor: 1, minTimeout: 500, maxTimeout: 500 },
        onCompromised: (e) => {
          // Another process took the lock (ours was not refreshed in time): it may mint from this file now.
          unassign('the standalone state file lock was lost');
          set('fenced', `the lock on ${stateFile} was lost (${e.message}): stopped minting`);
        },
      });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ELOCKED') {
        throw new LeaseError(
          'state-file',
          `another standalone node holds ${stateFile} (locked): give each node its own --state-file, or use etcd`,
          false,
        );
      }
      throw new LeaseError('state-file', `cannot lock the standalone state file ${stateFile}: ${errorText(e)}`, false);
    }
  };

  const unassign = (why: string): void => {
    clearInterval(timer);
    timer = undefined;
    target.unassign('lease', why);
  };

  const run = async (signal?: AbortSignal): Promise<void> => {
    await takeLock();
    try {
      signal?.throwIfAborted();
      const previous = readState();
      floorMs = Math.max(
        computeFloor(previous, { ttlMs: STANDALONE_STATE_TTL_MS, clockBoundMs, epochMs: layout.epochMs }),
        -1,
      );
      writeState(false);
      target.assign({
        region,
        worker: workers.first,
        floorMs,
        deadlineMonoMs: Number.POSITIVE_INFINITY,
        ceilingMs: ceiling(),
      });
      timer = setInterval(() => {
        try {
          writeState(false);
          target.extend({ deadlineMonoMs: Number.POSITIVE_INFINITY, ceilingMs: ceiling() });
        } catch (e) {
          // Not written: the ceiling stays where it was and the guard fences at it (clock-ahead).
          message = `writing ${stateFile} failed: ${errorText(e)}`;
        }
      }, intervalMs);
      timer.unref();
      const after =
        previous === undefined
          ? 'a new state file'
          : previous.released
            ? `the previous run released at ${previous.ms}`
            : `the previous run ended uncleanly at ${previous.ms}: minting above ${floorMs}`;
      set(
        'alive',
        `standalone (one node only, no etcd): worker ${workers.first} of region ${region}; ${after}; state in ${stateFile}`,
      );
    } catch (e) {
      await unlock?.().catch(() => undefined);
      unlock = undefined;
      throw e;
    }
  };

  return {
    start(signal?: AbortSignal) {
      if (state === 'released')
        return Promise.reject(new LeaseError('released', 'this lease was released; create a new one', false));
      starting ??= run(signal).catch((e: unknown) => {
        starting = undefined;
        set('idle', `start failed: ${errorText(e)}`);
        throw e;
      });
      return starting;
    },
    setAddress() {
      // no discovery in standalone mode
    },
    async register() {
      // no discovery in standalone mode: callers connect to the one node directly
    },
    async release() {
      if (state === 'released') return;
      await starting?.catch(() => undefined);
      clearInterval(timer);
      timer = undefined;
      target.unassign('draining', 'standalone lease released (shutting down)');
      if (unlock !== undefined) {
        // Minting stopped above: the next run may start right above what is written now.
        try {
          writeState(true);
        } catch {
          // the next run waits as after a crash
        }
        await unlock().catch(() => undefined);
        unlock = undefined;
      }
      set('released', 'released');
    },
    snapshot,
    on(_event, fn) {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
  };
}
