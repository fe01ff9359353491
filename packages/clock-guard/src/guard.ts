import { metrics, type Meter } from '@opentelemetry/api';
import {
  DEFAULT_LAYOUT,
  Minter,
  type Layout,
  type LeaseExtension,
  type WorkerAssignment,
  type MintVerdict,
  type MintedBlock,
  type SequenceExhausted,
} from '@idgen/core';
import { systemClock, type ClockSource } from './clock.js';
import { FencedError, type FenceReason } from './errors.js';
import { registerGuardMetrics, type GuardCounters } from './metrics.js';

/** Rollbacks up to this many milliseconds are waited out (the chrony bound, docs/design.md §4). */
export const DEFAULT_MAX_ROLLBACK_MS = 10;
/** A clock fence that lasts longer than this is fatal: the node should exit and restart (docs/design.md §4). */
export const DEFAULT_MAX_FENCE_MS = 30_000;
/** A wall clock that does not move for this long (monotonic ms) while we wait for the next millisecond is stuck. */
const STUCK_CLOCK_MS = 50;
/** The most IDs one `nextBlock` call may ask for (16 milliseconds of a 12-bit sequence). */
export const MAX_BLOCK_REQUEST = 65_536;

// The lease's side of the contract (WorkerAssignment, LeaseExtension) is declared once, in @idgen/core.
export type { LeaseExtension, WorkerAssignment } from '@idgen/core';

/** What the time-source check last said. */
export interface TimeSourceHealth {
  readonly healthy: boolean;
  readonly message: string;
  readonly offsetSeconds?: number;
}

/** What a {@link GuardStatus} says in either state: the slot, its bounds and the time source. */
export interface GuardBounds {
  readonly region: number | undefined;
  readonly worker: number | undefined;
  readonly floorMs: number;
  readonly lastMs: number;
  readonly deadlineMonoMs: number;
  /** The wall ceiling: no Unix millisecond above it is minted (docs/design.md §5). -Infinity until assigned. */
  readonly ceilingMs: number;
  readonly timeSource: TimeSourceHealth;
}

/** The guard's state, for status endpoints and events: serving, or fenced with its reason and since when. */
export type GuardStatus =
  | (GuardBounds & {
      readonly state: 'serving';
      readonly reason?: undefined;
      readonly message?: undefined;
      readonly sinceMonoMs?: undefined;
    })
  | (GuardBounds & {
      readonly state: 'fenced';
      readonly reason: FenceReason;
      readonly message: string;
      /** Monotonic ms when the current fence began. */
      readonly sinceMonoMs: number;
    });

/** Options of {@link createGuardedMinter}. */
export interface GuardedMinterOptions {
  readonly layout?: Layout;
  /** Home region code; an assignment may carry another (a borrowed code). */
  readonly region: number;
  readonly clock?: ClockSource;
  /** Rollbacks up to this size are waited out; larger ones fence. Default 10 ms. */
  readonly maxRollbackMs?: number;
  /** A clock fence longer than this emits `fatal`. Default 30 s. */
  readonly maxFenceMs?: number;
  /** Where metrics go; default the global OpenTelemetry meter provider's `@idgen/clock-guard` meter. */
  readonly meter?: Meter;
  /**
   * How often (ms) the guard re-checks its fences by itself (deadline passed, fence lifted, fatal bound),
   * so that state events and the fatal signal come even when nobody mints. 0 turns the timer off (tests
   * call {@link GuardedMinter.check}). Default 250.
   */
  readonly checkIntervalMs?: number;
}

type Listener<T> = (value: T) => void;

/**
 * Mints through the core's state machine with a real clock, and turns the core's verdicts into behaviour
 * (docs/design.md §4, §5):
 * - sequence spent: busy-wait for the next millisecond (under 1 ms), counted;
 * - clock behind by ≤ `maxRollbackMs`: busy-wait it out, counted; by more: fence (`clock-rollback`) until
 *   the clock passes the last minted millisecond again; a fence longer than `maxFenceMs` emits `fatal`;
 * - never at or below the floor; never after the lease deadline (fence `lease`); never a millisecond above the
 *   wall ceiling (fence `clock-ahead`).
 *
 * `next()` and `nextBlock()` are synchronous: every wait is bounded (below a millisecond for the sequence,
 * `maxRollbackMs` for a rollback), and the node has nothing better to do with those microseconds.
 * A refusal throws {@link FencedError}; nothing is minted then.
 */
