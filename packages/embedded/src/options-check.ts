import { refuseUnknownOptions, type OptionNames } from '@idgen/core';
import type { EtcdConnectionOptions, EtcdTlsOptions } from '@idgen/lease';
import type { EmbeddedIdSourceOptions } from './options.js';

const SOURCE: OptionNames<EmbeddedIdSourceOptions> = {
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
const ETCD: OptionNames<EtcdConnectionOptions> = { endpoints: true, tls: true, auth: true, prefix: true };
const TLS: OptionNames<EtcdTlsOptions> = { ca: true, cert: true, key: true };
const AUTH: OptionNames<NonNullable<EtcdConnectionOptions['auth']>> = { username: true, password: true };
const BACKOFF: OptionNames<NonNullable<EmbeddedIdSourceOptions['backoff']>> = { initialMs: true, maxMs: true };

/** What a nested object holds, said with its names (a guess like `etcd.ca` or `etcd.passwordFile` is common). */
const SHAPES: Record<string, string> = {
  etcd: ' (TLS as etcd.tls: { ca, cert, key }, PEM text, not file paths; a user as etcd.auth: { username, password })',
  'etcd.tls': ' (PEM text, not file paths: read the files with fs.readFileSync)',
  'etcd.auth': ' (the password itself, not a file: read it with fs.readFileSync)',
  registry: ' (the same shape as etcd: endpoints, tls: { ca, cert, key }, auth: { username, password }, prefix)',
  'registry.tls': ' (PEM text, not file paths: read the files with fs.readFileSync)',
  'registry.auth': ' (the password itself, not a file: read it with fs.readFileSync)',
};

function refuseUnknown(where: string, given: unknown, known: Readonly<Record<string, true>>): void {
  refuseUnknownOptions('createEmbeddedIdSource', where, given, known, SHAPES[where] ?? '');
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
