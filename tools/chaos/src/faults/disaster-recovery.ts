/**
 * Fault `disaster-recovery` (issue 31, item 7): an operator's disaster recovery between etcds, on a small deployment
 * of the fault's own (two etcds and two nodes of the run's region code, apart from the run's fleet, whose IDs it never
 * meets). The case drawn (by the fault's pick) is one of issue 31's; this build carries case 4:
 *
 * - `new-cluster` (case 4, a restore onto a new cluster while the old one still runs): node A holds worker 0 on the
 *   old etcd and mints; the old etcd is snapshotted and the snapshot restored onto a second, new cluster (new token);
 *   the runbook's `idgen region restored --region R --etcd NEW` rebinds it; node B starts on the new cluster. The old
 *   cluster was only cut off, never stopped: A mints on. Before a code was bound to one live cluster (issue 31, item
 *   5), `region restored` accepted, B claimed worker 0 and both minted region R / worker 0: duplicates.
 *
 * Expected (a SAFETY rule, docs/design.md "the deployment's invariant"): no ID handed out by both A and B, and the
 * deployment audit over both etcds (`auditDeployment`, in process) clean. A refused step (`region restored` exits
 * non-zero, B never ready) is a pass: the refusal is what the fix does. On a build without the fix the fault finds the
 * duplicate, and the audit names the overlap (both holders, the slot, the milliseconds).
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { freePort, serverLaunchArgs, spawnProcess, startEtcd, type EtcdServer } from '@idgen/testing';
import { ETCD_PREFIX, type FaultHandler } from '../fault-context.js';
import { auditConfig, runAudit, type AuditOutcome, type AuditRegion } from './audit.js';
import { cliLine, runOperatorCli, type CliRun } from './double-loan.js';
import { commonIds, finish, idsOf, pull, readyOrExit, becameReady, type StandaloneNode } from './standalone.js';

/** The cases the fault draws among (issue 31's numbering in the notes). */
export const DR_CASES = ['new-cluster'] as const;

/** One case of {@link DR_CASES}. */
export type DrCase = (typeof DR_CASES)[number];

/** The case a fault's pick draws. */
export function drCaseOf(pick: number): DrCase {
  return DR_CASES[Math.min(DR_CASES.length - 1, Math.floor(pick * DR_CASES.length))] as DrCase;
}

/** Options of {@link runNewCluster}. */
export interface DisasterRecoveryOptions {
  readonly serverMain: string;
  readonly cliMain: string;
  readonly region: number;
  readonly leaseTtlSeconds: number;
  /** The fault's own directory (logs, snapshot, the audit's deployment file). */
  readonly dir: string;
  readonly index: number;
  readonly signal: AbortSignal;
  /** How long B (and A) may take to become ready. */
  readonly readyTimeoutMs: number;
  /** How long both are asked for IDs once B is ready. */
  readonly overlapMs: number;
  readonly announce: (target: string) => void;
  readonly sleep: (ms: number) => Promise<void>;
}

/** What one disaster recovery did. */
export interface DisasterRecoveryOutcome {
  readonly drCase: DrCase;
  readonly init: CliRun;
  readonly restored: CliRun | undefined;
  readonly a: { readonly name: string; readonly ready: boolean; readonly ids: BigUint64Array; readonly failed: number };
  readonly b: { readonly name: string; readonly ready: boolean; readonly ids: BigUint64Array; readonly failed: number };
  readonly audit: AuditOutcome;
  /** The deployment file of the two etcds (written into the fault's directory, for the report). */
  readonly auditFile: string;
  readonly tookMs: number;
}

/** Starts `idgen-server` on `etcd` for worker 0 of `region`. */
async function startNode(o: DisasterRecoveryOptions, name: string, etcd: EtcdServer): Promise<StandaloneNode> {
  const listen = `127.0.0.1:${await freePort()}`;
  const handle = spawnProcess(
    process.execPath,
    [
      ...serverLaunchArgs(o.serverMain),
      '--region',
      String(o.region),
      '--etcd',
      etcd.clientUrl,
      '--workers',
      '0-0',
      '--listen',
      listen,
      '--lease-ttl',
      String(o.leaseTtlSeconds),
      '--time-source',
      'none',
      '--node-id',
      `chaos-${name}`,
    ],
    { maxLines: 100_000 },
  );
  return {
    name,
    handle,
    url: `http://${listen}`,
    spawnedMs: Date.now(),
    blocks: [],
    failedCalls: 0,
    stopPulling: undefined,
    endedAlone: undefined,
  };
}

