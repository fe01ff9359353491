import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { track } from './registry.js';

/** How a started process ended. */
export interface ProcessExit {
  /** Exit code, or `null` when a signal ended it. */
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/** Options of {@link spawnProcess}. */
export interface SpawnProcessOptions {
  /** Environment of the child; default the parent's. */
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Lines kept in {@link ProcessHandle.lines} (oldest dropped first); default 5000. */
  maxLines?: number;
}

/** A started child process whose output is collected line by line. */
export interface ProcessHandle {
  readonly pid: number;
  readonly command: string;
  /** Output lines so far, stdout and stderr interleaved in arrival order. */
  readonly lines: readonly string[];
  /** Only the stdout lines. */
  readonly stdoutLines: readonly string[];
  /** Only the stderr lines. */
  readonly stderrLines: readonly string[];
  /** Resolves when the process has ended (never rejects). */
  readonly exited: Promise<ProcessExit>;
  /** `undefined` while running. */
  exitStatus(): ProcessExit | undefined;
  /**
   * Resolves with the first line (already seen or still to come) matching `pattern`; rejects after
   * `timeoutMs`, or when the process ends first, with the last output lines in the message.
   */
  waitForLine(pattern: RegExp, timeoutMs?: number): Promise<string>;
  /** Sends a signal (e.g. SIGSTOP, SIGCONT, SIGTERM); ignored once the process has ended. */
  signal(sig: NodeJS.Signals): void;
  /** SIGKILL (after SIGCONT, in case it is stopped) and wait for the end. */
  kill(): Promise<ProcessExit>;
  /** SIGTERM, wait up to `graceMs` (default 5000), then SIGKILL. */
  stop(graceMs?: number): Promise<ProcessExit>;
  /** The last `n` output lines joined, for error messages. */
  tail(n?: number): string;
}

/**
 * Starts `cmd args` as a child process, collects its output, and tracks it so `cleanupAll()` or process exit
 * kills it even when the test fails.
 */
export function spawnProcess(cmd: string, args: readonly string[], options: SpawnProcessOptions = {}): ProcessHandle {
  const maxLines = options.maxLines ?? 5000;
  const child = spawn(cmd, args, {
    env: options.env ?? process.env,
    cwd: options.cwd,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const stdoutLines: string[] = [];
  const stderrLines: string[] = [];
  const waiters = new Set<{ pattern: RegExp; resolve: (line: string) => void }>();
  let status: ProcessExit | undefined;
  let spawnError: Error | undefined;

  const push = (into: string[], line: string): void => {
    into.push(line);
    if (into.length > maxLines) into.shift();
  };
  const onLine = (stream: string[]) => (line: string) => {
    push(lines, line);
    push(stream, line);
    for (const w of waiters) {
      if (w.pattern.test(line)) {
        waiters.delete(w);
        w.resolve(line);
      }
    }
  };
  const outputRead = (input: NodeJS.ReadableStream, into: string[]): Promise<void> =>
    new Promise((resolve) => createInterface({ input }).on('line', onLine(into)).once('close', resolve));
  const allOutputRead = Promise.all([outputRead(child.stdout, stdoutLines), outputRead(child.stderr, stderrLines)]);

  const exited = new Promise<ProcessExit>((resolve) => {
    child.once('error', (err) => {
      spawnError = err;
      status = { code: null, signal: null };
      resolve(status);
    });
    child.once('exit', (code, signal) => {
      const ended: ProcessExit = { code, signal };
      // 'exit' can come before the last lines are read from the pipes (a child that writes its verdict and exits
      // at once: the waiter then saw only the lines before it). Ended means its output read to the end too, or
      // 2 s after the exit when a process it started still holds the pipes open.
      let grace: NodeJS.Timeout | undefined;
      void Promise.race([allOutputRead, new Promise((r) => (grace = setTimeout(r, 2_000)))]).then(() => {
        clearTimeout(grace);
        status = ended;
        resolve(ended);
      });
    });
  });
  const untrack = track({
    cleanup: async () => {
      await handle.kill();
    },
    cleanupSync: () => {
      if (status === undefined && child.pid !== undefined) {
        try {
          process.kill(child.pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    },
  });
  void exited.then(untrack);

  const tail = (n = 20): string => lines.slice(-n).join('\n');
  const handle: ProcessHandle = {
    pid: child.pid ?? -1,
    command: [cmd, ...args].join(' '),
    lines,
    stdoutLines,
    stderrLines,
    exited,
    exitStatus: () => status,
    tail,
    waitForLine(pattern, timeoutMs = 10_000) {
      const seen = lines.find((l) => pattern.test(l));
      if (seen !== undefined) return Promise.resolve(seen);
      return new Promise<string>((resolve, reject) => {
        const waiter = {
          pattern,
          resolve: (line: string) => {
            clearTimeout(timer);
            resolve(line);
          },
        };
        const fail = (why: string): void => {
          waiters.delete(waiter);
          clearTimeout(timer);
          reject(
            new Error(`${why} waiting for a line matching ${String(pattern)} from ${cmd}; last output:\n${tail()}`),
          );
        };
        const timer = setTimeout(() => fail(`timed out after ${timeoutMs} ms`), timeoutMs);
        waiters.add(waiter);
        void exited.then((s) => {
          if (waiters.has(waiter)) {
            fail(
              spawnError
                ? `could not start (${spawnError.message})`
                : `process ended (code ${s.code}, signal ${s.signal})`,
            );
          }
        });
      });
    },
    signal(sig) {
      if (status !== undefined) return;
      try {
        child.kill(sig);
      } catch {
        // already gone
      }
    },
    async kill() {
      if (status === undefined) {
        handle.signal('SIGCONT');
        handle.signal('SIGKILL');
      }
      return exited;
    },
    async stop(graceMs = 5000) {
      if (status !== undefined) return status;
      handle.signal('SIGCONT');
      handle.signal('SIGTERM');
      let timer: NodeJS.Timeout | undefined;
      const result = await Promise.race([
        exited,
        new Promise<undefined>((resolve) => {
          timer = setTimeout(() => resolve(undefined), graceMs);
        }),
      ]);
      clearTimeout(timer);
      return result ?? handle.kill();
    },
  };
  return handle;
}

/**
 * The Node flags a script's first line gives (`#!/usr/bin/env -S node --flag …`), so tests, benchmarks and chaos
 * start a program the way its command does (apps/server/bin/idgen-server.js holds the node's launch flags).
 * Throws when the first line is not such a shebang.
 */
export function shebangNodeFlags(script: string): string[] {
  const first = readFileSync(script, 'utf8').split('\n', 1)[0] ?? '';
  const m = /^#!\/usr\/bin\/env(?: -S)? node((?: --?[\w-]+(?:=\S+)?)*)\s*$/.exec(first);
  if (m === null)
    throw new Error(`${script}: the first line is not "#!/usr/bin/env -S node [flags]": ${JSON.stringify(first)}`);
  return (m[1] ?? '').split(' ').filter((f) => f !== '');
}
