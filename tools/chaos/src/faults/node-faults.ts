/**
 * The faults that hit one generator node (issue 7, issue 12): a kill, a SIGTERM, a SIGSTOP until a spare takes
 * its slot, a cut etcd link (with or without its clock ahead), its clock ahead and back, a clock jump back. Each
 * is a {@link FaultHandler}; src/fault-table.ts maps the fault kinds to them.
 */
import type { FaultContext, FaultHandler } from '../fault-context.js';
import type { Incarnation } from '../node-fleet.js';
import type { Holding } from '../verify.js';

/** Seconds with one decimal, for the notes. */
const secondsSince = (fromMs: number, toMs: number = Date.now()): string => ((toMs - fromMs) / 1000).toFixed(1);

/** The holding of `worker` by another node than `inc`, seen since `sinceMs` (a takeover). */
const takeoverOf =
  (c: FaultContext, inc: Incarnation, worker: number | undefined, sinceMs: number) => (): Holding | undefined =>
    c.run.fleet.holdings.find((h) => h.worker === worker && h.name !== inc.name && h.seenMs >= sinceMs);

/** Waits until `takenOver` finds a holding or the fault's effect is over (or the run aborted). */
async function waitTakeover(
  c: FaultContext,
  worker: number | undefined,
  takenOver: () => Holding | undefined,
): Promise<void> {
  while (
    worker !== undefined &&
    takenOver() === undefined &&
    Date.now() < c.begin + c.fault.effectMs &&
    !c.run.o.signal.aborted
  ) {
    await c.run.sleep(100);
  }
}

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

/** SIGSTOP until the spare has taken the slot (and minted a moment), at most `effectMs`; then SIGCONT. */
export const pauseNode: FaultHandler = async (c) => {
  const r = c.record;
  const inc = await c.hitNode(true);
  if (inc === undefined) return;
  const worker = inc.worker;
  inc.paused = true;
  inc.handle.signal('SIGSTOP');
  const pausedAt = Date.now();
  // SIGCONT only then, so the old holder wakes up to a slot that is someone else's (issue 7).
  const takenOver = takeoverOf(c, inc, worker, pausedAt);
  await waitTakeover(c, worker, takenOver);
  if (takenOver() !== undefined) await c.run.sleep(Math.min(1000, c.begin + c.fault.effectMs - Date.now()));
  else await c.until();
  inc.handle.signal('SIGCONT');
  inc.paused = false;
  r.notes.push(`SIGCONT after ${secondsSince(pausedAt)} s`);
  const takeover = takenOver();
  if (takeover !== undefined)
    r.notes.push(`worker ${worker} taken over by ${takeover.name} after ${secondsSince(pausedAt, takeover.seenMs)} s`);
  else r.expectationMissed = `no other node took worker ${worker ?? '-'} while ${inc.name} was stopped`;
};

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