export class GuardedMinter {
  readonly layout: Layout;
  private readonly homeRegion: number;
  private readonly clock: ClockSource;
  private readonly maxRollbackMs: number;
  private readonly maxFenceMs: number;

  private minter: Minter | undefined;
  /** Monotonic deadline; minting stops at or after it. -Infinity until assigned. */
  private deadline = Number.NEGATIVE_INFINITY;
  /** Wall ceiling (Unix ms); nothing above it is minted. -Infinity until assigned. */
  private ceiling = Number.NEGATIVE_INFINITY;
  /** Highest floor ever given; survives re-assignment. */
  private floor = -1;

  // Standing conditions; `blocked` is derived from them and is the one field the hot path reads.
  private assigned = false;
  private draining = false;
  private timeSource: TimeSourceHealth = { healthy: true, message: 'not checked' };
  /** A clock fence (rollback, floor, out of range) that lifts when the wall clock reaches `untilMs`. */
  private clockFence: { reason: FenceReason; untilMs: number; message: string; sinceMonoMs: number } | undefined;
  private unassignedBecause: { reason: FenceReason; message: string } = {
    reason: 'not-assigned',
    message: 'no worker slot assigned yet',
  };
  /** The standing fence, if any: the one field the hot path reads (with the deadline). */
  private blocked: FencedError | undefined;
  /** The fence in force including a passed deadline, as last computed. */
  private currentFence: FencedError | undefined;
  private fatalSent = false;
  /**
   * The wall millisecond whose deadline and ceiling checks last passed; NaN (equal to no reading)
   * when none may be trusted: after a refusal, an assignment or any fence.
   */
  private checkedMs = Number.NaN;

  /** The millisecond whose spent sequence {@link tryNextBlock} last counted as an overflow wait. */
  private exhaustedMs = Number.NaN;
  /** IDs minted: a plain field, the one counter the hot path touches. */
  private minted = 0;
  private readonly counters: GuardCounters = {
    idsMinted: 0,
    overflowWaits: 0,
    rollbacksWaited: 0,
    rollbacksFenced: 0,
    fences: {},
    offsetSeconds: undefined,
  };
  private lastStatusKey = '';
  private readonly stateListeners = new Set<Listener<GuardStatus>>();
  private readonly fatalListeners = new Set<Listener<string>>();
  private timer: ReturnType<typeof setInterval> | undefined;

  constructor(options: GuardedMinterOptions) {
    this.layout = options.layout ?? DEFAULT_LAYOUT;
    this.homeRegion = this.layout.checkRegion(options.region);
    this.clock = options.clock ?? systemClock;
    this.maxRollbackMs = nonNegative('maxRollbackMs', options.maxRollbackMs ?? DEFAULT_MAX_ROLLBACK_MS);
    this.maxFenceMs = nonNegative('maxFenceMs', options.maxFenceMs ?? DEFAULT_MAX_FENCE_MS);
    registerGuardMetrics(options.meter ?? metrics.getMeter('@idgen/clock-guard'), () => this.counts());
    this.recompute();
    const every = options.checkIntervalMs ?? 250;
    if (every > 0) {
      this.timer = setInterval(() => this.check(), every);
      this.timer.unref();
    }
  }

