import { DEFAULT_LAYOUT } from '@idgen/core';
import { isLeaseError } from '@idgen/lease';
import {
  SpareRegistryCallError,
  initRegistry,
  isRegistryRefusedError,
  loanTermOf,
  noteRegistrySeenInAll,
  reconcileRegistry,
  type RegistryIo,
} from '@idgen/lease/operator';
import type { Etcd3 } from 'etcd3';
import type { VerbContext } from './context.js';
import { openEtcdClient } from './etcd-state.js';
import {
  CliError,
  EXIT_OK,
  EXIT_PROBLEM,
  EXIT_REGISTRY,
  EXIT_UNREACHABLE,
  isCliError,
  usageError,
} from './exit-codes.js';
import type { ExitCode } from './exit-codes.js';
import { deadlines, integerOption, registryConnection } from './options.js';
import { withDeploymentRegions, type SpareFlags } from './spare.js';

/**
 * `idgen spare init` and `idgen spare reconcile` (docs/design.md §7, "Registry threats"; docs/runbook.md "Lending a
 * spare region code" and "Restoring the registry"): the registry's identity, made once, and its history rebuilt from
 * the regions' mirrors after a restore. Both take the deployment file (`--config`, idgen audit's).
 */

async function withRegistryOnly<T>(
  flags: SpareFlags,
  verb: string,
  fn: (registry: RegistryIo) => Promise<T>,
): Promise<T> {
  const d = deadlines(flags);
  const at = registryConnection(
    { registryPrefix: '/idgen', ...flags },
    `idgen spare ${verb} works on the deployment's spare-code registry`,
  );
  let client: Etcd3;
  try {
    client = await openEtcdClient(at, d);
  } catch (e) {
    throw isCliError(e) ? new CliError(e.exitCode, `the spare-code registry ${e.message.replace(/^etcd /, '')}`) : e;
  }
  const name = at.options.endpoints.join(',');
  try {
    return await fn({ client, prefix: at.keyPrefix, timeoutMs: d.timeoutMs, name });
  } catch (e) {
    if (isCliError(e)) throw e;
    if (isRegistryRefusedError(e)) throw new CliError(EXIT_REGISTRY, e.message);
    if (e instanceof SpareRegistryCallError) throw new CliError(EXIT_UNREACHABLE, e.message);
    if (isLeaseError(e)) throw new CliError(EXIT_PROBLEM, e.message);
    throw new CliError(EXIT_UNREACHABLE, `${(e as Error).message?.split('\n')[0] ?? String(e)}`);
  } finally {
    client.close();
  }
}

/**
 * `idgen spare init --registry URLS --config deployment.json`: gives the registry its deployment ID (once; run again
 * it changes nothing), then records the registry and its revision in every region's etcd of the file, so a region
 * refuses another registry from then on.
 */
export async function runSpareInit(flags: SpareFlags & { loanTerm?: string }, ctx: VerbContext): Promise<ExitCode> {
  if (flags.registry === undefined) throw usageError('--registry is required: the etcd that keeps the spare codes');
  if (flags.config === undefined)
    throw usageError("--config <deployment.json> is required: every region's etcd records the registry it follows");
  const loanTermMs = integerOption('--loan-term', flags.loanTerm ?? '600', 2, 86_400);
  const out = await withRegistryOnly(flags, 'init', (registry) =>
    withDeploymentRegions(flags.config, flags, async (regions) => {
      const { now, changed } = await initRegistry(registry, { now: ctx.nowMs, loanTermMs: loanTermMs * 1000 });
      await noteRegistrySeenInAll(regions, now.identity, now.revision, { now: ctx.nowMs });
      return { now, changed, regions: regions.length };
    }),
  );
  const id = out.now.identity;
  if (flags.json)
    ctx.io.out(
      JSON.stringify({ registry: id, revision: out.now.revision, changed: out.changed, regions: out.regions }),
    );
  else
    ctx.io.out(
      `spare-code registry: deployment ${id.deploymentId} (etcd cluster ${id.clusterId}, prefix ${id.prefix || '/'}, ` +
        `loan term ${loanTermOf(out.now.record) / 1000} s)` +
        `${out.changed ? '' : ', already initialised'}; recorded in ${out.regions} region(s) at revision ${out.now.revision}`,
    );
  return EXIT_OK;
}

/**
 * `idgen spare reconcile --registry URLS --config deployment.json`: after the registry was restored from a backup (or
 * rebuilt on a new etcd), rebuilds it from the regions' mirrors and lets lend, reclaim and adopt run again.
 */
export async function runSpareReconcile(flags: SpareFlags, ctx: VerbContext): Promise<ExitCode> {
  if (flags.registry === undefined) throw usageError('--registry is required: the registry to rebuild');
  if (flags.config === undefined)
    throw usageError("--config <deployment.json> is required: the registry is rebuilt from every region's mirrors");
  const report = await withRegistryOnly(flags, 'reconcile', (registry) =>
    withDeploymentRegions(flags.config, flags, (regions) =>
      reconcileRegistry({ registry, regions, layout: DEFAULT_LAYOUT, now: ctx.nowMs }),
    ),
  );
  if (flags.json) ctx.io.out(JSON.stringify(report));
  else {
    ctx.io.out(
      `spare-code registry reconciled from ${report.regions} region(s): deployment ${report.registry.deploymentId}, ` +
        `revision ${report.revision}, every region's memory of it set to that`,
    );
    for (const c of report.codes)
      ctx.io.out(
        `  code ${c.code}: ${c.before} -> ${c.after} (from ${c.from})` +
          (c.sealed.length > 0 ? `; dead loans sealed: ${c.sealed.join(', ')}` : ''),
      );
  }
  return EXIT_OK;
}
