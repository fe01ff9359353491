/**
 * `@idgen/lease/records`: where a region's state lives in etcd and how each record reads: the keys, and a parser
 * per record (worker slots, `last-ms`, the layout, serving nodes, slot tenures, spare codes, the registry, the
 * region binding). For tools that read that state, as `idgen leases` and `idgen audit` do, and for the discovery
 * reader. Every parser refuses what it cannot read safely.
 *
 * The deployment audit lives here too, as pure functions over what was read: {@link regionViewOf} parses one etcd's
 * keys, {@link auditDeployment} judges the regions together, {@link whoisTenure} names the tenure behind an ID, and
 * {@link judgeLastMs} judges a `last-ms` against a clock. Reading etcd is the caller's (`idgen audit`, the chaos tool).
 *
 * @packageDocumentation
 */
export { leaseKeys, parseLastMsRecord, parseLayoutRecord, parseServingNode } from '../records.js';
export type { LastMsRecord, WorkerRecord } from '../records.js';
export type { ServingNode } from '../types.js';
export { lastMsUpperBound, parseTenureRecord, tenureDir, tenureKey } from '../tenure-ledger.js';
export type { Tenure, TenureEnd, TenureRecord } from '../tenure-ledger.js';
export { parseHandover, parseSpareCodeRecord, spareKeys } from '../spare-codes.js';
export type { SpareCodeAdoption, SpareCodeLoan, SpareCodeRecord } from '../spare-codes.js';
export { parseRegistryRecord, registryKeys } from '../spare-registry.js';
export type { SpareRegistryRecord } from '../spare-registry.js';
export { parseRegistryDeployment, parseRegistrySeen, registryMetaKeys } from '../registry-identity.js';
export { regionViewOf, parseWorkerRecord } from '../region-view.js';
export type { EtcdKeyValue, RegionRead, RegionView, SlotView } from '../region-view.js';
export { auditDeployment, judgeLastMs, tenureExtent, whoisTenure } from '../deployment-audit.js';
export type { Finding, FindingKind, LastMsVerdict, TenureOverlap, WhoisAnswer } from '../deployment-audit.js';
export { parseTenureWitness, witnessExtent } from '../tenure-witness.js';
export type { TenureWitnessEntry, TenureWitnessRecord } from '../tenure-witness.js';
export { bindingGeneration, parseRegionBinding, regionBindingKey } from '../region-binding.js';
export type { RegionBindingRecord, RegionRetirement } from '../region-binding.js';
export { parseTtlCeiling, ttlCeilingKey } from '../ttl-ceiling.js';
export type { TtlCeilingRecord } from '../ttl-ceiling.js';
