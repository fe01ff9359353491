/**
 * Fault `pause-node` (issue 7): a node SIGSTOPped until a spare takes its slot, then SIGCONT.
 */
import type { FaultHandler } from '../fault-context.js';
import { secondsSince, takeoverOf, waitTakeover } from './node-takeover.js';

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
