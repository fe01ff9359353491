import type { Etcd3 } from 'etcd3';
import { errorText } from './etcd-client.js';
import { loanTermOf, readRegistryNow, readRegistrySeen, revisionBelow, sameRegistry } from './registry-identity.js';
import type { RegionEtcd } from './registry-identity.js';
import { describeRegistry, readRegistryCode } from './spare-registry.js';
import type { RegistryIo, SpareRegistryEntry } from './spare-registry.js';
import type { SpareCodeEntry } from './spare-codes.js';

/**
 * What the registry says of a loan a region's etcd mirrors (docs/design.md §7, "Registry threats" and "Loan terms"):
 * - `confirmed`: the registry's record of the code says `lent` to this region, at or after the mod revision the
 *   mirror follows (later only by renewals), in the registry the region follows, and its term has not ended: it may
 *   be renewed, and a claim may go ahead under it with two TTLs of term left; `entry` is the record read (what a
 *   renewal compares), `termMs` the deployment's loan term;
 * - `ended`: the registry still says `lent` to this region, but the loan's term is over (no borrower renewed it: the
 *   registry was out of reach for a term, or it and this etcd were both restored to a loan that has since been
 *   reclaimed and adopted): never claim under it or renew it, and a holder gives its slot back;
 * - `dropped`: the registry has moved past the mirror (being reclaimed, reclaimed, adopted, or lent elsewhere): the
 *   mirror is a dead loan (the region's etcd was restored to before the reclaim); never claim under it;
 * - `unconfirmed`: the registry did not answer, is not initialised, is another registry, went back in its history, or
 *   has no record as recent as the mirror: no new claim under it until it answers for the loan.
 */
export type LoanVerdict =
  | { readonly kind: 'confirmed'; readonly entry: SpareRegistryEntry; readonly termMs: number }
  | { readonly kind: 'ended'; readonly why: string }
  | { readonly kind: 'dropped'; readonly why: string; readonly registryRevision: string }
  | { readonly kind: 'unconfirmed'; readonly why: string };

/** What a confirmation needs to judge a loan's term: the wall clock now, and the asking node's lease TTL. */
export interface TermNeed {
  readonly nowMs: number;
  /** The asking node's lease TTL: a term under four of them cannot be renewed in time, and is not confirmed. */
  readonly ttlMs: number;
}

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
  term: TermNeed,
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
    const below = revisionBelow(reg.modRevision, mirrorRevision);
    // A code is lent once (./spare-codes.ts): a `lent` record past the mirror's revision is the same loan, renewed.
    if (!below && reg.record.state === 'lent' && reg.record.lentTo === home)
      return judgeTerm(reg, loanTermOf(now.record), term);
    if (below)
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

/** A `lent` record's term against what the asker needs (docs/design.md §7, "Loan terms"). */
function judgeTerm(reg: SpareRegistryEntry, termMs: number, need: TermNeed): LoanVerdict {
  const code = reg.record.code;
  if (termMs < 4 * need.ttlMs)
    return {
      kind: 'unconfirmed',
      why: `the deployment's loan term (${termMs} ms) is under four of this node's TTLs (${need.ttlMs} ms): it could not renew in time`,
    };
  const until = reg.record.untilMs;
  // A term not yet over may be renewed: a reclaim stops renewals, and adopt waits past the term plus the TTL ceiling,
  // so a registry that still says `lent` before `untilMs` is no copy of a loan adopted since. A loan lent before terms
  // existed has none until its first renewal (docs/runbook.md "Upgrading a region").
  if (until === undefined || until > need.nowMs) return { kind: 'confirmed', entry: reg, termMs };
  return {
    kind: 'ended',
    why:
      `the loan of code ${code} ended at ${new Date(until).toISOString()}, ${need.nowMs - until} ms ago (not renewed: ` +
      'the registry out of reach for a term, or it and this etcd restored to before a reclaim)',
  };
}

/** A region's etcd client as a {@link RegionEtcd}. */
export function regionEtcd(client: Etcd3, prefix: string, timeoutMs: number, name = "this region's etcd"): RegionEtcd {
  return { client, prefix, timeoutMs, name };
}
