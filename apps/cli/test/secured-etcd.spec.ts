// The etcd flags against a secured etcd (docs/design.md §5: operators read): client TLS with client certificates,
// and authentication with a read-only operator role on the prefix. Real etcd, certificates made with openssl.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { cleanupAll, enableEtcdAuth, etcdctl, makeTestPki, startEtcd, tempDirSync, type TestPki } from '@idgen/testing';
import { idgen, idgenJson } from './support.test-helper.js';

jest.setTimeout(90_000);
afterAll(() => cleanupAll());

const LAYOUT = JSON.stringify(DEFAULT_LAYOUT.toRecord());

describe('etcd with client TLS (--client-cert-auth)', () => {
  let pki: TestPki;
  let url: string;

  beforeAll(async () => {
    pki = makeTestPki({ clients: ['operator'], name: 'cli-etcd-pki' });
    url = (await startEtcd({ tls: { pki, clientCertAuth: true } })).clientUrl;
    etcdctl(url, ['put', '/idgen/layout', LAYOUT], { pki });
  });

  it('reads the layout and the leases with --etcd-ca, --etcd-cert and --etcd-key', async () => {
    const client = pki.clients['operator'];
    if (client === undefined) throw new Error('no client certificate');
    const tls = ['--etcd', url, '--etcd-ca', pki.caFile, '--etcd-cert', client.certFile, '--etcd-key', client.keyFile];
    const layout = await idgenJson<Record<string, unknown>>(['layout', ...tls]);
    expect(layout.code).toBe(0);
    expect(layout.json).toMatchObject(DEFAULT_LAYOUT.toRecord());
    const leases = await idgenJson<{ slots: unknown[] }>(['leases', ...tls]);
    expect(leases.code).toBe(0);
    expect(leases.json.slots).toEqual([]);
    // idgen region init and show take the same flags.
    expect(await idgen(['region', 'init', '--sole-cluster', '--region', '2', ...tls])).toMatchObject({ code: 0 });
    expect((await idgen(['region', 'show', ...tls])).stdout).toMatch(/^region 2: bound \S+ in cluster \d+$/m);
  });

  it('exits 3 without a client certificate, and 2 for TLS files with an http:// endpoint', async () => {
    const r = await idgen(['layout', '--etcd', url, '--etcd-ca', pki.caFile, '--timeout-ms', '3000']);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/^idgen layout: etcd https:.*bad certificate/m);
    const http = await idgen(['layout', '--etcd', url.replace('https:', 'http:'), '--etcd-ca', pki.caFile]);
    expect(http.code).toBe(2);
    expect(http.stderr).toMatch(/tls is set but an endpoint uses http:\/\//);
  });
});

describe('etcd with authentication (a read-only operator role on the prefix)', () => {
  let url: string;
  let secrets: string;

  beforeAll(async () => {
    url = (await startEtcd()).clientUrl;
    etcdctl(url, ['put', '/idgen/layout', LAYOUT]);
    enableEtcdAuth(url, 'root-pw', [
      { name: 'operator', password: 'operator-pw', prefix: '/idgen/', permission: 'read' },
    ]);
    secrets = tempDirSync('cli-etcd-secrets').path;
  });

  const passwordFile = (name: string, password: string): string => {
    const file = join(secrets, name);
    writeFileSync(file, `${password}\n`, { mode: 0o600 });
    return file;
  };

  it('reads the layout and the leases as the operator, the password from a file', async () => {
    const auth = [
      '--etcd',
      url,
      '--etcd-user',
      'operator',
      '--etcd-password-file',
      passwordFile('operator', 'operator-pw'),
    ];
    const layout = await idgenJson<Record<string, unknown>>(['layout', ...auth]);
    expect(layout.code).toBe(0);
    expect(layout.json).toMatchObject(DEFAULT_LAYOUT.toRecord());
    expect((await idgen(['leases', ...auth])).code).toBe(0);
    // Binding the region's etcd is a write: refused to the read-only role, saying which key it writes.
    const init = await idgen(['region', 'init', '--sole-cluster', '--region', '2', ...auth]);
    expect(init.code).toBe(1);
    expect(init.stderr).toMatch(/^idgen region init: etcd denied it .*writes \{prefix\}\/region/m);
  });

  it('exits 3 on a wrong password or none', async () => {
    const wrong = await idgen([
      'layout',
      '--etcd',
      url,
      '--etcd-user',
      'operator',
      '--etcd-password-file',
      passwordFile('wrong', 'nope'),
      '--timeout-ms',
      '3000',
    ]);
    expect(wrong.code).toBe(3);
    expect(wrong.stderr).toMatch(/^idgen layout: etcd http:/m);
    const none = await idgen(['layout', '--etcd', url, '--timeout-ms', '3000']);
    expect(none.code).toBe(3);
  });
});
