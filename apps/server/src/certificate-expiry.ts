/**
 * When the serving port's certificates expire, so an operator renews them in time: for the
 * `idgen.tls.certificate.not_after` gauge and the `IdgenCertificateExpiresSoon` alert. Read from the files the serving
 * port loads, and read again when they change, as the port reloads them (on change and SIGHUP): a new file set the port
 * would refuse (a key that does not fit, a certificate not valid now) keeps the previous values, as the port keeps its
 * previous certificates.
 */
import { X509Certificate } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { loadTlsMaterial, type TlsFiles } from '@idgen/serving';

/** Which certificate a reading is of: the serving certificate, or the CA client certificates must chain to (mTLS). */
export type CertificateRole = 'serving' | 'client-ca';

/** One certificate's expiry. */
export interface CertificateExpiry {
  readonly certificate: CertificateRole;
  /** `notAfter`, in seconds since the Unix epoch. */
  readonly notAfterSeconds: number;
}

/** Reads the certificates' expiry; `read()` is called at each collection (a scrape, an OTLP export). */
export interface CertificateExpiryReader {
  read(): readonly CertificateExpiry[];
}

/**
 * A reader over the serving port's TLS files. A file's identity (inode, size, mtime) is looked at on each `read()`;
 * the files are parsed again only when one changed, so a scrape costs three `stat` calls.
 */
export function createCertificateExpiryReader(files: TlsFiles): CertificateExpiryReader {
  const watched = [files.certFile, files.keyFile, ...(files.clientCaFile === undefined ? [] : [files.clientCaFile])];
  let stamp = '';
  let current: readonly CertificateExpiry[] = [];
  const stampOf = (): string =>
    watched
      .map((f) => {
        try {
          const s = statSync(f);
          return `${s.ino}:${s.size}:${s.mtimeMs}`;
        } catch {
          return 'missing';
        }
      })
      .join('|');
  return {
    read() {
      const now = stampOf();
      if (now === stamp) return current;
      try {
        current = expiries(files);
        stamp = now;
      } catch {
        // Files the port would refuse too (it serves on with the previous ones): keep the previous values, and
        // look again at the next collection (a certificate and its key written one after the other).
      }
      return current;
    },
  };
}

/** The serving certificate's and the client CA's `notAfter`; throws on files the serving port would refuse. */
function expiries(files: TlsFiles): CertificateExpiry[] {
  const material = loadTlsMaterial(files);
  const out: CertificateExpiry[] = [
    { certificate: 'serving', notAfterSeconds: Math.floor(material.notAfter.getTime() / 1000) },
  ];
  if (files.clientCaFile !== undefined) {
    // A CA file may be a bundle: the first of its certificates to expire is when some clients start failing.
    const bundle = readFileSync(files.clientCaFile, 'utf8');
    const ends = [...bundle.matchAll(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g)].map((m) =>
      Date.parse(new X509Certificate(m[0]).validTo),
    );
    if (ends.length > 0) out.push({ certificate: 'client-ca', notAfterSeconds: Math.floor(Math.min(...ends) / 1000) });
  }
  return out;
}
