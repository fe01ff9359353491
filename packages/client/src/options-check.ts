import { refuseUnknownOptions, type OptionNames } from '@idgen/core';
import type { ClientTlsOptions, KeepAliveOptions } from './connect-transport.js';
import type { HedgeOptions } from './hedge.js';
import type { IdClientOptions, RegionNodes } from './options.js';
import type { BackoffOptions } from './node-pool.js';

const CLIENT: OptionNames<IdClientOptions> = {
  region: true,
  nodes: true,
  discovery: true,
  fallbackRegions: true,
  layout: true,
  bufferSize: true,
  lowWater: true,
  maxAgeMs: true,
  maxBatch: true,
  deadlineMs: true,
  attemptTimeoutMs: true,
  hedge: true,
  backoff: true,
  protocol: true,
  tls: true,
  keepAlive: true,
  prefill: true,
  meter: true,
  clock: true,
  transport: true,
  random: true,
  keyedFormKey: true,
};
const REGION: OptionNames<RegionNodes> = { region: true, nodes: true, discovery: true };
const TLS: OptionNames<ClientTlsOptions> = {
  ca: true,
  cert: true,
  key: true,
  servername: true,
  rejectUnauthorized: true,
};
const KEEP_ALIVE: OptionNames<KeepAliveOptions> = { intervalMs: true, timeoutMs: true, idleConnections: true };
const BACKOFF: OptionNames<BackoffOptions> = { initialMs: true, maxMs: true };
const HEDGE: OptionNames<HedgeOptions> = { minMs: true, maxMs: true, latencyMultiple: true };

function refuseUnknown(where: string, given: unknown, known: Readonly<Record<string, true>>): void {
  refuseUnknownOptions('createIdClient', where, given, known);
}

/** Refuses option names {@link IdClientOptions} does not have, at the top and in its nested objects. */
export function refuseUnknownClientOptions(options: IdClientOptions): void {
  refuseUnknown('', options, CLIENT);
  refuseUnknown('tls', options.tls, TLS);
  refuseUnknown('keepAlive', options.keepAlive, KEEP_ALIVE);
  refuseUnknown('backoff', options.backoff, BACKOFF);
  if (typeof options.hedge === 'object') refuseUnknown('hedge', options.hedge, HEDGE);
  for (const r of options.fallbackRegions ?? []) refuseUnknown('fallbackRegions[]', r, REGION);
}
