import type { Layout } from '@idgen/core';
import { createOnce } from './create-once.js';
import { deadlineIn, firstKey, withTimeout } from './etcd-client.js';
import {
  RegionBindingError,
  bindingGeneration,
  parseRegionBinding,
  regionBindingKey,
  type BindingIo,
  type RegionBindingRecord,
} from './region-binding.js';
import { retireRegion, type RetireIo } from './region-retire.js';
import type { RegionEtcd } from './registry-identity.js';
import { DEFAULT_TTL_CEILING_SECONDS, pinTtlCeiling, readTtlCeiling, type TtlCeilingRecord } from './ttl-ceiling.js';

/** What `idgen region init` is given besides the etcd it binds (docs/design.md §5, §8). */
export interface InitRegionOptions {
  /** The deployment's lease TTL ceiling, pinned once after the binding (docs/design.md §5, "The TTL ceiling"). */
  readonly ttlCeilingSeconds?: number;
  /**
   * Every region etcd of the deployment file (`--config`): each is read before anything is written, and a live binding
   * of the same code in another cluster (or under another prefix) refuses the step unless the proof below is given
   * (docs/design.md §8, "One live cluster per code").
   */
  readonly deployment?: readonly RegionEtcd[];
  /** The live cluster's endpoints (`--retire-etcd`): it is retired, and its holders fence, before this etcd is bound. */
  readonly retire?: RetireIo;
  /** The operator states that every member of the live cluster is stopped (`--old-etcd-stopped`). */
  readonly oldClusterStopped?: boolean;
  /**
   * No deployment file was given (the CLI without `--config`): binding an etcd not bound yet then needs `soleCluster`,
   * the operator's statement that no other cluster of the deployment serves the code (`--sole-cluster`: a deployment's
   * first etcds, before any deployment file exists; docs/design.md §8, "One live cluster per code"). A library caller
   * binding test or simulated etcds leaves both off.
   */
  readonly noDeploymentFile?: boolean;
  readonly soleCluster?: boolean;
}

/** What {@link initRegion} did. */
export interface InitRegionReport {
  readonly record: RegionBindingRecord;
  readonly changed: boolean;
  readonly ceiling?: TtlCeilingRecord;
  /** How a live binding of the code elsewhere was shown gone, when the deployment had one. */
  readonly oldCluster?: 'retired' | 'stated-stopped';
}

/** A binding of the code found live in another etcd of the deployment file. */
interface LiveBinding {
  readonly name: string;
  readonly record: RegionBindingRecord;
}

/**
 * `idgen region init`: binds this etcd (under the prefix) to region `code`, with etcd's cluster ID, and pins the lease
 * TTL ceiling (`o.ttlCeilingSeconds`; not told, one already pinned stays, else the default: ttl-ceiling.ts). Idempotent: the
 * same code again changes nothing. Refuses (a {@link RegionBindingError}) an etcd bound to another code, or bound in
 * another cluster (restored or replaced: docs/runbook.md), and, given the deployment file's etcds, a code that another
 * cluster of the deployment still serves (issue 31 case 4: a second, fresh etcd for a live code would mint its IDs
 * beside the first) unless that cluster is retired through its own etcd or stated stopped; the binding then takes the
 * next generation, which the audit compares across etcds.
 */
export async function initRegion(
  io: BindingIo & { layout: Layout; now?: () => number },
  code: number,
  o: InitRegionOptions = {},
): Promise<InitRegionReport> {
  const bound = await bindRegion(io, code, o);
  // Pinned after the binding, so an etcd of another code is refused before anything is written (docs/design.md §5).
  // Not told: a ceiling already pinned stays, and an etcd without one gets the default, as `idgen region init` pins it
  // (no holder claims on an etcd without a ceiling: docs/design.md §5, "The TTL ceiling").
  const seconds = o.ttlCeilingSeconds ?? (await readTtlCeiling(io))?.ttlCeilingSeconds ?? DEFAULT_TTL_CEILING_SECONDS;
  const { record: ceiling } = await pinTtlCeiling(io, seconds);
  return { ...bound, ceiling };
}

