/**
 * The clocks a process reads, declared once for every package that reads time (the lease, the clock guard, the
 * embedded source; issue 34): core itself has no clock (the minter is given the millisecond), this is the contract
 * the others share, so a simulator or a test can give each simulated process its own (tools/sim). Two clocks,
 * because they answer different questions:
 * - the wall clock fills the timestamp field and `last-ms` records (it can jump, backwards too: that is what the
 *   guard guards);
 * - the monotonic clock measures durations (fence deadlines, fence time, ages): it never jumps.
 */
export interface ClockSource {
  /** Wall-clock Unix milliseconds, an integer (`Date.now()`). */
  nowMs(): number;
  /** Monotonic milliseconds from an arbitrary origin, fractional (`performance.now()`). */
  monoMs(): number;
}
