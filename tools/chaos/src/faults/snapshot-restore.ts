/**
 * Fault `etcd-snapshot-restore` (issue 21, case 6 and items 7, 9; docs/runbook.md, "etcd restored from a snapshot"):
 * an operator's disaster recovery of the run's 3-member etcd while the nodes mint. The fault stops one holder
 * gracefully (SIGTERM: its slot is released, so the snapshot has no worker key for it), takes `etcdctl snapshot save`
 * at once, starts the node again and waits until a node claims the free slot: a claim after the snapshot, with its own
 * lease and a keep-alive. Then every member is killed, restored from the snapshot on its own data dir and URLs with a
 * NEW `--initial-cluster-token` (the runbook's step 1), and started again, quickly (within about one lease TTL). On the
 * restored history that slot is free while its post-snapshot holder may still be minting; the other holders' leases
 * are back from the snapshot. The spare's position is stopped with etcd and started while it is restored: a node with
 * no memory of the lost history, which claims the free slot at once unless a rule stops it (issue 21, item 7).
 *
 * Expected: the old holders fence (the revision went back, or their lease or key is gone), and no node serves on the
 * restored history until the operator's `idgen region restored` (the binding names another cluster ID): a node that
 * does is a SAFETY finding (it mints on records that lost what was minted after the snapshot). After the step every
 * slot serves again within {@link recoveryBoundMs} (liveness). Duplicates and overlapping holders are the run's own
 * rules; the audit at the end judges the restored etcd (its `region-restored` markers pass).
 */
import { join } from 'node:path';
import type { EtcdCluster } from '@idgen/testing';
import { ETCD_PREFIX, type FaultHandler } from '../fault-context.js';
import type { Incarnation, NodeFleet } from '../node-fleet.js';
import { cliLine, runOperatorCli, unknownToCli, type CliRun } from './double-loan.js';

/** How the nodes log a rewind (packages/lease/src/etcd-lease.ts, `distrust()`). */
export const DISTRUST_LINE = 'lease: etcd cannot be trusted';

/** How a running node logs that it gave up re-claiming (a binding refusal on a re-claim): it never serves again. */
export const GAVE_UP_LINE = 'lease: re-claiming stopped';

/**
 * How long every slot may take to serve again after `idgen region restored`: each next holder waits out the marker
 * (the step's millisecond + TTL + the clock bound), after a re-claim backoff of up to 5 s or a supervisor restart
 * (2 s and a boot); twice that, rounded up, for a loaded 2-core machine.
 */
export function recoveryBoundMs(ttlMs: number): number {
  return 2 * (ttlMs + 5000);
}

/** Options of {@link runSnapshotRestore}. */
export interface SnapshotRestoreOptions {
  readonly fleet: NodeFleet;
  readonly cluster: EtcdCluster;
  /** A serving node: stopped before the snapshot, so its slot is free in it. */
  readonly target: Incarnation;
  /** The operator's `idgen` (`region restored`). */
  readonly cliMain: string;
  readonly region: number;
  /** Nodes that serve when every slot is held (min(slots, nodes)). */
  readonly want: number;
  readonly leaseTtlSeconds: number;
  /** The run's key prefix (the nodes'). */
  readonly prefix: string;
  /** Where the snapshot file goes (`snapshot-N.db`). */
  readonly dir: string;
  /** The fault's index, for the snapshot file and the new cluster token. */
  readonly index: number;
  readonly sleep: (ms: number) => Promise<void>;
  readonly aborted: () => boolean;
}

