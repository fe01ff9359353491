import {
  DEFAULT_TTL_CEILING_SECONDS,
  TTL_CEILING_RANGE,
  initRegion,
  markRegionRestored,
  type RegionRestoredReport,
  type RegistryIo,
} from '@idgen/lease/operator';
import { regionBindingKey, parseRegionBinding } from '@idgen/lease/records';
import type { VerbContext } from './context.js';
import { EXIT_OK, EXIT_PROBLEM, usageError, type ExitCode } from './exit-codes.js';
import { integerOption } from './options.js';
import { withEtcd, withRegistry, type SpareFlags, type SpareIo } from './spare.js';

/** Flags of `idgen region init`. */
export interface RegionInitFlags extends SpareFlags {
  region?: string;
  leaseTtlCeiling?: string;
  /** A live cluster of the code found elsewhere: its endpoints, to retire it (same credentials and prefix as --etcd). */
  retireEtcd?: string;
  /** The operator's statement that every member of that cluster is stopped. */
  oldEtcdStopped?: boolean;
  /** The operator's statement that no other cluster of the deployment serves the code (no deployment file yet). */
  soleCluster?: boolean;
}

/**
 * `idgen region init --region N --etcd <region N's etcd> [--config deployment.json]`: binds that etcd to region code N
 * (docs/design.md §5, region binding), with etcd's cluster ID. Idempotent; exit 1 when the etcd is bound to another
 * code or in another cluster, or when another etcd of --config still serves code N (docs/design.md §8, "One live
 * cluster per code") and neither --retire-etcd nor --old-etcd-stopped proves it gone.
 */
export async function runRegionInit(flags: RegionInitFlags, ctx: VerbContext): Promise<ExitCode> {
  if (flags.region === undefined) throw usageError('--region is required (the code this etcd serves, 0-7)');
  const code = integerOption('--region', flags.region, 0, 7);
  const ttlCeilingSeconds = integerOption(
    '--lease-ttl-ceiling',
    flags.leaseTtlCeiling ?? String(DEFAULT_TTL_CEILING_SECONDS),
    TTL_CEILING_RANGE.min,
    TTL_CEILING_RANGE.max,
  );
  if (flags.retireEtcd !== undefined && flags.oldEtcdStopped === true)
    throw usageError('give either --retire-etcd or --old-etcd-stopped, not both');
  if (flags.soleCluster === true && flags.config !== undefined)
    throw usageError('give either --config or --sole-cluster, not both: the file names the other clusters');
  if ((flags.retireEtcd !== undefined || flags.oldEtcdStopped === true) && flags.config === undefined)
    throw usageError('--retire-etcd and --old-etcd-stopped need --config: the deployment file names the live cluster');
  const init = (io: SpareIo, retire?: SpareIo) => {
    if (code > io.layout.maxRegion) throw usageError(`--region must be from 0 to ${io.layout.maxRegion}, got ${code}`);
    return initRegion({ ...io, now: ctx.nowMs }, code, {
      ttlCeilingSeconds,
      ...(io.deployment === undefined ? {} : { deployment: io.deployment }),
      ...(retire === undefined ? {} : { retire }),
      oldClusterStopped: flags.oldEtcdStopped === true,
      noDeploymentFile: flags.config === undefined,
      soleCluster: flags.soleCluster === true,
    });
  };
  const retireAt = flags.retireEtcd;
  const { record, changed, ceiling, oldCluster } = await withEtcd(flags, 'region init', (io) =>
    retireAt === undefined
      ? init(io)
      : withEtcd({ ...flags, etcd: retireAt, config: undefined }, 'region init', (old) => init(io, old)),
  );
  if (flags.json)
    ctx.io.out(JSON.stringify({ record, changed, ceiling, ...(oldCluster === undefined ? {} : { oldCluster }) }));
  else
    ctx.io.out(
      (changed
        ? `region ${code}: this etcd (cluster ${record.clusterId}) is now bound to region code ${code}`
        : `region ${code}: already bound (cluster ${record.clusterId}, since ${record.at}); nothing written`) +
        (record.generation === undefined ? '' : `, generation ${record.generation}`) +
        (oldCluster === 'retired'
          ? `; the old cluster ${record.previousClusterId ?? ''} is retired`
          : oldCluster === 'stated-stopped'
            ? `; the old cluster ${record.previousClusterId ?? ''} stated stopped`
            : '') +
        `; lease TTL ceiling ${ceiling?.ttlCeilingSeconds ?? ttlCeilingSeconds} s`,
    );
  return EXIT_OK;
}

