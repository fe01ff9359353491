import { median } from './stats.js';

/** What one timed round of a throughput loop reports: how many IDs it produced, in how long. */
export interface RoundResult {
  /** IDs produced (each consumed as it was produced). */
  readonly ids: number;
  /** Calls that returned IDs (a block call counts once): the block path's cost is per call. */
  readonly calls: number;
  /** Wall time of the round, nanoseconds. */
  readonly elapsedNs: number;
}

/** A throughput loop: runs for about `budgetMs` milliseconds and reports what it did. */
export type Round = (budgetMs: number) => RoundResult;

/** How many rounds to run, and how long each lasts. */
export interface RoundsOptions {
  /** Timed rounds; the figure reported is their median. Default 5. */
  readonly rounds?: number;
  /** Untimed rounds first, so the JIT has compiled the loop before it is measured. Default 1. */
  readonly warmupRounds?: number;
  /** Length of each round, milliseconds. Default 500. */
  readonly roundMs?: number;
}

/** The rates of every timed round and their medians. */
export interface RoundsReport {
  /** IDs per second of each timed round, in the order they ran. */
  readonly idsPerSecond: readonly number[];
  readonly medianIdsPerSecond: number;
  readonly minIdsPerSecond: number;
  readonly maxIdsPerSecond: number;
  /** Median nanoseconds per call that returned IDs. */
  readonly medianNsPerCall: number;
}

/**
 * Runs `round` for the warm-up rounds, then the timed rounds, and reports the median rate. Several
 * short rounds and their median, rather than one long run, because the machine is shared: a round that
 * another process slowed down is an outlier, not the figure.
 */
export function runRounds(round: Round, options: RoundsOptions = {}): RoundsReport {
  const rounds = options.rounds ?? 5;
  const warmupRounds = options.warmupRounds ?? 1;
  const roundMs = options.roundMs ?? 500;
  if (!Number.isInteger(rounds) || rounds < 1) throw new RangeError(`rounds must be an integer ≥ 1, got ${rounds}`);
  for (let i = 0; i < warmupRounds; i++) round(roundMs);
  const rates: number[] = [];
  const nsPerCall: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const result = round(roundMs);
    rates.push((result.ids * 1e9) / result.elapsedNs);
    nsPerCall.push(result.calls === 0 ? Number.NaN : result.elapsedNs / result.calls);
  }
  return {
    idsPerSecond: rates,
    medianIdsPerSecond: median(rates),
    minIdsPerSecond: Math.min(...rates),
    maxIdsPerSecond: Math.max(...rates),
    medianNsPerCall: nsPerCall.some(Number.isNaN) ? Number.NaN : median(nsPerCall),
  };
}

/** Nanoseconds on the monotonic clock, as a number (exact to well beyond any benchmark's length). */
export function nowNs(): number {
  return Number(process.hrtime.bigint());
}
