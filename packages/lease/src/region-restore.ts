import type { Layout } from '@idgen/core';
import type { Etcd3 } from 'etcd3';
import { deadlineIn, firstKey, withTimeout } from './etcd-client.js';
import { parseLastMsRecord, leaseKeys } from './records.js';
import type { LastMsRecord } from './records.js';
import { RegionBindingError, bindingGeneration, parseRegionBinding, regionBindingKey } from './region-binding.js';
import { retireRegion } from './region-retire.js';
import type { RetireIo } from './region-retire.js';
import { pinTtlCeiling, readTtlCeiling } from './ttl-ceiling.js';
import type { RegionBindingRecord } from './region-binding.js';
import { readSpareCodesLeniently, sealDeadLoan } from './spare-codes.js';
import type { RegistryIo } from './spare-registry.js';
import { confirmLoan, regionEtcd } from './loan-confirmation.js';

/** The node id of the `last-ms` records `idgen region restored` writes. */
export const RESTORED_NODE_ID = 'region-restored';

/** What {@link markRegionRestored} did. */
export interface RegionRestoredReport {
  readonly code: number;
  /** The region code and the spare codes lent to it whose slots were marked. */
  readonly codes: readonly number[];
  /** `last-ms` records written (every worker of every code). */
  readonly written: number;
  /** The millisecond every slot's floor now starts from (the operator's clock), before TTL and bound. */
  readonly ms: number;
  readonly previousClusterId: string;
  readonly clusterId: string;
  /**
   * Each loan this etcd mirrors to the region, as the registry judged it (docs/design.md §7): `confirmed`, `dropped`
   * (sealed here as `reclaimed`: the loan had moved on before the restore), or `unconfirmed` (no registry given, or
   * no answer: left as is; borrowers confirm it themselves before any claim).
   */
  readonly loans: readonly {
    readonly code: number;
    readonly verdict: 'confirmed' | 'dropped' | 'unconfirmed';
    readonly why?: string;
  }[];
  /** The binding's generation after the step: one more than before when it moved to another cluster. */
  readonly generation: number;
  /** The TTL the marks were written with: the larger of `--lease-ttl` and the deployment's TTL ceiling. */
  readonly ttlMs: number;
  /** How the old cluster was shown to be gone, when the code moved to another one. */
  readonly oldCluster?: 'retired' | 'stated-stopped';
}

/**
 * How `idgen region restored` onto another cluster than the one the code was bound in proves that one gone
 * (docs/design.md §5, "One live cluster per code"): `retire` reaches it and retires it ({@link retireRegion}), or the
 * operator states it is stopped (`oldClusterStopped`, `--old-etcd-stopped`) after the runbook's steps.
 */
export interface OldClusterProof {
  readonly retire?: RetireIo;
  readonly oldClusterStopped?: boolean;
}

interface Io {
  readonly client: Etcd3;
  readonly prefix: string;
  readonly timeoutMs: number;
  readonly layout: Layout;
  readonly now?: () => number;
}

/**
 * `idgen region restored` (docs/runbook.md, "etcd restored from a snapshot"): after a restore, nothing in the restored
 * records says what holders of the lost history minted. Every slot of the region's code and of the spare codes lent to
 * it gets a `last-ms` record of the operator's clock now, not released (never lowering one there), so every next holder
 * waits until its clock passes now + TTL + bound, by when every holder of the lost history has fenced (none can
 * refresh on a history that lost its lease). Then the binding is rewritten with the cluster ID etcd answers from now
 * (and `restoredAt`), which lets nodes start again when the restore gave the cluster a new token. A holder whose lease
 * survived the restore finds a record it did not write at its next refresh and fences: conservative.
 */
