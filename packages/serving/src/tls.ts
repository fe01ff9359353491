import { X509Certificate } from 'node:crypto';
import { readFileSync, unwatchFile, watchFile } from 'node:fs';
import { createSecureContext, type SecureContextOptions, type TLSSocket } from 'node:tls';
import type { FlagDoc, NamedValue } from '@idgen/lease';

/** Where the serving port's TLS material lives (`--tls-cert`, `--tls-key`, `--tls-client-ca`, `--tls-client-names`). */
export interface TlsFiles {
  readonly certFile: string;
  readonly keyFile: string;
  /** mTLS: clients must present a certificate signed by this CA. */
  readonly clientCaFile?: string;
  /** mTLS: and one of these names as its subject CN or a DNS SAN; `undefined`: any certificate the CA signed. */
  readonly clientNames?: readonly string[];
}

/** TLS material read and checked: what a TLS server's secure context is built from. */
export interface TlsMaterial {
  readonly options: SecureContextOptions;
  /** When the serving certificate expires. */
  readonly notAfter: Date;
  /** mTLS: when the first certificate of the client CA file (a bundle may hold several) expires. */
  readonly clientCaNotAfter: Date | undefined;
  readonly subject: string;
}

/** Which certificate a {@link CertificateExpiry} is of: the serving certificate, or the client CA (mTLS). */
export type CertificateRole = 'serving' | 'client-ca';

/** One certificate's expiry, as the serving port loaded it (for a `notAfter` gauge and its alert). */
export interface CertificateExpiry {
  readonly certificate: CertificateRole;
  /** `notAfter`, in seconds since the Unix epoch. */
  readonly notAfterSeconds: number;
}

/**
 * The earliest `notAfter` of the certificates in a PEM bundle: when some clients start failing. Throws a
 * {@link TlsMaterialError} naming `file` when it holds no certificate or one that does not parse.
 */
function earliestNotAfter(pem: string, file: string): Date {
  const blocks = [...pem.matchAll(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g)];
  let earliest: number | undefined;
  for (const block of blocks) {
    let end: number;
    try {
      end = Date.parse(new X509Certificate(block[0]).validTo);
    } catch {
      throw new TlsMaterialError(`${JSON.stringify(file)} is not a PEM certificate`);
    }
    earliest = earliest === undefined ? end : Math.min(earliest, end);
  }
  if (earliest === undefined) throw new TlsMaterialError(`${JSON.stringify(file)} is not a PEM certificate`);
  return new Date(earliest);
}

/** Why TLS material cannot be used: one line, for exit 2 at start or a log line on reload. */
export class TlsMaterialError extends Error {
  override readonly name = 'TlsMaterialError';
}

function read(file: string, what: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (e) {
    throw new TlsMaterialError(
      `cannot read ${what} ${JSON.stringify(file)} (${(e as NodeJS.ErrnoException).code ?? String(e)})`,
    );
  }
}

/** The TLS flags' values as given (absent: not given), each with the name to report it by. */
export interface TlsFlagValues {
  readonly cert?: NamedValue | undefined;
  readonly key?: NamedValue | undefined;
  readonly clientCa?: NamedValue | undefined;
  /** Comma-separated certificate names (CN or DNS SAN). */
  readonly clientNames?: NamedValue | undefined;
}

/** The TLS flags, for a tool to declare (`idgen-server`'s): their values go in {@link TlsFlagValues}. */
export const TLS_FLAGS = [
  {
    flags: '--tls-cert <file>',
    key: 'cert',
    description: 'PEM certificate for TLS on the serving port (with --tls-key); absent: plaintext h2c and HTTP/1.1',
  },
  { flags: '--tls-key <file>', key: 'key', description: 'PEM private key of --tls-cert' },
  {
    flags: '--tls-client-ca <file>',
    key: 'clientCa',
    description: 'mTLS: clients must present a certificate this CA signed',
  },
  {
    flags: '--tls-client-names <names>',
    key: 'clientNames',
    description:
      'mTLS: comma-separated names (certificate CN or DNS SAN) allowed to call; absent: any certificate the CA signed',
  },
] as const satisfies readonly FlagDoc<keyof TlsFlagValues>[];

