// A secured etcd (docs/design.md §5 "root of trust"): client TLS with client certificates, and
// authentication with a role that may read and write only the deployment's prefix. Real etcd, real node
// processes, certificates made in the test with openssl.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cleanupAll, enableEtcdAuth, makeTestPki, startEtcd, tempDirSync } from '@idgen/testing';
import type { TestPki } from '@idgen/testing';
import { idClient, idsOf, initRegionSecured, parseLine, spawnServer, startServer } from './support.test-helper.js';

jest.setTimeout(90_000);
afterAll(() => cleanupAll());

const REGION = 2;
const base = ['--region', String(REGION), '--time-source', 'none', '--lease-ttl', '4', '--metrics-listen', 'off'];

/** The one fatal line a node that cannot use etcd exits with (exit 1 after boot failed). */
async function fatalOf(args: readonly string[]): Promise<string> {
  const proc = spawnServer([...args, '--listen', '127.0.0.1:0']);
  const exit = await proc.exited;
  expect(exit.code).toBe(1);
  const fatal = proc.stdoutLines.map(parseLine).find((l) => l?.level === 'fatal');
  return JSON.stringify(fatal ?? proc.tail(5));
}

describe('etcd with client TLS (--client-cert-auth)', () => {
  let pki: TestPki;
  let other: TestPki;
  let url: string;

  beforeAll(async () => {
    pki = makeTestPki({ clients: ['idgen-node'], name: 'etcd-pki' });
    other = makeTestPki({ clients: ['idgen-node'], name: 'other-pki' });
    url = (await startEtcd({ tls: { pki, clientCertAuth: true } })).clientUrl;
    // idgen region init over TLS, before the region's first node.
    const client = pki.clients['idgen-node'];
    await initRegionSecured(url, REGION, { tls: { ca: pki.ca, cert: client?.cert, key: client?.key } });
  });

  it('serves IDs with --etcd-ca/--etcd-cert/--etcd-key', async () => {
    const client = pki.clients['idgen-node'];
    if (client === undefined) throw new Error('no client certificate');
    const node = await startServer([
      ...base,
      '--etcd',
      url,
      '--etcd-ca',
      pki.caFile,
      '--etcd-cert',
      client.certFile,
      '--etcd-key',
      client.keyFile,
    ]);
    await node.ready(30_000);
    const ids = idsOf((await idClient(node.baseUrl, 'grpc-h2').nextIds({ count: 5 })).blocks);
    expect(ids).toHaveLength(5);
    expect((await node.stop()).code).toBe(0);
  });

  it('fails fast with a clear message on a CA that did not sign etcd, and without a client certificate', async () => {
    const theirs = other.clients['idgen-node'];
    if (theirs === undefined) throw new Error('no client certificate');
    expect(
      await fatalOf([
        ...base,
        '--etcd',
        url,
        '--etcd-ca',
        other.caFile,
        '--etcd-cert',
        theirs.certFile,
        '--etcd-key',
        theirs.keyFile,
      ]),
    ).toMatch(/TLS to etcd failed/);
    expect(await fatalOf([...base, '--etcd', url, '--etcd-ca', pki.caFile])).toMatch(/TLS to etcd failed|certificate/);
  });
});

describe('etcd with authentication (a role per user, on the prefix)', () => {
  let url: string;
  let secrets: string;

  beforeAll(async () => {
    url = (await startEtcd()).clientUrl;
    enableEtcdAuth(url, 'root-pw', [
      { name: 'idgen-node', password: 'node-pw', prefix: '/idgen/', permission: 'readwrite' },
      { name: 'operator', password: 'operator-pw', prefix: '/idgen/', permission: 'read' },
    ]);
    // idgen region init as etcd's root, before the region's first node.
    await initRegionSecured(url, REGION, { auth: { username: 'root', password: 'root-pw' } });
    secrets = tempDirSync('etcd-secrets').path;
  });

  const passwordFile = (name: string, password: string): string => {
    const file = join(secrets, name);
    writeFileSync(file, `${password}\n`, { mode: 0o600 });
    return file;
  };

  it('serves IDs as a user whose role may write the prefix, the password read from a file', async () => {
    const node = await startServer([
      ...base,
      '--etcd',
      url,
      '--etcd-user',
      'idgen-node',
      '--etcd-password-file',
      passwordFile('node', 'node-pw'),
    ]);
    await node.ready(30_000);
    expect(idsOf((await idClient(node.baseUrl, 'grpc-h2').nextIds({ count: 3 })).blocks)).toHaveLength(3);
    expect((await node.stop()).code).toBe(0);
  });

  it('fails fast with a clear message on a wrong password, and as a read-only operator', async () => {
    expect(
      await fatalOf([
        ...base,
        '--etcd',
        url,
        '--etcd-user',
        'idgen-node',
        '--etcd-password-file',
        passwordFile('wrong', 'nope'),
      ]),
    ).toMatch(/etcd refused the credentials/);
    expect(
      await fatalOf([
        ...base,
        '--etcd',
        url,
        '--etcd-user',
        'operator',
        '--etcd-password-file',
        passwordFile('op', 'operator-pw'),
      ]),
    ).toMatch(/etcd denied access/);
  });
});
