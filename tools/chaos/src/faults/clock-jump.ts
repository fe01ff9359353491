/**
 * Faults `clock-jump-small` and `clock-jump-large` (issue 7): a node's clock jumps back while the run probes it.
 */
import type { FaultHandler } from '../fault-context.js';

/** A node's clock jumps (back, by `clockOffsetSeconds`) while the run probes it; judged at the end. */
export const clockJump: FaultHandler = async (c) => {
  const { run } = c;
  const inc = await c.hitNode(false);
  if (inc === undefined) return;
  const before = inc.metrics;
  const probing = run.probe(inc, c.begin + c.fault.effectMs + 300);
  await run.sleep(200);
  await run.fleet.setClock(inc.position, String(c.fault.clockOffsetSeconds ?? 0));
  await c.until();
  // Back to true time: a jump forward, harmless (the guard only refuses going back).
  await run.fleet.setClock(inc.position, '+0');
  const p = await probing;
  await run.fleet.scrape(inc);
  c.record.notes.push(
    `probe ${p.ok} ok / ${p.failed} refused; rollbacks waited out ${inc.metrics.rollbacksWaited - before.rollbacksWaited}, fenced ${inc.metrics.rollbacksFenced - before.rollbacksFenced}`,
  );
};
