import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { createEtcdClient } from '@idgen/lease';
import { initRegion } from '@idgen/lease/operator';
import { createEmbeddedIdSource } from '../src/index.js';
import {
  bindRegion,
  cleanupAll,
  enableEtcdAuth,
  makeTestPki,
  readmeExample,
  runTsExample,
  startEtcd,
  tempDirSync,
  type EtcdServer,
} from '@idgen/testing';

// The README opens with a runnable example: run it, as written, against a real etcd, so the docs cannot rot
// (docs/style.md "Tests": a README snippet that a test runs).
jest.setTimeout(60_000);

let etcd: EtcdServer;

beforeAll(async () => {
  etcd = await startEtcd();
});

afterAll(async () => {
  await cleanupAll();
});

const README = join(__dirname, '..', 'README.md');

it('the README example runs and prints IDs it minted in its own process from a slot of the embedded range', async () => {
  // The README's setup step, before the example runs: bind the region's etcd to the example's region (idgen region init).
  const init = /^\$ npx @idgen\/cli region init --region (\d+) --etcd (\S+)$/m.exec(readFileSync(README, 'utf8'));
  expect(init?.slice(1)).toEqual(['2', 'http://127.0.0.1:2379']);
  await bindRegion(etcd, Number(init?.[1]));
  const { exit, child } = await runTsExample(readmeExample(README), {
    IDGEN_ETCD: etcd.clientUrl,
  });
  expect({ code: exit.code, output: exit.code === 0 ? '' : child.tail(20) }).toEqual({ code: 0, output: '' });
  const printed = JSON.parse(child.stdoutLines.join('\n')) as {
    id: string;
    hot: string;
    batch: string[];
    worker: number;
  };
  const ids = [printed.id, printed.hot, ...printed.batch].map((s) => BigInt(s));
  expect(new Set(ids).size).toBe(5);
  expect(ids.map((id) => DEFAULT_LAYOUT.decompose(id))).toEqual(
    ids.map(() => expect.objectContaining({ region: 2, worker: printed.worker })),
  );
  expect(printed.worker).toBeGreaterThanOrEqual(18);
});

/** The README's TLS and authentication example: the ```ts block after its `<!-- tls example -->` marker. */
function tlsExample(): string {
  const match = /^<!-- tls example -->\n```ts\n([\s\S]*?)^```$/m.exec(readFileSync(README, 'utf8'));
  if (match?.[1] === undefined) throw new Error('the README has no TLS example');
  return match[1];
}

it('the README TLS and auth example runs as written against an etcd with client TLS and a user', async () => {
  const pki = makeTestPki({ clients: ['idgen-node'], name: 'embedded-readme-tls' });
  const secured = await startEtcd({ tls: { pki, clientCertAuth: true } });
  const password = 'readme-password';
  enableEtcdAuth(
    secured.clientUrl,
    'root-password',
    [{ name: 'idgen-node', password, prefix: '/idgen/', permission: 'readwrite' }],
    pki,
  );
  const client = pki.clients['idgen-node'];
  if (client === undefined) throw new Error('no client certificate');
  // The files the example reads, as the operator installs them.
  const dir = tempDirSync('embedded-readme-etcd').path;
  copyFileSync(pki.caFile, join(dir, 'ca.crt'));
  copyFileSync(client.certFile, join(dir, 'tls.crt'));
  copyFileSync(client.keyFile, join(dir, 'tls.key'));
  writeFileSync(join(dir, 'password'), `${password}\n`);
  // idgen region init, over TLS with the user.
  const admin = createEtcdClient({
    endpoints: [secured.clientUrl],
    tls: { ca: pki.ca, cert: client.cert, key: client.key },
    auth: { username: 'idgen-node', password },
  });
  try {
    await initRegion({ client: admin, prefix: '/idgen', timeoutMs: 5_000, layout: DEFAULT_LAYOUT }, 2);
  } finally {
    admin.close();
  }
  const { exit, child } = await runTsExample(tlsExample(), { IDGEN_ETCD: secured.clientUrl, IDGEN_ETCD_DIR: dir });
  expect({ code: exit.code, output: exit.code === 0 ? '' : child.tail(20) }).toEqual({ code: 0, output: '' });
  const printed = JSON.parse(child.stdoutLines.join('\n')) as { id: string; worker: number };
  expect(DEFAULT_LAYOUT.decompose(BigInt(printed.id))).toMatchObject({ region: 2, worker: printed.worker });
  // A CA that did not sign etcd: the failure names the library's options, not idgen-server's flags.
  const other = makeTestPki({ name: 'embedded-readme-other-ca' });
  const wrong = createEmbeddedIdSource({
    etcd: {
      endpoints: [secured.clientUrl],
      tls: { ca: other.ca, cert: client.cert, key: client.key },
      auth: { username: 'idgen-node', password },
    },
    region: 2,
    timeSource: 'none',
    requestTimeoutMs: 2_000,
  });
  const failure = await wrong.ready().then(
    () => 'ready',
    (e: unknown) => (e instanceof Error ? e.message : String(e)),
  );
  await wrong.close();
  expect(failure).toMatch(/^the embedded source could not start: .*etcd\.tls/);
  expect(failure).not.toContain('--etcd');
});
