/**
 * The target of a region fault (`region-pool-down`, `region-etcd-down`): one of the run's further regions (codes 2 …
 * N, src/regions.ts), by the fault's `pick`. Region 1, the run's own (with its embedded callers and the other faults),
 * is never taken away whole.
 */
import type { FaultContext } from '../fault-context.js';
import type { RegionOutage, RegionPart } from '../regions.js';

/** The region the fault takes away, announced; undefined (and noted) in a run without further regions. */
export function regionTarget(c: FaultContext): RegionPart | undefined {
  const regions = c.run.regions;
  const region = regions[Math.floor(c.fault.pick * regions.length)];
  if (region === undefined) {
    c.record.notes.push('no further region (--regions 1): nothing to take away');
    return undefined;
  }
  c.record.target = `region ${region.code}`;
  c.line();
  return region;
}

/** Records the region's loss now (wall ms); the handler sets `returnMs` once it is given back. */
export function regionLost(c: FaultContext, region: RegionPart): RegionOutage {
  const out: RegionOutage = { region: region.code, lossMs: Date.now(), returnMs: undefined };
  c.run.regionOutages.set(c.record, out);
  return out;
}
