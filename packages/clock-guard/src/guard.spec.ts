import type { Attributes, Meter, ObservableCallback, ObservableResult } from '@opentelemetry/api';
import { DEFAULT_LAYOUT, systemClock as coreSystemClock, type MintedBlock } from '@idgen/core';
import fc from 'fast-check';
import {
  ClockGuardMetrics,
  createGuardedMinter,
  isFencedError,
  systemClock,
  type FenceReason,
  type GuardStatus,
  type GuardedMinter,
} from './index.js';
import { createTestClock, type TestClock } from './testing.js';

const T0 = 1_728_898_200_123; // 2024-10-14T09:30:00.123Z

/** A meter that records observable callbacks, so a test can collect what the SDK would export. */
function recordingMeter() {
  const callbacks = new Map<string, ObservableCallback<Attributes>[]>();
  const instrument = (name: string) => ({
    addCallback: (cb: ObservableCallback<Attributes>) => callbacks.set(name, [...(callbacks.get(name) ?? []), cb]),
    removeCallback: () => undefined,
  });
  const meter = {
    createObservableCounter: instrument,
    createObservableGauge: instrument,
    createObservableUpDownCounter: instrument,
  } as unknown as Meter;
  /** The values observed for one metric, keyed by their attributes as JSON. */
  const collect = (name: string): Record<string, number> => {
    const out: Record<string, number> = {};
    for (const cb of callbacks.get(name) ?? []) {
      const result: ObservableResult<Attributes> = {
        observe: (value: number, attributes?: Attributes) => {
          out[JSON.stringify(attributes ?? {})] = value;
        },
      };
      void cb(result);
    }
    return out;
  };
  return { meter, collect };
}

function setup(options: { maxRollbackMs?: number; maxFenceMs?: number } = {}) {
  const clock = createTestClock(T0, 1_000);
  const m = recordingMeter();
  const guard = createGuardedMinter({ region: 2, clock, meter: m.meter, checkIntervalMs: 0, ...options });
  const assign = (extra: { floorMs?: number; deadlineInMs?: number; worker?: number; ceilingMs?: number } = {}) =>
    guard.assign({
      region: 2,
      worker: extra.worker ?? 17,
      floorMs: extra.floorMs ?? T0 - 1,
      deadlineMonoMs: clock.monoMs() + (extra.deadlineInMs ?? 60_000),
      // As the lease sets it when the clocks agree: the wall reading the deadline is counted from.
      ceilingMs: extra.ceilingMs ?? T0 + (extra.deadlineInMs ?? 60_000),
    });
  return { clock, guard, assign, collect: m.collect };
}

function fenceReasonOf(fn: () => unknown): FenceReason | undefined {
  try {
    fn();
  } catch (e) {
    if (isFencedError(e)) return e.reason;
    throw e;
  }
  return undefined;
}

/** Makes a busy wait see time pass: every `reads` wall-clock reads, both clocks move 1 ms. */
function tickEvery(clock: TestClock, reads: number) {
  let n = 0;
  clock.onRead = (c) => {
    if (++n % reads === 0) c.advance(1);
  };
}

const fieldsOf = (id: bigint) => DEFAULT_LAYOUT.decompose(id);

