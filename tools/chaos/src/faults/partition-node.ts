/**
 * Faults `partition-node` and `partition-clock-forward` (issue 7, issue 12): a node cut off from etcd by its TCP proxy,
 * its clock also ahead for the second. {@link runPartition} is the partition itself, shared with `netns-partition`
 * (src/faults/netns-partition.ts), which cuts in the router namespace instead, so both are judged and measured alike.
 */
import type { FaultContext, FaultHandler } from '../fault-context.js';
import type { Incarnation } from '../node-fleet.js';
import type { PartitionFigures } from '../run.js';
import type { Holding } from '../verify.js';
import { secondsSince, takeoverOf, waitTakeover } from './node-takeover.js';

/**
 * One node cut off from etcd (`partition-node`), its clock also set ahead at the cut for
 * `partition-clock-forward`. The run asks the cut-off node for one ID after another: its callers still reach
 * it, and whatever it mints while it believes it holds the slot is verified like a caller's blocks.
 */
export const partitionNode: FaultHandler = async (c) => {
  const inc = await c.hitNode(true);
  if (inc === undefined) return;
  const fleet = c.run.fleet;
  await runPartition(c, inc, {
    via: 'proxy',
    cut: () => fleet.cutEtcd(inc.position),
    heal: () => fleet.restoreEtcd(inc.position),
  });
};

/** How a partition cuts and heals a node's way to etcd. */
export interface PartitionLink {
  readonly via: PartitionFigures['via'];
  cut(): void;
  heal(): void;
}

/** How long after the heal the run still looks for the cut node's first answer from etcd (in the background). */
const ANSWER_WATCH_MS = 30_000;

/**
 * The partition of `inc` by `link`, from now (`c.begin` for the proxy's; later for the netns one, which may first
 * hand its node a slot): cut, wait for the takeover (a second more; with the clock ahead, until the successor's
 * clock has passed all the holder could have minted), heal, judge, and measure ({@link PartitionFigures}).
 */
export async function runPartition(c: FaultContext, inc: Incarnation, link: PartitionLink): Promise<void> {
  const { run, fault: f } = c;
  const worker = inc.worker;
  const forward = f.kind === 'partition-clock-forward' ? (f.clockOffsetSeconds ?? 0) : 0;
  const phase = Date.now();
  const stop = { untilMs: phase + f.effectMs };
  const probing = run.probe(inc, stop);
  await run.sleep(200);
  const cutAt = Date.now();
  link.cut();
  // Ahead at once, while its monotonic deadline still runs (up to TTL − margin after its last keep-alive).
  const allowance = forward > 0 ? await run.clockAhead(inc, forward) : undefined;
  const takenOver = takeoverOf(c, inc, worker, cutAt);
  // Until the spare holds the slot (and a second more), and, with the clock ahead, until the successor's
  // clock has passed all the holder could have minted (offset + TTL − margin after the cut); at most `effectMs`.
  const earliestEnd = cutAt + (forward > 0 ? forward * 1000 + run.ttlMs - 1000 + 500 : 0);
  await waitTakeover(c, worker, takenOver, phase + f.effectMs);
  const taken = takenOver();
  await run.sleep(
    Math.min(Math.max(taken !== undefined ? taken.seenMs + 1000 : 0, earliestEnd), phase + f.effectMs) - Date.now(),
  );
  stop.untilMs = Date.now();
  const p = await probing;
  if (allowance !== undefined) await run.clockBack(inc, allowance);
  const healAt = Date.now();
  const seenAtHeal = inc.handle.stdoutLines.length;
  link.heal();
  const figures = judgePartition(c, inc, { worker, forward, cutAt, healAt, probe: p, takeover: takenOver(), link });
  c.record.partition = figures;
  void watchAnswer(c, inc, seenAtHeal, healAt, figures);
}

/**
 * A line of the cut node that shows a claim etcd settled: a slot claimed (waiting out its floor) or held, or a claim
 * refused for no free slot. Not a late answer to a request sent during the cut (a lease granted then is fenced at a
 * deadline counted from its send time, and its keep-alives may still wait on a retransmission).
 */
function answerOf(line: string): string | undefined {
  if (line.includes('"msg":"lease: alive"')) return 'held a slot';
  if (line.includes('"state":"waiting-for-floor"')) return 'claimed a slot';
  if (line.includes('no free worker slot')) return 'claim refused: no free slot';
  return undefined;
}

/** In the background: the cut node's first claim etcd settled after the heal, into `figures` (read by the report). */
async function watchAnswer(
  c: FaultContext,
  inc: Incarnation,
  from: number,
  healAt: number,
  figures: PartitionFigures,
): Promise<void> {
  let seen = from;
  while (Date.now() - healAt < ANSWER_WATCH_MS && !c.run.o.signal.aborted) {
    const lines = inc.handle.stdoutLines;
    for (; seen < lines.length; seen++) {
      const a = answerOf(lines[seen] as string);
      if (a !== undefined) {
        figures.healToEtcdMs = Date.now() - healAt;
        figures.healAnswer = a;
        return;
      }
    }
    if (inc.handle.exitStatus() !== undefined) {
      figures.healAnswer = `exited first (code ${inc.handle.exitStatus()?.code ?? '-'})`;
      return;
    }
    await c.run.sleep(20);
  }
}

/** The notes and the expectation of a partition: a takeover, and a fence of the cut-off node. */
function judgePartition(
  c: FaultContext,
  inc: Incarnation,
  s: {
    worker: number | undefined;
    forward: number;
    cutAt: number;
    healAt: number;
    probe: { ok: number; failed: number };
    takeover: Holding | undefined;
    link: PartitionLink;
  },
): PartitionFigures {
  const { record: r, run } = c;
  const { worker, cutAt, takeover } = s;
  r.notes.push(`${s.link.via === 'netns' ? 'router rules deleted' : 'link restored'} after ${secondsSince(cutAt)} s`);
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
  const mine = run.fleet.fences.filter(
    (e) => e.name === inc.name && e.atMs >= cutAt && e.atMs <= s.healAt && e.source === 'guard',
  );
  const fences: Record<string, number> = {};
  for (const e of mine) fences[e.reason] = (fences[e.reason] ?? 0) + 1;
  const first = run.fleet.fences.find((e) => e.name === inc.name && e.atMs >= cutAt && e.atMs <= s.healAt);
  return {
    via: s.link.via,
    cutToFenceMs: first === undefined ? undefined : first.atMs - cutAt,
    fences,
    takeoverMs: takeover === undefined ? undefined : takeover.seenMs - cutAt,
    cutMs: s.healAt - cutAt,
    healToEtcdMs: undefined,
    healAnswer: undefined,
    probeOk: s.probe.ok,
    probeFailed: s.probe.failed,
  };
}
