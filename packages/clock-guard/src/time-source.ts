import { setTimeout as delay } from 'node:timers/promises';
import { execFile } from 'node:child_process';
import type { GuardedMinter } from './guard.js';

/** The clock bound of docs/design.md §3-4: chrony keeps clocks within 10 ms of the reference. */
export const DEFAULT_MAX_OFFSET_MS = 10;
/** How often the time source is read while running. */
export const DEFAULT_TIME_SOURCE_INTERVAL_MS = 5_000;

/** The fields of one `chronyc -c tracking` line that decide whether the clock may be trusted. */
export interface ChronyTracking {
  /** Reference ID, hex (`7F7F0101` is chrony's local clock; `00000000` none). */
  readonly referenceId: string;
  readonly referenceName: string;
  readonly stratum: number;
  /** Offset of the system clock from chrony's estimate of true time, seconds (the "System time" field). */
  readonly systemTimeOffsetSeconds: number;
  readonly lastOffsetSeconds: number;
  readonly rootDelaySeconds: number;
  readonly rootDispersionSeconds: number;
  /** `Normal`, `Insert second`, `Delete second` or `Not synchronised`. */
  readonly leapStatus: string;
}

/**
 * Which way a time source failed, for readiness answers and alerts (the message says it in words):
 * - `not-read`: no reading yet (booting);
 * - `chronyc-missing`: the chronyc binary is not on PATH (chrony not installed);
 * - `chronyc-failed`: chronyc ran and failed (chronyd not running, permission denied: see the message);
 * - `chronyc-timeout`: chronyc did not answer in time;
 * - `unparseable`: chronyc answered something this check cannot read;
 * - `not-synchronised`: chrony has no usable reference (leap status, stratum 0/16, no reference ID);
 * - `offset-too-large`: synchronised, but the system clock is further off than the bound (docs/design.md §4).
 */
export type TimeSourceProblem =
  | 'not-read'
  | 'chronyc-missing'
  | 'chronyc-failed'
  | 'chronyc-timeout'
  | 'unparseable'
  | 'not-synchronised'
  | 'offset-too-large';

/** One reading of the time source and the verdict on it. */
export interface TimeSourceReading {
  readonly healthy: boolean;
  /** Why: what was read, or what went wrong reading it. */
  readonly message: string;
  /** Which way it failed; absent while healthy. */
  readonly problem?: TimeSourceProblem;
  readonly offsetSeconds?: number;
  readonly tracking?: ChronyTracking;
}

const LEAP_STATUSES = new Set(['Normal', 'Insert second', 'Delete second', 'Not synchronised']);

/**
 * Parses one line of `chronyc -c tracking` (CSV: reference ID, reference name, stratum, reference time,
 * system time, last offset, RMS offset, frequency, residual frequency, skew, root delay, root dispersion,
 * update interval, leap status). Throws `Error` saying what is wrong with the line.
 */
export function parseChronyTracking(output: string): ChronyTracking {
  const line = output.trim().split('\n')[0] ?? '';
  const f = line.split(',');
  if (f.length < 14) {
    throw new Error(`expected 14 comma-separated fields from chronyc -c tracking, got ${f.length}: ${clip(line)}`);
  }
  const num = (i: number, name: string): number => {
    const v = f[i] ?? '';
    const n = Number(v);
    if (v.trim() === '' || !Number.isFinite(n)) throw new Error(`field ${i + 1} (${name}) is not a number: ${clip(v)}`);
    return n;
  };
  const referenceId = f[0] ?? '';
  if (!/^[0-9A-Fa-f]{1,8}$/.test(referenceId))
    throw new Error(`field 1 (reference ID) is not hex: ${clip(referenceId)}`);
  const leapStatus = (f[13] ?? '').trim();
  if (!LEAP_STATUSES.has(leapStatus)) throw new Error(`field 14 (leap status) is unknown: ${clip(leapStatus)}`);
  return {
    referenceId: referenceId.toUpperCase(),
    referenceName: f[1] ?? '',
    stratum: num(2, 'stratum'),
    systemTimeOffsetSeconds: num(4, 'system time'),
    lastOffsetSeconds: num(5, 'last offset'),
    rootDelaySeconds: num(10, 'root delay'),
    rootDispersionSeconds: num(11, 'root dispersion'),
    leapStatus,
  };
}

/**
 * Decides whether a clock chrony describes may fill the timestamp field (docs/design.md §4): synchronised to a
 * real reference and |system time offset| within `maxOffsetMs`.
 */
