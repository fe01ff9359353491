/**
 * Fault `etcd-cluster-stop` (issue 7): every member of the run's etcd killed for the effect, then started again.
 */
import type { FaultHandler } from '../fault-context.js';

/** Every member killed for the effect, then started again. */
export const etcdClusterStop: FaultHandler = async (c) => {
  const { run, record: r } = c;
  r.target = 'etcd (all members)';
  c.line();
  // SIGKILL (a power cut): SIGTERM'd members wait for each other up to the 5 s grace, which would
  // make the outage longer than scheduled.
  await Promise.all(run.cluster.members.map((m) => m.kill()));
  r.notes.push(`all stopped after ${((Date.now() - c.begin) / 1000).toFixed(1)} s`);
  await c.until();
  const restart = Date.now();
  await Promise.all(run.cluster.members.map((m) => m.start())).catch((e: unknown) =>
    r.notes.push(`restart failed: ${String(e)}`),
  );
  r.notes.push(`healthy again ${((Date.now() - restart) / 1000).toFixed(1)} s after the restart`);
};