/** What happened, step by step (wall ms). */
export interface SnapshotRestoreOutcome {
  readonly target: string;
  readonly worker: number | undefined;
  readonly snapshotRevision: number | undefined;
  /** Who claimed the target's slot after the snapshot, how long after it, and whether etcd confirms it (the key's
   * create revision above the snapshot's). */
  readonly claimant: string | undefined;
  readonly claimAfterMs: number | undefined;
  readonly claimConfirmed: boolean | undefined;
  /** Nodes serving when the members were killed. */
  readonly servingAtStop: readonly string[];
  /** Nodes started (on the spares' positions) while the members were restored: they first meet the restored etcd. */
  readonly startedAfter: readonly string[];
  /** From the kill of every member to all of them healthy again (undefined: the restore failed). */
  readonly downMs: number | undefined;
  readonly restoreError: string | undefined;
  /** From etcd's return to no node serving (undefined: some node still served at the end of the wait). */
  readonly allFencedAfterMs: number | undefined;
  /** Nodes serving TTL + 1 s after etcd's return, before `region restored` (never fenced, or claimed again). */
  readonly servedOnRestored: readonly string[];
  /** Nodes that logged the rewind ({@link DISTRUST_LINE}) after the restore. */
  readonly distrusted: readonly string[];
  /** `idgen region restored` (undefined: this CLI has no such verb). */
  readonly restored: CliRun | undefined;
  /** From the step (or etcd's return, without it) to every slot serving again (undefined: not within the bound). */
  readonly servingAgainAfterMs: number | undefined;
  readonly recoveryBoundMs: number;
  /**
   * Running nodes that gave up re-claiming ({@link GAVE_UP_LINE}) and did not serve within the bound: restarted then,
   * as an operator would, so the run goes on (their names, before the restart).
   */
  readonly gaveUp: readonly string[];
}

/** The create revision of `key` (0: absent; undefined: no member answered). */
async function createRevision(endpoints: readonly string[], key: string): Promise<number | undefined> {
  for (const e of endpoints) {
    try {
      const res = await fetch(`${e}/v3/kv/range`, {
        method: 'POST',
        body: JSON.stringify({ key: Buffer.from(key).toString('base64') }),
        headers: { 'content-type': 'application/json' },
        signal: AbortSignal.timeout(2000),
      });
      const body = (await res.json()) as { header?: unknown; kvs?: { create_revision?: string }[] };
      if (body.header !== undefined) return Number(body.kvs?.[0]?.create_revision ?? '0');
    } catch {
      // next member
    }
  }
  return undefined;
}

/** Waits (polling every 100 ms) until `done` or `deadline` (wall ms); the time it took, undefined at the deadline. */
async function waitFor(
  o: SnapshotRestoreOptions,
  deadline: number,
  done: () => Promise<boolean> | boolean,
): Promise<number | undefined> {
  const t0 = Date.now();
  for (;;) {
    if (await done()) return Date.now() - t0;
    if (Date.now() >= deadline || o.aborted()) return undefined;
    await o.sleep(100);
  }
}

/** Log lines with `line` per node process. */
function lineCounts(fleet: NodeFleet, line: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const i of fleet.incarnations) out.set(i.name, i.handle.stdoutLines.filter((l) => l.includes(line)).length);
  return out;
}

/** Names whose count of `line` grew since `before`. */
function grew(fleet: NodeFleet, line: string, before: ReadonlyMap<string, number>): string[] {
  return [...lineCounts(fleet, line)].filter(([name, n]) => n > (before.get(name) ?? 0)).map(([name]) => name);
}

