import { parentPort } from 'node:worker_threads';
import type { Scenario } from './deployment.js';
import { runSimulated } from './runner.js';

/**
 * The worker thread a {@link ScheduleRunner} runs schedules in, one at a time: it answers `{ id, report }` (or
 * `{ id, error }`) per schedule and posts `{ id, progressMs }` as simulated time moves, so the runner can tell a
 * schedule that stopped making progress (and terminate this thread) from one that is only slow.
 */
if (parentPort !== null) {
  const port = parentPort;
  port.on('message', (m: { id: number; scenario: Scenario; netSeed: number }) => {
    // Started: the runner's stall clock starts now, not while this thread was still loading its modules.
    port.postMessage({ id: m.id, progressMs: 0 });
    runSimulated(m.scenario, m.netSeed, (progressMs) => port.postMessage({ id: m.id, progressMs })).then(
      (report) => port.postMessage({ id: m.id, report }),
      (e: unknown) => port.postMessage({ id: m.id, error: e instanceof Error ? `${e.name}: ${e.message}` : String(e) }),
    );
  });
}
