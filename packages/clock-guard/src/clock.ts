import type { ClockSource } from '@idgen/core';

// The contract and the real clocks are declared once, in @idgen/core (docs/design.md §2); re-exported for the guard's
// callers.
export type { ClockSource } from '@idgen/core';
export { systemClock } from '@idgen/core';

/**
 * A clock that tests drive by hand. Time only moves when the test moves it; `onRead` lets a test move it
 * while the code under test is waiting (a busy wait reads the clock in a loop).
 */
export interface TestClock extends ClockSource {
  /** Moves both clocks forward by `ms`. */
  advance(ms: number): void;
  /** Moves only the wall clock by `deltaMs` (negative: a rollback); the monotonic clock does not move. */
  jumpWall(deltaMs: number): void;
  /** Sets the wall clock; the monotonic clock does not move. */
  setWall(unixMs: number): void;
  /** Called on every wall-clock read, after which the read happens; default: nothing. */
  onRead: ((clock: TestClock) => void) | undefined;
}

/** Creates a {@link TestClock} at `wallMs` (default the seed's example millisecond) and monotonic `monoMs`. */
export function createTestClock(wallMs = 1_728_898_200_123, monoMs = 1_000): TestClock {
  let wall = wallMs;
  let mono = monoMs;
  const clock: TestClock = {
    onRead: undefined,
    nowMs() {
      clock.onRead?.(clock);
      return wall;
    },
    monoMs: () => mono,
    advance(ms: number) {
      if (!(ms >= 0)) throw new RangeError(`advance needs a non-negative number of ms, got ${ms}`);
      wall += ms;
      mono += ms;
    },
    jumpWall(deltaMs: number) {
      wall += deltaMs;
    },
    setWall(unixMs: number) {
      wall = unixMs;
    },
  };
  return clock;
}
