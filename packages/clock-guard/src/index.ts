/**
 * `@idgen/clock-guard`: the clock minting trusts, and the rules for when it cannot be trusted
 * (docs/design.md §4). The server and the embedded mode mint through a {@link GuardedMinter}.
 *
 * @packageDocumentation
 */
export { systemClock } from './clock.js';
export type { ClockSource } from './clock.js';
// A clock tests move by hand: `@idgen/clock-guard/testing`.
export { FENCE_REASONS, FencedError, isFencedError } from './errors.js';
export type { FenceReason } from './errors.js';
export {
  DEFAULT_MAX_FENCE_MS,
  DEFAULT_MAX_ROLLBACK_MS,
  GuardedMinter,
  MAX_BLOCK_REQUEST,
  createGuardedMinter,
} from './guard.js';
export { MintAbandonedError, createMintScheduler } from './mint-scheduler.js';
export type { MintScheduler, MintSchedulerOptions, SchedulableMinter } from './mint-scheduler.js';
export type {
  GuardBounds,
  GuardStatus,
  GuardedMinterOptions,
  LeaseExtension,
  TimeSourceHealth,
  WorkerAssignment,
} from './guard.js';
export { ClockGuardAttributes, ClockGuardMetrics } from './metrics.js';
export type { GuardCounters } from './metrics.js';
export {
  DEFAULT_MAX_OFFSET_MS,
  DEFAULT_TIME_SOURCE_INTERVAL_MS,
  createTimeSourceCheck,
  judgeTracking,
  parseChronyTracking,
  readChrony,
  untilTimeSourceHealthy,
} from './time-source.js';
export type {
  ChronyTracking,
  TimeSourceCheck,
  TimeSourceCheckOptions,
  TimeSourceLogger,
  TimeSourceProblem,
  TimeSourceReading,
  UntilHealthyOptions,
} from './time-source.js';
