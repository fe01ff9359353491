import { readFileSync } from 'node:fs';
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
  /** `--dial-timeout-ms` (every verb with etcd flags has it). */
  dialTimeoutMs?: string;
}

/** What a verb does with etcd: the role its `--etcd-user` needs (the help says which). */
export type EtcdAccess = 'read' | 'write';

/**
 * Adds `--etcd`, `--etcd-prefix` and the TLS/auth flags (@idgen/lease's, the same as idgen-server's: docs/design.md
 * §6). A read-only verb's `--etcd-user` help names the read-only role, not one that "reads and writes".
 */
export function addEtcdOptions(command: Command, etcdDescription: string, access: EtcdAccess = 'read'): Command {
  command.option('--etcd <urls>', `${etcdDescription}; absent: ETCDCTL_ENDPOINTS`);
  for (const f of ETCD_FLAGS) {
    const description =
      f.key === 'user'
        ? access === 'read'
          ? 'etcd user (with --etcd-password-file); its role must read the prefix (idgen-operator); absent: ETCDCTL_USER (user:password)'
          : 'etcd user (with --etcd-password-file); its role must write the keys this verb writes; absent: ETCDCTL_USER (user:password)'
        : `${f.description}${ETCDCTL_FALLBACK[f.key] === undefined ? '' : `; absent: ${ETCDCTL_FALLBACK[f.key]}`}`;
    command.option(f.flags, description, 'defaultValue' in f ? f.defaultValue : undefined);
  }
  return command;
}

/** The etcdctl variable each etcd flag falls back to when neither it nor its `IDGEN_*` variable is given. */
const ETCDCTL_FALLBACK: Partial<Record<(typeof ETCD_FLAGS)[number]['key'], string>> = {
  ca: 'ETCDCTL_CACERT',
  cert: 'ETCDCTL_CERT',
  key: 'ETCDCTL_KEY',
};

/** The flags of the TLS the nodes serve (`--tls-ca`, and the client certificate mTLS nodes ask for). */
export interface NodeTlsFlags {
  tlsCa?: string;
  tlsCert?: string;
  tlsKey?: string;
  tlsServername?: string;
}

/**
 * Adds `--tls-ca`, `--tls-cert`, `--tls-key`: the names of idgen-server's TLS flags (`--tls-cert`/`--tls-key` are the
 * certificate and key this side presents: the node's serving pair there, the CLI's client pair for mTLS here).
 */
export function addNodeTlsOptions(command: Command): Command {
  return command
    .option('--tls-ca <file>', "PEM file of the CA that signed the nodes' serving certificates (https:// nodes)")
    .option('--tls-cert <file>', 'PEM client certificate for nodes that ask for one (mTLS; with --tls-key)')
    .option('--tls-key <file>', 'PEM private key of --tls-cert')
    .option(
      '--tls-servername <name>',
      "the name the nodes' serving certificates carry, when they are dialled by another (a pod IP; as grpcurl -servername)",
    );
}

/**
 * Gives every option of `program` and its sub-commands a variable, `IDGEN_` and its name in capitals
 * (`--etcd-ca` → `IDGEN_ETCD_CA`), as idgen-server's flags have (docs/design.md §6); the command line wins. Commander's
 * own variables, not @idgen/flags' table: the CLI's flags are spread over verbs that commander parses.
 */