export function judgeTracking(t: ChronyTracking, maxOffsetMs = DEFAULT_MAX_OFFSET_MS): TimeSourceReading {
  const offsetMs = t.systemTimeOffsetSeconds * 1000;
  const where = `reference ${t.referenceName || t.referenceId}, stratum ${t.stratum}, offset ${offsetMs.toFixed(3)} ms`;
  const base = { offsetSeconds: t.systemTimeOffsetSeconds, tracking: t };
  if (t.leapStatus === 'Not synchronised' || t.stratum === 0 || t.stratum >= 16 || /^0+$/.test(t.referenceId)) {
    return {
      healthy: false,
      problem: 'not-synchronised',
      message: `chrony is not synchronised (${where}, leap status ${t.leapStatus})`,
      ...base,
    };
  }
  if (Math.abs(offsetMs) > maxOffsetMs) {
    return {
      healthy: false,
      problem: 'offset-too-large',
      message: `the system clock is ${offsetMs.toFixed(3)} ms off its reference, more than the ${maxOffsetMs} ms bound (${where})`,
      ...base,
    };
  }
  return { healthy: true, message: `synchronised (${where})`, ...base };
}

/**
 * Waits before each retry of a chronyc that could not be started for want of a resource (descriptors, processes,
 * memory: {@link TRANSIENT_SPAWN_ERRORS}). Together 1.4 s, within the 5 s check interval: one EMFILE while clients
 * hold many connections must not fence the node on its time source (a
 * spawn that fails for want of a descriptor says nothing about the clock).
 */
export const SPAWN_RETRY_DELAYS_MS: readonly number[] = [100, 300, 1_000];
/** Errors of starting a process that say the machine is short of something for now, not that chronyc is broken. */
export const TRANSIENT_SPAWN_ERRORS: ReadonlySet<string> = new Set(['EMFILE', 'ENFILE', 'EAGAIN', 'ENOMEM']);

/** How {@link readChrony} runs chronyc: node's `execFile` (tests pass their own to fail a spawn on purpose). */
export type ExecFileFn = (
  file: string,
  args: readonly string[],
  options: { timeout: number; encoding: 'utf8' },
  callback: (err: Error | null, stdout: string, stderr: string) => void,
) => unknown;

/** Options of {@link readChrony}. */
export interface ReadChronyOptions {
  readonly chronycPath?: string;
  readonly maxOffsetMs?: number;
  readonly timeoutMs?: number;
  /** Waits before each retry of a spawn that failed for want of a resource. Default {@link SPAWN_RETRY_DELAYS_MS}. */
  readonly spawnRetryDelaysMs?: readonly number[];
  readonly execFile?: ExecFileFn;
}

/**
 * Runs `chronyc -c tracking` and judges it. Never throws: every failure is an unhealthy reading saying which. A
 * chronyc that could not be started for want of a resource (EMFILE, ENFILE, EAGAIN, ENOMEM) is tried again after
 * each of `spawnRetryDelaysMs` before the reading counts as failed.
 */
export async function readChrony(options: ReadChronyOptions = {}): Promise<TimeSourceReading> {
  const delays = options.spawnRetryDelaysMs ?? SPAWN_RETRY_DELAYS_MS;
  for (let attempt = 0; ; attempt++) {
    const { reading, spawnError } = await readChronyOnce(options);
    const delay = delays[attempt];
    if (spawnError === undefined || delay === undefined) {
      if (spawnError === undefined || attempt === 0) return reading;
      return { ...reading, message: `${reading.message} (${attempt + 1} attempts)` };
    }
    await new Promise((r) => setTimeout(r, delay));
  }
}

/** One run of chronyc; `spawnError` set when it could not be started for want of a resource (worth a retry). */
function readChronyOnce(options: ReadChronyOptions): Promise<{ reading: TimeSourceReading; spawnError?: string }> {
  const path = options.chronycPath ?? 'chronyc';
  const run = options.execFile ?? (execFile as unknown as ExecFileFn);
  return new Promise((resolveWith) => {
    const resolve = (reading: TimeSourceReading, spawnError?: string): void =>
      resolveWith(spawnError === undefined ? { reading } : { reading, spawnError });
    const done = (err: Error | null, stdout: string, stderr: string): void => {
      if (err !== null) {
        const e = err as NodeJS.ErrnoException & { killed?: boolean; code?: string | number };
        if (typeof e.code === 'string' && TRANSIENT_SPAWN_ERRORS.has(e.code)) {
          resolve(
            {
              healthy: false,
              problem: 'chronyc-failed',
              message: `${path} could not be started: ${e.code} (${e.message})`,
            },
            e.code,
          );
        } else if (e.code === 'ENOENT') {
          resolve({
            healthy: false,
            problem: 'chronyc-missing',
            message: `${path} not found: install chrony (apt-get install chrony), or run with --time-source none for development`,
          });
        } else if (e.killed === true) {
          resolve({
            healthy: false,
            problem: 'chronyc-timeout',
            message: `${path} -c tracking did not answer within ${options.timeoutMs ?? 2_000} ms`,
          });
        } else {
          resolve({
            healthy: false,
            problem: 'chronyc-failed',
            message: `${path} -c tracking failed (exit code ${String(e.code)}): ${clip(String(stderr || stdout || e.message).trim())}`,
          });
        }
        return;
      }
      try {
        resolve(judgeTracking(parseChronyTracking(stdout), options.maxOffsetMs));
      } catch (parseError) {
        resolve({
          healthy: false,
          problem: 'unparseable',
          message: `could not parse ${path} -c tracking output: ${(parseError as Error).message}`,
        });
      }
    };
    try {
      run(path, ['-c', 'tracking'], { timeout: options.timeoutMs ?? 2_000, encoding: 'utf8' }, done);
    } catch (e) {
      // Node throws (rather than calls back) for some spawn failures (ENOMEM, say).
      done(e instanceof Error ? e : new Error(String(e)), '', '');
    }
  });
}

