import { parentPort } from 'node:worker_threads';
import type { Scenario } from './deployment.js';
import type { RegionsScenario } from './regions.js';
import { runRegionsSimulated } from './regions-runner.js';
import { runSimulated } from './runner.js';
import type { ScheduleReport, Simulation } from './schedule-runner.js';

/** One schedule a {@link ScheduleRunner} hands its thread. */
interface Job {
  readonly id: number;
  readonly scenario: Scenario | RegionsScenario;
  readonly netSeed: number;
  readonly simulation: Simulation;
}

function runJob(m: Job, onProgress: (simulatedMs: number) => void): Promise<ScheduleReport> {
  return m.simulation.kind === 'regions'
    ? runRegionsSimulated(m.scenario as RegionsScenario, m.netSeed, { audit: m.simulation.audit }, onProgress)
    : runSimulated(m.scenario as Scenario, m.netSeed, onProgress);
}

/**
 * The worker thread a {@link ScheduleRunner} runs schedules in, one at a time: it answers `{ id, report }` (or
 * `{ id, error }`) per schedule and posts `{ id, progressMs }` as simulated time moves, so the runner can tell a
 * schedule that stopped making progress (and terminate this thread) from one that is only slow.
 */
if (parentPort !== null) {
  const port = parentPort;
  port.on('message', (m: Job) => {
    // Started: the runner's stall clock starts now, not while this thread was still loading its modules.
    port.postMessage({ id: m.id, progressMs: 0 });
    runJob(m, (progressMs) => port.postMessage({ id: m.id, progressMs })).then(
      (report) => port.postMessage({ id: m.id, report }),
      (e: unknown) => port.postMessage({ id: m.id, error: e instanceof Error ? `${e.name}: ${e.message}` : String(e) }),
    );
  });
}
