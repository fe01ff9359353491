import { Option, type Command } from 'commander';
import { FlagError, integer } from '@idgen/flags';
import {
  ETCD_FLAGS,
  LeaseConfigError,
  etcdConnectionFromFlags,
  etcdFlagsFor,
  resolveConnection,
  type EtcdConnectionOptions,
  type NamedValue,
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

/** Adds `--etcd`, `--etcd-prefix` and the TLS/auth flags (@idgen/lease's, the same as idgen-server's: docs/design.md §6). */
export function addEtcdOptions(command: Command, etcdDescription: string): Command {
  command.option('--etcd <urls>', etcdDescription);
  for (const f of ETCD_FLAGS) command.option(f.flags, f.description, 'defaultValue' in f ? f.defaultValue : undefined);
  return command;
}

/** The spare-code registry's flags, as commander parses them: the etcd flags named `--registry…` (docs/design.md §7). */
export interface RegistryFlags {
  registry?: string;
  registryPrefix: string;
  registryCa?: string;
  registryCert?: string;
  registryKey?: string;
  registryUser?: string;
  registryPasswordFile?: string;
}

/** The registry flags: @idgen/lease's etcd flags (and their checks) with `registry` in place of `etcd`. */
export const REGISTRY_FLAGS = etcdFlagsFor('registry', 'the spare-code registry');

/** Adds `--registry`, `--registry-prefix` and the registry's TLS/auth flags. */
export function addRegistryOptions(command: Command, registryDescription: string): Command {
  command.option('--registry <urls>', registryDescription);
  for (const f of REGISTRY_FLAGS)
    command.option(f.flags, f.description, 'defaultValue' in f ? f.defaultValue : undefined);
  return command;
}

/** Adds `--timeout-ms`. */
export function addTimeoutOption(command: Command, what: string): Command {
  return command.addOption(new Option('--timeout-ms <ms>', `give up on ${what} after this long`).default('5000'));
}

/** Adds `--json`. */
export function addJsonOption(command: Command): Command {
  return command.option('--json', 'one JSON document on stdout instead of a table (for scripts)', false);
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
  return namedConnection('etcd', 'etcd', {
    url: flags.etcd,
    prefix: flags.etcdPrefix,
    ca: flags.etcdCa,
    cert: flags.etcdCert,
    key: flags.etcdKey,
    user: flags.etcdUser,
    passwordFile: flags.etcdPasswordFile,
  });
}

/**
 * The spare-code registry's connection (`--registry` and its flags), validated by the same rules as
 * {@link etcdConnection}. Throws a usage error (exit 2) naming every bad value, or `--registry` when it is absent.
 */
export function registryConnection(flags: RegistryFlags, why: string): EtcdConnection {
  if (flags.registry === undefined) throw usageError(`--registry is required: ${why}`);
  return namedConnection('registry', 'registry', {
    url: flags.registry,
    prefix: flags.registryPrefix,
    ca: flags.registryCa,
    cert: flags.registryCert,
    key: flags.registryKey,
    user: flags.registryUser,
    passwordFile: flags.registryPasswordFile,
  });
}

/** One etcd connection from the flags `--{flag}`, `--{flag}-prefix`, `--{flag}-ca` …; `what` names it in errors. */
function namedConnection(
  flag: string,
  what: string,
  v: {
    url: string | undefined;
    prefix: string | undefined;
    ca: string | undefined;
    cert: string | undefined;
    key: string | undefined;
    user: string | undefined;
    passwordFile: string | undefined;
  },
): EtcdConnection {
  if (v.url === undefined) throw usageError(`--${flag} is required`);
  const named = (value: string | undefined, name: string): NamedValue | undefined =>
    value === undefined ? undefined : { value, name: `--${flag}${name}` };
  try {
    const options = etcdConnectionFromFlags({
      etcd: { value: v.url, name: `--${flag}` },
      prefix: named(v.prefix, '-prefix'),
      ca: named(v.ca, '-ca'),
      cert: named(v.cert, '-cert'),
      key: named(v.key, '-key'),
      user: named(v.user, '-user'),
      passwordFile: named(v.passwordFile, '-password-file'),
    });
    const { prefix } = resolveConnection(options);
    // The lease package writes under '' for the prefix '/' (its keys then start with '/regions').
    return { options, keyPrefix: prefix === '/' ? '' : prefix };
  } catch (e) {
    if (e instanceof LeaseConfigError) throw usageError(`invalid ${what} options: ${e.problems.join('; ')}`);
    throw e;
  }
}

/** Parses an integer flag in `[min, max]` as idgen-server does (@idgen/flags' `integer`); a usage error otherwise. */
export function integerOption(flag: string, text: string, min: number, max: number): number {
  try {
    return integer(min, max)(text, flag);
  } catch (e) {
    if (e instanceof FlagError) throw usageError(e.message);
    throw e;
  }
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
