import type { Etcd3 } from 'etcd3';
import { errorText } from './etcd-client.js';
import { readRegistryNow, readRegistrySeen, revisionBelow, sameRegistry } from './registry-identity.js';
import type { RegionEtcd } from './registry-identity.js';
import { describeRegistry, readRegistryCode } from './spare-registry.js';
import type { RegistryIo } from './spare-registry.js';
import type { SpareCodeEntry } from './spare-codes.js';

/**
 * What the registry says of a loan a region's etcd mirrors (docs/design.md §7, "Registry threats"):
 * - `confirmed`: the registry's record of the code says `lent` to this region at exactly the mod revision the mirror
 *   follows, in the registry the region follows: a claim under it may go ahead;
 * - `dropped`: the registry has moved past the mirror (being reclaimed, reclaimed, adopted, or lent elsewhere): the
 *   mirror is a dead loan (the region's etcd was restored to before the reclaim); never claim under it;
 * - `unconfirmed`: the registry did not answer, is not initialised, is another registry, went back in its history, or
 *   has no record as recent as the mirror: no new claim under it until it answers for the loan.
 */
export type LoanVerdict =
  | { readonly kind: 'confirmed' }
  | { readonly kind: 'dropped'; readonly why: string; readonly registryRevision: string }
  | { readonly kind: 'unconfirmed'; readonly why: string };

/**
 * Asks the registry about one `lent` (or `reclaiming`) mirror of `region`'s etcd, whose borrower is `home`. Never
 * throws: an error is an `unconfirmed` verdict naming it (a claim must not wait on the registry past its deadline,
 * and `registry.timeoutMs` bounds each read).
 */
export async function confirmLoan(
  registry: RegistryIo,
  region: RegionEtcd,
  entry: SpareCodeEntry,
  home: number,
  maxRegion: number,
): Promise<LoanVerdict> {
  const r = entry.record;
  const code = r.code;
  try {
    const now = await readRegistryNow(registry);
    const seen = await readRegistrySeen(region);
    if (seen !== undefined && !sameRegistry(seen.record.registry, now.identity))
      return { kind: 'unconfirmed', why: `${region.name} follows another spare-code registry than the one given` };
    if (seen !== undefined && revisionBelow(now.revision, seen.record.revision))
      return {
        kind: 'unconfirmed',
        why: `the registry answers at revision ${now.revision}, below the ${seen.record.revision} ${region.name} saw (restored?)`,
      };
    const follows = r.registry;
    const mirrorRevision = r.registryRevision;
    if (follows === undefined || mirrorRevision === undefined)
      return { kind: 'unconfirmed', why: `${entry.key} records no registry revision (written before the registry)` };
    if (follows.clusterId !== now.identity.clusterId || follows.prefix !== now.identity.prefix)
      return {
        kind: 'unconfirmed',
        why: `${entry.key} follows the registry of cluster ${follows.clusterId}, not this one (${now.identity.clusterId})`,
      };
    const reg = await readRegistryCode(registry, code, maxRegion);
    if (reg === undefined)
      return { kind: 'unconfirmed', why: `the registry has no record of code ${code} (restored to before the loan?)` };
    const atMirror = reg.modRevision === mirrorRevision;
    if (atMirror && reg.record.state === 'lent' && reg.record.lentTo === home) return { kind: 'confirmed' };
    if (revisionBelow(reg.modRevision, mirrorRevision))
      return {
        kind: 'unconfirmed',
        why: `the registry's record of code ${code} is at revision ${reg.modRevision}, below the ${mirrorRevision} the mirror follows (restored?)`,
      };
    return {
      kind: 'dropped',
      why: `the registry says code ${code} is ${describeRegistry(reg.record)} (since ${reg.record.at}), not the loan ${entry.key} mirrors`,
      registryRevision: reg.modRevision,
    };
  } catch (e) {
    return { kind: 'unconfirmed', why: `the registry did not answer for code ${code}: ${errorText(e)}` };
  }
}

/** A region's etcd client as a {@link RegionEtcd}. */
export function regionEtcd(client: Etcd3, prefix: string, timeoutMs: number, name = "this region's etcd"): RegionEtcd {
  return { client, prefix, timeoutMs, name };
}