  /**
   * Mints one ID. Throws {@link FencedError} when it may not.
   *
   * The wall clock is read *before* the deadline is checked: if the process stalls between the two, the
   * ID carries the earlier reading, which the lease still covered. Reading it after could stamp an ID with
   * a millisecond the slot's next holder may use.
   *
   * The monotonic deadline and the wall ceiling are checked once per wall-clock millisecond, not once per ID:
   * further IDs in a millisecond that was already checked carry that same, covered millisecond, and reading
   * the monotonic clock would otherwise be most of the cost of an ID. The shortcut keeps the ceiling exact:
   * it compares the very millisecond the IDs carry, and a ceiling only rises while assigned. Any refusal, and
   * any fence the guard's own check finds (a passed deadline, a wall clock above the ceiling), forgets the
   * checked millisecond, so a clock set back to it is checked again; a millisecond checked less than 1 ms of
   * monotonic time before the deadline is not remembered at all (the deadline may pass inside it). Standing
   * fences (`blocked`) are checked on every ID.
   */
  next(): bigint {
    const now = this.clock.nowMs();
    if (this.blocked !== undefined) throw this.refusal(now);
    if (now !== this.checkedMs) {
      if (now > this.ceiling) throw this.refusal(now);
      const left = this.deadline - this.clock.monoMs();
      if (!(left > 0)) throw this.refusal(now);
      // Checked: further IDs of this millisecond skip the checks, unless the deadline may pass within it.
      this.checkedMs = left > 1 ? now : Number.NaN;
    }
    const r = (this.minter as Minter).mintOne(now);
    if (typeof r === 'bigint') {
      this.minted++;
      return r;
    }
    this.handle(r);
    return this.next();
  }

  /**
   * Mints `count` IDs (1 … 65,536) as consecutive blocks, in increasing order; a request that does not fit
   * in the current millisecond continues in the next (docs/design.md §4). Throws {@link FencedError} when it may
   * not mint; IDs minted for this call before a fence are dropped, never handed out twice.
   */
  nextBlock(count: number): MintedBlock[] {
    const blocks: MintedBlock[] = [];
    let left = count;
    for (;;) {
      const spent = this.mintAvailable(left, blocks);
      if (spent === undefined) return blocks;
      left = spent.left;
      this.handle(spent.verdict); // docs/design.md §4: wait for the next millisecond here, counted
    }
  }

  /**
   * Mints up to `count` IDs (1 … 65,536) without waiting for a millisecond: what the clock allows now. Returns
   * the blocks minted, fewer IDs than asked (possibly none) when the current millisecond's sequence is spent;
   * the caller asks again for the rest from a timer (createMintScheduler), so a burst of large requests never
   * holds the event loop (the lease's keep-alives run between milliseconds). Throws
   * {@link FencedError} like {@link nextBlock}. A rollback or floor within `maxRollbackMs` is still waited out
   * here (bounded, and only on a clock event).
   */
  tryNextBlock(count: number): MintedBlock[] {
    const blocks: MintedBlock[] = [];
    const spent = this.mintAvailable(count, blocks);
    // The rest waits for the next millisecond off the loop: counted once per millisecond, not per asking.
    if (spent !== undefined && spent.verdict.lastMs !== this.exhaustedMs) {
      this.exhaustedMs = spent.verdict.lastMs;
      this.counters.overflowWaits++;
    }
    return blocks;
  }

  /**
   * Mints up to `count` IDs into `blocks` until done (undefined) or the current millisecond's sequence is spent
   * (the verdict and how many are left). Checks the fences, the deadline and the ceiling for every block.
   */
  private mintAvailable(
    count: number,
    blocks: MintedBlock[],
  ): { verdict: SequenceExhausted; left: number } | undefined {
    if (!Number.isInteger(count) || count < 1 || count > MAX_BLOCK_REQUEST) {
      throw new RangeError(`count must be an integer from 1 to ${MAX_BLOCK_REQUEST}, got ${String(count)}`);
    }
    const perMs = this.layout.maxSequence + 1;
    let left = count;
    while (left > 0) {
      const now = this.clock.nowMs();
      if (this.blocked !== undefined || now > this.ceiling || this.clock.monoMs() >= this.deadline) {
        throw this.refusal(now);
      }
      const r = (this.minter as Minter).mintBlock(now, left < perMs ? left : perMs);
      if ('first' in r) {
        blocks.push(r);
        left -= r.count;
        this.minted += r.count;
      } else if (r.kind === 'sequence-exhausted') {
        return { verdict: r, left };
      } else {
        this.handle(r);
      }
    }
    return undefined;
  }