/**
 * The serving port's TLS files from `--tls-cert`, `--tls-key`, `--tls-client-ca` and `--tls-client-names`
 * (`undefined`: none given, plaintext), checked now with {@link loadTlsMaterial} so a bad or expired certificate
 * stops a start, not a handshake later. Throws a {@link TlsMaterialError} that names the flag.
 */
export function tlsFilesFromFlags(flags: TlsFlagValues): TlsFiles | undefined {
  const { cert, key, clientCa, clientNames: names } = flags;
  if (cert === undefined && key === undefined) {
    const stray = clientCa ?? names;
    if (stray !== undefined) throw new TlsMaterialError(`${stray.name} applies only with --tls-cert and --tls-key`);
    return undefined;
  }
  if (cert === undefined || key === undefined)
    throw new TlsMaterialError('--tls-cert and --tls-key go together: give both or neither');
  if (names !== undefined && clientCa === undefined)
    throw new TlsMaterialError(
      `${names.name} needs --tls-client-ca (names are checked on verified client certificates)`,
    );
  const clientNames = names?.value
    .split(',')
    .map((n) => n.trim())
    .filter((n) => n !== '');
  if (names !== undefined && clientNames?.length === 0)
    throw new TlsMaterialError(`${names.name} must list at least one name`);
  const files: TlsFiles = {
    certFile: cert.value,
    keyFile: key.value,
    ...(clientCa === undefined ? {} : { clientCaFile: clientCa.value }),
    ...(clientNames === undefined ? {} : { clientNames }),
  };
  try {
    loadTlsMaterial(files);
  } catch (e) {
    if (e instanceof TlsMaterialError) throw new TlsMaterialError(`${cert.name}: ${e.message}`);
    throw e;
  }
  return files;
}

/**
 * Reads and checks the serving certificate, its key and the client CA: readable, PEM, the key matching the
 * certificate, the certificate valid now (an expired or not-yet-valid one is refused: clients would all fail).
 */
export function loadTlsMaterial(files: TlsFiles, now: Date = new Date()): TlsMaterial {
  const cert = read(files.certFile, 'the TLS certificate');
  const key = read(files.keyFile, 'the TLS key');
  const ca = files.clientCaFile === undefined ? undefined : read(files.clientCaFile, 'the TLS client CA');
  let x509: X509Certificate;
  try {
    x509 = new X509Certificate(cert);
  } catch {
    throw new TlsMaterialError(`${JSON.stringify(files.certFile)} is not a PEM certificate`);
  }
  const notBefore = new Date(x509.validFrom);
  const notAfter = new Date(x509.validTo);
  if (now < notBefore || now > notAfter) {
    throw new TlsMaterialError(
      `the TLS certificate ${JSON.stringify(files.certFile)} is not valid now (valid ${x509.validFrom} to ${x509.validTo})`,
    );
  }
  const clientCaNotAfter = ca === undefined ? undefined : earliestNotAfter(ca, files.clientCaFile ?? '');
  const options: SecureContextOptions = { cert, key, ...(ca === undefined ? {} : { ca }), minVersion: 'TLSv1.2' };
  try {
    createSecureContext(options);
  } catch (e) {
    throw new TlsMaterialError(
      `the TLS key ${JSON.stringify(files.keyFile)} does not fit the certificate or is not a PEM key (${(e as Error).message})`,
    );
  }
  return { options, notAfter, clientCaNotAfter, subject: x509.subject.replace(/\n/g, ', ') };
}

/** The names a peer certificate carries: its subject CN and its DNS SANs. */
export function peerNames(socket: TLSSocket): string[] {
  const cert = socket.getPeerCertificate();
  const names: string[] = [];
  const cn = cert.subject?.CN;
  if (typeof cn === 'string') names.push(cn);
  else if (Array.isArray(cn)) names.push(...(cn as string[]));
  for (const part of (cert.subjectaltname ?? '').split(',')) {
    const m = /^\s*DNS:(.+)$/.exec(part);
    if (m?.[1] !== undefined) names.push(m[1].trim());
  }
  return names;
}

