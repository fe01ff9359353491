import { DEFAULT_LAYOUT, createLayout } from '@idgen/core';
import { ceilingIdsPerSecond, parseBenchArgs } from './environment.js';
import { runRounds } from './rounds.js';

const defaults = { rounds: 5, roundMs: 500, check: 4_096_000, seconds: 10 };

describe('ceilingIdsPerSecond', () => {
  it('is 4,096,000 IDs/s for the default 12-bit sequence (docs/design.md §1)', () => {
    expect(ceilingIdsPerSecond(DEFAULT_LAYOUT)).toBe(4_096_000);
  });

  it('follows the sequence width of a custom layout', () => {
    const layout = createLayout({ timestampBits: 43, regionBits: 3, workerBits: 7, sequenceBits: 10 });
    expect(ceilingIdsPerSecond(layout)).toBe(1_024_000);
  });
});

describe('parseBenchArgs', () => {
  it('keeps the defaults when no flag is given', () => {
    expect(parseBenchArgs([], defaults)).toEqual(defaults);
  });

  it('reads each flag', () => {
    expect(parseBenchArgs(['--rounds', '3', '--round-ms=200', '--check', '1000', '--seconds', '2'], defaults)).toEqual({
      rounds: 3,
      roundMs: 200,
      check: 1000,
      seconds: 2,
    });
  });

  it.each([['--rounds', '0'], ['--check', '1e3x'], ['--round-ms=-5'], ['--seconds', '1.5']])(
    'rejects %s %s',
    (...argv: string[]) => {
      expect(() => parseBenchArgs(argv, defaults)).toThrow(RangeError);
    },
  );

  it('rejects an unknown flag', () => {
    expect(() => parseBenchArgs(['--round', '3'], defaults)).toThrow();
  });

  it('reads --baseline and --baseline-name where the benchmark takes them', () => {
    const argv = ['--seconds', '5', '--baseline', '/tmp/idgen-base', '--baseline-name', '2f8b955'];
    expect(parseBenchArgs(argv, defaults, { baseline: true })).toEqual({
      ...defaults,
      seconds: 5,
      baseline: '/tmp/idgen-base',
      baselineName: '2f8b955',
    });
    const parsed = parseBenchArgs(['--baseline=/tmp/b'], defaults, { baseline: true });
    expect(parsed.baseline).toBe('/tmp/b');
    expect('baselineName' in parsed).toBe(false);
  });

  it('leaves the baseline out when it is not given', () => {
    const parsed = parseBenchArgs([], defaults, { baseline: true });
    expect(parsed).toEqual(defaults);
    expect('baseline' in parsed).toBe(false);
  });

  it('rejects --baseline in a benchmark that does not compare builds', () => {
    expect(() => parseBenchArgs(['--baseline', '/tmp/b'], defaults)).toThrow(/baseline/);
  });

  it('reads --builds-only with a --baseline, and rejects it without one or where builds are not compared', () => {
    expect(parseBenchArgs(['--baseline', '/tmp/b', '--builds-only'], defaults, { baseline: true })).toEqual({
      ...defaults,
      baseline: '/tmp/b',
      buildsOnly: true,
    });
    expect(() => parseBenchArgs(['--builds-only'], defaults, { baseline: true })).toThrow(/--baseline/);
    expect(() => parseBenchArgs(['--baseline', '/tmp/b', '--builds-only'], defaults)).toThrow();
  });

  it('rejects an empty --baseline and a --baseline-name without --baseline', () => {
    expect(() => parseBenchArgs(['--baseline='], defaults, { baseline: true })).toThrow(RangeError);
    expect(() => parseBenchArgs(['--baseline-name', 'x'], defaults, { baseline: true })).toThrow(RangeError);
  });
});

describe('runRounds', () => {
  it('runs the warm-up rounds untimed and reports the median of the timed ones', () => {
    const elapsed = [1e9, 1e9, 2e9, 4e9]; // warm-up, then 1 s, 2 s, 4 s for 1,000 IDs each
    let call = 0;
    const report = runRounds(
      (budgetMs) => {
        expect(budgetMs).toBe(50);
        return { ids: 1000, calls: 100, elapsedNs: elapsed[call++] as number };
      },
      { rounds: 3, warmupRounds: 1, roundMs: 50 },
    );
    expect(call).toBe(4);
    expect(report.idsPerSecond).toEqual([1000, 500, 250]);
    expect(report.medianIdsPerSecond).toBe(500);
    expect(report.minIdsPerSecond).toBe(250);
    expect(report.maxIdsPerSecond).toBe(1000);
    expect(report.medianNsPerCall).toBe(2e7);
  });

  it('rejects zero rounds', () => {
    expect(() => runRounds(() => ({ ids: 1, calls: 1, elapsedNs: 1 }), { rounds: 0 })).toThrow(RangeError);
  });
});