  /** The lease holds a slot and the wall clock has passed its floor: minting may start (docs/design.md §5 step 5). */
  assign(a: WorkerAssignment): void {
    const region = this.layout.checkRegion(a.region);
    const worker = this.layout.checkWorker(a.worker);
    if (!Number.isSafeInteger(a.floorMs)) throw new RangeError(`floorMs must be a safe integer, got ${a.floorMs}`);
    if (typeof a.deadlineMonoMs !== 'number' || Number.isNaN(a.deadlineMonoMs)) {
      throw new RangeError(`deadlineMonoMs must be a number, got ${String(a.deadlineMonoMs)}`);
    }
    if (typeof a.ceilingMs !== 'number' || Number.isNaN(a.ceilingMs)) {
      throw new RangeError(`ceilingMs must be a number (Unix ms), got ${String(a.ceilingMs)}`);
    }
    // A new slot starts a new state machine. Its floor is at least the last millisecond this process
    // minted in, so IDs stay increasing across slots and a rollback across a re-claim is still caught.
    const last = this.lastMintedMs();
    this.floor = Math.max(this.floor, a.floorMs, last);
    if (this.minter === undefined || this.minter.region !== region || this.minter.worker !== worker) {
      this.minter = new Minter({ layout: this.layout, region, worker, floorMs: this.floor });
    } else {
      this.minter.raiseFloor(this.floor);
    }
    this.deadline = a.deadlineMonoMs;
    this.ceiling = a.ceilingMs;
    this.checkedMs = Number.NaN;
    this.assigned = true;
    this.recompute();
  }

  /**
   * Moves the lease deadline and the wall ceiling forward (after an acknowledged keep-alive and `last-ms`
   * refresh). Neither moves back while the slot is held: the lease writes `last-ms` non-decreasing.
   */
  extend(e: LeaseExtension): void {
    if (e.deadlineMonoMs > this.deadline) this.deadline = e.deadlineMonoMs;
    if (e.ceilingMs > this.ceiling) this.ceiling = e.ceilingMs;
    this.recompute();
  }

  /** The lease is gone (lost, expired, released): fence at once. */
  unassign(reason: FenceReason, message: string): void {
    this.assigned = false;
    this.deadline = Number.NEGATIVE_INFINITY;
    this.ceiling = Number.NEGATIVE_INFINITY;
    this.unassignedBecause = { reason, message };
    this.recompute();
  }

  /** What the time-source check says; unhealthy fences with reason `time-source` (docs/design.md §4). */
  setTimeSource(healthy: boolean, message: string, offsetSeconds?: number): void {
    this.timeSource = offsetSeconds === undefined ? { healthy, message } : { healthy, message, offsetSeconds };
    if (offsetSeconds !== undefined) this.counters.offsetSeconds = offsetSeconds;
    this.recompute();
  }

  /** The node is shutting down: refuse from now on. */
  drain(): void {
    this.draining = true;
    this.recompute();
  }

  /** Last Unix millisecond minted in, or -1. */
  lastMintedMs(): number {
    return this.minter?.lastMs ?? -1;
  }

  /**
   * True when a mint now would not be refused for a standing reason: serving, deadline not passed, the wall
   * clock above the floor and not above the ceiling. What readiness reports.
   */
  canMint(): boolean {
    const now = this.clock.nowMs();
    return this.blocked === undefined && this.clock.monoMs() < this.deadline && now > this.floor && now <= this.ceiling;
  }

  /**
   * Re-evaluates fences that change with time alone: a passed deadline, a clock fence that may lift, the
   * fatal bound. Runs on the guard's own timer; tests call it after moving a test clock.
   */
  check(): void {
    this.recompute();
    const f = this.clockFence;
    if (f !== undefined && !this.fatalSent && this.clock.monoMs() - f.sinceMonoMs > this.maxFenceMs) {
      this.fatalSent = true;
      const why =
        `clock fenced for more than ${this.maxFenceMs} ms (${f.message}): ` +
        'exit so the orchestrator restarts this node on a fresh lease (docs/design.md §4)';
      for (const fn of this.fatalListeners) fn(why);
    }
  }

  /** The guard's state and what it is based on. */
  status(): GuardStatus {
    const b = this.blocked ?? this.deadlineFence() ?? this.ceilingFence(this.clock.nowMs());
    const base: GuardBounds = {
      region: this.minter?.region,
      worker: this.assigned ? this.minter?.worker : undefined,
      floorMs: this.floor,
      lastMs: this.lastMintedMs(),
      deadlineMonoMs: this.deadline,
      ceilingMs: this.ceiling,
      timeSource: this.timeSource,
    };
    return b === undefined
      ? { state: 'serving', ...base }
      : { state: 'fenced', reason: b.reason, message: b.message, sinceMonoMs: b.sinceMonoMs, ...base };
  }

