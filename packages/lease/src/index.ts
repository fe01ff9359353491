/**
 * `@idgen/lease`: worker-ID leases on etcd with self-fencing before etcd can expire them, the standalone
 * (one node only) lease, and the serving-node records discovery reads (docs/design.md §5; the reader itself is
 * `@idgen/discovery`).
 *
 * @packageDocumentation
 */
export {
  DEFAULT_CLOCK_BOUND_MS,
  DEFAULT_FENCE_MARGIN_MS,
  DEFAULT_KEEPALIVE_INTERVAL_MS,
  DEFAULT_PREFIX,
  DEFAULT_TTL_SECONDS,
  MAX_TTL_SECONDS,
  MIN_TTL_SECONDS,
  checkPrefix,
  defaultNodeId,
  parseWorkerRange,
  resolveConnection,
  resolveLeaseConfig,
} from './config.js';
export { createEtcdClient } from './etcd-client.js';
export { ETCD_FLAGS, etcdConnectionFromFlags, etcdFlagsFor } from './flags.js';
export type { EtcdFlagValues, FlagDoc, NamedValue } from './flags.js';
export type { EtcdConnectionOptions, EtcdLeaseOptions, EtcdTlsOptions, LeaseConfig, WorkerRange } from './config.js';
export { createEtcdLease } from './etcd-lease.js';
export {
  CorruptRecordError,
  LayoutMismatchError,
  LeaseConfigError,
  LeaseError,
  NoFreeWorkerError,
  isLeaseError,
  isNoFreeWorkerError,
} from './errors.js';
export type { LeaseErrorCode, SlotHolder } from './errors.js';
export { LeaseAttributes, LeaseMetrics } from './metrics.js';
export type { ChurnEvent } from './metrics.js';
export { computeFloor, leaseKeys, parseLastMsRecord, parseLayoutRecord, parseServingNode } from './records.js';
export type { LastMsRecord, WorkerRecord } from './records.js';
export {
  EMPTY_TENURE_RECORD,
  TENURE_KEEP,
  closeTenure,
  compactTenures,
  lastMsUpperBound,
  openTenure,
  parseTenureRecord,
  tenureDir,
  tenureKey,
  updateTenureRecord,
} from './tenure-ledger.js';
export type { Tenure, TenureEnd, TenureRecord, TenureWriteOutcome } from './tenure-ledger.js';
export {
  DEFAULT_REGIONS_IN_USE,
  HANDOVER_NODE_ID,
  SpareCodeError,
  adoptSpareCode,
  beginReclaim,
  checkRegionCode,
  exportHandover,
  handoverLastMs,
  heldSlotsUnder,
  lendSpareCode,
  listSpareCodes,
  parseHandover,
  parseSpareCodeRecord,
  readSpareCode,
  spareCodesOf,
  spareKeys,
} from './spare-codes.js';
export type { Handover, HandoverWorker, SpareCodeEntry, SpareCodeRecord, SpareCodeState } from './spare-codes.js';
export type { WithRegistry } from './spare-codes.js';
export {
  SpareRegistryCallError,
  casRegistryCode,
  describeRegistry,
  listRegistryCodes,
  parseRegistryRecord,
  readRegistryCode,
  registryKeys,
} from './spare-registry.js';
export type {
  RegistryAdopter,
  RegistryHandover,
  RegistryIo,
  RegistryState,
  RegistryTrailEntry,
  SpareRegistryEntry,
  SpareRegistryRecord,
} from './spare-registry.js';
export {
  RegionBindingError,
  checkRegionBinding,
  initRegion,
  parseRegionBinding,
  regionBindingKey,
} from './region-binding.js';
export type { RegionBindingCheck, RegionBindingRecord } from './region-binding.js';
export { RESTORED_NODE_ID, markRegionRestored } from './region-restore.js';
export type { RegionRestoredReport } from './region-restore.js';
export { silentLogger } from './types.js';
export type {
  LeaseExtension,
  LeaseLogger,
  LeaseSnapshot,
  LeaseState,
  LeaseTarget,
  ServingNode,
  WorkerAssignment,
  WorkerLease,
} from './types.js';
export type { ClockSource } from './clock.js';
export { createStandaloneLease, defaultStandaloneStateFile } from './standalone-lease.js';
export type { StandaloneLeaseOptions } from './standalone-lease.js';