/** `idgen region show --etcd`: the region binding this etcd records, or exit 1 if it has none. */
export async function runRegionShow(flags: SpareFlags, ctx: VerbContext): Promise<ExitCode> {
  const found = await withEtcd(flags, 'region show', async (io) => {
    const key = regionBindingKey(io.prefix);
    const res = await io.client.get(key).exec();
    const kv = res.kvs[0];
    return {
      key,
      clusterId: res.header.cluster_id,
      record: kv === undefined ? undefined : parseRegionBinding(key, kv.value.toString('utf8'), io.layout.maxRegion),
    };
  });
  if (found.record === undefined) {
    if (flags.json) ctx.io.out(JSON.stringify({ record: null, clusterId: found.clusterId }));
    ctx.io.err(`idgen region show: ${found.key} is absent: this etcd was never bound (idgen region init --region N)`);
    return EXIT_PROBLEM;
  }
  const same = found.record.clusterId === found.clusterId;
  const { retired } = found.record;
  if (flags.json) ctx.io.out(JSON.stringify({ record: found.record, clusterId: found.clusterId, sameCluster: same }));
  else
    ctx.io.out(
      `region ${found.record.code}: bound ${found.record.at} in cluster ${found.record.clusterId}` +
        (found.record.generation === undefined ? '' : `, generation ${found.record.generation}`) +
        (same ? '' : `; etcd now reports cluster ${found.clusterId}: restored or replaced (docs/runbook.md)`) +
        (retired === undefined
          ? ''
          : `; retired ${retired.at}: the region moved to cluster ${retired.byClusterId} (generation ${retired.generation})`),
    );
  return same && retired === undefined ? EXIT_OK : EXIT_PROBLEM;
}

/** Flags of `idgen region restored`. */
export interface RegionRestoredFlags extends RegionInitFlags {
  leaseTtl: string;
}

/**
 * `idgen region restored --region N --etcd <the restored etcd>` (docs/runbook.md, "etcd restored from a snapshot"):
 * marks every slot of the region (and of the spare codes lent to it) unclean as of now, so every next holder starts
 * above now + TTL + the clock bound, then rebinds the region to the cluster ID the restored etcd answers from.
 */
export async function runRegionRestored(flags: RegionRestoredFlags, ctx: VerbContext): Promise<ExitCode> {
  if (flags.region === undefined) throw usageError('--region is required (the code this etcd serves, 0-7)');
  const code = integerOption('--region', flags.region, 0, 7);
  const ttlMs = integerOption('--lease-ttl', flags.leaseTtl, 2, 3600) * 1000;
  const ttlCeilingSeconds =
    flags.leaseTtlCeiling === undefined
      ? undefined
      : integerOption('--lease-ttl-ceiling', flags.leaseTtlCeiling, TTL_CEILING_RANGE.min, TTL_CEILING_RANGE.max);
  if (flags.retireEtcd !== undefined && flags.oldEtcdStopped === true)
    throw usageError('give either --retire-etcd or --old-etcd-stopped, not both');
  const mark = (io: SpareIo & { readonly registry?: RegistryIo }, retire?: SpareIo): Promise<RegionRestoredReport> =>
    markRegionRestored({ ...io, now: ctx.nowMs }, code, {
      ttlMs,
      ...(ttlCeilingSeconds === undefined ? {} : { ttlCeilingSeconds }),
      ...(retire === undefined ? {} : { retire }),
      oldClusterStopped: flags.oldEtcdStopped === true,
    });
  const retireAt = flags.retireEtcd;
  const run = (io: SpareIo & { readonly registry?: RegistryIo }): Promise<RegionRestoredReport> =>
    retireAt === undefined
      ? mark(io)
      : withEtcd({ ...flags, etcd: retireAt }, 'region restored', (old) => mark(io, old));
  // With --registry, each loan this etcd mirrors is confirmed there (docs/design.md §7, "Registry threats").
  const report =
    flags.registry === undefined
      ? await withEtcd(flags, 'region restored', run)
      : await withRegistry(flags, 'region restored', run);
  if (flags.json) ctx.io.out(JSON.stringify(report));
  else
    ctx.io.out(
      `region ${code}: ${report.written} slot(s) of code(s) ${report.codes.join(', ')} marked unclean at ` +
        `${new Date(report.ms).toISOString()} (next holders start above it + TTL + the clock bound); bound to cluster ` +
        `${report.clusterId}${report.clusterId === report.previousClusterId ? ' (unchanged)' : ` (was ${report.previousClusterId})`}` +
        `, generation ${report.generation}; marks cover a TTL of ${report.ttlMs / 1000} s` +
        (report.oldCluster === 'retired'
          ? '; the old cluster is retired'
          : report.oldCluster === 'stated-stopped'
            ? '; the old cluster stated stopped'
            : ''),
    );
  for (const loan of report.loans)
    ctx.io.err(
      `idgen region restored: spare code ${loan.code} lent here: ${
        loan.verdict === 'confirmed'
          ? 'confirmed by the registry'
          : loan.verdict === 'dropped'
            ? `sealed (reclaimed): ${loan.why ?? ''}`
            : `not confirmed (${loan.why ?? ''}): borrowers confirm it in the registry before any claim`
      }`,
    );
  return EXIT_OK;
}
