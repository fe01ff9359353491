/**
 * Fault `clock-forward` (issue 12): a node's clock ahead for the effect, then back to true time.
 */
import type { FaultHandler } from '../fault-context.js';

/**
 * A node's clock ahead for the effect, then back to true time: probed while ahead and after the return, until
 * true time has passed what it minted ahead; minting ahead, then back, it must refuse until then.
 */
export const clockForward: FaultHandler = async (c) => {
  const { run, record: r } = c;
  const inc = await c.hitNode(false);
  if (inc === undefined) return;
  const forward = c.fault.clockOffsetSeconds ?? 0;
  const before = inc.metrics;
  const probing = run.probe(inc, c.begin + c.fault.effectMs + forward * 1000 + 500);
  await run.sleep(200);
  const aheadAt = Date.now();
  const allowance = await run.clockAhead(inc, forward);
  await c.until();
  const backAt = Date.now();
  await run.clockBack(inc, allowance);
  const p = await probing;
  await run.fleet.scrape(inc);
  const rollbacks = run.fencesOf(inc, backAt, 'clock-rollback');
  r.notes.push(
    `probe ${p.ok} ok / ${p.failed} refused; fences while ahead: ${run.fencesOf(inc, aheadAt) - run.fencesOf(inc, backAt)} (clock-ahead ${run.fencesOf(inc, aheadAt, 'clock-ahead') - run.fencesOf(inc, backAt, 'clock-ahead')}); ` +
      `after the return: clock-rollback ${rollbacks} (rollbacks fenced ${inc.metrics.rollbacksFenced - before.rollbacksFenced})`,
  );
  if (
    rollbacks === 0 &&
    inc.metrics.rollbacksFenced === before.rollbacksFenced &&
    r.servingAtStart > 0 &&
    inc.exitedMs === undefined
  ) {
    r.expectationMissed = `${inc.name} did not fence on its clock's return from +${forward} s`;
  }
};
