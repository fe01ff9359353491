import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import type { RunReport, Scenario } from './deployment.js';
import type { RegionsReport, RegionsScenario } from './regions.js';

/** Which scenario a runner's thread runs: one region (deployment.ts), or the whole deployment (regions.ts). */
export type Simulation = { readonly kind: 'region' } | { readonly kind: 'regions'; readonly audit: boolean };

/** What one schedule's run reports, whichever the scenario (its violations' kinds are the scenario's own). */
export type ScheduleReport = (RunReport | RegionsReport) & {
  /** The run was cut off by the explorer's own deadline before its end (not a finding). */
  readonly unfinished?: boolean;
};

/** How a {@link ScheduleRunner} bounds one schedule in wall time. */
export interface ScheduleBounds {
  /** A schedule whose simulated time does not move for this long (wall ms) is stuck. Default 15 s. */
  readonly stallMs?: number;
  /** A schedule still running after this long (wall ms), moving or not, is stuck. Default 2 minutes. */
  readonly wallMs?: number;
}

/** The worker entry, built: dist/schedule-worker.js beside this file, or (run from the sources by jest) under dist/. */
function workerPath(): string {
  const beside = join(__dirname, 'schedule-worker.js');
  return existsSync(beside) ? beside : join(__dirname, '..', 'dist', 'schedule-worker.js');
}

/**
 * Runs schedules in a worker thread, one at a time, and makes sure each one ends (issue 32: a run never hangs). A
 * schedule that stops moving simulated time for `stallMs` of wall time (a loop that never yields, a timer chain that
 * never lets the step end), or runs past `wallMs`, gets its thread terminated and is reported as a `stuck` violation;
 * one that throws, or takes its thread down, as an `error` violation. Either is a finding with the schedule's replay,
 * like a broken invariant. The next schedule gets a fresh thread.
 */
export class ScheduleRunner {
  private worker: Worker | undefined;
  private nextId = 0;
  /** Ends the schedule in flight, if any (its thread terminated). */
  private abandon: (() => void) | undefined;
  private readonly stallMs: number;
  private readonly wallMs: number;

  constructor(
    bounds: ScheduleBounds = {},
    private readonly simulation: Simulation = { kind: 'region' },
  ) {
    this.stallMs = bounds.stallMs ?? 15_000;
    this.wallMs = bounds.wallMs ?? 120_000;
  }

  /**
   * Runs one schedule to its end, its thread's stall, or its wall bound; `endBy` (wall ms, `Date.now()`) ends it
   * `unfinished` (no violation) when the caller's own deadline comes first.
   */
  run(
    scenario: Scenario | RegionsScenario,
    netSeed: number,
    o: { readonly endBy?: number } = {},
  ): Promise<ScheduleReport> {
    // A caller that gave up on the previous schedule (a time limit racing it) gets a fresh thread for this one: the
    // abandoned one must not run on beside it (its fake clock is installed on the thread's globals).
    this.abandon?.();
    const worker = (this.worker ??= this.spawn());
    const id = this.nextId++;
    const started = Date.now();
    let moved = started;
    let progressMs = 0;
    /** The thread took the schedule (a fresh thread first loads its modules: not a stall). */
    let begun = false;
    return new Promise<ScheduleReport>((resolve) => {
      const finish = (report: ScheduleReport, kill: boolean): void => {
        this.abandon = undefined;
        clearInterval(watch);
        worker.off('message', onMessage);
        worker.off('error', onError);
        worker.off('exit', onExit);
        if (kill) {
          this.worker = undefined;
          void worker.terminate();
        }
        resolve(report);
      };
      const failed = (kind: 'stuck' | 'error', message: string): RunReport => ({
        minted: 0,
        violations: [{ kind, atMs: progressMs, message }],
        simulatedMs: progressMs,
        faults: 0,
        lostAnswers: 0,
        lateDeliveries: 0,
      });
      const onMessage = (m: { id: number; progressMs?: number; report?: ScheduleReport; error?: string }): void => {
        if (m.id !== id) return;
        if (m.progressMs !== undefined) {
          if (!begun || m.progressMs > progressMs) moved = Date.now();
          begun = true;
          progressMs = Math.max(progressMs, m.progressMs);
        } else if (m.report !== undefined) finish(m.report, false);
        else finish(failed('error', `the schedule threw: ${m.error ?? '?'}`), true);
      };
      const onError = (e: Error): void => finish(failed('error', `the schedule's thread died: ${e.message}`), true);
      const onExit = (code: number): void => finish(failed('error', `the schedule's thread exited (${code})`), true);
      // Real time: this thread's timers are not faked (the schedule's fake clock lives in the worker).
      const watch = setInterval(
        () => {
          const now = Date.now();
          if (begun && now - moved >= this.stallMs)
            finish(
              failed(
                'stuck',
                `simulated time stopped at +${progressMs} ms: no progress for ${((now - moved) / 1000).toFixed(1)} s of wall time`,
              ),
              true,
            );
          else if (o.endBy !== undefined && now >= o.endBy)
            // The caller's own deadline (a run's budget and shrink cap): not the schedule's fault, not a finding.
            finish({ ...failed('stuck', "cut off by the run's deadline"), violations: [], unfinished: true }, true);
          else if (now - started >= this.wallMs)
            finish(
              failed(
                'stuck',
                `still running at +${progressMs} ms after ${((now - started) / 1000).toFixed(1)} s of wall time`,
              ),
              true,
            );
        },
        Math.min(1000, this.stallMs / 4),
      );
      this.abandon = () => finish(failed('error', 'abandoned: another schedule was started before it ended'), true);
      worker.on('message', onMessage);
      worker.on('error', onError);
      worker.on('exit', onExit);
      worker.postMessage({ id, scenario, netSeed, simulation: this.simulation });
    });
  }

  /** Ends the thread (the process can then exit). */
  async close(): Promise<void> {
    this.abandon?.();
    const w = this.worker;
    this.worker = undefined;
    if (w !== undefined) await w.terminate();
  }

  private spawn(): Worker {
    const w = new Worker(workerPath());
    // An idle thread does not keep the process alive; a running schedule's promise does (through the watch timer).
    w.unref();
    return w;
  }
}
