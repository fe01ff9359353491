// TLS and mTLS on the serving port: HTTP/2 and HTTP/1.1 by ALPN on one port, served by the same
// implementation as h2c; Connect, gRPC and gRPC-Web to an allowed client; every other client refused;
// certificates reloaded without a restart; a bad certificate at start is exit 2. Real processes, openssl.
import { execFileSync } from 'node:child_process';
import { copyFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { createClient } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from '@connectrpc/connect-node';
import { IdGenerator } from '@idgen/proto';
import { cleanupAll, findOnPath, makeTestPki, tempDirSync } from '@idgen/testing';
import type { TestCertificate, TestPki } from '@idgen/testing';
import { decode, idsOf, spawnServer, startServer, waitFor, type ServerNode } from './support.test-helper.js';

jest.setTimeout(120_000);
afterAll(() => cleanupAll());

type Protocol = 'grpc' | 'connect-h2' | 'connect-http1' | 'grpc-web-http1';
const PROTOCOLS: readonly Protocol[] = ['grpc', 'connect-h2', 'connect-http1', 'grpc-web-http1'];

function client(port: number, protocol: Protocol, pki: TestPki, cert: TestCertificate | undefined) {
  const nodeOptions = {
    ca: pki.ca,
    ...(cert === undefined ? {} : { cert: cert.cert, key: cert.key }),
    servername: 'localhost',
  };
  const baseUrl = `https://127.0.0.1:${port}`;
  const transport =
    protocol === 'grpc'
      ? createGrpcTransport({ baseUrl, nodeOptions })
      : protocol === 'connect-h2'
        ? createConnectTransport({ baseUrl, httpVersion: '2', nodeOptions })
        : protocol === 'connect-http1'
          ? createConnectTransport({ baseUrl, httpVersion: '1.1', nodeOptions })
          : createGrpcWebTransport({ baseUrl, httpVersion: '1.1', nodeOptions });
  return createClient(IdGenerator, transport);
}

/** The subject CN of the certificate a new TLS connection to `port` is shown. */
function servedSubject(port: number, pki: TestPki, cert: TestCertificate): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = tlsConnect(
      {
        host: '127.0.0.1',
        port,
        ca: pki.ca,
        cert: cert.cert,
        key: cert.key,
        servername: 'localhost',
        ALPNProtocols: ['h2'],
      },
      () => {
        resolve(String(s.getPeerCertificate().subject?.CN));
        s.destroy();
      },
    );
    s.on('error', reject);
  });
}

describe('mTLS on the serving port', () => {
  let pki: TestPki;
  let foreign: TestPki;
  let node: ServerNode;
  let port: number;

  beforeAll(async () => {
    pki = makeTestPki({ clients: ['idgen-caller', 'stranger'], name: 'serving-pki' });
    foreign = makeTestPki({ clients: ['idgen-caller'], name: 'foreign-pki' });
    node = await startServer([
      '--time-source',
      'none',
      '--region',
      '3',
      '--tls-cert',
      pki.server.certFile,
      '--tls-key',
      pki.server.keyFile,
      '--tls-client-ca',
      pki.caFile,
      '--tls-client-names',
      'idgen-caller',
    ]);
    await node.ready();
    port = node.port;
  });
  afterAll(() => node.stop());

  it.each(PROTOCOLS)('serves NextIds over %s to an allowed client', async (protocol) => {
    const res = await client(port, protocol, pki, pki.clients['idgen-caller']).nextIds({ count: 4 });
    const ids = idsOf(res.blocks);
    expect(ids).toHaveLength(4);
    for (const id of ids) expect(decode(id).region).toBe(3);
  });

  it.each(PROTOCOLS)(
    'refuses over %s a certificate of the same CA whose name is not allowed, a foreign one, and none',
    async (protocol) => {
      for (const [who, p, cert] of [
        ['stranger', pki, pki.clients['stranger']],
        ['foreign CA', pki, foreign.clients['idgen-caller']],
        ['no certificate', pki, undefined],
      ] as const) {
        const outcome = await client(port, protocol, p, cert)
          .nextIds({ count: 1 }, { timeoutMs: 5000 })
          .then(
            () => 'served',
            () => 'refused',
          );
        expect(`${who}: ${outcome}`).toBe(`${who}: refused`);
      }
    },
  );

  it('answers kubelet-style probes (no client certificate) on the metrics port as the serving port would', async () => {
    const base = (node.metricsUrl ?? '').replace(/\/metrics$/, '');
    const readyz = await fetch(`${base}/readyz`);
    expect(readyz.status).toBe(200);
    expect(readyz.headers.get('cache-control')).toBe('no-store');
    expect(await readyz.json()).toMatchObject({ ready: true, reason: 'ready', state: 'serving' });
    expect(await (await fetch(`${base}/healthz`)).json()).toEqual({ status: 'alive' });
    const head = await fetch(`${base}/readyz`, { method: 'HEAD' });
    expect([head.status, await head.text()]).toEqual([200, '']);
    expect((await fetch(`${base}/readyz`, { method: 'POST' })).status).toBe(405);
    expect((await fetch(`${base}/nothing-here`)).status).toBe(404);
    expect((await fetch(`${base}/metrics`)).status).toBe(200);
  });

  it('refuses plaintext h2c on the TLS port', async () => {
    const plain = createClient(IdGenerator, createGrpcTransport({ baseUrl: `http://127.0.0.1:${port}` }));
    await expect(plain.nextIds({ count: 1 }, { timeoutMs: 5000 })).rejects.toThrow();
  });
});

