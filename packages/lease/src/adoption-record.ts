import type { Layout } from '@idgen/core';
import { parseRegionBinding, regionBindingKey } from './region-binding.js';
import { getKey, readSpareCode } from './spare-code-records.js';
import type { Io } from './spare-code-records.js';
import { casRegistryCode, readRegistryCode } from './spare-registry.js';
import type { RegistryIo } from './spare-registry.js';

/** What {@link keepAdoptionOnRecord} found: not an adopter here, the registry agrees, or it wrote the adoption back. */
export type AdoptionRecordStep = 'not-adopted' | 'on-record' | 'rewritten';

/**
 * An adopter keeps its adoption on record in the registry (docs/design.md §7, "An adoption kept on record"). An
 * adoption has no term: a registry restored to before it, with no `spare reconcile`, would lend the code again, and
 * the first-claim wait only outlasts loans. So a node of a code its etcd says it adopted asks the registry now and
 * then, and writes the adoption back (compared on the record it read) when the registry has none, or has a later loan
 * of the code: a new loan's borrowers then meet `adopted` before their first claim is due (a term and a quarter after
 * the lend), and never claim under it. An `adopted` mirror is never undone (a code is adopted once), so the etcd's
 * word outranks a registry that lost it.
 */
export async function keepAdoptionOnRecord(
  io: Io & { layout: Layout },
  registry: RegistryIo,
  code: number,
  nowMs: number,
): Promise<AdoptionRecordStep> {
  const mine = await readSpareCode(io, code);
  if (mine === undefined || mine.record.state !== 'adopted') return 'not-adopted';
  const reg = await readRegistryCode(registry, code, io.layout.maxRegion);
  if (reg?.record.state === 'adopted') return 'on-record';
  const bindingKey = regionBindingKey(io.prefix);
  const binding = await getKey(io, bindingKey);
  if (binding === undefined) return 'not-adopted'; // unbound: the node's own checks refuse it
  const { clusterId } = parseRegionBinding(bindingKey, binding.value, io.layout.maxRegion);
  const from = mine.record.adoptedFrom;
  const cas = await casRegistryCode(
    registry,
    reg,
    {
      code,
      state: 'adopted',
      lentTo: from.lentTo,
      handover: { lentTo: from.lentTo, reclaimedAt: from.reclaimedAt, workers: [], maxLastMs: from.maxLastMs },
      adoptedBy: { clusterId, prefix: io.prefix },
      at: new Date(nowMs).toISOString(),
    },
    io.layout.maxRegion,
  );
  return cas.won ? 'rewritten' : 'on-record';
}
