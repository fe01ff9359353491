/**
 * Fault `region-etcd-down` (issue 25, item 2): the etcd of one further region killed for the effect (longer than the
 * TTL: its nodes fence at their deadline), then started again. With a fallback region configured its callers should
 * lose no call (issue 25's target); the failover table (src/regions.ts) gives what it does cost them.
 */
import type { FaultHandler } from '../fault-context.js';
import { regionLost, regionTarget } from './region-target.js';

/** The region's etcd members killed, started again once the effect is over. */
export const regionEtcdDown: FaultHandler = async (c) => {
  const region = regionTarget(c);
  if (region === undefined) return;
  const out = regionLost(c, region);
  // SIGKILL, as etcd-cluster-stop does: a power cut of the region's etcd.
  await Promise.all(region.cluster.members.map((m) => m.kill()));
  await c.until();
  const restart = Date.now();
  out.returnMs = restart;
  await Promise.all(region.cluster.members.map((m) => m.start())).catch((e: unknown) =>
    c.record.notes.push(`restart failed: ${String(e)}`),
  );
  c.record.notes.push(`etcd healthy again ${((Date.now() - restart) / 1000).toFixed(1)} s after the restart`);
};
