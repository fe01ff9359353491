import { readFileSync } from 'node:fs';
import type { FlagDoc, NamedValue } from '@idgen/core';
import { DEFAULT_PREFIX, checkConnection, type EtcdConnectionOptions } from './config.js';
import { LeaseConfigError } from './errors.js';

/**
 * The etcd flags `idgen-server` and the `idgen` CLI share (docs/design.md §6: the same names in both), beside
 * `--etcd <urls>`, whose description each tool words for itself. Commander's flag syntax, the field of
 * {@link EtcdFlagValues} its value goes in, and the help text.
 */
export const ETCD_FLAGS = [
  { flags: '--etcd-prefix <prefix>', key: 'prefix', description: 'key prefix in etcd', defaultValue: DEFAULT_PREFIX },
  {
    flags: '--etcd-ca <file>',
    key: 'ca',
    description: "PEM file of the CA that signed the etcd servers' certificates (https://)",
  },
  { flags: '--etcd-cert <file>', key: 'cert', description: 'PEM client certificate for etcd (with --etcd-key)' },
  { flags: '--etcd-key <file>', key: 'key', description: 'PEM private key of --etcd-cert' },
  {
    flags: '--etcd-user <name>',
    key: 'user',
    description: 'etcd user (with --etcd-password-file); its role reads and writes the prefix',
  },
  {
    flags: '--etcd-password-file <file>',
    key: 'passwordFile',
    description: "file holding the etcd user's password (one line, never a flag)",
  },
] as const satisfies readonly FlagDoc<keyof EtcdFlagValues>[];

/**
 * The same flags for another etcd than the region's, named after it: `etcdFlagsFor('registry', 'the spare-code
 * registry')` gives `--registry-prefix`, `--registry-ca`, … `--registry-password-file` (docs/design.md §7), for
 * {@link etcdConnectionFromFlags} with `name: '--registry'`.
 */
export function etcdFlagsFor(name: string, what: string): FlagDoc<keyof EtcdFlagValues>[] {
  return ETCD_FLAGS.map((f) => ({
    ...f,
    flags: f.flags.replace('--etcd-', `--${name}-`),
    description: f.description
      .replace('--etcd-', `--${name}-`)
      .replace(/the etcd servers'/, `${what}'s servers'`)
      .replace(/\b(in|for) etcd\b/, `$1 ${what}`)
      .replace(/^etcd user/, `${what}'s etcd user`)
      .replace(/the etcd user's/, `${what}'s etcd user's`),
  }));
}

// FlagDoc and NamedValue are the core's (one home for the contract flags and tools share); re-exported by index.ts.
export type { FlagDoc, NamedValue };

/** The etcd flags' values as given (absent: not given). */
export interface EtcdFlagValues {
  readonly etcd: NamedValue;
  readonly prefix?: NamedValue | undefined;
  readonly ca?: NamedValue | undefined;
  readonly cert?: NamedValue | undefined;
  readonly key?: NamedValue | undefined;
  readonly user?: NamedValue | undefined;
  readonly passwordFile?: NamedValue | undefined;
}

/** Reads a PEM or secret file a flag names; unreadable or empty is a problem that names the flag. */
function readFlagFile(flag: NamedValue | undefined, what: string, problems: string[]): string | undefined {
  if (flag === undefined) return undefined;
  let text: string;
  try {
    text = readFileSync(flag.value, 'utf8');
  } catch (e) {
    problems.push(
      `${flag.name}: cannot read ${what} ${JSON.stringify(flag.value)} (${(e as NodeJS.ErrnoException).code ?? String(e)})`,
    );
    return undefined;
  }
  if (text.trim() === '') {
    problems.push(`${flag.name}: ${JSON.stringify(flag.value)} is empty`);
    return undefined;
  }
  return text;
}

/**
 * The etcd connection the flags describe: URLs split, files read and checked (PEM certificates and key, the
 * password without its line end), pairs complete, then {@link resolveConnection}'s rules. Throws one
 * {@link LeaseConfigError} whose problems name the flags, before any connection is made.
 */
export function etcdConnectionFromFlags(flags: EtcdFlagValues): EtcdConnectionOptions {
  const problems: string[] = [];
  const endpoints = flags.etcd.value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if (endpoints.length === 0)
    problems.push(
      `${flags.etcd.name} must list at least one etcd URL (http://host:port), got ${JSON.stringify(flags.etcd.value)}`,
    );
  // The flags are named after the connection (`--etcd`, or `--registry` for the spare-code registry).
  const base = flags.etcd.name.startsWith('--') ? flags.etcd.name : '--etcd';
  if ((flags.cert === undefined) !== (flags.key === undefined))
    problems.push(`${base}-cert and ${base}-key go together: give both or neither`);
  if ((flags.user === undefined) !== (flags.passwordFile === undefined))
    problems.push(`${base}-user and ${base}-password-file go together: give both or neither`);
  const ca = readFlagFile(flags.ca, 'the etcd CA file', problems);
  const cert = readFlagFile(flags.cert, 'the etcd client certificate', problems);
  const key = readFlagFile(flags.key, 'the etcd client key', problems);
  for (const [pem, flag] of [
    [ca, flags.ca],
    [cert, flags.cert],
  ] as const) {
    if (pem !== undefined && !pem.includes('-----BEGIN CERTIFICATE-----'))
      problems.push(`${flag?.name}: ${JSON.stringify(flag?.value)} is not a PEM certificate`);
  }
  if (key !== undefined && !/-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(key))
    problems.push(`${flags.key?.name}: not a PEM private key`);
  const password = readFlagFile(flags.passwordFile, 'the etcd password file', problems)?.replace(/\r?\n$/, '');
  if (problems.length > 0) throw new LeaseConfigError(problems);

  const tls = {
    ...(ca === undefined ? {} : { ca }),
    ...(cert === undefined ? {} : { cert }),
    ...(key === undefined ? {} : { key }),
  };
  const options: EtcdConnectionOptions = {
    endpoints,
    prefix: flags.prefix?.value ?? DEFAULT_PREFIX,
    ...(Object.keys(tls).length > 0 ? { tls } : {}),
    ...(flags.user !== undefined && password !== undefined ? { auth: { username: flags.user.value, password } } : {}),
  };
  // resolveConnection's rules, each problem named by the flag that set the option it is about.
  const named = { endpoints: flags.etcd, prefix: flags.prefix, auth: flags.user, tls: flags.etcd };
  const connection = checkConnection(options).problems;
  if (connection.length > 0)
    throw new LeaseConfigError(connection.map((p) => `${named[p.option]?.name ?? flags.etcd.name}: ${p.message}`));
  return options;
}
