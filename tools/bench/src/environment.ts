import { cpus, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import type { Layout } from '@idgen/core';

/**
 * The physical ceiling of one worker under `layout`: its sequence values per millisecond, times 1,000
 * (4,096,000 IDs/s for the default 12-bit sequence: docs/design.md §1). Faster than this from one worker means
 * a duplicate or another layout.
 */
export function ceilingIdsPerSecond(layout: Layout): number {
  return (layout.maxSequence + 1) * 1000;
}

/**
 * One line naming what the figures were measured on: Node version, CPU model and count, load average.
 * Benchmarks print it first because a figure without its machine cannot be compared.
 */
export function describeMachine(): string {
  const cpuList = cpus();
  const model = cpuList[0]?.model.trim() ?? 'unknown CPU';
  const load = loadavg()
    .map((value) => value.toFixed(2))
    .join(' ');
  return `node ${process.version}, ${cpuList.length} × ${model}, load average ${load}`;
}

/** Command-line knobs every benchmark takes. */
export interface BenchArgs {
  /** Timed rounds per case (median reported). */
  readonly rounds: number;
  /** Length of one round, milliseconds. */
  readonly roundMs: number;
  /** IDs collected per implementation for the duplicate pass. */
  readonly check: number;
  /** Seconds per load-generator case (server and client benchmarks). */
  readonly seconds: number;
  /**
   * `--baseline <dir>` (bench:server only): a checkout of another commit with a built `apps/server`, measured
   * beside this one in the same run. Absent: no comparison.
   */
  readonly baseline?: string;
  /** `--baseline-name <text>`: the baseline's label in the report (default: its commit if `git` can read one, else the dir). */
  readonly baselineName?: string;
  /** `--builds-only` (with `--baseline`): only the builds' comparison, not the report before it. */
  readonly buildsOnly?: boolean;
}

/** Which optional knobs a benchmark takes beyond the four every one does. */
export interface BenchArgsOptions {
  /** Accept `--baseline <dir>` and `--baseline-name <text>` (bench:server). Without it they are unknown flags. */
  readonly baseline?: boolean;
}

/**
 * Parses `--rounds N`, `--round-ms N`, `--check N` and `--seconds N` from `argv` over `defaults` (and, with
 * `options.baseline`, `--baseline <dir>`, `--baseline-name <text>` and `--builds-only`). A value that is not a positive integer
 * throws a `RangeError` naming the flag, as do an empty `--baseline` and a `--baseline-name` without
 * `--baseline`: a benchmark run with a mistyped knob should stop, not print figures measured some other way.
 */
export function parseBenchArgs(
  argv: readonly string[],
  defaults: BenchArgs,
  options: BenchArgsOptions = {},
): BenchArgs {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      rounds: { type: 'string' },
      'round-ms': { type: 'string' },
      check: { type: 'string' },
      seconds: { type: 'string' },
      // Unknown (so rejected by `strict`) where the benchmark would ignore them: a benchmark that took the flag and
      // compared nothing would print figures that look like a comparison.
      ...(options.baseline === true
        ? {
            baseline: { type: 'string' as const },
            'baseline-name': { type: 'string' as const },
            'builds-only': { type: 'boolean' as const },
          }
        : {}),
    },
    strict: true,
    allowPositionals: false,
  });
  const baseline = values['baseline'] as string | undefined;
  const baselineName = values['baseline-name'] as string | undefined;
  if (baseline === '') throw new RangeError('--baseline must name a directory (a checkout with a built apps/server)');
  if (baselineName !== undefined && baseline === undefined)
    throw new RangeError('--baseline-name labels a --baseline: give --baseline <dir> too');
  const buildsOnly = values['builds-only'] === true;
  if (buildsOnly && baseline === undefined)
    throw new RangeError('--builds-only compares two builds: give --baseline <dir> too');
  const positive = (flag: string, raw: string | undefined, fallback: number): number => {
    if (raw === undefined) return fallback;
    const value = Number(raw);
    if (!Number.isSafeInteger(value) || value < 1) {
      throw new RangeError(`--${flag} must be a positive integer, got ${JSON.stringify(raw)}`);
    }
    return value;
  };
  return {
    rounds: positive('rounds', values.rounds, defaults.rounds),
    roundMs: positive('round-ms', values['round-ms'], defaults.roundMs),
    check: positive('check', values.check, defaults.check),
    seconds: positive('seconds', values.seconds, defaults.seconds),
    ...(baseline === undefined ? {} : { baseline }),
    ...(baselineName === undefined ? {} : { baselineName }),
    ...(buildsOnly ? { buildsOnly } : {}),
  };
}
