/**
 * `@idgen/lease/operator`: what an operator does to a deployment's etcds: lend a spare region code to another
 * cluster, reclaim and adopt it through the one registry, bind a region's etcd to its code, and mark it restored
 * from a snapshot (docs/design.md §5, docs/runbook.md). The `idgen` CLI is built on it; a node needs none of it.
 *
 * @packageDocumentation
 */
export {
  HANDOVER_NODE_ID,
  SpareCodeError,
  adoptSpareCode,
  beginReclaim,
  exportHandover,
  heldSlotsUnder,
  lendSpareCode,
  listSpareCodes,
  sealDeadLoan,
  spareCodesOf,
} from '../spare-codes.js';
export type {
  Handover,
  HandoverWorker,
  LendResult,
  SpareCodeEntry,
  SpareCodeState,
  WithRegistry,
} from '../spare-codes.js';
export { SpareRegistryCallError, describeRegistry, listRegistryCodes } from '../spare-registry.js';
export type {
  RegistryAdopter,
  RegistryHandover,
  RegistryIo,
  RegistryState,
  RegistryTrailEntry,
  SpareRegistryEntry,
} from '../spare-registry.js';
export { initRegion } from '../region-init.js';
export type { InitRegionOptions, InitRegionReport } from '../region-init.js';
export {
  RegistryRefusedError,
  initRegistry,
  loanTermOf,
  DEFAULT_LOAN_TERM_MS,
  isRegistryRefusedError,
  noteRegistrySeen,
  noteRegistrySeenInAll,
  readRegistryNow,
  readRegistrySeen,
} from '../registry-identity.js';
export type {
  DeploymentRegistry,
  RegionEtcd,
  RegistryDeploymentRecord,
  RegistryNow,
  RegistryRefusal,
  RegistrySeenRecord,
} from '../registry-identity.js';
export type { WithDeployment } from '../registry-guard.js';
export { reconcileRegistry } from '../registry-reconcile.js';
export type { ReconcileReport, ReconciledCode } from '../registry-reconcile.js';
export { confirmLoan } from '../loan-confirmation.js';
export type { LoanVerdict } from '../loan-confirmation.js';
export { retireRegion } from '../region-retire.js';
export type { RetireIo, RetireReport } from '../region-retire.js';
export {
  DEFAULT_TTL_CEILING_SECONDS,
  TTL_CEILING_RANGE,
  TtlCeilingError,
  pinTtlCeiling,
  readTtlCeiling,
} from '../ttl-ceiling.js';
export { RESTORED_NODE_ID, markRegionRestored } from '../region-restore.js';
export type { OldClusterProof, RegionRestoredReport } from '../region-restore.js';