/** Where the check reports; a pino logger fits. */
export interface TimeSourceLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** Options of {@link createTimeSourceCheck}. */
export interface TimeSourceCheckOptions {
  /** `chrony` reads chronyc; `none` trusts the clock blindly (development only, said loudly). */
  readonly mode: 'chrony' | 'none';
  /** The guard to fence while the time source is unhealthy. */
  readonly guard: Pick<GuardedMinter, 'setTimeSource'>;
  readonly intervalMs?: number;
  readonly maxOffsetMs?: number;
  readonly chronycPath?: string;
  readonly logger?: TimeSourceLogger;
}

/** A running time-source check. */
export interface TimeSourceCheck {
  /** Reads once and reports to the guard; then polls every `intervalMs`. Resolves with the first reading. */
  start(): Promise<TimeSourceReading>;
  /** Reads once now and reports to the guard. */
  readNow(): Promise<TimeSourceReading>;
  /** The last reading. */
  last(): TimeSourceReading;
  stop(): void;
}

/**
 * Keeps the guard informed of the time source (docs/design.md §4): unhealthy fences minting with reason
 * `time-source`, and a node does not become ready on an unhealthy clock.
 */
export function createTimeSourceCheck(options: TimeSourceCheckOptions): TimeSourceCheck {
  const maxOffsetMs = options.maxOffsetMs ?? DEFAULT_MAX_OFFSET_MS;
  let last: TimeSourceReading = { healthy: false, problem: 'not-read', message: 'not read yet' };
  let timer: ReturnType<typeof setInterval> | undefined;
  let reading: Promise<TimeSourceReading> | undefined;

  const report = (r: TimeSourceReading) => {
    const changed = r.healthy !== last.healthy;
    last = r;
    options.guard.setTimeSource(r.healthy, r.message, r.offsetSeconds);
    if (changed || !r.healthy) {
      const log = options.logger;
      if (r.healthy) log?.info({ timeSource: r.message }, 'time source healthy');
      else log?.error({ timeSource: r.message }, 'time source unhealthy: minting is fenced');
    }
    return r;
  };

  const readNow = (): Promise<TimeSourceReading> => {
    if (options.mode === 'none') {
      return Promise.resolve(
        report({
          healthy: true,
          message: 'time-source check turned off (--time-source none): development only, the clock is trusted blindly',
        }),
      );
    }
    // One read at a time: a slow chronyc must not pile up processes.
    reading ??= readChrony({ chronycPath: options.chronycPath, maxOffsetMs }).then((r) => {
      reading = undefined;
      return report(r);
    });
    return reading;
  };

  return {
    async start() {
      if (options.mode === 'none') {
        options.logger?.warn(
          { timeSource: 'none' },
          'TIME SOURCE CHECK TURNED OFF: the clock is trusted without chrony. Development only: never in production.',
        );
      }
      const first = await readNow();
      if (timer === undefined && options.mode !== 'none') {
        timer = setInterval(() => void readNow(), options.intervalMs ?? DEFAULT_TIME_SOURCE_INTERVAL_MS);
        timer.unref();
      }
      return first;
    },
    readNow,
    last: () => last,
    stop() {
      if (timer !== undefined) clearInterval(timer);
      timer = undefined;
    },
  };
}

/** Options of {@link untilTimeSourceHealthy}. */
export interface UntilHealthyOptions {
  /** How long to wait between readings while the source is unhealthy. */
  readonly retryMs: number;
  /** Ends the wait: the promise rejects with `signal.reason`. */
  readonly signal: AbortSignal;
  /** Told of each unhealthy reading, before the wait for the next one (to log it, or to say why not ready). */
  readonly onUnhealthy: (reading: TimeSourceReading) => void;
}

/**
 * Starts `check` and resolves with its first healthy reading, reading again every `retryMs` while it is unhealthy
 * (docs/design.md §4: no first mint, and no readiness, on an unhealthy clock). A node's boot and an embedded source's
 * start wait here.
 */
export async function untilTimeSourceHealthy(
  check: Pick<TimeSourceCheck, 'start' | 'readNow'>,
  options: UntilHealthyOptions,
): Promise<TimeSourceReading> {
  const { signal } = options;
  let reading = await check.start();
  while (!reading.healthy) {
    options.onUnhealthy(reading);
    try {
      await delay(options.retryMs, undefined, { signal });
    } catch (e) {
      // node:timers rejects with its own AbortError: the caller's reason is what the caller waits for.
      throw signal.aborted ? signal.reason : e;
    }
    reading = await check.readNow();
  }
  return reading;
}

function clip(s: string): string {
  return JSON.stringify(s.length > 120 ? `${s.slice(0, 120)}…` : s);
}
