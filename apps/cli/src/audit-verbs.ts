import { formatId } from '@idgen/core';
import type { VerbContext } from './context.js';
import { decodeId, parseIdText } from './decode.js';
import { EXIT_OK, EXIT_PROBLEM, EXIT_UNREACHABLE, usageError, type ExitCode } from './exit-codes.js';
import { auditDeployment, whoisTenure } from '@idgen/lease/records';
import { readTenureWitnesses } from '@idgen/lease';
import { deploymentOf, journalsOf, readDeployment } from './audit.js';
import { deadlines, type EtcdFlags } from './options.js';

/** Flags of `idgen audit` and `idgen whois`. */
export interface AuditFlags extends EtcdFlags {
  config?: string;
  /** `--journal`, repeatable (audit only). */
  journal?: string[];
  timeoutMs: string;
  json: boolean;
}

/**
 * `idgen audit --config deployment.json`: reads every region's etcd (each within --timeout-ms) and proves or refutes
 * the deployment's invariants: exit 0 clean, 1 with one line per violation, 3 when an etcd did not answer.
 */
export async function runAudit(flags: AuditFlags, ctx: VerbContext): Promise<ExitCode> {
  const d = deadlines(flags);
  const regions = deploymentOf(flags);
  const { views, unreachable } = await readDeployment(regions, d);
  const findings = auditDeployment(views, await readTenureWitnesses(journalsOf(flags)));
  const code: ExitCode = unreachable.length > 0 ? EXIT_UNREACHABLE : findings.length > 0 ? EXIT_PROBLEM : EXIT_OK;
  const slots = views.reduce((n, v) => n + v.slots.length, 0);
  const tenures = views.reduce((n, v) => n + v.slots.reduce((m, s) => m + (s.tenures?.tenures.length ?? 0), 0), 0);
  if (flags.json) {
    ctx.io.out(
      JSON.stringify({
        clean: code === EXIT_OK,
        regions: views.map((v) => ({
          name: v.name,
          code: v.binding?.code ?? null,
          clusterId: v.clusterId,
          revision: v.revision,
          slots: v.slots.length,
        })),
        unreachable,
        findings,
      }),
    );
  } else {
    for (const u of unreachable) ctx.io.err(`idgen audit: unreachable: ${u}`);
    for (const f of findings) ctx.io.out(`VIOLATION ${f.kind}: ${f.message}`);
    ctx.io.out(
      `audit: ${views.length} of ${regions.length} region(s) read, ${slots} slot(s), ${tenures} tenure(s) on record: ` +
        (code === EXIT_OK
          ? 'clean'
          : `${findings.length} violation(s)${unreachable.length > 0 ? `, ${unreachable.length} etcd(s) unreachable: not proven` : ''}`),
    );
  }
  return code;
}

/**
 * `idgen whois <id> --config deployment.json` (or `--etcd`): decodes the ID and names the tenure that covers its
 * millisecond on its slot, or says none is on record (exit 1).
 */
export async function runWhois(idText: string, flags: AuditFlags, ctx: VerbContext): Promise<ExitCode> {
  const d = deadlines(flags);
  let id: bigint;
  try {
    id = parseIdText(idText);
  } catch (e) {
    throw usageError((e as Error).message);
  }
  const regions = deploymentOf(flags);
  const { views, unreachable } = await readDeployment(regions, d);
  for (const u of unreachable) ctx.io.err(`idgen whois: unreachable: ${u}`);
  const layoutView = views.find((v) => v.layoutRecord !== undefined);
  const layout = layoutView?.layout;
  if (layout === undefined) {
    if (unreachable.length > 0) return EXIT_UNREACHABLE;
    ctx.io.err('idgen whois: no etcd holds a layout record: the ID cannot be decoded against the deployment');
    return EXIT_PROBLEM;
  }
  const decoded = decodeId(formatId(id), layout);
  const ms = layout.dateOf(id).getTime();
  const { found, compacted } = whoisTenure(views, decoded.region, decoded.worker, ms);
  if (flags.json) {
    ctx.io.out(
      JSON.stringify({
        ...decoded,
        ms,
        tenures: found.map((f) => ({ region: f.region, ...f.tenure, extentMs: f.lastMs })),
        ...(compacted === undefined ? {} : { compacted }),
      }),
    );
  } else {
    const head = `${decoded.id}: region ${decoded.region}, worker ${decoded.worker}, ms ${ms} (${decoded.time})`;
    if (found.length === 0)
      ctx.io.out(`${head}: no tenure on record covers it${compacted === undefined ? '' : `; ${compacted}`}`);
    for (const f of found) {
      const t = f.tenure;
      ctx.io.out(
        `${head}: minted by ${t.nodeId} (${t.kind}, lease ${t.leaseId}) in ${f.region}'s etcd, tenure ` +
          `${t.firstMs}…${t.lastMs ?? `open, up to ${f.lastMs}`}, ${t.end}`,
      );
    }
  }
  if (unreachable.length > 0 && found.length === 0) return EXIT_UNREACHABLE;
  // Two tenures covering one millisecond of a slot would be a duplicate-ID risk: idgen audit names it.
  return found.length === 1 ? EXIT_OK : EXIT_PROBLEM;
}
