import { readFileSync } from 'node:fs';
import { Option, type Command } from 'commander';
import {
  DEFAULT_PREFIX,
  isLeaseError,
  resolveConnection,
  type EtcdConnectionOptions,
  type LeaseConfigError,
} from '@idgen/lease';
import { usageError } from './exit-codes.js';

/** The etcd flags, as commander parses them. */
export interface EtcdFlags {
  etcd?: string;
  etcdPrefix: string;
  etcdCa?: string;
  etcdCert?: string;
  etcdKey?: string;
  etcdUser?: string;
  etcdPasswordFile?: string;
}

/** Adds `--etcd`, `--etcd-prefix` and the TLS/auth flags (the same names as idgen-server's, docs/design.md §6). */
export function addEtcdOptions(command: Command, etcdDescription: string): Command {
  return command
    .option('--etcd <urls>', etcdDescription)
    .option('--etcd-prefix <prefix>', 'key prefix in etcd', DEFAULT_PREFIX)
    .option('--etcd-ca <file>', 'CA certificate (PEM) to verify etcd with; needs https:// endpoints')
    .option('--etcd-cert <file>', 'client certificate (PEM) for etcd')
    .option('--etcd-key <file>', 'client private key (PEM) for etcd')
    .option('--etcd-user <name>', 'etcd user (needs --etcd-password-file)')
    .option('--etcd-password-file <file>', "file holding the etcd user's password (one line)");
}

/** Adds `--timeout-ms`. */
export function addTimeoutOption(command: Command, what: string): Command {
  return command.addOption(new Option('--timeout-ms <ms>', `give up on ${what} after this long`).default('5000'));
}

/** Adds `--json`. */
export function addJsonOption(command: Command): Command {
  return command.option('--json', 'one JSON document on stdout instead of a table (for scripts)', false);
}

function readFileOption(flag: string, path: string | undefined): string | undefined {
  if (path === undefined) return undefined;
  try {
    return readFileSync(path, 'utf8');
  } catch (e) {
    throw usageError(`${flag} ${path}: ${(e as Error).message}`);
  }
}

/** Validated etcd options, and the prefix the lease package's key builders take. */
export interface EtcdConnection {
  readonly options: EtcdConnectionOptions;
  readonly keyPrefix: string;
}

/**
 * The etcd connection of the flags, validated by `@idgen/lease` (the rules idgen-server applies), files read.
 * Throws a usage error (exit 2) naming every bad value.
 */
export function etcdConnection(flags: EtcdFlags): EtcdConnection {
  if (flags.etcd === undefined) throw usageError('--etcd is required');
  const endpoints = flags.etcd
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if ((flags.etcdCert === undefined) !== (flags.etcdKey === undefined))
    throw usageError('--etcd-cert and --etcd-key go together');
  if ((flags.etcdUser === undefined) !== (flags.etcdPasswordFile === undefined)) {
    throw usageError('--etcd-user and --etcd-password-file go together');
  }
  const ca = readFileOption('--etcd-ca', flags.etcdCa);
  const cert = readFileOption('--etcd-cert', flags.etcdCert);
  const key = readFileOption('--etcd-key', flags.etcdKey);
  const tls = ca !== undefined || cert !== undefined ? { ca, cert, key } : undefined;
  const password = readFileOption('--etcd-password-file', flags.etcdPasswordFile)?.replace(/\r?\n$/, '');
  const auth =
    flags.etcdUser !== undefined && password !== undefined ? { username: flags.etcdUser, password } : undefined;
  const options: EtcdConnectionOptions = {
    endpoints,
    prefix: flags.etcdPrefix,
    ...(tls ? { tls } : {}),
    ...(auth ? { auth } : {}),
  };
  try {
    const { prefix } = resolveConnection(options);
    // The lease package writes under '' for the prefix '/' (its keys then start with '/regions').
    return { options, keyPrefix: prefix === '/' ? '' : prefix };
  } catch (e) {
    if (isLeaseError(e) && e.code === 'config')
      throw usageError(`invalid etcd options: ${(e as LeaseConfigError).problems.join('; ')}`);
    throw e;
  }
}

/** Parses an integer flag in `[min, max]`; a usage error otherwise. */
export function integerOption(flag: string, text: string, min: number, max: number): number {
  if (!/^[0-9]+$/.test(text) || Number(text) < min || Number(text) > max) {
    throw usageError(`${flag} must be an integer from ${min} to ${max}, got ${JSON.stringify(text)}`);
  }
  return Number(text);
}

/** Parses `--server`: a base URL `http://host:port` (or `https://`), or `host:port` (→ `http://`). */
export function serverUrl(text: string): string {
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(text) ? text : `http://${text}`;
  let url: URL;
  try {
    url = new URL(withScheme);
  } catch {
    throw usageError(`--server ${JSON.stringify(text)} is not a node URL like http://127.0.0.1:8080`);
  }
  if (
    (url.protocol !== 'http:' && url.protocol !== 'https:') ||
    url.hostname === '' ||
    url.search !== '' ||
    url.username !== ''
  ) {
    throw usageError(`--server ${JSON.stringify(text)} is not a node URL like http://127.0.0.1:8080`);
  }
  return `${url.protocol}//${url.host}${url.pathname.replace(/\/$/, '')}`;
}
