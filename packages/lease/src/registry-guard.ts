import type { Etcd3 } from 'etcd3';
import type { Layout } from '@idgen/core';
import { deadlineIn, firstKey, withTimeout } from './etcd-client.js';
import { parseRegionBinding, regionBindingKey } from './region-binding.js';
import {
  checkRegistryHistory,
  conflictingMirror,
  noteRegistrySeen,
  readRegistryNow,
  readRegistrySeen,
} from './registry-identity.js';
import type { RegionEtcd, RegionRegistryView, RegistryNow, RegistryStep } from './registry-identity.js';
import { readSpareCodesLeniently } from './spare-code-records.js';
import { listRegistryCodes } from './spare-registry.js';
import type { RegistryIo } from './spare-registry.js';

/**
 * The deployment-wide check before a lend, reclaim or adopt writes anything (docs/design.md §7, "Registry threats"):
 * the registry is initialised and is the one every region follows, its history has not gone back, and no region of
 * the deployment mirrors the code in a way that contradicts the step. Then, once the step is done, every region
 * remembers the registry revision it reached ({@link RegistryGuard.noteSeen}).
 */

/** The other regions of the deployment (the deployment file's), read before a step; the step's own etcd is added. */
export interface WithDeployment {
  readonly deployment?: readonly RegionEtcd[];
}

/** What a step's check found: the registry now, and the regions to tell the revision the step reached. */
export interface RegistryGuard {
  readonly now: RegistryNow;
  /** Raises every region's memory of the registry to the revision the registry answers with now. */
  noteSeen(now?: () => number): Promise<void>;
}

/** Reads one region's binding code, memory of the registry and mirrors (a garbage mirror is left out here). */
export async function readRegionView(io: RegionEtcd, layout: Layout): Promise<RegionRegistryView> {
  const key = regionBindingKey(io.prefix);
  const got = await withTimeout(
    io.client.get(key).options(deadlineIn(io.timeoutMs)).exec(),
    io.timeoutMs,
    `reading ${key} in ${io.name}`,
  );
  const read = firstKey(got.kvs);
  let code: number | undefined;
  try {
    code = read === undefined ? undefined : parseRegionBinding(key, read.value, layout.maxRegion).code;
  } catch {
    code = undefined;
  }
  const seen = await readRegistrySeen(io);
  const { entries } = await readSpareCodesLeniently({ ...io, layout });
  return { name: io.name, code, seen: seen?.record, mirrors: entries };
}

/**
 * Checks the registry and every region before `step` (throws {@link RegistryRefusedError} with one line); the step's
 * own etcd (`io`) is always among the regions read.
 */
export async function guardRegistryStep(
  io: { client: Etcd3; prefix: string; timeoutMs: number; layout: Layout; registry: RegistryIo } & WithDeployment,
  step: RegistryStep,
): Promise<RegistryGuard> {
  const own: RegionEtcd = { client: io.client, prefix: io.prefix, timeoutMs: io.timeoutMs, name: "this step's etcd" };
  const regions = [own, ...(io.deployment ?? [])];
  const now = await readRegistryNow(io.registry);
  const codes = await listRegistryCodes(io.registry, io.layout.maxRegion);
  const views: RegionRegistryView[] = [];
  for (const r of regions) views.push(await readRegionView(r, io.layout));
  checkRegistryHistory(now, codes, views);
  conflictingMirror(step, views);
  return {
    now,
    async noteSeen(clock) {
      const after = await readRegistryNow(io.registry);
      for (const r of regions) await noteRegistrySeen(r, after.identity, after.revision, { now: clock });
    },
  };
}
