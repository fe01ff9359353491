import { X509Certificate } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cleanupAll, makeTestPki, tempDirSync } from '@idgen/testing';
import { TlsMaterialError, createTlsServing } from './tls.js';

afterAll(() => cleanupAll());

const seconds = (certFile: string): number =>
  Math.floor(Date.parse(new X509Certificate(readFileSync(certFile)).validTo) / 1000);

/** A self-signed certificate and its key valid for `days` (a CA for a bundle, or a serving pair). */
function selfSigned(dir: string, name: string, days: number): { certFile: string; keyFile: string } {
  const certFile = join(dir, `${name}.crt`);
  const keyFile = join(dir, `${name}.key`);
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      keyFile,
      '-out',
      certFile,
      '-days',
      String(days),
    ].concat(['-subj', `/CN=${name}`]),
    { stdio: 'ignore' },
  );
  return { certFile, keyFile };
}

describe('createTlsServing: the certificates the port serves with, for the expiry gauge', () => {
  const pki = makeTestPki({ name: 'serving-tls-expiry', clients: ['caller'] });
  const dir = tempDirSync('serving-tls-expiry').path;
  const long = selfSigned(dir, 'long-lived', 30);
  const certFile = join(dir, 'tls.crt');
  const keyFile = join(dir, 'tls.key');
  const caFile = join(dir, 'ca-bundle.crt');
  copyFileSync(pki.server.certFile, certFile);
  copyFileSync(pki.server.keyFile, keyFile);
  // A bundle: the 30-day CA first, the test PKI's 2-day CA second; clients start failing at the earlier end.
  writeFileSync(caFile, readFileSync(long.certFile, 'utf8') + readFileSync(pki.caFile, 'utf8'));

  it("reads the serving certificate's notAfter and the bundle's earliest, then follows a reload, and keeps them when a reload fails", () => {
    const tls = createTlsServing({ certFile, keyFile, clientCaFile: caFile });
    expect(tls.certificates()).toEqual([
      { certificate: 'serving', notAfterSeconds: seconds(pki.server.certFile) },
      { certificate: 'client-ca', notAfterSeconds: seconds(pki.caFile) },
    ]);
    expect(seconds(long.certFile)).toBeGreaterThan(seconds(pki.caFile));

    // A renewed serving pair (30 days), reloaded.
    copyFileSync(long.certFile, certFile);
    copyFileSync(long.keyFile, keyFile);
    expect(tls.reload()).toBeUndefined();
    expect(tls.certificates()[0]).toEqual({ certificate: 'serving', notAfterSeconds: seconds(long.certFile) });

    // A certificate the port would refuse: the reload fails, the port serves on, and so do the readings.
    writeFileSync(certFile, 'not a certificate');
    expect(tls.reload()).toBeInstanceOf(TlsMaterialError);
    expect(tls.certificates()[0]).toEqual({ certificate: 'serving', notAfterSeconds: seconds(long.certFile) });
  });

  it('without mTLS reads the serving certificate only; refuses a client CA file that holds no certificate', () => {
    const plain = join(dir, 'plain');
    copyFileSync(pki.server.certFile, `${plain}.crt`);
    copyFileSync(pki.server.keyFile, `${plain}.key`);
    expect(createTlsServing({ certFile: `${plain}.crt`, keyFile: `${plain}.key` }).certificates()).toEqual([
      { certificate: 'serving', notAfterSeconds: seconds(pki.server.certFile) },
    ]);
    const empty = join(dir, 'empty-ca.crt');
    writeFileSync(empty, 'no certificate here\n');
    expect(() => createTlsServing({ certFile: `${plain}.crt`, keyFile: `${plain}.key`, clientCaFile: empty })).toThrow(
      new TlsMaterialError(`${JSON.stringify(empty)} is not a PEM certificate`),
    );
  });
});