  /** The counters behind the metrics (a copy). */
  counts(): GuardCounters {
    return { ...this.counters, idsMinted: this.minted, fences: { ...this.counters.fences } };
  }

  /** Subscribes to state changes (`state`) or the fatal signal (`fatal`); returns the unsubscribe function. */
  on(event: 'state', fn: Listener<GuardStatus>): () => void;
  on(event: 'fatal', fn: Listener<string>): () => void;
  on(event: 'state' | 'fatal', fn: Listener<GuardStatus> | Listener<string>): () => void {
    const set = (event === 'state' ? this.stateListeners : this.fatalListeners) as Set<typeof fn>;
    set.add(fn);
    return () => set.delete(fn);
  }

  /** Stops the guard's timer. Minting still works; events from time alone stop. */
  close(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Acts on a verdict: returns after waiting it out, or throws a fence. */
  private handle(v: MintVerdict): void {
    switch (v.kind) {
      case 'sequence-exhausted':
        // docs/design.md §4: wait for the next millisecond, and count it. The wait ends on any other reading:
        // an earlier one is then handled as a rollback by the next mint.
        this.counters.overflowWaits++;
        if (!this.spinWhile((now) => now === v.lastMs, this.clock.monoMs() + STUCK_CLOCK_MS)) {
          // A wall clock that stops (a frozen VM clock, a faked time) would otherwise spin us forever.
          throw new FencedError(
            'clock-rollback',
            `the wall clock did not advance past ${new Date(v.lastMs).toISOString()} for ${STUCK_CLOCK_MS} ms`,
            this.clock.monoMs(),
          );
        }
        return;
      case 'clock-behind':
        if (v.behindMs <= this.maxRollbackMs) {
          this.counters.rollbacksWaited++;
          this.waitOut(v.lastMs, 'clock-rollback', `the wall clock went back by ${v.behindMs} ms`);
          return;
        }
        this.counters.rollbacksFenced++;
        this.fenceClock(
          'clock-rollback',
          v.lastMs,
          `the wall clock went back by ${v.behindMs} ms (more than the tolerated ${this.maxRollbackMs} ms); ` +
            `minting resumes when it passes ${new Date(v.lastMs).toISOString()}`,
        );
        throw this.refusal();
      case 'below-floor': {
        const wait = v.retryAtMs - v.nowMs;
        const message = `the wall clock is at or below the floor ${new Date(v.floorMs).toISOString()}, a millisecond a previous holder of this slot may have used`;
        if (wait <= this.maxRollbackMs) {
          this.waitOut(v.retryAtMs, 'waiting-for-floor', message);
          return;
        }
        this.fenceClock('waiting-for-floor', v.retryAtMs, message);
        throw this.refusal();
      }
      case 'clock-out-of-range':
        this.fenceClock('clock-out-of-range', Number.POSITIVE_INFINITY, v.message);
        throw this.refusal();
    }
  }

  /**
   * Busy-waits until the wall clock reaches `untilMs`, for at most `maxRollbackMs` (+1 ms) of monotonic
   * time; if it does not get there in time (the clock went back further meanwhile), fences.
   */
  private waitOut(untilMs: number, reason: FenceReason, message: string): void {
    const giveUpAt = this.clock.monoMs() + this.maxRollbackMs + 1;
    const reached = this.spinWhile((now) => now < untilMs, giveUpAt);
    if (!reached) {
      if (reason === 'clock-rollback') this.counters.rollbacksFenced++;
      this.fenceClock(reason, untilMs, `${message}, and it did not catch up within ${this.maxRollbackMs} ms`);
      throw this.refusal();
    }
  }

  /** Spins while `cond(wall)` holds; false if the monotonic clock reached `giveUpAtMono` first. */
  private spinWhile(cond: (wallMs: number) => boolean, giveUpAtMono: number): boolean {
    while (cond(this.clock.nowMs())) {
      // Read the wall clock once more before giving up: a process descheduled between the two reads
      // would otherwise see time run out on a condition that already holds.
      if (this.clock.monoMs() >= giveUpAtMono) return !cond(this.clock.nowMs());
    }
    return true;
  }

  private fenceClock(reason: FenceReason, untilMs: number, message: string): void {
    // A fence that continues keeps its start: the fatal bound counts from the first refusal.
    const sinceMonoMs = this.clockFence?.sinceMonoMs ?? this.clock.monoMs();
    this.clockFence = { reason, untilMs, message, sinceMonoMs };
    this.recompute();
  }

  private deadlineFence(): FencedError | undefined {
    if (!this.assigned || this.clock.monoMs() < this.deadline) return undefined;
    return this.fence('lease', 'the lease deadline passed without an acknowledged keep-alive (docs/design.md §5)');
  }

  /** The wall clock is above the wall ceiling (docs/design.md §5): fence `clock-ahead` until a refresh lifts it. */
  private ceilingFence(nowMs: number): FencedError | undefined {
    if (!this.assigned || nowMs <= this.ceiling) return undefined;
    return this.fence(
      'clock-ahead',
      `the wall clock is above the lease's wall ceiling ${new Date(this.ceiling).toISOString()} ` +
        '(last acknowledged last-ms + TTL − margin, docs/design.md §5): it may have run ahead of the monotonic clock; ' +
        'minting resumes once etcd acknowledges a last-ms at this clock',
    );
  }

  /**
   * The error a refused mint throws: the standing fence, the passed deadline, or the ceiling. Forgets the
   * checked millisecond, so that a clock set back to it cannot skip the checks.
   */
  private refusal(nowMs: number = this.clock.nowMs()): FencedError {
    this.checkedMs = Number.NaN;
    this.recompute(nowMs);
    return (
      this.blocked ??
      this.deadlineFence() ??
      this.ceilingFence(nowMs) ??
      this.fence('lease', 'the lease deadline passed')
    );
  }

  /** A fence with a start time that survives re-computation while its reason stays the same. */
  private fence(reason: FenceReason, message: string): FencedError {
    const current = this.currentFence;
    if (current !== undefined && current.reason === reason && current.message === message) return current;
    return new FencedError(reason, message, this.clock.monoMs());
  }
  /**
   * Derives `blocked` from the standing conditions, in order of precedence, and emits changes. `nowMs` is the
   * wall reading a refusal was decided on (so its reason is the one counted), else the clock now.
   */
  private recompute(nowMs: number = this.clock.nowMs()): void {
    if (this.clockFence !== undefined && this.clock.nowMs() >= this.clockFence.untilMs) {
      this.clockFence = undefined;
      this.fatalSent = false;
    }
    let next: FencedError | undefined;
    if (this.draining) next = this.fence('draining', 'the node is shutting down');
    else if (!this.assigned) next = this.fence(this.unassignedBecause.reason, this.unassignedBecause.message);
    else if (!this.timeSource.healthy)
      next = this.fence('time-source', `time source unhealthy: ${this.timeSource.message}`);
    else if (this.clockFence !== undefined) next = this.fence(this.clockFence.reason, this.clockFence.message);
    this.blocked = next;
    const effective = next ?? this.deadlineFence() ?? this.ceilingFence(nowMs);
    // Any fence found, a passed deadline or a wall clock above the ceiling included, forgets the checked
    // millisecond: a wall clock back in it must be checked again, not minted on the shortcut.
    if (effective !== undefined) this.checkedMs = Number.NaN;
    if (effective?.reason !== this.currentFence?.reason && effective !== undefined) {
      this.counters.fences[effective.reason] = (this.counters.fences[effective.reason] ?? 0) + 1;
    }
    this.currentFence = effective;
    const key = effective === undefined ? 'serving' : `${effective.reason}|${effective.message}`;
    if (key !== this.lastStatusKey) {
      this.lastStatusKey = key;
      if (this.stateListeners.size > 0) {
        const s = this.status();
        for (const fn of this.stateListeners) fn(s);
      }
    }
  }
}

function nonNegative(name: string, v: number): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
    throw new RangeError(`${name} must be a non-negative number of milliseconds, got ${String(v)}`);
  }
  return v;
}

/** Creates a {@link GuardedMinter}: it refuses (`not-assigned`) until the lease assigns a worker. */
export function createGuardedMinter(options: GuardedMinterOptions): GuardedMinter {
  return new GuardedMinter(options);
}
