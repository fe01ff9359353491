/**
 * Order statistics for benchmark rounds and latency samples. Plain arrays of numbers in, numbers out;
 * nothing here reads a clock, so the specs can check every edge.
 */

/** A copy of `values` sorted ascending (numbers, not strings: `[10, 9].sort()` puts 10 first). */
export function sortedAscending(values: readonly number[]): number[] {
  return [...values].sort((a, b) => a - b);
}

/**
 * The median of `values`: the middle value, or the mean of the two middle values for an even count.
 * Benchmarks report the median of several rounds because one round slowed by another process on this
 * shared machine should not move the figure (a mean would follow it).
 */
export function median(values: readonly number[]): number {
  return percentile(values, 50);
}

/**
 * The `p`-th percentile of `values` (0 ≤ p ≤ 100), with linear interpolation between the two closest
 * ranks (the "R-7" definition spreadsheets and NumPy use by default): p = 0 is the minimum, p = 100 the
 * maximum, p = 50 the median. Throws a `RangeError` for no values, a non-finite value or p outside 0…100.
 */
export function percentile(values: readonly number[], p: number): number {
  return percentileOfSorted(checkedSorted(values), p);
}

/**
 * Like {@link percentile}, for values already sorted ascending: latency runs sort their samples once and
 * read several percentiles from them.
 */
export function percentileOfSorted(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) throw new RangeError('percentile of no values');
  if (!(p >= 0 && p <= 100)) throw new RangeError(`percentile must be from 0 to 100, got ${String(p)}`);
  const rank = (p / 100) * (sorted.length - 1);
  const below = Math.floor(rank);
  const above = Math.ceil(rank);
  const low = sorted[below] as number;
  const high = sorted[above] as number;
  return low + (high - low) * (rank - below);
}

/** The summary a table prints for one case measured over several rounds or many samples. */
export interface Summary {
  readonly count: number;
  readonly min: number;
  readonly median: number;
  readonly p99: number;
  readonly max: number;
}

/** Minimum, median, 99th percentile and maximum of `values` (at least one finite value). */
export function summarize(values: readonly number[]): Summary {
  const sorted = checkedSorted(values);
  return {
    count: sorted.length,
    min: sorted[0] as number,
    median: percentileOfSorted(sorted, 50),
    p99: percentileOfSorted(sorted, 99),
    max: sorted[sorted.length - 1] as number,
  };
}

function checkedSorted(values: readonly number[]): number[] {
  if (values.length === 0) throw new RangeError('no values to summarize');
  for (const value of values) {
    if (!Number.isFinite(value)) throw new RangeError(`values must be finite numbers, got ${String(value)}`);
  }
  return sortedAscending(values);
}

/**
 * Counts the duplicates among `ids`: how many entries equal an earlier one once sorted (three equal
 * IDs count as two duplicates). Sorts `ids` in place; a typed array keeps millions of IDs compact and
 * sorts natively, where a `Set<bigint>` of the same size measures the garbage collector.
 */
export function countDuplicates(ids: BigUint64Array): number {
  ids.sort();
  let duplicates = 0;
  for (let i = 1; i < ids.length; i++) {
    if (ids[i] === ids[i - 1]) duplicates++;
  }
  return duplicates;
}
