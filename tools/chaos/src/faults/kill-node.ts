/**
 * Fault `kill-node` (issue 7): a node SIGKILLed, and a new process on its position once the effect is over.
 */
import type { FaultHandler } from '../fault-context.js';

/** SIGKILL, then a new process on the position once the effect is over. */
export const killNode: FaultHandler = async (c) => {
  const inc = await c.hitNode(true);
  if (inc === undefined) return;
  inc.expectedExit = true;
  await inc.handle.kill();
  await c.until();
  if (c.run.o.signal.aborted) return;
  const next = await c.run.fleet.start(inc.position);
  c.record.notes.push(`restarted as ${next.name}`);
};
