import { readFile } from 'node:fs/promises';
import { findOnPath, spawnProcess } from '@idgen/testing';
import { percentileOfSorted } from './stats.js';

/** What to say when h2load is missing: benchmarks are not part of CI, but they never skip silently. */
export const H2LOAD_MISSING_MESSAGE =
  'h2load not found on PATH: bench:server loads the node with h2load from nghttp2. ' +
  'Install it with `apt-get install nghttp2-client` (Debian/Ubuntu), then run `npm run bench:server` again.';

/** Where h2load is, or a thrown `Error` with {@link H2LOAD_MISSING_MESSAGE}. */
export function requireH2load(): string {
  const found = findOnPath('h2load');
  if (found === undefined) throw new Error(H2LOAD_MISSING_MESSAGE);
  return found;
}

/** One h2load run: a URL, a fixed request body, headers, how many clients and streams, how long. */
export interface H2loadRun {
  readonly url: string;
  /** File holding the request body (sent with every request). */
  readonly bodyFile: string;
  readonly headers: readonly string[];
  /** Connections (`-c`). */
  readonly clients: number;
  /** Concurrent streams per connection (`-m`). */
  readonly streams: number;
  /** Measured seconds (`-D`), after `warmupSeconds` unmeasured. */
  readonly seconds: number;
  readonly warmupSeconds: number;
  /** Requests per second per client (`--rps`); absent: as fast as the server answers. */
  readonly rpsPerClient?: number;
  /** Per-request log (`--log-file`), for the percentiles. */
  readonly logFile: string;
}

/** What a run measured. */
export interface H2loadResult {
  readonly requestsPerSecond: number;
  readonly succeeded: number;
  /** Failed, errored or timed-out requests plus non-2xx responses. */
  readonly failed: number;
  /** Latency until the end of the response, microseconds, over the 2xx requests of the log. */
  readonly p50Us: number;
  readonly p99Us: number;
  readonly samples: number;
}

/** Runs h2load once (one thread: the other core is the server's) and parses its summary and log. */
export async function runH2load(h2load: string, run: H2loadRun): Promise<H2loadResult> {
  const args = [
    '-t', '1',
    '-c', String(run.clients),
    '-m', String(run.streams),
    '-D', String(run.seconds),
    `--warm-up-time=${run.warmupSeconds}`,
    '-d', run.bodyFile,
    `--log-file=${run.logFile}`,
    ...run.headers.flatMap((header) => ['-H', header]),
    ...(run.rpsPerClient === undefined ? [] : [`--rps=${run.rpsPerClient}`]),
    run.url,
  ];
  const child = spawnProcess(h2load, args);
  const exit = await child.exited;
  const text = child.stdoutLines.join('\n');
  if (exit.code !== 0) throw new Error(`h2load exited with ${String(exit.code ?? exit.signal)}:\n${child.tail(20)}`);
  return { ...parseH2loadSummary(text), ...(await latencyFromLog(run.logFile)) };
}

/**
 * Reads h2load's summary: `finished in 10.00s, 21456.30 req/s, …`, `requests: N total, … S succeeded,
 * F failed, E errored, T timeout` and `status codes: A 2xx, B 3xx, C 4xx, D 5xx`.
 * Throws when a line is missing: a summary it cannot read must not turn into a figure.
 */
export function parseH2loadSummary(text: string): Omit<H2loadResult, 'p50Us' | 'p99Us' | 'samples'> {
  const finished = /finished in [\d.]+\w+, ([\d.]+) req\/s/.exec(text);
  const requests = /requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout/.exec(text);
  const status = /status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx/.exec(text);
  if (finished === null || requests === null || status === null) {
    throw new Error(`could not read h2load's summary:\n${text}`);
  }
  const n = (m: RegExpExecArray, i: number): number => Number(m[i]);
  return {
    requestsPerSecond: n(finished, 1),
    succeeded: n(status, 1),
    failed: n(requests, 2) + n(requests, 3) + n(requests, 4) + n(status, 2) + n(status, 3) + n(status, 4),
  };
}

/** p50 and p99 of the 2xx rows of an h2load `--log-file` (start µs, status, µs to end of response). */
export async function latencyFromLog(logFile: string): Promise<{ p50Us: number; p99Us: number; samples: number }> {
  const text = await readFile(logFile, 'utf8');
  const latencies: number[] = [];
  for (const line of text.split('\n')) {
    const [, status, micros] = line.split('\t');
    if (status !== undefined && status.startsWith('2') && micros !== undefined) latencies.push(Number(micros));
  }
  if (latencies.length === 0) return { p50Us: Number.NaN, p99Us: Number.NaN, samples: 0 };
  const sorted = Float64Array.from(latencies).sort();
  return { p50Us: percentileOfSorted(sorted, 50), p99Us: percentileOfSorted(sorted, 99), samples: sorted.length };
}