describe('GuardedMinter', () => {
  it('refuses until a worker is assigned, then mints with that region and worker', () => {
    const { guard, assign } = setup();
    expect(fenceReasonOf(() => guard.next())).toBe('not-assigned');
    expect(guard.canMint()).toBe(false);
    assign();
    expect(guard.canMint()).toBe(true);
    const id = guard.next();
    expect(fieldsOf(id)).toEqual({ timestampMs: T0 - DEFAULT_LAYOUT.epochMs, region: 2, worker: 17, sequence: 0 });
    expect(guard.next()).toBe(id + 1n);
  });

  it('waits for the next millisecond when the sequence is spent, and counts the wait', () => {
    const { guard, assign, clock, collect } = setup();
    assign();
    for (let i = 0; i < 4096; i++) guard.next();
    tickEvery(clock, 5);
    const id = guard.next();
    expect(fieldsOf(id).timestampMs).toBe(T0 + 1 - DEFAULT_LAYOUT.epochMs);
    expect(fieldsOf(id).sequence).toBe(0);
    expect(guard.counts().overflowWaits).toBe(1);
    expect(collect(ClockGuardMetrics.overflowWaits)).toEqual({ '{}': 1 });
    expect(collect(ClockGuardMetrics.idsMinted)).toEqual({ '{}': 4097 });
  });

  it('gives up on a wall clock that stops while waiting for the next millisecond', () => {
    const { guard, assign, clock } = setup();
    assign();
    for (let i = 0; i < 4096; i++) guard.next();
    let n = 0;
    clock.onRead = () => {
      if (++n % 5 === 0) clock.jumpWall(0);
    };
    // Only the monotonic clock moves: the wall is frozen.
    const mono = clock.monoMs;
    let m = 0;
    clock.monoMs = () => mono() + (m += 1);
    expect(fenceReasonOf(() => guard.next())).toBe('clock-rollback');
  });

  it('waits out a small rollback and counts it', () => {
    const { guard, assign, clock, collect } = setup();
    assign();
    const before = guard.next();
    clock.jumpWall(-7);
    tickEvery(clock, 3);
    const after = guard.next();
    expect(after > before).toBe(true);
    expect(fieldsOf(after).timestampMs).toBeGreaterThanOrEqual(T0 - DEFAULT_LAYOUT.epochMs);
    expect(guard.counts().rollbacksWaited).toBe(1);
    expect(guard.status().state).toBe('serving');
    expect(collect(ClockGuardMetrics.rollbacks)).toEqual({ '{"outcome":"waited"}': 1, '{"outcome":"fenced"}': 0 });
  });

  it('fences a small rollback that does not catch up within the tolerated time', () => {
    const { guard, assign, clock } = setup();
    assign();
    guard.next();
    clock.jumpWall(-5);
    // The wall clock keeps falling behind while the monotonic clock runs: never catches up.
    clock.onRead = (c) => {
      c.advance(1);
      c.jumpWall(-2);
    };
    expect(fenceReasonOf(() => guard.next())).toBe('clock-rollback');
    expect(guard.counts().rollbacksFenced).toBe(1);
  });

  it('fences on a large rollback until the clock passes the last minted millisecond again', () => {
    const { guard, assign, clock, collect } = setup();
    assign();
    const before = guard.next();
    clock.jumpWall(-2_000);
    expect(fenceReasonOf(() => guard.next())).toBe('clock-rollback');
    expect(fenceReasonOf(() => guard.nextBlock(10))).toBe('clock-rollback');
    const s = guard.status();
    expect(s).toMatchObject({ state: 'fenced', reason: 'clock-rollback' });
    expect(s.message).toMatch(/went back by 2000 ms/);
    expect(guard.canMint()).toBe(false);
    clock.advance(1_999);
    guard.check();
    expect(fenceReasonOf(() => guard.next())).toBe('clock-rollback');
    clock.advance(1);
    guard.check();
    expect(guard.status().state).toBe('serving');
    const after = guard.next();
    expect(after > before).toBe(true);
    expect(guard.counts().rollbacksFenced).toBe(1);
    expect(collect(ClockGuardMetrics.fences)).toMatchObject({ '{"reason":"clock-rollback"}': 1 });
  });

  it('signals fatal once when a clock fence outlasts the bound', () => {
    const { guard, assign, clock } = setup({ maxFenceMs: 30_000 });
    const fatal: string[] = [];
    guard.on('fatal', (why) => fatal.push(why));
    assign({ deadlineInMs: 1e9 });
    guard.next();
    clock.jumpWall(-60_000);
    expect(fenceReasonOf(() => guard.next())).toBe('clock-rollback');
    clock.advance(29_000);
    guard.check();
    expect(fatal).toEqual([]);
    clock.advance(1_001);
    guard.check();
    guard.check();
    expect(fatal).toHaveLength(1);
    expect(fatal[0]).toMatch(/fenced for more than 30000 ms/);
  });

  it('never mints at or below the floor', () => {
    const { guard, assign, clock } = setup();
    assign({ floorMs: T0 + 100 });
    expect(fenceReasonOf(() => guard.next())).toBe('waiting-for-floor');
    clock.advance(100);
    guard.check();
    expect(fenceReasonOf(() => guard.next())).toBe('waiting-for-floor');
    clock.advance(1);
    guard.check();
    expect(fieldsOf(guard.next()).timestampMs).toBe(T0 + 101 - DEFAULT_LAYOUT.epochMs);
  });

  it('waits out a floor that is only a few milliseconds ahead', () => {
    const { guard, assign, clock } = setup();
    assign({ floorMs: T0 + 3 });
    tickEvery(clock, 2);
    expect(fieldsOf(guard.next()).timestampMs).toBe(T0 + 4 - DEFAULT_LAYOUT.epochMs);
  });

  it('stops minting at the lease deadline, and resumes when a keep-alive extends it', () => {
    const { guard, assign, clock } = setup();
    assign({ deadlineInMs: 1_000 });
    clock.advance(999);
    guard.next();
    clock.advance(1);
    expect(guard.canMint()).toBe(false);
    expect(fenceReasonOf(() => guard.next())).toBe('lease');
    expect(guard.status()).toMatchObject({ state: 'fenced', reason: 'lease' });
    guard.extend({ deadlineMonoMs: clock.monoMs() - 5, ceilingMs: clock.nowMs() + 1_000 }); // a deadline never moves back
    expect(fenceReasonOf(() => guard.next())).toBe('lease');
    guard.extend({ deadlineMonoMs: clock.monoMs() + 1_000, ceilingMs: clock.nowMs() + 1_000 });
    expect(typeof guard.next()).toBe('bigint');
  });

  describe('wall ceiling (docs/design.md §5, issue 12)', () => {
    it('refuses a millisecond above the ceiling with clock-ahead, counted, while the monotonic deadline is far', () => {
      const { guard, assign, clock, collect } = setup();
      assign({ deadlineInMs: 5_000, ceilingMs: T0 + 2_000 });
      guard.next();
      // The wall clock steps forward 5 s (a VM resumed, chrony stepping it); the monotonic clock does not.
      clock.jumpWall(5_000);
      expect(guard.canMint()).toBe(false);
      expect(fenceReasonOf(() => guard.next())).toBe('clock-ahead');
      expect(fenceReasonOf(() => guard.nextBlock(10))).toBe('clock-ahead');
      expect(guard.status()).toMatchObject({ state: 'fenced', reason: 'clock-ahead', ceilingMs: T0 + 2_000 });
      expect(collect(ClockGuardMetrics.fences)).toMatchObject({ '{"reason":"clock-ahead"}': 1 });
      // Only an acknowledged last-ms at the jumped clock lifts it.
      guard.extend({ deadlineMonoMs: clock.monoMs() + 5_000, ceilingMs: clock.nowMs() + 4_000 });
      expect(fieldsOf(guard.next()).timestampMs).toBe(T0 + 5_000 - DEFAULT_LAYOUT.epochMs);
    });

    it('mints in the ceiling millisecond and not one above it, also on the per-millisecond shortcut', () => {
      const { guard, assign, clock } = setup();
      assign({ ceilingMs: T0 + 1 });
      guard.next();
      clock.advance(1);
      guard.next(); // T0 + 1, the ceiling: checked once, then the shortcut
      guard.next();
      clock.advance(1);
      expect(fenceReasonOf(() => guard.next())).toBe('clock-ahead');
      expect(guard.lastMintedMs()).toBe(T0 + 1);
    });

    it('a ceiling never moves back while the slot is held, and a new assignment sets it afresh', () => {
      const { guard, assign, clock } = setup();
      assign({ ceilingMs: T0 + 100 });
      guard.extend({ deadlineMonoMs: clock.monoMs() + 60_000, ceilingMs: T0 + 10 });
      expect(guard.status().ceilingMs).toBe(T0 + 100);
      guard.unassign('lease', 'lost');
      expect(guard.status().ceilingMs).toBe(Number.NEGATIVE_INFINITY);
      assign({ ceilingMs: T0 + 7 });
      expect(guard.status().ceilingMs).toBe(T0 + 7);
    });

    it('refuses an assignment without a ceiling', () => {
      const { guard, clock } = setup();
      expect(() =>
        guard.assign({
          region: 2,
          worker: 1,
          floorMs: T0 - 1,
          deadlineMonoMs: clock.monoMs() + 1_000,
          ceilingMs: Number.NaN,
        }),
      ).toThrow(/ceilingMs must be a number/);
    });
  });

  it('a refusal forgets the checked millisecond: a wall clock set back to it cannot mint past the deadline', () => {
    const { guard, assign, clock } = setup();
    assign({ deadlineInMs: 1_000 });
    guard.next(); // T0 checked
    clock.advance(1_000); // the deadline passes
    expect(fenceReasonOf(() => guard.next())).toBe('lease');
    clock.setWall(T0); // the wall clock goes back to the millisecond that was checked
    expect(fenceReasonOf(() => guard.next())).toBe('lease');
    expect(fenceReasonOf(() => guard.nextBlock(5))).toBe('lease');
    expect(guard.counts().idsMinted).toBe(1);
  });

  it('a deadline the guard finds passed forgets the checked millisecond, though no mint was refused', () => {
    const { guard, assign, clock } = setup();
    assign({ deadlineInMs: 1_000 });
    guard.next(); // T0 checked
    clock.advance(1_000); // the deadline passes while nothing mints (the lease's fence timer has not run)
    guard.check(); // the guard's own timer finds it
    clock.setWall(T0); // the wall clock is back in the millisecond that was checked
    expect(fenceReasonOf(() => guard.next())).toBe('lease');
    expect(guard.counts().idsMinted).toBe(1);
  });

  it('a millisecond checked within 1 ms of the deadline is not remembered: the deadline may pass inside it', () => {
    const { guard, assign, clock } = setup();
    assign({ deadlineInMs: 1 });
    guard.next(); // T0, 1 ms of monotonic time left
    clock.advance(1); // the deadline passes ...
    clock.setWall(T0); // ... while the wall clock is still in T0 (a millisecond is not an instant)
    expect(fenceReasonOf(() => guard.next())).toBe('lease');
    expect(guard.counts().idsMinted).toBe(1);
  });

  it('reads the wall clock before checking the deadline, so a stall in between cannot stamp a late millisecond', () => {
    const { guard, assign, clock } = setup();
    assign({ deadlineInMs: 1_000 });
    // The process stalls for 5 s right after reading the wall clock.
    clock.onRead = (c) => {
      c.onRead = undefined;
      c.advance(5_000);
    };
    expect(fenceReasonOf(() => guard.next())).toBe('lease');
  });

  it('fences at once when the lease is gone, and after drain', () => {
    const { guard, assign, clock } = setup();
    assign();
    guard.next();
    guard.unassign('lease', 'lease lost');
    expect(fenceReasonOf(() => guard.next())).toBe('lease');
    expect(guard.status().worker).toBeUndefined();
    assign();
    tickEvery(clock, 3); // the re-assigned slot starts above the last millisecond minted
    guard.next();
    guard.drain();
    expect(fenceReasonOf(() => guard.next())).toBe('draining');
  });

  it('fences while the time source is unhealthy', () => {
    const { guard, assign, collect } = setup();
    assign();
    guard.setTimeSource(false, 'chrony is not synchronised', 0.5);
    expect(fenceReasonOf(() => guard.next())).toBe('time-source');
    expect(guard.status().message).toMatch(/not synchronised/);
    guard.setTimeSource(true, 'synchronised', 0.0001);
    expect(typeof guard.next()).toBe('bigint');
    expect(collect(ClockGuardMetrics.clockOffset)).toEqual({ '{}': 0.0001 });
    expect(collect(ClockGuardMetrics.fences)).toMatchObject({ '{"reason":"time-source"}': 1 });
  });

  it('emits a state event on each change', () => {
    const { guard, assign, clock } = setup();
    const seen: GuardStatus[] = [];
    guard.on('state', (s) => seen.push(s));
    assign({ deadlineInMs: 10 });
    clock.advance(10);
    guard.check();
    guard.check();
    guard.extend({ deadlineMonoMs: clock.monoMs() + 100, ceilingMs: clock.nowMs() + 100 });
    expect(seen.map((s) => s.reason ?? s.state)).toEqual(['serving', 'lease', 'serving']);
  });

  it('keeps IDs increasing when re-assigned to another worker', () => {
    const { guard, assign, clock } = setup();
    assign({ worker: 100 });
    const a = guard.next();
    guard.unassign('lease', 'lost');
    assign({ worker: 3 });
    // The new slot's floor is at least the last millisecond minted: the next ID waits for the next one.
    expect(guard.status().floorMs).toBe(T0);
    tickEvery(clock, 3);
    const b = guard.next();
    expect(fieldsOf(b)).toMatchObject({ worker: 3, timestampMs: T0 + 1 - DEFAULT_LAYOUT.epochMs });
    expect(b > a).toBe(true);
  });

  describe('nextBlock', () => {
    it('returns consecutive blocks totalling the count, continuing in the next millisecond', () => {
      const { guard, assign, clock } = setup();
      assign();
      guard.nextBlock(4000);
      tickEvery(clock, 3);
      const blocks = guard.nextBlock(500);
      expect(blocks.map((b) => b.count)).toEqual([96, 404]);
      const [a, b] = blocks as [MintedBlock, MintedBlock];
      expect(b.first > a.first + 95n).toBe(true);
      expect(guard.counts().idsMinted).toBe(4500);
    });

    it('serves a request larger than one millisecond', () => {
      const { guard, assign, clock } = setup();
      assign();
      tickEvery(clock, 3);
      const blocks = guard.nextBlock(10_000);
      expect(blocks.reduce((n, b) => n + b.count, 0)).toBe(10_000);
      expect(blocks.map((b) => b.count)).toEqual([4096, 4096, 1808]);
    });

    it.each([[0], [65_537], [1.5], [-1]])('refuses count %p naming the range', (count) => {
      const { guard, assign } = setup();
      assign();
      expect(() => guard.nextBlock(count)).toThrow(/count must be an integer from 1 to 65536/);
    });
  });

  it('refuses bad options', () => {
    expect(() => createGuardedMinter({ region: 8 })).toThrow(/region must be an integer from 0 to 7/);
    expect(() => createGuardedMinter({ region: 0, maxRollbackMs: -1, checkIntervalMs: 0 })).toThrow(/maxRollbackMs/);
  });
});