/** Case 4: A on the old cluster, its snapshot restored onto a new one beside it, `region restored`, B there. */
export async function runNewCluster(o: DisasterRecoveryOptions): Promise<DisasterRecoveryOutcome> {
  const t0 = Date.now();
  const etcds: EtcdServer[] = [];
  const nodes: StandaloneNode[] = [];
  try {
    const [oldEtcd, newEtcd] = await Promise.all([
      startEtcd({ name: `dr-${o.index}-old`, readyTimeoutMs: 30_000 }),
      startEtcd({ name: `dr-${o.index}-new`, readyTimeoutMs: 30_000 }),
    ]);
    etcds.push(oldEtcd, newEtcd);
    o.announce(
      `case 4, a restore onto a new cluster while the old one runs: region ${o.region}, old etcd ${oldEtcd.clientUrl}, new ${newEtcd.clientUrl}`,
    );
    const cli = (args: readonly string[]): Promise<CliRun> =>
      runOperatorCli(o.cliMain, [...args, '--timeout-ms', '5000'], 60_000);
    const init = await cli(['region', 'init', '--region', String(o.region), '--etcd', oldEtcd.clientUrl]);
    const a = await startNode(o, `dr-${o.index}-a`, oldEtcd);
    nodes.push(a);
    await readyOrExit(a, o.readyTimeoutMs, o.signal);
    if (becameReady(a)) pull(a, o.region, o.signal);
    // The operator's backup, restored onto a second cluster (its own token: another cluster ID), the old one untouched.
    const snapshot = join(o.dir, `dr-${o.index}-snapshot.db`);
    await oldEtcd.snapshot(snapshot);
    await newEtcd.restore(snapshot, { clusterToken: `idgen-chaos-dr-${o.index}-${Date.now()}` });
    const restored = await cli([
      'region',
      'restored',
      '--region',
      String(o.region),
      '--etcd',
      newEtcd.clientUrl,
      '--lease-ttl',
      String(o.leaseTtlSeconds),
    ]);
    const b = await startNode(o, `dr-${o.index}-b`, newEtcd);
    nodes.push(b);
    await readyOrExit(b, o.readyTimeoutMs, o.signal);
    if (becameReady(b)) {
      pull(b, o.region, o.signal);
      await o.sleep(o.overlapMs);
    }
    // Stopped (a clean release each), then the audit reads both etcds as they are left.
    await Promise.all(nodes.splice(0).map((n) => finish(n, o.dir)));
    const regions: AuditRegion[] = [
      { name: `region-${o.region}-old`, etcd: [oldEtcd.clientUrl], prefix: ETCD_PREFIX },
      { name: `region-${o.region}-new`, etcd: [newEtcd.clientUrl], prefix: ETCD_PREFIX },
    ];
    const auditFile = join(o.dir, `dr-${o.index}-audit.json`);
    await writeFile(auditFile, auditConfig(regions));
    const audit = await runAudit({ regions, timeoutMs: 5000 });
    const summary = (n: StandaloneNode): DisasterRecoveryOutcome['a'] => ({
      name: n.name,
      ready: becameReady(n),
      ids: idsOf(n.blocks),
      failed: n.failedCalls,
    });
    return {
      drCase: 'new-cluster',
      init,
      restored,
      a: summary(a),
      b: summary(b),
      audit,
      auditFile,
      tookMs: Date.now() - t0,
    };
  } finally {
    await Promise.all(nodes.map((n) => finish(n, o.dir).catch(() => undefined)));
    await Promise.all(etcds.map((e) => e.stop()));
  }
}

/** What the report says about one disaster recovery. */
export interface DisasterRecoveryJudgement {
  readonly notes: string[];
  /** IDs handed out by both nodes, or an audit that is not clean: the deployment's invariant broken. */
  readonly safetyViolation: string | undefined;
  /** The fault could not set its deployment up (A never ready, `region init` failed). */
  readonly expectationMissed: string | undefined;
}

/** Judges one disaster recovery: 0 IDs in common and the audit clean, or a safety violation naming both. */
export function judgeDisasterRecovery(d: DisasterRecoveryOutcome): DisasterRecoveryJudgement {
  const common = commonIds(d.a.ids, d.b.ids);
  const count = (n: DisasterRecoveryOutcome['a']): string =>
    `${n.name}: ${n.ids.length.toLocaleString('en-US')} IDs, ${n.failed} calls refused, ${n.ready ? 'was ready' : 'never ready'}`;
  const notes = [
    `region init on the old etcd: ${cliLine(d.init)}`,
    `region restored on the new cluster: ${d.restored === undefined ? 'not run' : cliLine(d.restored)}`,
    count(d.a),
    count(d.b),
    `IDs handed out by both: ${common.count.toLocaleString('en-US')}${common.count > 0 ? ` (e.g. ${common.examples.join(', ')})` : ''}`,
    ...d.audit.lines,
    `audit deployment file: ${d.auditFile}`,
    `took ${(d.tookMs / 1000).toFixed(1)} s`,
  ];
  const unsafe: string[] = [];
  if (common.count > 0)
    unsafe.push(`${common.count.toLocaleString('en-US')} ID(s) handed out by both ${d.a.name} and ${d.b.name}`);
  if (!d.audit.ok) unsafe.push(`the audit over both etcds is not clean (${d.audit.lines[0] ?? ''})`);
  const missed: string[] = [];
  if (d.init.code !== 0) missed.push(`region init of the old etcd failed (${cliLine(d.init)})`);
  if (!d.a.ready) missed.push(`${d.a.name} never became ready on the old etcd`);
  return {
    notes,
    safetyViolation:
      unsafe.length === 0
        ? undefined
        : `disaster recovery (${d.drCase}, issue 31 case 4) broke the deployment's invariant: ${unsafe.join('; ')}`,
    expectationMissed: missed.length === 0 ? undefined : missed.join('; '),
  };
}

/** Fault `disaster-recovery`'s handler. */
export const disasterRecovery: FaultHandler = async (c) => {
  const { run, record: r } = c;
  const { o } = run;
  const d = await runNewCluster({
    serverMain: o.serverMain,
    cliMain: run.operatorCli,
    region: o.region,
    leaseTtlSeconds: o.leaseTtlSeconds,
    dir: run.dir,
    index: c.fault.index,
    signal: o.signal,
    readyTimeoutMs: 10 * o.leaseTtlSeconds * 1000,
    overlapMs: 2000,
    announce: (target) => void ((r.target = target), c.line()),
    sleep: (ms) => run.sleep(ms),
  });
  const j = judgeDisasterRecovery(d);
  r.notes.push(...j.notes);
  r.safetyViolation = j.safetyViolation;
  r.expectationMissed = j.expectationMissed;
};