/** What the serving port needs of TLS: the current material, and whether a verified peer may call. */
export interface TlsServing {
  readonly requestCert: boolean;
  /** Certificate, key and client CA as a TLS server takes them (`tls.createServer`, `setSecureContext`). */
  contextOptions(): SecureContextOptions;
  /** Calls `fn` after each successful reload (the server swaps its context). */
  onReload(fn: () => void): void;
  /** A verified client certificate whose names include an allowed one (always true without mTLS). */
  allowed(socket: TLSSocket): boolean;
  /** Reads the files again; on a problem the current context stays and the error is returned. */
  reload(): TlsMaterialError | undefined;
  notAfter(): Date;
  /** The serving certificate's and the client CA's expiry, from the material in use (what the last good reload read). */
  certificates(): readonly CertificateExpiry[];
}

/** A material's expiries: the serving certificate's, and the client CA's with mTLS. */
function expiriesOf(material: TlsMaterial): readonly CertificateExpiry[] {
  const seconds = (d: Date): number => Math.floor(d.getTime() / 1000);
  const serving: CertificateExpiry = { certificate: 'serving', notAfterSeconds: seconds(material.notAfter) };
  const ca = material.clientCaNotAfter;
  return ca === undefined ? [serving] : [serving, { certificate: 'client-ca', notAfterSeconds: seconds(ca) }];
}

/** Holds the serving port's TLS context; `reload()` swaps it for new connections, in-flight ones untouched. */
export function createTlsServing(files: TlsFiles): TlsServing {
  let material = loadTlsMaterial(files);
  let expiries = expiriesOf(material);
  const requestCert = files.clientCaFile !== undefined;
  const allowedNames = files.clientNames === undefined ? undefined : new Set(files.clientNames);
  const reloaded = new Set<() => void>();
  return {
    requestCert,
    contextOptions: () => material.options,
    onReload: (fn) => void reloaded.add(fn),
    allowed(socket) {
      if (!requestCert) return true;
      if (!socket.authorized) return false;
      return allowedNames === undefined || peerNames(socket).some((n) => allowedNames.has(n));
    },
    reload() {
      try {
        material = loadTlsMaterial(files);
        expiries = expiriesOf(material);
        for (const fn of reloaded) fn();
        return undefined;
      } catch (e) {
        return e instanceof TlsMaterialError ? e : new TlsMaterialError(String(e));
      }
    },
    notAfter: () => material.notAfter,
    certificates: () => expiries,
  };
}

/** Where reload outcomes go (pino's `logger.info(fields, msg)` fits). */
export interface TlsReloadLogger {
  info(fields: Record<string, unknown>, msg: string): void;
  error(fields: Record<string, unknown>, msg: string): void;
}

/**
 * Reloads the serving port's TLS material on SIGHUP and when one of its files changes (a renewed certificate
 * written in place or swapped by a Kubernetes Secret update), without a restart: new connections get the new
 * context, connections open now keep theirs. A bad new file keeps the current material and logs why.
 * Returns a function that stops watching.
 */
export function reloadTlsOnChange(tls: TlsServing, files: TlsFiles, logger: TlsReloadLogger): () => void {
  const reload = (why: string): void => {
    const error = tls.reload();
    if (error === undefined) logger.info({ why, notAfter: tls.notAfter().toISOString() }, 'tls: certificates reloaded');
    else logger.error({ why, err: error.message }, 'tls: reload failed; serving with the previous certificates');
  };
  const onHup = (): void => reload('SIGHUP');
  process.on('SIGHUP', onHup);
  const watched = [files.certFile, files.keyFile, ...(files.clientCaFile === undefined ? [] : [files.clientCaFile])];
  let pending: NodeJS.Timeout | undefined;
  const onChange = (): void => {
    // A certificate and its key are often written one after the other: reload once they both settled.
    clearTimeout(pending);
    pending = setTimeout(() => reload('file changed'), 200);
    pending.unref();
  };
  for (const f of watched) watchFile(f, { interval: 1000, persistent: false }, onChange);
  return () => {
    process.off('SIGHUP', onHup);
    clearTimeout(pending);
    for (const f of watched) unwatchFile(f, onChange);
  };
}
