/**
 * Fault `sigterm-node` (issue 7): a node SIGTERMed, a clean stop expected; then a replacement.
 */
import type { FaultHandler } from '../fault-context.js';

/** SIGTERM: a clean stop (exit 0) is expected; then a replacement. */
export const sigtermNode: FaultHandler = async (c) => {
  const r = c.record;
  const inc = await c.hitNode(true);
  if (inc === undefined) return;
  inc.expectedExit = true;
  const exit = await inc.handle.stop(15_000);
  r.notes.push(`exit code ${exit.code}${exit.signal !== null ? ` signal ${exit.signal}` : ''}`);
  if (exit.code !== 0)
    r.expectationMissed = `a SIGTERM should end in a clean stop (exit 0), got code ${exit.code} signal ${exit.signal}`;
  if (c.run.o.signal.aborted) return;
  const next = await c.run.fleet.start(inc.position);
  r.notes.push(`replacement ${next.name}`);
};
