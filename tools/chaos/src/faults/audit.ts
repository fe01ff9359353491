/**
 * The deployment audit at the end of every chaos run (issue 21, item 9), and after a disaster-recovery fault: once
 * the callers, the embedded callers and the nodes have stopped, and before etcd is torn down, the run reads every
 * region's etcd and judges it with the rules `idgen audit` prints (`auditDeployment` of `@idgen/lease/records`, in
 * process: issue 34, item 2). The audit reads what etcd holds (the region binding, every slot's tenure record and
 * `last-ms`: docs/design.md §5) and proves or refutes the deployment's invariants on its own, apart from the run's ID
 * checks: clean, a violation, or an etcd that did not answer. Anything but clean fails the run.
 */
import { readTenureWitnesses } from '@idgen/lease';
import { auditDeployment, regionViewOf, type EtcdKeyValue, type Finding, type RegionView } from '@idgen/lease/records';

/** One region of the audit: a name, its etcd members (plaintext: the run's etcds) and the key prefix. */
export interface AuditRegion {
  readonly name: string;
  readonly etcd: readonly string[];
  readonly prefix: string;
}

/** What the audit said, for the report. */
export interface AuditOutcome {
  /** What `idgen audit` would exit with: 0 clean, 1 a violation, 3 an etcd did not answer (null: not run). */
  readonly exitCode: number | null;
  /** Clean: no finding, every etcd read. */
  readonly ok: boolean;
  /** The report's lines: the verdict, one per region read, one per violation or unreachable etcd. */
  readonly lines: readonly string[];
  /** The findings, as `auditDeployment` returned them. */
  readonly findings?: readonly Finding[];
}

/** The deployment file `idgen audit --config` reads, for an operator to audit the same etcds (and journals) by hand. */
export function auditConfig(regions: readonly AuditRegion[], journals: readonly string[] = []): string {
  const doc = {
    regions: regions.map((r) => ({ name: r.name, etcd: [...r.etcd], prefix: r.prefix })),
    ...(journals.length === 0 ? {} : { journals: [...journals] }),
  };
  return `${JSON.stringify(doc, null, 2)}\n`;
}

/** The lines and verdict of an audit: `views` read, `findings` of `auditDeployment`, `unreachable` etcds' reasons. */
export function judgeFindings(
  views: readonly RegionView[],
  findings: readonly Finding[],
  unreachable: readonly string[],
): AuditOutcome {
  const exitCode = unreachable.length > 0 ? 3 : findings.length > 0 ? 1 : 0;
  const ok = exitCode === 0;
  const tenures = views.reduce((n, v) => n + v.slots.reduce((m, s) => m + (s.tenures?.tenures.length ?? 0), 0), 0);
  const lines = [
    `audit: ${views.length} region(s) read, ${tenures} tenure(s) on record: ${
      ok ? 'clean' : `${findings.length} violation(s), ${unreachable.length} etcd(s) unreachable`
    }`,
    ...views.map(
      (v) =>
        `  region ${v.name}: bound to code ${v.binding?.code ?? 'none'}, cluster ${v.clusterId}, revision ${v.revision}, ${v.slots.length} slot(s) read`,
    ),
    ...findings.map((f) => `  VIOLATION ${f.kind}: ${f.message}`),
    ...unreachable.map((u) => `  UNREACHABLE: ${u}`),
  ];
  return { exitCode, ok, lines, findings };
}

interface RangeAnswer {
  header?: { cluster_id?: string; revision?: string };
  kvs?: { key?: string; value?: string; lease?: string }[];
}

/**
 * Reads every key under `{prefix}/` of one plaintext etcd over its gRPC-JSON gateway (`/v3/kv/range`), from the
 * first member that answers within `timeoutMs`; rejects with the reasons when none does.
 */
export async function readRegion(r: AuditRegion, timeoutMs: number): Promise<RegionView> {
  const b64 = (s: string): string => Buffer.from(s).toString('base64');
  const from = `${r.prefix}/`;
  const end = `${r.prefix}0`; // '/' + 1
  const why: string[] = [];
  for (const e of r.etcd) {
    try {
      const res = await fetch(`${e}/v3/kv/range`, {
        method: 'POST',
        body: JSON.stringify({ key: b64(from), range_end: b64(end) }),
        headers: { 'content-type': 'application/json' },
        signal: AbortSignal.timeout(timeoutMs),
      });
      const body = (await res.json()) as RangeAnswer;
      if (body.header?.cluster_id === undefined) throw new Error(`no range answer (HTTP ${res.status})`);
      const text = (v: string | undefined): string => Buffer.from(v ?? '', 'base64').toString('utf8');
      const kvs: EtcdKeyValue[] = (body.kvs ?? []).map((kv) => ({
        key: text(kv.key),
        value: text(kv.value),
        lease: kv.lease ?? '0',
      }));
      return regionViewOf({
        name: r.name,
        where: `${r.name} (etcd ${r.etcd.join(',')})`,
        prefix: r.prefix,
        clusterId: body.header.cluster_id,
        revision: body.header.revision ?? '0',
        kvs,
      });
    } catch (err) {
      why.push(`${e}: ${(err as Error).message}`);
    }
  }
  throw new Error(`${r.name} (etcd ${r.etcd.join(',')}): ${why.join('; ')}`);
}

/** Options of {@link runAudit}. */
export interface RunAuditOptions {
  readonly regions: readonly AuditRegion[];
  /** Holders' tenure journals (`--tenure-journal` directories), the witnesses outside etcd. */
  readonly journals?: readonly string[];
  /** Each etcd's answer, ms. */
  readonly timeoutMs: number;
}

/** Reads every region's etcd at once and judges them together, with the journals given (`auditDeployment`). */
export async function runAudit(o: RunAuditOptions): Promise<AuditOutcome> {
  const settled = await Promise.allSettled(o.regions.map((r) => readRegion(r, o.timeoutMs)));
  const views: RegionView[] = [];
  const unreachable: string[] = [];
  for (const s of settled)
    if (s.status === 'fulfilled') views.push(s.value);
    else unreachable.push((s.reason as Error).message);
  const witnesses = await readTenureWitnesses(o.journals ?? []);
  return judgeFindings(views, auditDeployment(views, witnesses), unreachable);
}

/**
 * What a disaster-recovery case's two holders and its audit broke of the deployment's invariant (docs/design.md): IDs
 * both handed out, and an audit that is not clean. Empty when neither.
 */
export function holdersBreaches(common: number, first: string, second: string, audit: AuditOutcome): string[] {
  const unsafe: string[] = [];
  if (common > 0) unsafe.push(`${common.toLocaleString('en-US')} ID(s) handed out by both ${first} and ${second}`);
  if (!audit.ok) unsafe.push(`the audit is not clean (${audit.lines[0] ?? ''})`);
  return unsafe;
}

/** The notes a disaster-recovery case ends with: the audit's report, its deployment file, how long the case took. */
export function auditNotes(audit: AuditOutcome, auditFile: string, tookMs: number): string[] {
  return [...audit.lines, `audit deployment file: ${auditFile}`, `took ${(tookMs / 1000).toFixed(1)} s`];
}

/** The safety violation of disaster-recovery case `name` (issue 31's case `issueCase`), or none when nothing broke. */
export function drSafetyViolation(name: string, issueCase: number, unsafe: readonly string[]): string | undefined {
  return unsafe.length === 0
    ? undefined
    : `disaster recovery (${name}, issue 31 case ${issueCase}) broke the deployment's invariant: ${unsafe.join('; ')}`;
}