export async function markRegionRestored(
  io: Io & { readonly registry?: RegistryIo },
  code: number,
  o: { readonly ttlMs: number; readonly ttlCeilingSeconds?: number } & OldClusterProof,
): Promise<RegionRestoredReport> {
  const clock = io.now ?? Date.now;
  const key = regionBindingKey(io.prefix);
  const res = await withTimeout(
    io.client.get(key).options(deadlineIn(io.timeoutMs)).exec(),
    io.timeoutMs,
    `reading ${key}`,
  );
  const read = firstKey(res.kvs);
  if (read === undefined)
    throw new RegionBindingError(`${key} is absent: this etcd was never bound; bind it with idgen region init`);
  const binding = parseRegionBinding(key, read.value, io.layout.maxRegion);
  if (binding.code !== code)
    throw new RegionBindingError(`this etcd serves region ${binding.code} (${key}), not region ${code}`);
  if (binding.retired !== undefined)
    throw new RegionBindingError(
      `region ${code} moved out of this etcd (${key} retired at ${binding.retired.at} for cluster ${binding.retired.byClusterId})`,
    );
  const clusterId = res.header.cluster_id;
  const moved = binding.clusterId !== clusterId;
  const generation = bindingGeneration(binding) + (moved ? 1 : 0);
  let oldCluster: RegionRestoredReport['oldCluster'];
  if (moved) {
    // A second live cluster of one code would mint its IDs beside the first (§8, case 4): prove the first gone.
    if (o.retire !== undefined) {
      await retireRegion(o.retire, code, {
        clusterId: binding.clusterId,
        byClusterId: clusterId,
        generation,
        at: new Date(clock()).toISOString(),
      });
      oldCluster = 'retired';
    } else if (o.oldClusterStopped === true) oldCluster = 'stated-stopped';
    else
      throw new RegionBindingError(
        `region ${code} was bound in cluster ${binding.clusterId}, and this etcd is cluster ${clusterId}: prove the old ` +
          'cluster gone first: --retire-etcd <its endpoints> retires it and fences its holders, or, once every member ' +
          'of it is stopped, --old-etcd-stopped (docs/runbook.md, "Moving a region to a new etcd cluster")',
      );
  }
  // Every mark covers a holder of the lost history, which may have run on any TTL up to the ceiling (§5).
  const pinned = await readTtlCeiling(io);
  if (pinned === undefined && o.ttlCeilingSeconds !== undefined) await pinTtlCeiling(io, o.ttlCeilingSeconds);
  const ceilingMs = (pinned?.ttlCeilingSeconds ?? o.ttlCeilingSeconds ?? 0) * 1000;
  const ttlMs = Math.max(o.ttlMs, ceilingMs);
  // Read after the retire: a holder of the old cluster acknowledged up to its sweep mints nothing above this + TTL.
  const now = clock();
  const { entries } = await readSpareCodesLeniently(io);
  const loans = entries.filter(
    (e) => (e.record.state === 'lent' || e.record.state === 'reclaiming') && e.record.lentTo === code,
  );
  // The restored mirrors are copies from before the snapshot: the registry decides whether each loan still stands. A
  // loan it shows reclaimed or adopted since is sealed here (`reclaimed`), so the restore never endorses it.
  const judged: { code: number; verdict: 'confirmed' | 'dropped' | 'unconfirmed'; why?: string }[] = [];
  for (const e of loans) {
    if (io.registry === undefined) {
      judged.push({ code: e.record.code, verdict: 'unconfirmed', why: 'no --registry given' });
      continue;
    }
    const v =
      e.record.state === 'reclaiming'
        ? ({ kind: 'confirmed' } as const) // no claim compares a reclaiming mirror: nothing to endorse
        : await confirmLoan(io.registry, regionEtcd(io.client, io.prefix, io.timeoutMs), e, code, io.layout.maxRegion, {
            nowMs: now,
            ttlMs: 0,
          });
    if (v.kind === 'dropped') await sealDeadLoan(io, e, v.registryRevision, now);
    // An ended term is not sealed: the registry still says lent, and `idgen spare lend` again may renew it.
    const verdict = v.kind === 'ended' ? 'unconfirmed' : v.kind;
    judged.push({ code: e.record.code, verdict, ...(v.kind === 'confirmed' ? {} : { why: v.why }) });
  }
  // Every slot of every code lent here is marked, a dropped loan's too: a holder of the lost history may still mint.
  const codes = [code, ...loans.map((e) => e.record.code)];
  let written = 0;
  for (const c of codes) {
    for (let worker = 0; worker <= io.layout.maxWorker; worker++) {
      await markSlot(io, leaseKeys.lastMs(io.prefix, c, worker), now, ttlMs);
      written++;
    }
  }
  const record: RegionBindingRecord & { restoredAt: string } = {
    code,
    clusterId,
    at: binding.at,
    restoredAt: new Date(now).toISOString(),
    generation,
    ...(moved ? { previousClusterId: binding.clusterId } : {}),
  };
  const rebind = await withTimeout(
    io.client
      .if(key, 'Mod', '==', read.modRevision)
      .then(io.client.put(key).value(JSON.stringify(record)))
      .options(deadlineIn(io.timeoutMs))
      .commit(),
    io.timeoutMs,
    `rebinding ${key}`,
  );
  if (!rebind.succeeded) throw new RegionBindingError(`${key} changed meanwhile; run idgen region restored again`);
  return {
    code,
    codes,
    written,
    ms: now,
    previousClusterId: binding.clusterId,
    clusterId,
    loans: judged,
    generation,
    ttlMs,
    ...(oldCluster === undefined ? {} : { oldCluster }),
  };
}

/** Raises one slot's `last-ms` to an unclean record at `ms` (never lowering it), compared on its mod revision. */
async function markSlot(io: Io, key: string, ms: number, ttlMs: number): Promise<void> {
  for (let attempt = 0; attempt < 5; attempt++) {
    const got = await withTimeout(
      io.client.get(key).options(deadlineIn(io.timeoutMs)).exec(),
      io.timeoutMs,
      `reading ${key}`,
    );
    const found = firstKey(got.kvs);
    let previous: LastMsRecord | undefined;
    try {
      previous = found === undefined ? undefined : parseLastMsRecord(key, found.value);
    } catch {
      previous = undefined; // garbage is replaced: a claimer refuses it anyway, and the mark is what a floor needs
    }
    const record: LastMsRecord = {
      ms: Math.max(ms, previous?.ms ?? -1),
      released: false,
      nodeId: RESTORED_NODE_ID,
      at: new Date(ms).toISOString(),
      ttlMs: Math.max(ttlMs, previous?.ttlMs ?? 0),
    };
    const cmp =
      found === undefined ? io.client.if(key, 'Create', '==', 0) : io.client.if(key, 'Mod', '==', found.modRevision);
    const res = await withTimeout(
      cmp
        .then(io.client.put(key).value(JSON.stringify(record)))
        .options(deadlineIn(io.timeoutMs))
        .commit(),
      io.timeoutMs,
      `marking ${key}`,
    );
    if (res.succeeded) return;
  }
  throw new RegionBindingError(`${key} kept changing while it was marked; run idgen region restored again`);
}
