import { countDuplicates, median, percentile, percentileOfSorted, sortedAscending, summarize } from './stats.js';

describe('median', () => {
  it.each([
    [[7], 7],
    [[3, 1, 2], 2],
    [[4, 1, 3, 2], 2.5],
    [[10, 9, 100, 1, 5], 9],
    [[-2, -2, -2], -2],
  ])('median(%j) = %d', (values, expected) => {
    expect(median(values)).toBe(expected);
  });

  it('sorts numerically, not as strings', () => {
    // [10, 9, 8].sort() without a comparator gives [10, 8, 9]: the median would read 8.
    expect(median([10, 9, 8])).toBe(9);
  });

  it('does not reorder its input', () => {
    const values = [3, 1, 2];
    median(values);
    expect(values).toEqual([3, 1, 2]);
  });
});

describe('percentile', () => {
  const hundred = Array.from({ length: 100 }, (_, i) => 100 - i); // 100 … 1, unsorted on purpose

  it('returns the extremes at 0 and 100', () => {
    expect(percentile(hundred, 0)).toBe(1);
    expect(percentile(hundred, 100)).toBe(100);
  });

  it('interpolates between the two closest ranks (R-7)', () => {
    expect(percentile(hundred, 50)).toBe(50.5);
    expect(percentile(hundred, 99)).toBeCloseTo(99.01, 10);
    expect(percentile([0, 10], 25)).toBe(2.5);
    expect(percentile([1, 2, 3, 4, 5], 90)).toBeCloseTo(4.6, 10);
  });

  it('gives the single value for one sample at any percentile', () => {
    expect(percentile([42], 0)).toBe(42);
    expect(percentile([42], 99)).toBe(42);
  });

  it('reads sorted typed arrays too', () => {
    expect(percentileOfSorted(Float64Array.from([1, 2, 3, 4]), 50)).toBe(2.5);
  });

  it.each([-1, 100.5, Number.NaN])('rejects percentile %d', (p) => {
    expect(() => percentile([1, 2], p)).toThrow(RangeError);
  });

  it('rejects no values and non-finite values', () => {
    expect(() => percentile([], 50)).toThrow('no values');
    expect(() => percentile([1, Number.POSITIVE_INFINITY], 50)).toThrow('finite');
    expect(() => median([Number.NaN])).toThrow(RangeError);
  });
});

describe('summarize', () => {
  it('reports count, min, median, p99 and max', () => {
    const samples = [5, 1, 4, 2, 3];
    expect(summarize(samples)).toEqual({ count: 5, min: 1, median: 3, p99: 4.96, max: 5 });
  });
});

describe('sortedAscending', () => {
  it('copies and sorts numerically', () => {
    const values = [100, 20, 3];
    expect(sortedAscending(values)).toEqual([3, 20, 100]);
    expect(values).toEqual([100, 20, 3]);
  });
});

describe('countDuplicates', () => {
  it('counts each repeat of an earlier ID once', () => {
    const ids = BigUint64Array.from([5n, 1n, 5n, 2n, 5n, 1n, 2n ** 63n - 1n]);
    // 5 appears three times (two duplicates), 1 twice (one duplicate).
    expect(countDuplicates(ids)).toBe(3);
  });

  it('finds none among distinct IDs, whatever their order', () => {
    expect(countDuplicates(BigUint64Array.from([3n, 2n, 1n, 2n ** 64n - 1n, 0n]))).toBe(0);
    expect(countDuplicates(new BigUint64Array(0))).toBe(0);
  });
});
