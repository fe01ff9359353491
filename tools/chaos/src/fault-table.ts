/**
 * Every fault kind's handler (issue 7): one table from {@link FaultKind} to a {@link FaultHandler}, so a new kind
 * is one entry the compiler asks for. Node faults live in src/faults/node-faults.ts, etcd faults in
 * src/faults/etcd-faults.ts; the few here only hand over to their own modules.
 */
import { doubleLoanFault } from './faults/double-loan.js';
import {
  etcdClusterStop,
  etcdLeaderStop,
  etcdMemberDown,
  etcdPause,
  etcdSlow,
  etcdSnapshotRestore,
} from './faults/etcd-faults.js';
import { clockForward, clockJump, killNode, partitionNode, pauseNode, sigtermNode } from './faults/node-faults.js';
import { runStandaloneFault } from './faults/standalone.js';
import { judgeWrongRegion, runWrongRegionNode, wrongRegionOf } from './faults/wrong-region-node.js';
import { ETCD_PREFIX, type FaultHandler } from './fault-context.js';
import type { FaultKind } from './schedule.js';

/** A loan of a spare worker to another region while it is in use here (src/faults/double-loan.ts). */
const doubleLoan: FaultHandler = async (c) => {
  const { run, record: r } = c;
  const { o } = run;
  const nth = run.records.filter((x) => x.fault.kind === 'double-loan').length - 1;
  const announce = (target: string): void => void ((r.target = target), c.line());
  const common = { runEtcd: run.cluster.endpoints, region: o.region, prefix: ETCD_PREFIX, dir: run.dir, announce };
  const j = await doubleLoanFault(
    {
      ...common,
      cliMain: run.operatorCli,
      otherRegion: wrongRegionOf(o.region),
      leaseTtlSeconds: o.leaseTtlSeconds,
      timeoutMs: 30_000,
    },
    nth,
  );
  Object.assign(r, { safetyViolation: j.safetyViolation, expectationMissed: j.expectationMissed }).notes.push(
    ...j.notes,
  );
};

/** A node of another region started on this region's etcd: it must refuse (src/faults/wrong-region-node.ts). */
const wrongRegionNode: FaultHandler = async (c) => {
  const { run, record: r } = c;
  const { o } = run;
  const wrong = wrongRegionOf(o.region);
  const name = run.nextWrongRegionName();
  r.target = `${name} (region ${wrong} on region ${o.region}'s etcd)`;
  c.line();
  const w = await runWrongRegionNode({
    serverMain: o.serverMain,
    etcd: run.cluster.endpoints,
    wrongRegion: wrong,
    prefix: ETCD_PREFIX,
    slots: o.slots,
    leaseTtlSeconds: o.leaseTtlSeconds,
    dir: run.dir,
    name,
    timeoutMs: 15_000,
  });
  const judged = judgeWrongRegion(w, o.region, wrong);
  r.notes.push(...judged.notes);
  r.expectationMissed = judged.expectationMissed;
  r.safetyViolation = judged.safetyViolation;
};

/** Standalone nodes on their own `--state-file`, apart from the fleet (src/faults/standalone.ts). */
const standalone: FaultHandler = async (c) => {
  const { run, record: r, fault: f } = c;
  if (f.kind !== 'standalone-pause' && f.kind !== 'standalone-step' && f.kind !== 'standalone-empty-state') return;
  const name = `${f.kind}-${f.index}`;
  r.target = `${name} (standalone nodes on their own --state-file)`;
  c.line();
  const s = await runStandaloneFault(f.kind, {
    ...run.o,
    faketimeLib: run.faketimeLib,
    dir: run.dir,
    name,
    effectMs: f.effectMs,
  });
  Object.assign(r, {
    target: s.target,
    expectationMissed: s.expectationMissed,
    safetyViolation: s.safetyViolation,
  });
  r.notes.push(...s.notes);
};

/** The handler of each fault kind. */
export const FAULT_HANDLERS: Readonly<Record<FaultKind, FaultHandler>> = {
  'kill-node': killNode,
  'pause-node': pauseNode,
  'sigterm-node': sigtermNode,
  'partition-node': partitionNode,
  'partition-clock-forward': partitionNode,
  'clock-forward': clockForward,
  'clock-jump-small': clockJump,
  'clock-jump-large': clockJump,
  'etcd-leader-stop': etcdLeaderStop,
  'etcd-cluster-stop': etcdClusterStop,
  'etcd-pause-short': etcdPause,
  'etcd-pause-long': etcdPause,
  'etcd-slow-short': etcdSlow,
  'etcd-slow-long': etcdSlow,
  'etcd-member-down': etcdMemberDown,
  'etcd-snapshot-restore': etcdSnapshotRestore,
  'double-loan': doubleLoan,
  'wrong-region-node': wrongRegionNode,
  'standalone-pause': standalone,
  'standalone-step': standalone,
  'standalone-empty-state': standalone,
};
