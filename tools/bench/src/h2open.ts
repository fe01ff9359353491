import { execFileSync } from 'node:child_process';
import { mkdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { findOnPath, spawnProcess } from '@idgen/testing';

/** The C source of the open-loop generator (`native/h2open.c`: what it does and why h2load was not enough). */
export const H2OPEN_SOURCE = resolve(__dirname, '../native/h2open.c');
const H2OPEN_BINARY = resolve(__dirname, '../dist/native/h2open');

export const CC_MISSING_MESSAGE =
  'cc not found on PATH: bench:server compiles its open-loop load generator (tools/bench/native/h2open.c). ' +
  'Install a C compiler with `apt-get install gcc` (Debian/Ubuntu), then run the benchmark again.';

/** Compiles h2open when its binary is missing or older than its source; returns the binary's path. */
export function buildH2open(): string {
  const cc = findOnPath('cc') ?? findOnPath('gcc');
  const fresh = (() => {
    try {
      return statSync(H2OPEN_BINARY).mtimeMs >= statSync(H2OPEN_SOURCE).mtimeMs;
    } catch {
      return false;
    }
  })();
  if (fresh) return H2OPEN_BINARY;
  if (cc === undefined) throw new Error(CC_MISSING_MESSAGE);
  mkdirSync(join(H2OPEN_BINARY, '..'), { recursive: true });
  execFileSync(cc, ['-O2', '-Wall', '-o', H2OPEN_BINARY, H2OPEN_SOURCE, '-lm'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  return H2OPEN_BINARY;
}

/** One open-loop run: Poisson arrivals at `rate` req/s over `connections`, `warmupSeconds` then `seconds` measured. */
export interface H2openRun {
  readonly host: string;
  readonly port: number;
  readonly path: string;
  readonly bodyFile: string;
  readonly headers: readonly string[];
  readonly rate: number;
  readonly connections: number;
  readonly warmupSeconds: number;
  readonly seconds: number;
  readonly seed: number;
}

/** What h2open measured over the measured window. Latencies in µs from each request's write to its end. */
export interface H2openResult {
  readonly sent: number;
  readonly ok: number;
  /** RST_STREAM, a status other than 200, or no answer by the end. */
  readonly failed: number;
  readonly requestsPerSecond: number;
  readonly p50Us: number;
  readonly p99Us: number;
  readonly p999Us: number;
  readonly maxUs: number;
  /** p99 of how late requests were written against their schedule: the generator's own delay. */
  readonly lagP99Us: number;
}

/** Parses h2open's one result line; throws on anything else, so a broken run never becomes a figure. */
export function parseH2openLine(text: string): H2openResult {
  const line = text.split('\n').find((l) => l.startsWith('sent='));
  const fields = new Map<string, number>();
  for (const part of (line ?? '').split(' ')) {
    const [key, value] = part.split('=');
    if (key !== undefined && value !== undefined && /^-?[\d.]+$/.test(value)) fields.set(key, Number(value));
  }
  const need = ['sent', 'done', 'ok', 'failed', 'rate', 'p50_us', 'p99_us', 'p999_us', 'max_us', 'lag_p99_us'];
  const missing = need.filter((key) => !fields.has(key));
  if (line === undefined || missing.length > 0)
    throw new Error(`could not read h2open's result (missing ${missing.join(', ')}):\n${text}`);
  const get = (key: string): number => fields.get(key) ?? Number.NaN;
  return {
    sent: get('sent'),
    ok: get('ok'),
    failed: get('failed'),
    requestsPerSecond: get('rate'),
    p50Us: get('p50_us'),
    p99Us: get('p99_us'),
    p999Us: get('p999_us'),
    maxUs: get('max_us'),
    lagP99Us: get('lag_p99_us'),
  };
}

/** Runs h2open once and reads its result. */
export async function runH2open(binary: string, run: H2openRun): Promise<H2openResult> {
  const args = [
    run.host,
    String(run.port),
    run.path,
    run.bodyFile,
    String(Math.round(run.rate)),
    String(run.connections),
    String(run.warmupSeconds),
    String(run.seconds),
    String(run.seed),
    ...run.headers,
  ];
  const child = spawnProcess(binary, args);
  const exit = await child.exited;
  if (exit.code !== 0) throw new Error(`h2open exited with ${String(exit.code ?? exit.signal)}:\n${child.tail(20)}`);
  return parseH2openLine(child.stdoutLines.join('\n'));
}
