import type { ClientTlsOptions, KeepAliveOptions } from './connect-transport.js';
import type { HedgeOptions } from './hedge.js';
import type { IdClientOptions, RegionNodes } from './options.js';
import type { BackoffOptions } from './node-pool.js';

/** Every option name of a type, listed: adding an option to the type without listing it here fails to compile. */
type Names<T> = { readonly [K in keyof Required<T>]: true };

const CLIENT: Names<IdClientOptions> = {
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
const REGION: Names<RegionNodes> = { region: true, nodes: true, discovery: true };
const TLS: Names<ClientTlsOptions> = { ca: true, cert: true, key: true, servername: true, rejectUnauthorized: true };
const KEEP_ALIVE: Names<KeepAliveOptions> = { intervalMs: true, timeoutMs: true, idleConnections: true };
const BACKOFF: Names<BackoffOptions> = { initialMs: true, maxMs: true };
const HEDGE: Names<HedgeOptions> = { minMs: true, maxMs: true, latencyMultiple: true };

/**
 * Throws a `TypeError` naming every option of `given` that `known` does not list (one set to `undefined` counts as
 * absent), and the names it takes: a misspelt or guessed option would otherwise be ignored without a word.
 */
function refuseUnknown(where: string, given: unknown, known: Record<string, true>): void {
  if (typeof given !== 'object' || given === null || Array.isArray(given)) return;
  const unknown = Object.keys(given).filter(
    (k) => !Object.hasOwn(known, k) && (given as Record<string, unknown>)[k] !== undefined,
  );
  if (unknown.length === 0) return;
  throw new TypeError(
    `createIdClient: unknown option${unknown.length === 1 ? '' : 's'} ${unknown.map((k) => JSON.stringify(k)).join(', ')}` +
      `${where === '' ? '' : ` in ${where}`}; ${where === '' ? 'the options are' : `${where} takes`} ${Object.keys(known).join(', ')}`,
  );
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
