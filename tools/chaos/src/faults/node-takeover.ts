/**
 * What the faults that stop or cut off a node share (src/faults/pause-node.ts, src/faults/partition-node.ts): whether
 * another node took its worker, and the seconds since, for the notes.
 */
import type { FaultContext } from '../fault-context.js';
import type { Incarnation } from '../node-fleet.js';
import type { Holding } from '../verify.js';

/** Seconds with one decimal, for the notes. */
export const secondsSince = (fromMs: number, toMs: number = Date.now()): string => ((toMs - fromMs) / 1000).toFixed(1);

/** The holding of `worker` by another node than `inc`, seen since `sinceMs` (a takeover). */
export const takeoverOf =
  (c: FaultContext, inc: Incarnation, worker: number | undefined, sinceMs: number) => (): Holding | undefined =>
    c.run.fleet.holdings.find((h) => h.worker === worker && h.name !== inc.name && h.seenMs >= sinceMs);

/**
 * Waits until `takenOver` finds a holding or the fault's effect is over (`untilMs`, default `begin + effectMs`), or the
 * run aborted.
 */
export async function waitTakeover(
  c: FaultContext,
  worker: number | undefined,
  takenOver: () => Holding | undefined,
  untilMs: number = c.begin + c.fault.effectMs,
): Promise<void> {
  while (worker !== undefined && takenOver() === undefined && Date.now() < untilMs && !c.run.o.signal.aborted) {
    await c.run.sleep(100);
  }
}
