/**
 * `@idgen/discovery`: lists and watches the serving nodes of one idgen region in etcd
 * (`{prefix}/regions/{code}/nodes/`, docs/design.md §5), for `createIdClient({ discovery })` in
 * `@idgen/client`. A caller that lists its nodes by hand does not need this package (nor etcd).
 *
 * @packageDocumentation
 */
export { createDiscoveryReader } from './discovery.js';
export type { DiscoveryReader, DiscoveryReaderOptions } from './discovery.js';
export { LeaseConfigError, isLeaseError } from '@idgen/lease';
export type { EtcdConnectionOptions, EtcdTlsOptions, LeaseLogger } from '@idgen/lease';
export type { ServingNode } from '@idgen/lease/records';
