/**
 * Faults `etcd-pause-short` and `etcd-pause-long` (issue 7): every member of the run's etcd SIGSTOPped for the
 * effect.
 */
import type { FaultHandler } from '../fault-context.js';

/** Every member SIGSTOPped for the effect (short or long: judged by its fences at the end). */
export const etcdPause: FaultHandler = async (c) => {
  c.record.target = 'etcd (all members, SIGSTOP)';
  c.line();
  for (const m of c.run.cluster.members) m.pause();
  await c.until();
  for (const m of c.run.cluster.members) m.resume();
};
