/**
 * `@idgen/client`: the buffered client every caller embeds (docs/design.md §7). Most calls take an ID from a
 * local buffer with no network hop; refills balance across the region's healthy nodes, skip failed
 * ones at once, fail over to neighbouring regions, and never invent an ID.
 *
 * @packageDocumentation
 */
export { MAX_BUFFER_SIZE, MAX_NEXT_IDS, createIdClient } from './id-client.js';
export { CLIENT_DEFAULTS } from './defaults.js';
export type { CallOptions, IdClient, IdClientOptions, IdClientStats, NodeStats, RegionNodes } from './id-client.js';
export { IdClientError, IdsUnavailableError, isIdClientError, isIdsUnavailableError } from './errors.js';
export type { AttemptFailure, IdClientErrorCode } from './errors.js';
export { systemClientClock } from './clock.js';
export type { ClientClock } from './clock.js';
export { createConnectTransport } from './connect-transport.js';
export type {
  ClientProtocol,
  ClientTlsOptions,
  ConnectTransportOptions,
  KeepAliveOptions,
} from './connect-transport.js';
export { classifyFailure } from './transport.js';
export type { AttemptOptions, ClassifiedFailure, IdTransport, IdTransportFactory, NodeTarget } from './transport.js';
export type { BackoffOptions, DiscoveredNode, NodeDiscovery } from './node-pool.js';
export type { HedgeOptions } from './hedge.js';
export { dns, parseDnsTarget } from './dns-discovery.js';
export type { DnsDiscovery, DnsDiscoveryOptions, DnsTarget } from './dns-discovery.js';
export type { IdBlock } from './id-buffer.js';
export { CLIENT_METRIC_ATTRIBUTES, CLIENT_METRIC_NAMES } from './metrics.js';
export type { BlockRefusalReason } from './block-guard.js';
// Where a client user looks for it, so decoding takes no second import: the fields of an ID, over the default
// layout's decompose.
export { decodeId } from '@idgen/core';
export type { IdFields } from '@idgen/core';
// The forms `nextId({ form })` hands out (docs/design.md §1 "Forms"); `createIdForms` in `@idgen/core` reads them back.
export type { FormCallOptions, IdForm, IdInForm } from '@idgen/core';