async function bindRegion(
  io: BindingIo & { layout: Layout; now?: () => number },
  code: number,
  o: InitRegionOptions,
): Promise<InitRegionReport> {
  if (!Number.isSafeInteger(code) || code < 0 || code > io.layout.maxRegion) {
    throw new RegionBindingError(`region must be an integer from 0 to ${io.layout.maxRegion}, got ${String(code)}`);
  }
  const key = regionBindingKey(io.prefix);
  const clock = io.now ?? Date.now;
  // The cluster ID comes with every answer; read it first so the record written is the cluster that took it.
  const probe = await withTimeout(
    io.client.get(key).options(deadlineIn(io.timeoutMs)).exec(),
    io.timeoutMs,
    `reading ${key}`,
  );
  const clusterId = probe.header.cluster_id;
  const found = firstKey(probe.kvs);
  let record: RegionBindingRecord = { code, clusterId, at: new Date(clock()).toISOString() };
  let oldCluster: InitRegionReport['oldCluster'];
  if (found === undefined) {
    if (o.noDeploymentFile === true && o.soleCluster !== true)
      throw new RegionBindingError(
        `this etcd is not bound yet and no deployment file was given: give --config <deployment.json>, so every region's ` +
          `etcd is read first and a code another cluster still serves is refused, or state --sole-cluster when no ` +
          `other etcd cluster of the deployment serves region ${code} (docs/runbook.md, "Binding a region's etcd")`,
      );
    const live = await liveElsewhere(io, code, clusterId, o.deployment ?? []);
    const [oldest] = live;
    if (oldest !== undefined) {
      const generation = Math.max(...live.map((l) => bindingGeneration(l.record))) + 1;
      oldCluster = await proveGone(live, code, clusterId, generation, clock, o);
      record = { ...record, generation, previousClusterId: oldest.record.clusterId };
    }
  }
  const res = await createOnce(io, key, JSON.stringify(record), `binding transaction on ${key}`);
  if (res.clusterId !== clusterId) {
    throw new Error(`etcd answered from cluster ${clusterId}, then ${res.clusterId}: try again`);
  }
  if (res.kind === 'created') return { record, changed: true, ...(oldCluster === undefined ? {} : { oldCluster }) };
  const existing = parseRegionBinding(key, res.raw, io.layout.maxRegion);
  if (existing.code !== code) {
    throw new RegionBindingError(
      `this etcd is already bound to region ${existing.code} (${key}, since ${existing.at}): one etcd serves one region code`,
    );
  }
  if (existing.clusterId !== clusterId) {
    throw new RegionBindingError(
      `region ${code} was bound in cluster ${existing.clusterId}, and this etcd reports cluster ${clusterId} (${key}): ` +
        'a restored or replaced etcd is never trusted; follow docs/runbook.md, "etcd restored from a snapshot"',
    );
  }
  if (existing.retired !== undefined) {
    throw new RegionBindingError(
      `region ${code} moved out of this etcd (${key} retired at ${existing.retired.at} for cluster ` +
        `${existing.retired.byClusterId}): a retired etcd is never bound again`,
    );
  }
  return { record: existing, changed: false };
}

/**
 * The deployment's other bindings of `code` that no retirement ends: any etcd of the deployment file bound to the code,
 * except this one (the same cluster under the same prefix). One that does not answer fails the step (its error passes
 * through) before anything is written: nothing then shows the code free.
 */
async function liveElsewhere(
  io: BindingIo & { layout: Layout },
  code: number,
  clusterId: string,
  deployment: readonly RegionEtcd[],
): Promise<LiveBinding[]> {
  const live: LiveBinding[] = [];
  for (const r of deployment) {
    const key = regionBindingKey(r.prefix);
    const res = await withTimeout(
      r.client.get(key).options(deadlineIn(r.timeoutMs)).exec(),
      r.timeoutMs,
      `reading ${key} in ${r.name}`,
    );
    if (res.header.cluster_id === clusterId && r.prefix === io.prefix) continue; // this etcd itself
    const kv = firstKey(res.kvs);
    if (kv === undefined) continue;
    const record = parseRegionBinding(`${key} in ${r.name}`, kv.value, io.layout.maxRegion);
    if (record.code === code && record.retired === undefined) live.push({ name: r.name, record });
  }
  return live;
}

/** Retires the live binding through its own etcd, or takes the operator's statement; else refuses with one line. */
async function proveGone(
  live: readonly LiveBinding[],
  code: number,
  clusterId: string,
  generation: number,
  clock: () => number,
  o: InitRegionOptions,
): Promise<'retired' | 'stated-stopped'> {
  if (o.oldClusterStopped === true) return 'stated-stopped';
  const where = live.map((l) => `${l.name}, cluster ${l.record.clusterId}`).join('; ');
  const [only] = live;
  if (o.retire !== undefined && only !== undefined && live.length === 1) {
    await retireRegion(o.retire, code, {
      clusterId: only.record.clusterId,
      byClusterId: clusterId,
      generation,
      at: new Date(clock()).toISOString(),
    });
    return 'retired';
  }
  throw new RegionBindingError(
    `region ${code} is live in another cluster of the deployment (${where}): a second cluster of one code mints its ` +
      'IDs twice; prove the old one gone first: --retire-etcd <its endpoints> retires it and fences its holders, or, ' +
      'once every member of it is stopped, --old-etcd-stopped (docs/runbook.md, "Moving a region to a new etcd cluster")',
  );
}
