/**
 * Fault `netns-partition` (issue 25, item 5; `--netns`): the node in its own network namespace cut off from etcd in
 * the router namespace (src/netns/netns-node-link.ts), for longer than the TTL while its callers and the run's probe
 * still reach it, then healed. Unlike `partition-node`'s TCP proxy (which reads and drops, and closes every
 * connection on restore) the cut is silence: no RST, no ICMP; both kernels retransmit with a growing backoff and
 * deliver what they had queued after the heal, so the node's late keep-alives and `last-ms` writes reach etcd after
 * its successor holds the slot. The same partition as `partition-node` ({@link runPartition}): takeover, fence of the
 * cut node, the same figures, side by side in the report.
 */
import type { FaultContext, FaultHandler } from '../fault-context.js';
import type { Incarnation } from '../node-fleet.js';
import { secondsSince } from './node-takeover.js';
import { runPartition } from './partition-node.js';

/** Longest the run waits for the netns node to claim a slot a holder released for it. */
const HAND_OVER_MS = 15_000;

export const netnsPartition: FaultHandler = async (c) => {
  const { run, record: r } = c;
  const position = run.fleet.netnsPosition;
  if (position === undefined) throw new Error('netns-partition needs --netns (a node in its own network namespace)');
  if (!(await handItASlot(c, position))) return;
  const inc = await c.hitNode(true, position);
  if (inc === undefined || inc.worker === undefined) {
    r.expectationMissed = `the netns node ${inc?.name ?? position} held no slot to be cut off with`;
    return;
  }
  await runPartition(c, inc, { via: 'netns', cut: () => run.fleet.netnsCut(), heal: () => run.fleet.netnsHeal() });
};

/**
 * The netns node must hold a slot to be worth cutting off: when it is the spare, a holder picked by the fault's `pick`
 * is SIGTERMed (a clean release, as `sigterm-node`), the netns node claims the slot, and a replacement of the holder
 * starts (the new spare). False, with the expectation missed, when the netns node took no slot in time.
 */
async function handItASlot(c: FaultContext, position: string): Promise<boolean> {
  const { run, record: r, fault: f } = c;
  const holding = (): Incarnation | undefined => {
    const i = run.fleet.current(position);
    return i !== undefined && i.worker !== undefined && i.readyMs !== undefined ? i : undefined;
  };
  if (holding() !== undefined) return true;
  const holders = (await run.fleet.serving())
    .filter((i) => i.position !== position && i.worker !== undefined)
    .sort((a, b) => a.position.localeCompare(b.position));
  const victim = holders[Math.floor(f.pick * holders.length)];
  if (victim === undefined) {
    r.expectationMissed = `the netns node ${position} is the spare and no holder could hand it a slot`;
    return false;
  }
  const t0 = Date.now();
  const released = victim.worker;
  victim.expectedExit = true;
  await victim.handle.stop(15_000);
  while (holding() === undefined && Date.now() - t0 < HAND_OVER_MS && !run.o.signal.aborted) await run.sleep(100);
  const next = await run.fleet.start(victim.position);
  const got = holding();
  r.notes.push(
    `the netns node was the spare: ${victim.name} SIGTERMed to hand it worker ${released ?? '-'}; ${got === undefined ? 'not taken' : `${got.name} held worker ${got.worker ?? '-'} after ${secondsSince(t0)} s`}; replacement ${next.name}`,
  );
  if (got === undefined) {
    r.expectationMissed = `the netns node ${position} claimed no slot within ${HAND_OVER_MS / 1000} s of a release`;
    return false;
  }
  // Its first keep-alives and the probe's first mint, before the cut.
  await run.sleep(500);
  return true;
}
