/**
 * `@idgen/bench`: the project's benchmarks (`npm run bench:core`, `bench:clock-guard`, `bench:server`,
 * `bench:client`) and the helpers they share: order statistics, table formatting, timed rounds.
 *
 * @packageDocumentation
 */
export { median, percentile, percentileOfSorted, sortedAscending, summarize, countDuplicates } from './stats.js';
export type { Summary } from './stats.js';
export { formatTable, formatCount, formatShare, formatNanoseconds } from './table.js';
export type { Column } from './table.js';
export { runRounds, nowNs } from './rounds.js';
export type { Round, RoundResult, RoundsOptions, RoundsReport } from './rounds.js';
export { ceilingIdsPerSecond, describeMachine, parseBenchArgs } from './environment.js';
export type { BenchArgs } from './environment.js';
