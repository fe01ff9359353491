import { createGuardedMinter, type GuardedMinter } from '@idgen/clock-guard';
import type { ServiceDeps } from './service.js';

/** A guard holding worker 9 of region 4, assigned for good (no deadline, no ceiling): the specs' minting node. */
export function assignedTestGuard(): GuardedMinter {
  const guard = createGuardedMinter({ region: 4 });
  guard.assign({
    region: 4,
    worker: 9,
    floorMs: Date.now() - 1,
    deadlineMonoMs: Number.MAX_SAFE_INTEGER,
    ceilingMs: Number.MAX_SAFE_INTEGER,
  });
  return guard;
}

/** The service's dependencies over `guard`: a running standalone node of region 4, NextIds up to 100. */
export function testServiceDeps(guard: GuardedMinter): ServiceDeps {
  return {
    guard,
    lease: () => ({
      nodeId: 'n',
      leaseId: undefined,
      keepAliveAgeSeconds: undefined,
      deadlineInMs: undefined,
      mode: 'standalone',
    }),
    phase: () => 'running',
    region: 4,
    maxCount: 100,
    timeSourceMode: 'none',
    advertise: () => 'here:1',
  };
}