describe('certificates reloaded without a restart', () => {
  it('SIGHUP and a changed file swap the certificate for new connections; open ones keep working', async () => {
    const pki = makeTestPki({ clients: ['idgen-caller'], name: 'reload-pki' });
    const dir = tempDirSync('tls-files').path;
    const certFile = join(dir, 'tls.crt');
    const keyFile = join(dir, 'tls.key');
    copyFileSync(pki.server.certFile, certFile);
    copyFileSync(pki.server.keyFile, keyFile);
    const node = await startServer([
      '--time-source',
      'none',
      '--metrics-listen',
      'off',
      '--tls-cert',
      certFile,
      '--tls-key',
      keyFile,
    ]);
    await node.ready();
    const caller = pki.clients['idgen-caller'];
    if (caller === undefined) throw new Error('no client certificate');
    const open = client(node.port, 'grpc', pki, caller);
    expect(idsOf((await open.nextIds({ count: 1 })).blocks)).toHaveLength(1);
    expect(await servedSubject(node.port, pki, caller)).toBe('127.0.0.1');

    // A renewed certificate from the same CA, for the same names, with another subject to tell them apart.
    const renewedKey = join(dir, 'renewed.key');
    const renewedCsr = join(dir, 'renewed.csr');
    const ext = join(dir, 'renewed.ext');
    writeFileSync(ext, 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
    execFileSync(
      'openssl',
      [
        'req',
        '-new',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-keyout',
        renewedKey,
        '-out',
        renewedCsr,
        '-subj',
        '/CN=renewed',
      ],
      { stdio: 'ignore' },
    );
    execFileSync(
      'openssl',
      [
        'x509',
        '-req',
        '-in',
        renewedCsr,
        '-CA',
        pki.caFile,
        '-CAkey',
        join(pki.dir, 'ca.key'),
        '-CAcreateserial',
        '-out',
        join(dir, 'renewed.crt'),
        '-days',
        '2',
        '-extfile',
        ext,
      ],
      { stdio: 'ignore' },
    );
    copyFileSync(join(dir, 'renewed.crt'), certFile);
    copyFileSync(renewedKey, keyFile);
    node.process.signal('SIGHUP');
    await node.process.waitForLine(/tls: certificates reloaded/, 10_000);
    expect(await servedSubject(node.port, pki, caller)).toBe('renewed');
    // The connection opened before the reload still answers.
    expect(idsOf((await open.nextIds({ count: 2 })).blocks)).toHaveLength(2);

    // A garbled file keeps the current certificate (and says so); a good one written later is picked up by the watch.
    writeFileSync(certFile, 'not a certificate\n');
    node.process.signal('SIGHUP');
    await node.process.waitForLine(/tls: reload failed; serving with the previous certificates/, 10_000);
    expect(await servedSubject(node.port, pki, caller)).toBe('renewed');
    copyFileSync(pki.server.certFile, certFile);
    copyFileSync(pki.server.keyFile, keyFile);
    await waitFor(
      'the watch to reload the restored certificate',
      async () => (await servedSubject(node.port, pki, caller)) === '127.0.0.1',
      15_000,
    );
    expect((await node.stop()).code).toBe(0);
  });
});

describe('bad TLS configuration: one line, exit 2, before any I/O', () => {
  it('refuses an expired certificate, a key that does not fit, an unreadable file and half a pair', async () => {
    const pki = makeTestPki({ name: 'bad-pki' });
    const other = makeTestPki({ name: 'other-bad-pki' });
    const dir = tempDirSync('tls-bad').path;
    if (findOnPath('faketime') === undefined)
      throw new Error('faketime not found: apt-get install faketime (it makes an expired certificate)');
    // Valid for one day, three days ago.
    const threeDaysAgo = new Date(Date.now() - 3 * 86_400_000).toISOString().replace('T', ' ').slice(0, 19);
    execFileSync(
      'faketime',
      [
        threeDaysAgo,
        'openssl',
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-keyout',
        join(dir, 'old.key'),
        '-out',
        join(dir, 'old.crt'),
        '-days',
        '1',
        '-subj',
        '/CN=old',
      ],
      { stdio: 'ignore' },
    );
    const cases: [string[], RegExp][] = [
      [['--tls-cert', join(dir, 'old.crt'), '--tls-key', join(dir, 'old.key')], /is not valid now/],
      [['--tls-cert', pki.server.certFile, '--tls-key', other.server.keyFile], /does not fit the certificate/],
      [
        ['--tls-cert', join(dir, 'missing.crt'), '--tls-key', pki.server.keyFile],
        /cannot read the TLS certificate .*ENOENT/,
      ],
      [['--tls-cert', pki.server.certFile], /--tls-cert and --tls-key go together/],
      [['--tls-client-ca', pki.caFile], /applies only with --tls-cert and --tls-key/],
    ];
    for (const [args, message] of cases) {
      const proc = spawnServer(['--standalone', '--state-file', join(dir, 's.json'), '--time-source', 'none', ...args]);
      expect(await proc.exited).toEqual({ code: 2, signal: null });
      expect(proc.stderrLines).toHaveLength(1);
      expect(proc.stderrLines[0]).toMatch(message);
    }
  });
});