/** Stop, snapshot, a claim after it, the restore with a new token, `region restored`, and the recovery. */
export async function runSnapshotRestore(o: SnapshotRestoreOptions): Promise<SnapshotRestoreOutcome> {
  const { fleet, cluster, target } = o;
  const ttlMs = o.leaseTtlSeconds * 1000;
  const worker = target.worker;
  // 1. The holder goes (a clean release), the snapshot is taken at once: the slot is free in it.
  target.expectedExit = true;
  await target.handle.stop(15_000);
  const snapshotFile = join(o.dir, `snapshot-${o.index}.db`);
  const snapshotAt = Date.now();
  const { revision } = await cluster.snapshot(snapshotFile);
  // 2. A claim after the snapshot: the node again (or the spare) takes the slot, and holds it past a keep-alive.
  await fleet.start(target.position);
  const taken = () => fleet.holdings.find((h) => h.worker === worker && h.seenMs >= snapshotAt);
  await waitFor(o, snapshotAt + 4 * ttlMs, () => taken() !== undefined);
  const claim = taken();
  const created =
    worker === undefined
      ? undefined
      : await createRevision(cluster.endpoints, `${o.prefix}/regions/${o.region}/workers/${worker}`);
  if (claim !== undefined) await o.sleep(Math.min(1500, ttlMs / 2));
  // 3. Every member down, restored with a new cluster token, up again.
  const servingAtStop = (await fleet.serving()).map((i) => i.name);
  // The spare's position is stopped now and started once etcd is back: a node with no memory of the lost history,
  // claiming the slot the restored history has free at once (issue 21, item 7).
  const spares = fleet.positions.filter((p) => !servingAtStop.includes(fleet.current(p)?.name ?? ''));
  for (const p of spares) {
    const inc = fleet.current(p);
    if (inc === undefined) continue;
    inc.expectedExit = true;
    await inc.handle.stop(5000);
  }
  const before = lineCounts(fleet, DISTRUST_LINE);
  const beforeGaveUp = lineCounts(fleet, GAVE_UP_LINE);
  const stopAt = Date.now();
  let restoreError: string | undefined;
  const restoring = cluster
    .restore(snapshotFile, { clusterToken: `idgen-chaos-restored-${o.index}-${stopAt}` })
    .catch((e: unknown) => (restoreError = e instanceof Error ? e.message : String(e)));
  // Started while the members are down (a node's boot takes longer than their kill): its first claim meets the
  // restored etcd as soon as it answers.
  const startedAfter: string[] = [];
  for (const p of spares) if (fleet.current(p) === undefined) startedAfter.push((await fleet.start(p)).name);
  await restoring;
  const backAt = Date.now();
  // 4. Every node must stop serving on the restored history (fence window: TTL − margin after its last keep-alive,
  // a keep-alive interval to notice the rewind), and stay so until the operator's step.
  const fenceBy = backAt + ttlMs + 1000;
  const allFencedAfterMs = await waitFor(o, fenceBy, async () => (await fleet.serving()).length === 0);
  // …and none serves again before the step (on records that lost what was minted after the snapshot).
  await o.sleep(fenceBy - Date.now());
  const servedOnRestored = (await fleet.serving()).map((i) => i.name);
  const distrusted = grew(fleet, DISTRUST_LINE, before);
  // 5. The runbook's step 2, then every slot serving again within the bound.
  const step = [
    'region',
    'restored',
    '--region',
    String(o.region),
    '--etcd',
    cluster.endpoints.join(','),
    '--lease-ttl',
    String(o.leaseTtlSeconds),
    '--timeout-ms',
    '5000',
  ];
  // Every member was restored in place with a new token: the old cluster is gone (docs/runbook.md); a CLI from before
  // the one-live-cluster rule has no such flag and is run without it.
  let restored: CliRun | undefined = await runOperatorCli(o.cliMain, [...step, '--old-etcd-stopped'], 30_000);
  if (unknownToCli(restored, /old-etcd-stopped/)) restored = await runOperatorCli(o.cliMain, step, 30_000);
  if (unknownToCli(restored)) restored = undefined;
  const stepAt = Date.now();
  const bound = recoveryBoundMs(ttlMs);
  const servingAgainAfterMs = await waitFor(o, stepAt + bound, async () => (await fleet.serving()).length >= o.want);
  const gaveUp =
    servingAgainAfterMs === undefined ? await restartGaveUp(fleet, grew(fleet, GAVE_UP_LINE, beforeGaveUp)) : [];
  return {
    target: target.name,
    worker,
    snapshotRevision: revision,
    claimant: claim?.name,
    claimAfterMs: claim === undefined ? undefined : claim.seenMs - snapshotAt,
    claimConfirmed: created === undefined || created === 0 ? undefined : created > revision,
    servingAtStop,
    startedAfter,
    downMs: restoreError === undefined ? backAt - stopAt : undefined,
    restoreError,
    allFencedAfterMs,
    servedOnRestored,
    distrusted,
    restored,
    servingAgainAfterMs,
    recoveryBoundMs: bound,
    gaveUp,
  };
}

/** Restarts the running, unserving nodes of `names` (they gave up re-claiming); returns the ones restarted. */
async function restartGaveUp(fleet: NodeFleet, names: readonly string[]): Promise<string[]> {
  const serving = new Set((await fleet.serving()).map((i) => i.name));
  const stuck = fleet.positions
    .map((p) => fleet.current(p))
    .filter((i): i is Incarnation => i !== undefined && names.includes(i.name) && !serving.has(i.name));
  for (const inc of stuck) {
    inc.expectedExit = true;
    await inc.handle.stop(10_000);
    await fleet.start(inc.position);
  }
  return stuck.map((i) => i.name);
}

/** What the report says about one restore: its notes, a broken safety rule, a missed expectation. */
export interface SnapshotRestoreJudgement {
  readonly notes: string[];
  /** A node served on the restored history before `idgen region restored` (docs/design.md §5). */
  readonly safetyViolation: string | undefined;
  /** Liveness and set-up: not every slot serving again within the bound, a slow or failed restore, a failed step. */
  readonly expectationMissed: string | undefined;
}

