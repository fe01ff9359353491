import { readFile, rm } from 'node:fs/promises';
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
  /**
   * Per-request log (`--log-file`), for the percentiles. h2load APPENDS to an existing log, so
   * {@link runH2load} deletes it first: a reused name would mix earlier runs into this run's percentiles.
   */
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
  readonly p999Us: number;
  readonly samples: number;
}

/** Runs h2load once (one thread: the other core is the server's) and parses its summary and log. */
export async function runH2load(h2load: string, run: H2loadRun): Promise<H2loadResult> {
  const exit = await startH2load(h2load, run);
  return { ...exit, ...(await latencyFromLogs([run.logFile])) };
}

/** Starts one h2load process (after deleting its old log) and reads its summary once it exits. */
async function startH2load(
  h2load: string,
  run: H2loadRun,
): Promise<Omit<H2loadResult, 'p50Us' | 'p99Us' | 'p999Us' | 'samples'>> {
  await rm(run.logFile, { force: true });
  const args = [
    '-t',
    '1',
    '-c',
    String(run.clients),
    '-m',
    String(run.streams),
    '-D',
    String(run.seconds),
    `--warm-up-time=${run.warmupSeconds}`,
    '-d',
    run.bodyFile,
    `--log-file=${run.logFile}`,
    ...run.headers.flatMap((header) => ['-H', header]),
    ...(run.rpsPerClient === undefined ? [] : [`--rps=${run.rpsPerClient}`]),
    run.url,
  ];
  const child = spawnProcess(h2load, args);
  const exit = await child.exited;
  const text = child.stdoutLines.join('\n');
  if (exit.code !== 0) throw new Error(`h2load exited with ${String(exit.code ?? exit.signal)}:\n${child.tail(20)}`);
  return parseH2loadSummary(text);
}

/** h2load's `--rps` timer fires every 10 ms (nghttp2 1.52: `max(0.01, 1 / rps)`). */
export const H2LOAD_RPS_TICK_MS = 10;

/**
 * A fixed offered load of `rate` req/s spread over `processes` independent h2load processes (one connection
 * each, `rate / processes` req/s), started {@link H2LOAD_RPS_TICK_MS}`/ processes` apart.
 *
 * Why: one h2load process sends its whole `--rps` budget in bursts on a 10 ms timer, and the timers of its
 * connections fire together, so `-c 4 --rps R` offers `4 R / 100` requests at once every 10 ms: at half
 * saturation that burst is ~5 ms of the server's work, and the last request of each burst waits for the
 * others: a p99 of the harness, not of the server. Independent processes have independent timer phases, so
 * the same rate arrives as `processes` smaller bursts spread over each tick, closer to many independent
 * callers. Latencies are pooled over all processes' logs; req/s and failures are summed.
 */
export async function runH2loadSpread(
  h2load: string,
  run: Omit<H2loadRun, 'clients' | 'rpsPerClient' | 'logFile'>,
  spread: { readonly rate: number; readonly processes: number; readonly logPrefix: string },
): Promise<H2loadResult> {
  const perProcess = Math.max(1, Math.round(spread.rate / spread.processes));
  const logs: string[] = [];
  const runs: Promise<Omit<H2loadResult, 'p50Us' | 'p99Us' | 'p999Us' | 'samples'>>[] = [];
  for (let i = 0; i < spread.processes; i++) {
    const logFile = `${spread.logPrefix}-${i}.log`;
    logs.push(logFile);
    runs.push(startH2load(h2load, { ...run, clients: 1, rpsPerClient: perProcess, logFile }));
    await new Promise((resolve) => setTimeout(resolve, H2LOAD_RPS_TICK_MS / spread.processes));
  }
  const results = await Promise.all(runs);
  return {
    requestsPerSecond: results.reduce((sum, r) => sum + r.requestsPerSecond, 0),
    succeeded: results.reduce((sum, r) => sum + r.succeeded, 0),
    failed: results.reduce((sum, r) => sum + r.failed, 0),
    ...(await latencyFromLogs(logs)),
  };
}

/**
 * Reads h2load's summary: `finished in 10.00s, 21456.30 req/s, …`, `requests: N total, … S succeeded,
 * F failed, E errored, T timeout` and `status codes: A 2xx, B 3xx, C 4xx, D 5xx`.
 * Throws when a line is missing: a summary it cannot read must not turn into a figure.
 */
export function parseH2loadSummary(text: string): Omit<H2loadResult, 'p50Us' | 'p99Us' | 'p999Us' | 'samples'> {
  const finished = /finished in [\d.]+\w+, ([\d.]+) req\/s/.exec(text);
  const requests =
    /requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout/.exec(
      text,
    );
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

/** p50, p99 and p99.9 of the 2xx rows of h2load `--log-file`s, pooled (start µs, status, µs to end of response). */
export async function latencyFromLogs(
  logFiles: readonly string[],
): Promise<{ p50Us: number; p99Us: number; p999Us: number; samples: number }> {
  const latencies: number[] = [];
  for (const logFile of logFiles) {
    const text = await readFile(logFile, 'utf8');
    for (const line of text.split('\n')) {
      const [, status, micros] = line.split('\t');
      if (status !== undefined && status.startsWith('2') && micros !== undefined) latencies.push(Number(micros));
    }
  }
  if (latencies.length === 0) return { p50Us: Number.NaN, p99Us: Number.NaN, p999Us: Number.NaN, samples: 0 };
  const sorted = Float64Array.from(latencies).sort();
  return {
    p50Us: percentileOfSorted(sorted, 50),
    p99Us: percentileOfSorted(sorted, 99),
    p999Us: percentileOfSorted(sorted, 99.9),
    samples: sorted.length,
  };
}
