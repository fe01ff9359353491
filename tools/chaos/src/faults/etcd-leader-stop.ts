/**
 * Fault `etcd-leader-stop` (issue 7): the run's etcd leader stopped for the effect, then started again.
 */
import type { FaultHandler } from '../fault-context.js';

/** The leader stopped for the effect, then started again; notes the new leader. */
export const etcdLeaderStop: FaultHandler = async (c) => {
  const { run, record: r } = c;
  const leader = await run.cluster.leader(10_000).catch(() => undefined);
  if (leader === undefined) {
    r.notes.push('no leader found');
    return;
  }
  r.target = `etcd ${leader.name}`;
  c.line();
  await leader.stop();
  await c.until();
  await leader.start().catch((e: unknown) => r.notes.push(`restart failed: ${String(e)}`));
  const next = await run.cluster.leader(10_000).catch(() => undefined);
  r.notes.push(`new leader ${next?.name ?? 'unknown'}`);
};
