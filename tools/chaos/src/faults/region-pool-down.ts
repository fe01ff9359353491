/**
 * Fault `region-pool-down` (issue 25, item 2): every node of one further region SIGKILLed for the effect, then a new
 * process on every position. The region's callers mint from a fallback region meanwhile; the failover table
 * (src/regions.ts) gives the time to their first fallback ID and, from the restart, back to their first home ID.
 */
import type { FaultHandler } from '../fault-context.js';
import { regionLost, regionTarget } from './region-target.js';

/** The whole pool killed, then restarted once the effect is over. */
export const regionPoolDown: FaultHandler = async (c) => {
  const region = regionTarget(c);
  if (region === undefined) return;
  const fleet = region.fleet;
  const running = fleet.positions.flatMap((p) => {
    const inc = fleet.current(p);
    return inc === undefined ? [] : [inc];
  });
  for (const inc of running) inc.expectedExit = true;
  const out = regionLost(c, region);
  await Promise.all(running.map((inc) => inc.handle.kill()));
  c.record.notes.push(`killed ${running.map((i) => i.name).join(', ')}`);
  await c.until();
  if (c.run.o.signal.aborted) return;
  out.returnMs = Date.now();
  const next = await Promise.all(fleet.positions.map((p) => fleet.start(p)));
  c.record.notes.push(`restarted as ${next.map((i) => i.name).join(', ')}`);
};
