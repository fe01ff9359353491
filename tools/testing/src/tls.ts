import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { findOnPath } from './find-on-path.js';
import { tempDirSync } from './net.js';

/** A certificate and its key, as files and as PEM text. */
export interface TestCertificate {
  readonly certFile: string;
  readonly keyFile: string;
  readonly cert: string;
  readonly key: string;
}

/** A throwaway certificate authority with a server certificate for loopback and client certificates. */
export interface TestPki {
  readonly dir: string;
  readonly caFile: string;
  readonly ca: string;
  /** For `127.0.0.1`, `localhost` and `idgen-server.region-2.svc.test` (the DNS-discovery specs' name). */
  readonly server: TestCertificate;
  /** Client certificates by common name. */
  readonly clients: Readonly<Record<string, TestCertificate>>;
}

export const OPENSSL_MISSING_MESSAGE =
  'openssl not found on PATH: install it (apt-get install openssl); TLS tests make their certificates with it';

function openssl(args: readonly string[], cwd: string): void {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

function leaf(
  dir: string,
  name: string,
  subject: string,
  ext: string,
  ca: { certFile: string; keyFile: string },
  days: number,
): TestCertificate {
  const keyFile = join(dir, `${name}.key`);
  const csr = join(dir, `${name}.csr`);
  const certFile = join(dir, `${name}.crt`);
  const extFile = join(dir, `${name}.ext`);
  writeFileSync(extFile, ext);
  openssl(['req', '-new', '-newkey', 'rsa:2048', '-nodes', '-keyout', keyFile, '-out', csr, '-subj', subject], dir);
  openssl(
    [
      'x509',
      '-req',
      '-in',
      csr,
      '-CA',
      ca.certFile,
      '-CAkey',
      ca.keyFile,
      '-CAcreateserial',
      '-out',
      certFile,
      '-days',
      String(days),
      '-sha256',
      '-extfile',
      extFile,
    ],
    dir,
  );
  return { certFile, keyFile, cert: readFileSync(certFile, 'utf8'), key: readFileSync(keyFile, 'utf8') };
}

/**
 * Makes a CA, a server certificate for loopback and one client certificate per name, with `openssl`, in a
 * temporary directory removed after the test file (or in `dir`, created if missing, which the caller removes). A missing `openssl` fails loudly. `days` < 0 is not
 * accepted by openssl; an expired certificate comes from `expiredClient` (valid from 2 days ago for 1 day).
 */
export function makeTestPki(options: { clients?: readonly string[]; name?: string; dir?: string } = {}): TestPki {
  if (findOnPath('openssl') === undefined) throw new Error(OPENSSL_MISSING_MESSAGE);
  let dir: string;
  if (options.dir === undefined) dir = tempDirSync(options.name ?? 'pki').path;
  else {
    dir = options.dir;
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  }
  const caKeyFile = join(dir, 'ca.key');
  const caFile = join(dir, 'ca.crt');
  openssl(
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      caKeyFile,
      '-out',
      caFile,
      '-days',
      '2',
      '-subj',
      `/CN=idgen test CA ${options.name ?? ''}`.trim(),
    ],
    dir,
  );
  const ca = { certFile: caFile, keyFile: caKeyFile };
  const server = leaf(
    dir,
    'server',
    '/CN=127.0.0.1',
    'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost,DNS:idgen-server.region-2.svc.test\n',
    ca,
    2,
  );
  const clients: Record<string, TestCertificate> = {};
  for (const cn of options.clients ?? []) {
    clients[cn] = leaf(
      dir,
      `client-${cn}`,
      `/CN=${cn}`,
      `basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\nsubjectAltName=DNS:${cn}\n`,
      ca,
      2,
    );
  }
  return { dir, caFile, ca: readFileSync(caFile, 'utf8'), server, clients };
}

/** One etcd user for {@link enableEtcdAuth}: a role of its own with `permission` on `prefix` (a key prefix). */
export interface EtcdTestUser {
  readonly name: string;
  readonly password: string;
  readonly prefix: string;
  readonly permission: 'read' | 'write' | 'readwrite';
}

/** Runs `etcdctl` against `clientUrl` (with the PKI's CA and first client certificate for https). */
export function etcdctl(
  clientUrl: string,
  args: readonly string[],
  options: { pki?: TestPki; user?: string } = {},
): string {
  if (findOnPath('etcdctl') === undefined)
    throw new Error('etcdctl not found on PATH: install it (apt-get install etcd-client)');
  const tls: string[] = [];
  if (options.pki !== undefined) {
    const client = Object.values(options.pki.clients)[0] ?? options.pki.server;
    tls.push('--cacert', options.pki.caFile, '--cert', client.certFile, '--key', client.keyFile);
  }
  const user = options.user === undefined ? [] : ['--user', options.user];
  return execFileSync('etcdctl', ['--endpoints', clientUrl, ...tls, ...user, ...args], {
    encoding: 'utf8',
    env: { ...process.env, ETCDCTL_API: '3' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/**
 * Turns etcd's authentication on: a `root` user (password `rootPassword`) and one user per entry, each with a
 * role that may only `permission` keys under its prefix. After this every call needs a user and password.
 */
export function enableEtcdAuth(
  clientUrl: string,
  rootPassword: string,
  users: readonly EtcdTestUser[],
  pki?: TestPki,
): void {
  const run = (args: readonly string[]): string => etcdctl(clientUrl, args, pki === undefined ? {} : { pki });
  run(['user', 'add', `root:${rootPassword}`, '--interactive=false']);
  run(['user', 'grant-role', 'root', 'root']);
  for (const u of users) {
    const role = `role-${u.name}`;
    run(['role', 'add', role]);
    run(['role', 'grant-permission', role, '--prefix=true', u.permission, u.prefix]);
    run(['user', 'add', `${u.name}:${u.password}`, '--interactive=false']);
    run(['user', 'grant-role', u.name, role]);
  }
  run(['auth', 'enable']);
}
