/**
 * Every fault kind's handler (issue 7, issue 24): one table from {@link FaultKind} to a {@link FaultHandler}, so a
 * new kind is one entry the compiler asks for. Each kind's handler lives in its own file here, named for the kind
 * (`kill-node` in src/faults/kill-node.ts); the variants of one fault share one (`etcd-pause-short` and
 * `etcd-pause-long` in src/faults/etcd-pause.ts, the three `standalone-*` kinds in src/faults/standalone.ts), and
 * `etcd-snapshot-restore`'s is in src/faults/snapshot-restore.ts. The run (src/chaos-run.ts) looks a fault's handler
 * up here and calls it.
 */
import type { FaultHandler } from '../fault-context.js';
import type { FaultKind } from '../schedule.js';
import { clockForward } from './clock-forward.js';
import { clockJump } from './clock-jump.js';
import { disasterRecovery } from './disaster-recovery.js';
import { doubleLoan } from './double-loan.js';
import { etcdClusterStop } from './etcd-cluster-stop.js';
import { etcdLeaderStop } from './etcd-leader-stop.js';
import { etcdMemberDown } from './etcd-member-down.js';
import { etcdPause } from './etcd-pause.js';
import { etcdSlow } from './etcd-slow.js';
import { killNode } from './kill-node.js';
import { netnsPartition } from './netns-partition.js';
import { partitionNode } from './partition-node.js';
import { pauseNode } from './pause-node.js';
import { regionEtcdDown } from './region-etcd-down.js';
import { regionPoolDown } from './region-pool-down.js';
import { rollingRestart } from './rolling-restart.js';
import { sigtermNode } from './sigterm-node.js';
import { etcdSnapshotRestore } from './snapshot-restore.js';
import { standaloneFault } from './standalone.js';
import { wrongRegionNode } from './wrong-region-node.js';

/** The handler of each fault kind. */
export const FAULT_HANDLERS: Readonly<Record<FaultKind, FaultHandler>> = {
  'kill-node': killNode,
  'pause-node': pauseNode,
  'sigterm-node': sigtermNode,
  'partition-node': partitionNode,
  'partition-clock-forward': partitionNode,
  'netns-partition': netnsPartition,
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
  'disaster-recovery': disasterRecovery,
  'wrong-region-node': wrongRegionNode,
  'standalone-pause': standaloneFault,
  'standalone-step': standaloneFault,
  'standalone-empty-state': standaloneFault,
  'region-pool-down': regionPoolDown,
  'region-etcd-down': regionEtcdDown,
  'rolling-restart': rollingRestart,
};
