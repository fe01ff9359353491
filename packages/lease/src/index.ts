/**
 * `@idgen/lease`: worker-ID leases on etcd with self-fencing before etcd can expire them, and the standalone
 * (one node only) lease (docs/design.md §5). This entry is for what holds a slot: a generator node, an embedded
 * source, the discovery reader's connection.
 *
 * Two more entries serve other audiences: `@idgen/lease/operator` (spare codes lent between regions, the
 * registry, a region's binding and its restore: what the `idgen` CLI does) and `@idgen/lease/records` (the etcd
 * keys and the parsers of every record, for tools that read a region's state).
 *
 * @packageDocumentation
 */

// For end users: a holder and its configuration.
export {
  DEFAULT_CLOCK_BOUND_MS,
  DEFAULT_FENCE_MARGIN_MS,
  DEFAULT_KEEPALIVE_INTERVAL_MS,
  DEFAULT_PREFIX,
  DEFAULT_TTL_SECONDS,
  LEASE_DEFAULTS,
  MAX_TTL_SECONDS,
  MIN_TTL_SECONDS,
  checkPrefix,
  defaultNodeId,
  parseWorkerRange,
  resolveConnection,
  resolveLeaseConfig,
} from './config.js';
export type { EtcdConnectionOptions, EtcdLeaseOptions, EtcdTlsOptions, LeaseConfig, WorkerRange } from './config.js';
export { createEtcdLease } from './etcd-lease.js';
export { createStandaloneLease, defaultStandaloneStateFile } from './standalone-lease.js';
export type { StandaloneLeaseOptions } from './standalone-lease.js';
export {
  CorruptRecordError,
  UnreadableSchemaError,
  LayoutMismatchError,
  LeaseConfigError,
  LeaseError,
  NoFreeWorkerError,
  isLeaseError,
  isNoFreeWorkerError,
} from './errors.js';
export type { LeaseErrorCode, SlotHolder } from './errors.js';
export { RegionBindingError } from './region-binding.js';
export { TtlCeilingError } from './ttl-ceiling.js';
export { silentLogger } from './types.js';
export type {
  LeaseExtension,
  LeaseLogger,
  LeaseSnapshot,
  LeaseState,
  LeaseTarget,
  WorkerAssignment,
  WorkerLease,
} from './types.js';
export type { ClockSource } from './clock.js';

// For other libraries and apps: an etcd client and the etcd flags, shared by the server, the CLI and discovery.
export { createEtcdClient } from './etcd-client.js';
export { ETCD_FLAGS, etcdConnectionFromFlags, etcdFlagsFor } from './flags.js';
export type { EtcdFlagValues, FlagDoc, NamedValue } from './flags.js';

// The holder's journal of its tenures, outside etcd (docs/design.md §5 "A witness outside the etcd"): the server's
// `--tenure-journal`, and what `idgen audit --journal` reads.
export { WITNESS_KEEP, createFileTenureWitness, readTenureWitnesses } from './tenure-witness.js';
export type { TenureWitness, TenureWitnessEntry, TenureWitnessRecord } from './tenure-witness.js';
