// The certificate-expiry gauge: on a TLS node, `idgen_tls_certificate_not_after` is the serving
// certificate's and the client CA's notAfter (as openssl reads them), and follows a renewed certificate the node
// reloads. A real server process, certificates made with openssl.
import { execFileSync } from 'node:child_process';
import { copyFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cleanupAll, makeTestPki, tempDirSync, type TestPki } from '@idgen/testing';
import { startServer, waitFor, type ServerNode } from './support.test-helper.js';

jest.setTimeout(90_000);
afterAll(() => cleanupAll());

/** `notAfter` of a PEM certificate file as openssl prints it, in seconds since the epoch. */
function opensslNotAfter(certFile: string): number {
  const line = execFileSync('openssl', ['x509', '-noout', '-enddate', '-in', certFile], { encoding: 'utf8' }).trim();
  const ms = Date.parse(line.replace(/^notAfter=/, ''));
  if (!Number.isFinite(ms)) throw new Error(`openssl printed no date: ${line}`);
  return ms / 1000;
}

/** The gauge's samples on a scrape: `serving` / `client-ca` → value. */
async function notAfterSamples(node: ServerNode): Promise<Record<string, number>> {
  const text = await (await fetch(node.metricsUrl ?? '', { signal: AbortSignal.timeout(5_000) })).text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^idgen_tls_certificate_not_after\{([^}]*)\} (\S+)$/gm)) {
    const which = /idgen_certificate="([^"]+)"/.exec(m[1] ?? '')?.[1] ?? '?';
    out[which] = Number(m[2]);
  }
  return out;
}

/** A server certificate for loopback signed by `pki`'s CA, valid for `days`, written over `certFile`/`keyFile`. */
function renewServerCertificate(pki: TestPki, days: number, certFile: string, keyFile: string): void {
  const dir = tempDirSync('renewed').path;
  const ext = join(dir, 'server.ext');
  writeFileSync(
    ext,
    'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n',
  );
  const [key, csr, crt] = ['server.key', 'server.csr', 'server.crt'].map((f) => join(dir, f)) as [
    string,
    string,
    string,
  ];
  const run = (args: string[]): void => void execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  run(['req', '-new', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', csr, '-subj', '/CN=127.0.0.1']);
  run([
    'x509',
    '-req',
    '-in',
    csr,
    '-CA',
    pki.caFile,
    '-CAkey',
    join(pki.dir, 'ca.key'),
    '-CAcreateserial',
    '-out',
    crt,
    '-days',
    String(days),
    '-sha256',
    '-extfile',
    ext,
  ]);
  copyFileSync(key, keyFile);
  copyFileSync(crt, certFile);
}

describe('idgen_tls_certificate_not_after on a TLS node', () => {
  let pki: TestPki;
  let node: ServerNode;
  let certFile: string;
  let keyFile: string;

  beforeAll(async () => {
    pki = makeTestPki({ clients: ['idgen-caller'], name: 'expiry-pki' });
    // The node serves copies, so the test can renew them in place as a certificate manager would.
    const dir = tempDirSync('expiry-tls').path;
    certFile = join(dir, 'tls.crt');
    keyFile = join(dir, 'tls.key');
    copyFileSync(pki.server.certFile, certFile);
    copyFileSync(pki.server.keyFile, keyFile);
    node = await startServer([
      '--time-source',
      'none',
      '--tls-cert',
      certFile,
      '--tls-key',
      keyFile,
      '--tls-client-ca',
      pki.caFile,
    ]);
    await node.ready();
  });
  afterAll(() => node?.stop());

  it("equals the serving certificate's and the client CA's notAfter, in seconds since the epoch", async () => {
    const text = await (await fetch(node.metricsUrl ?? '', { signal: AbortSignal.timeout(5_000) })).text();
    // The type docs/metrics.md's series table gives it (metrics.spec.ts checks the plaintext node's series).
    expect(text).toMatch(/^# TYPE idgen_tls_certificate_not_after gauge$/m);
    const samples = await notAfterSamples(node);
    expect(samples).toEqual({ serving: opensslNotAfter(certFile), 'client-ca': opensslNotAfter(pki.caFile) });
    // The test PKI's certificates are valid for 2 days: the alert (< 14 days) would fire on this node.
    expect(samples['serving']).toBeGreaterThan(Date.now() / 1000);
    expect(samples['serving']).toBeLessThan(Date.now() / 1000 + 3 * 86_400);
  });

  it('follows a renewed certificate the node reloads', async () => {
    renewServerCertificate(pki, 30, certFile, keyFile);
    const renewed = opensslNotAfter(certFile);
    expect(renewed).toBeGreaterThan(Date.now() / 1000 + 29 * 86_400);
    await waitFor('the reload log line', () => node.logs().some((l) => l.msg === 'tls: certificates reloaded'), 15_000);
    await waitFor(
      'the gauge to show the renewed certificate',
      async () => (await notAfterSamples(node))['serving'] === renewed,
      15_000,
    );
    expect((await notAfterSamples(node))['client-ca']).toBe(opensslNotAfter(pki.caFile));
  });
});

describe('a plaintext node', () => {
  it('exports no certificate gauge (no value rather than a made-up one)', async () => {
    const node = await startServer(['--time-source', 'none']);
    try {
      await node.ready();
      const text = await (await fetch(node.metricsUrl ?? '', { signal: AbortSignal.timeout(5_000) })).text();
      expect(text).toContain('target_info{');
      expect(text).not.toContain('idgen_tls_certificate_not_after');
    } finally {
      await node.stop();
    }
  });
});
