/**
 * Faults `partition-node` and `partition-clock-forward` (issue 7, issue 12): a node cut off from etcd, its clock
 * also ahead for the second.
 */
import type { FaultContext, FaultHandler } from '../fault-context.js';
import type { Incarnation } from '../node-fleet.js';
import type { Holding } from '../verify.js';
import { secondsSince, takeoverOf, waitTakeover } from './node-takeover.js';

/**
 * One node cut off from etcd (`partition-node`), its clock also set ahead at the cut for
 * `partition-clock-forward`. The run asks the cut-off node for one ID after another: its callers still reach
 * it, and whatever it mints while it believes it holds the slot is verified like a caller's blocks.
 */
export const partitionNode: FaultHandler = async (c) => {
  const { run, fault: f, begin } = c;
  const inc = await c.hitNode(true);
  if (inc === undefined) return;
  const worker = inc.worker;
  const forward = f.kind === 'partition-clock-forward' ? (f.clockOffsetSeconds ?? 0) : 0;
  const stop = { untilMs: begin + f.effectMs };
  const probing = run.probe(inc, stop);
  await run.sleep(200);
  const cutAt = Date.now();
  run.fleet.cutEtcd(inc.position);
  // Ahead at once, while its monotonic deadline still runs (up to TTL − margin after its last keep-alive).
  const allowance = forward > 0 ? await run.clockAhead(inc, forward) : undefined;
  const takenOver = takeoverOf(c, inc, worker, cutAt);
  // Until the spare holds the slot (and a second more), and, with the clock ahead, until the successor's
  // clock has passed all the holder could have minted (offset + TTL − margin after the cut); at most `effectMs`.
  const earliestEnd = cutAt + (forward > 0 ? forward * 1000 + run.ttlMs - 1000 + 500 : 0);
  await waitTakeover(c, worker, takenOver);
  const taken = takenOver();
  await run.sleep(
    Math.min(Math.max(taken !== undefined ? taken.seenMs + 1000 : 0, earliestEnd), begin + f.effectMs) - Date.now(),
  );
  stop.untilMs = Date.now();
  const p = await probing;
  if (allowance !== undefined) await run.clockBack(inc, allowance);
  run.fleet.restoreEtcd(inc.position);
  judgePartition(c, inc, { worker, forward, cutAt, probe: p, takeover: takenOver() });
};

/** The notes and the expectation of a {@link partitionNode}: a takeover, and a fence of the cut-off node. */
function judgePartition(
  c: FaultContext,
  inc: Incarnation,
  s: {
    worker: number | undefined;
    forward: number;
    cutAt: number;
    probe: { ok: number; failed: number };
    takeover: Holding | undefined;
  },
): void {
  const { record: r, run } = c;
  const { worker, cutAt, takeover } = s;
  r.notes.push(`link restored after ${secondsSince(cutAt)} s`);
  if (s.forward > 0) r.notes.push(`clock +${s.forward} s from the cut until then`);
  r.notes.push(
    `probe ${s.probe.ok} ok / ${s.probe.failed} refused; its fences: ${run.fencesOf(inc, cutAt)} (lease ${run.fencesOf(inc, cutAt, 'lease')}, clock-ahead ${run.fencesOf(inc, cutAt, 'clock-ahead')})`,
  );
  if (takeover !== undefined)
    r.notes.push(`worker ${worker} taken over by ${takeover.name} after ${secondsSince(cutAt, takeover.seenMs)} s`);
  else r.expectationMissed = `no other node took worker ${worker ?? '-'} while ${inc.name} was cut off from etcd`;
  if (r.expectationMissed === undefined && run.fencesOf(inc, cutAt) === 0) {
    r.expectationMissed = `${inc.name} never fenced while cut off from etcd for longer than the TTL`;
  }
}
