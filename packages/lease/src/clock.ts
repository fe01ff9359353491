/**
 * The clocks the lease reads: the wall clock for `last-ms` records and floors, the monotonic clock for fence
 * deadlines. The contract is declared once, in `@idgen/core` (which `@idgen/clock-guard` uses too), so one injected
 * source serves the lease and the guard of a process (tools/sim gives each simulated process its own).
 */
export type { ClockSource } from '@idgen/core';
// The real clocks are defined once too, in @idgen/core beside the contract.
export { systemClock } from '@idgen/core';
