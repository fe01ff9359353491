import type { EtcdConnectionOptions, EtcdTlsOptions } from '@idgen/lease';
import type { EmbeddedIdSourceOptions } from './options.js';

/** Every option name of a type, listed: adding an option to the type without listing it here fails to compile. */
type Names<T> = { readonly [K in keyof Required<T>]: true };

const SOURCE: Names<EmbeddedIdSourceOptions> = {
  etcd: true,
  region: true,
  workers: true,
  borrowSpare: true,
  nodeId: true,
  ttlSeconds: true,
  keepAliveIntervalMs: true,
  keepAliveTimeoutMs: true,
  fenceMarginMs: true,
  clockBoundMs: true,
  requestTimeoutMs: true,
  backoff: true,
  timeSource: true,
  maxClockOffsetMs: true,
  chronycPath: true,
  timeSourceRetryMs: true,
  maxRollbackMs: true,
  maxFenceMs: true,
  slotWaitMs: true,
  deadlineMs: true,
  layout: true,
  clock: true,
  meter: true,
  logger: true,
  onFatal: true,
  registry: true,
  keyedFormKey: true,
};
const ETCD: Names<EtcdConnectionOptions> = { endpoints: true, tls: true, auth: true, prefix: true };
const TLS: Names<EtcdTlsOptions> = { ca: true, cert: true, key: true };
const AUTH: Names<NonNullable<EtcdConnectionOptions['auth']>> = { username: true, password: true };
const BACKOFF: Names<NonNullable<EmbeddedIdSourceOptions['backoff']>> = { initialMs: true, maxMs: true };

/** What a nested object holds, said with its names (a guess like `etcd.ca` or `etcd.passwordFile` is common). */
const SHAPES: Record<string, string> = {
  etcd: ' (TLS as etcd.tls: { ca, cert, key }, PEM text, not file paths; a user as etcd.auth: { username, password })',
  'etcd.tls': ' (PEM text, not file paths: read the files with fs.readFileSync)',
  'etcd.auth': ' (the password itself, not a file: read it with fs.readFileSync)',
  registry: ' (the same shape as etcd: endpoints, tls: { ca, cert, key }, auth: { username, password }, prefix)',
  'registry.tls': ' (PEM text, not file paths: read the files with fs.readFileSync)',
  'registry.auth': ' (the password itself, not a file: read it with fs.readFileSync)',
};

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
    `createEmbeddedIdSource: unknown option${unknown.length === 1 ? '' : 's'} ${unknown.map((k) => JSON.stringify(k)).join(', ')}` +
      `${where === '' ? '' : ` in ${where}`}; ${where === '' ? 'the options are' : `${where} takes`} ` +
      `${Object.keys(known).join(', ')}${SHAPES[where] ?? ''}`,
  );
}

/** Refuses option names {@link EmbeddedIdSourceOptions} does not have, at the top and in its nested objects. */
export function refuseUnknownEmbeddedOptions(options: EmbeddedIdSourceOptions): void {
  refuseUnknown('', options, SOURCE);
  refuseUnknown('etcd', options.etcd, ETCD);
  refuseUnknown('etcd.tls', options.etcd?.tls, TLS);
  refuseUnknown('etcd.auth', options.etcd?.auth, AUTH);
  refuseUnknown('registry', options.registry, ETCD);
  refuseUnknown('registry.tls', options.registry?.tls, TLS);
  refuseUnknown('registry.auth', options.registry?.auth, AUTH);
  refuseUnknown('backoff', options.backoff, BACKOFF);
}
