/**
 * The clocks the lease reads. The same shape as `ClockSource` in `@idgen/clock-guard` (which satisfies it
 * structurally), declared here so the lease does not depend on the guard for a type:
 * - the wall clock for `last-ms` records and floors;
 * - the monotonic clock for fence deadlines (it never jumps).
 */
export interface ClockSource {
  /** Wall-clock Unix milliseconds, an integer (`Date.now()`). */
  nowMs(): number;
  /** Monotonic milliseconds from an arbitrary origin, fractional (`performance.now()`). */
  monoMs(): number;
}

/** The process's real clocks. */
export const systemClock: ClockSource = Object.freeze({
  nowMs: () => Date.now(),
  monoMs: () => performance.now(),
});