export function addEnvironment(program: Command): Command {
  for (const c of [program, ...program.commands, ...program.commands.flatMap((s) => s.commands)]) {
    for (const o of c.options) {
      if (o.envVar !== undefined || o.long === undefined || o.long === '--help' || o.long === '--version') continue;
      o.env(`IDGEN_${o.long.slice(2).toUpperCase().replace(/-/g, '_')}`);
    }
  }
  // Commander reads an option's variable only when it had one as it was added; these were given one after, so the
  // verb about to run takes them here: a non-empty variable fills a flag not given on the command line.
  program.hook('preAction', (_, verb) => {
    for (const o of verb.options) {
      const key = o.attributeName();
      const text = o.envVar === undefined ? undefined : process.env[o.envVar];
      const source = verb.getOptionValueSource(key);
      if (text === undefined || text === '' || (source !== undefined && source !== 'default')) continue;
      verb.setOptionValueWithSource(key, o.required || o.optional ? text : text !== '0' && text !== 'false', 'env');
    }
  });
  return program;
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

/** Adds `--timeout-ms` (the command's deadline) and `--dial-timeout-ms` (each connection's). */
export function addTimeoutOption(command: Command, what: string): Command {
  return command
    .addOption(
      new Option('--timeout-ms <ms>', `command timeout: give up on ${what} after this long (exit 3)`).default('5000'),
    )
    .addOption(
      new Option(
        '--dial-timeout-ms <ms>',
        'dial timeout: give up on connecting to an etcd endpoint or a node (TCP, TLS handshake, HTTP/2) after this long',
      ).default('2000'),
    );
}

/** The flags of {@link addTimeoutOption}, read. */
export interface Deadlines {
  readonly timeoutMs: number;
  readonly dialTimeoutMs: number;
}

/** Reads `--timeout-ms` and `--dial-timeout-ms` (1 ms … 10 min); a usage error otherwise. */
export function deadlines(flags: { timeoutMs?: string; dialTimeoutMs?: string }): Deadlines {
  return {
    timeoutMs: integerOption('--timeout-ms', flags.timeoutMs ?? '5000', 1, 600_000),
    dialTimeoutMs: integerOption('--dial-timeout-ms', flags.dialTimeoutMs ?? '2000', 1, 600_000),
  };
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
export function etcdConnection(flags: EtcdFlags, env: NodeJS.ProcessEnv = process.env): EtcdConnection {
  // etcdctl's variables fill what neither a flag nor its IDGEN_* variable gave (an operator's shell already has them).
  const ctl = (name: string): string | undefined => (env[name] === '' ? undefined : env[name]);
  const ctlUser =
    flags.etcdUser === undefined && flags.etcdPasswordFile === undefined ? ctl('ETCDCTL_USER') : undefined;
  const ca = flags.etcdCa ?? ctl('ETCDCTL_CACERT');
  const connection = namedConnection('etcd', 'etcd', {
    url: flags.etcd ?? etcdctlEndpoints(ctl('ETCDCTL_ENDPOINTS'), ca !== undefined),
    prefix: flags.etcdPrefix,
    ca,
    cert: flags.etcdCert ?? ctl('ETCDCTL_CERT'),
    key: flags.etcdKey ?? ctl('ETCDCTL_KEY'),
    user: flags.etcdUser,
    passwordFile: flags.etcdPasswordFile,
  });
  if (ctlUser === undefined) return connection;
  // ETCDCTL_USER is `user:password` (etcdctl's --user), or the user with ETCDCTL_PASSWORD.
  const colon = ctlUser.indexOf(':');
  const username = colon < 0 ? ctlUser : ctlUser.slice(0, colon);
  const password = colon < 0 ? ctl('ETCDCTL_PASSWORD') : ctlUser.slice(colon + 1);
  if (username === '' || password === undefined || password === '')
    throw usageError('ETCDCTL_USER must be user:password (or the user, with ETCDCTL_PASSWORD)');
  const options = { ...connection.options, auth: { username, password } };
  try {
    resolveConnection(options);
  } catch (e) {
    if (e instanceof LeaseConfigError)
      throw usageError(`invalid etcd options (ETCDCTL_USER): ${e.problems.join('; ')}`);
    throw e;
  }
  return { ...connection, options };
}

/** Whether etcdctl's ETCDCTL_ENDPOINTS names an etcd (then `--etcd` may be left out). */
export function etcdctlEndpointsSet(env: NodeJS.ProcessEnv = process.env): boolean {
  return (env['ETCDCTL_ENDPOINTS'] ?? '') !== '';
}

/** ETCDCTL_ENDPOINTS as --etcd: etcdctl takes `host:port`, which is `https://` with a CA, else `http://`. */
function etcdctlEndpoints(value: string | undefined, tls: boolean): string | undefined {
  return value
    ?.split(',')
    .map((e) => e.trim())
    .filter((e) => e !== '')
    .map((e) => (/^[a-z][a-z0-9+.-]*:\/\//i.test(e) ? e : `${tls ? 'https' : 'http'}://${e}`))
    .join(',');
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
  if (v.url === undefined)
    throw usageError(`--${flag} is required${flag === 'etcd' ? ' (or IDGEN_ETCD, or ETCDCTL_ENDPOINTS)' : ''}`);
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

/**
 * The node TLS of `--tls-ca`, `--tls-cert`, `--tls-key`, `--tls-servername` (files read; `undefined` when none is
 * given). Throws a usage
 * error naming the flag of an unreadable or non-PEM file, or a certificate without its key.
 */
export function nodeTls(
  flags: NodeTlsFlags,
): { ca?: string; cert?: string; key?: string; servername?: string } | undefined {
  if (
    flags.tlsCa === undefined &&
    flags.tlsCert === undefined &&
    flags.tlsKey === undefined &&
    flags.tlsServername === undefined
  )
    return undefined;
  if (flags.tlsServername !== undefined && !/^[A-Za-z0-9*]([A-Za-z0-9.*-]*[A-Za-z0-9])?$/.test(flags.tlsServername))
    throw usageError(`--tls-servername ${JSON.stringify(flags.tlsServername)} is not a DNS name`);
  if ((flags.tlsCert === undefined) !== (flags.tlsKey === undefined))
    throw usageError('--tls-cert and --tls-key go together: give both or neither');
  const read = (file: string | undefined, flag: string, pem: RegExp): string | undefined => {
    if (file === undefined) return undefined;
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (e) {
      throw usageError(
        `${flag}: cannot read ${JSON.stringify(file)} (${(e as NodeJS.ErrnoException).code ?? String(e)})`,
      );
    }
    if (!pem.test(text)) throw usageError(`${flag}: ${JSON.stringify(file)} is not PEM`);
    return text;
  };
  const ca = read(flags.tlsCa, '--tls-ca', /-----BEGIN CERTIFICATE-----/);
  const cert = read(flags.tlsCert, '--tls-cert', /-----BEGIN CERTIFICATE-----/);
  const key = read(flags.tlsKey, '--tls-key', /-----BEGIN [A-Z ]*PRIVATE KEY-----/);
  return {
    ...(ca === undefined ? {} : { ca }),
    ...(cert === undefined ? {} : { cert }),
    ...(key === undefined ? {} : { key }),
    ...(flags.tlsServername === undefined ? {} : { servername: flags.tlsServername }),
  };
}

/** A node's address as etcd records it (`host:port`) as a base URL: `https://` when the node TLS flags are given. */
export function nodeUrl(address: string, tls: boolean): string {
  return /^https?:\/\//.test(address) ? address : `${tls ? 'https' : 'http'}://${address}`;
}

/**
 * Parses `--server`: a base URL `http://host:port` (or `https://`), or `host:port` (→ `http://`, or `https://` with
 * the node TLS flags).
 */
export function serverUrl(text: string, tls = false): string {
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(text) ? text : `${tls ? 'https' : 'http'}://${text}`;
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