const s1 = (ms: number | undefined): string => (ms === undefined ? '-' : `${(ms / 1000).toFixed(1)} s`);

/** The judgement of one restore (see the module's doc). */
export function judgeSnapshotRestore(r: SnapshotRestoreOutcome, ttlMs: number): SnapshotRestoreJudgement {
  const notes = [
    `stopped ${r.target} (worker ${r.worker ?? '-'}), snapshot at revision ${r.snapshotRevision ?? '-'}`,
    r.claimant === undefined
      ? `no claim of worker ${r.worker ?? '-'} after the snapshot`
      : `worker ${r.worker ?? '-'} claimed by ${r.claimant} ${s1(r.claimAfterMs)} after the snapshot${r.claimConfirmed === false ? ' (etcd: created before the snapshot)' : ''}`,
    `serving at the stop: ${r.servingAtStop.join(', ') || 'none'}; started on the restored history: ${r.startedAfter.join(', ') || 'none'}`,
    r.restoreError === undefined
      ? `every member killed, restored with a new cluster token and healthy again in ${s1(r.downMs)}`
      : `restore failed: ${r.restoreError}`,
    r.allFencedAfterMs === undefined
      ? `some node served all along after etcd's return`
      : `no node serving ${s1(r.allFencedAfterMs)} after etcd's return`,
    `serving ${s1(ttlMs + 1000)} after etcd's return (before idgen region restored): ${r.servedOnRestored.join(', ') || 'none'}`,
    `rewind logged by: ${r.distrusted.join(', ') || 'none'}`,
    `idgen region restored: ${r.restored === undefined ? 'no such verb in this CLI' : cliLine(r.restored)}`,
    r.servingAgainAfterMs === undefined
      ? `not every slot serving ${s1(r.recoveryBoundMs)} after it`
      : `every slot serving again ${s1(r.servingAgainAfterMs)} after it (bound ${s1(r.recoveryBoundMs)})`,
    ...(r.gaveUp.length === 0
      ? []
      : [`gave up re-claiming ("${GAVE_UP_LINE}") and never served again: ${r.gaveUp.join(', ')} (restarted then)`]),
  ];
  const missed: string[] = [];
  if (r.restoreError !== undefined) missed.push('the restore failed');
  else if ((r.downMs ?? 0) > ttlMs)
    missed.push(`etcd was back only ${s1(r.downMs)} after the stop (a quick restore is within one TTL)`);
  if (r.claimant === undefined) missed.push('no claim after the snapshot');
  if (r.restored === undefined) missed.push('the CLI has no idgen region restored');
  else if (r.restored.code !== 0) missed.push(`idgen region restored failed (${cliLine(r.restored)})`);
  if (r.servingAgainAfterMs === undefined)
    missed.push(
      `not every slot serving again within ${s1(r.recoveryBoundMs)} of the step${r.gaveUp.length === 0 ? '' : ` (${r.gaveUp.join(', ')} gave up re-claiming on the binding refusal and stayed unready until restarted)`}`,
    );
  return {
    notes,
    safetyViolation:
      r.servedOnRestored.length === 0
        ? undefined
        : `served on the restored history before idgen region restored: ${r.servedOnRestored.join(', ')}`,
    expectationMissed: missed.length === 0 ? undefined : missed.join('; '),
  };
}

/** Fault `etcd-snapshot-restore`'s handler: the cluster restored from an older snapshot under a serving node. */
export const etcdSnapshotRestore: FaultHandler = async (c) => {
  const { run, record: r } = c;
  const target = await c.hitNode(true);
  if (target === undefined) return;
  const { o } = run;
  const common = {
    fleet: run.fleet,
    cluster: run.cluster,
    target,
    region: o.region,
    prefix: ETCD_PREFIX,
    dir: run.dir,
    index: c.fault.index,
  };
  const s = await runSnapshotRestore({
    ...common,
    cliMain: run.operatorCli,
    want: Math.min(o.slots, o.nodes),
    leaseTtlSeconds: o.leaseTtlSeconds,
    sleep: (ms) => run.sleep(ms),
    aborted: () => o.signal.aborted,
  });
  const j = judgeSnapshotRestore(s, run.ttlMs);
  Object.assign(r, { safetyViolation: j.safetyViolation, expectationMissed: j.expectationMissed }).notes.push(
    ...j.notes,
  );
};