describe('GuardedMinter properties', () => {
  type Op =
    | { op: 'mint'; count: number }
    | { op: 'advance'; ms: number }
    | { op: 'jump'; ms: number }
    | { op: 'wallStep'; ms: number }
    | { op: 'keepalive' }
    | { op: 'timeSource'; healthy: boolean }
    | { op: 'reassign'; worker: number; floorAhead: number };
  const op: fc.Arbitrary<Op> = fc.oneof(
    { weight: 6, arbitrary: fc.record({ op: fc.constant('mint' as const), count: fc.integer({ min: 1, max: 6000 }) }) },
    { weight: 3, arbitrary: fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 3000 }) }) },
    { weight: 2, arbitrary: fc.record({ op: fc.constant('jump' as const), ms: fc.integer({ min: -5000, max: 50 }) }) },
    // The wall clock running ahead of the monotonic one: a frozen-and-resumed VM, a clock stepped forward.
    {
      weight: 1,
      arbitrary: fc.record({ op: fc.constant('wallStep' as const), ms: fc.integer({ min: 1, max: 8000 }) }),
    },
    { weight: 2, arbitrary: fc.record({ op: fc.constant('keepalive' as const) }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant('timeSource' as const), healthy: fc.boolean() }) },
    {
      weight: 1,
      arbitrary: fc.record({
        op: fc.constant('reassign' as const),
        worker: fc.integer({ min: 0, max: 127 }),
        floorAhead: fc.integer({ min: -100, max: 100 }),
      }),
    },
  );

  it('mints unique, strictly increasing IDs, never at or below the floor, past the deadline or above the ceiling', () => {
    fc.assert(
      fc.property(fc.array(op, { minLength: 1, maxLength: 120 }), (ops) => {
        const clock = createTestClock(T0, 1_000);
        const guard: GuardedMinter = createGuardedMinter({ region: 1, clock, checkIntervalMs: 0 });
        let floor = T0 - 1;
        let deadline = clock.monoMs() + 3_000;
        let ceiling = clock.nowMs() + 3_000;
        guard.assign({ region: 1, worker: 5, floorMs: floor, deadlineMonoMs: deadline, ceilingMs: ceiling });
        tickEvery(clock, 7); // busy waits see time pass
        let last = -1n;
        for (const o of ops) {
          switch (o.op) {
            case 'advance':
              clock.advance(o.ms);
              break;
            case 'jump':
            case 'wallStep':
              clock.jumpWall(o.ms);
              break;
            case 'keepalive':
              // As the lease does: last-ms never goes down, the ceiling is last-ms + TTL − margin.
              deadline = clock.monoMs() + 3_000;
              ceiling = Math.max(ceiling, clock.nowMs() + 3_000);
              guard.extend({ deadlineMonoMs: deadline, ceilingMs: ceiling });
              break;
            case 'timeSource':
              guard.setTimeSource(o.healthy, o.healthy ? 'ok' : 'unsynchronised');
              break;
            case 'reassign':
              guard.unassign('lease', 'lost');
              floor = Math.max(floor, clock.nowMs() + o.floorAhead);
              deadline = clock.monoMs() + 3_000;
              ceiling = clock.nowMs() + 3_000;
              guard.assign({
                region: 1,
                worker: o.worker,
                floorMs: floor,
                deadlineMonoMs: deadline,
                ceilingMs: ceiling,
              });
              break;
            case 'mint': {
              let blocks;
              try {
                blocks = guard.nextBlock(o.count);
              } catch (e) {
                if (!isFencedError(e)) throw e;
                continue;
              }
              // Minting succeeded, so the deadline had not passed when the wall clock was read.
              for (const b of blocks) {
                expect(b.first > last).toBe(true);
                expect(b.unixMs).toBeGreaterThan(floor);
                expect(b.unixMs).toBeLessThanOrEqual(ceiling);
                last = b.first + BigInt(b.count) - 1n;
              }
              expect(clock.monoMs()).toBeLessThan(deadline);
              break;
            }
          }
          guard.check();
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe('systemClock', () => {
  it("is the core's one definition, not a copy (issue 34: one home for a contract and its default)", () => {
    expect(systemClock).toBe(coreSystemClock);
  });
});
