// GetStatus reveals only what an operator needs to a caller the node has not authenticated: the lease
// id, fence deadline, floor and last minted millisecond go only to callers over mTLS, or everyone with
// --status-details full (a node behind a mesh sidecar that authenticates callers). /readyz keeps its reason.
import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { IdGenerator } from '@idgen/proto';
import { cleanupAll, makeTestPki } from '@idgen/testing';
import { idClient, startServer } from './support.test-helper.js';

jest.setTimeout(60_000);
afterAll(() => cleanupAll());

const base = ['--time-source', 'none', '--metrics-listen', 'off'];

it('redacts the details on a plaintext port by default, and shows them with --status-details full', async () => {
  for (const [extra, redacted] of [
    [[], true],
    [['--status-details', 'full'], false],
  ] as const) {
    const node = await startServer([...base, ...extra]);
    await node.ready();
    const client = idClient(node.baseUrl, 'grpc-h2');
    await client.nextIds({ count: 1 });
    const status = await client.getStatus({});
    expect(status.detailsRedacted).toBe(redacted);
    expect(status.floorMs > 0n).toBe(!redacted);
    expect(status.lastMintedMs > 0n).toBe(!redacted);
    // What an operator needs stays: who, where, state, readiness.
    expect(status).toMatchObject({ region: 0, worker: 0, ready: true });
    expect(status.nodeId).not.toBe('');
    const readyz = (await (await fetch(`${node.baseUrl}/readyz`)).json()) as { ready?: boolean; reason?: string };
    expect(readyz).toMatchObject({ ready: true });
    expect((await node.stop()).code).toBe(0);
  }
});

it('shows the details by default to callers over mTLS, where every caller holds an allowed certificate', async () => {
  const pki = makeTestPki({ clients: ['operator'], name: 'status-pki' });
  const operator = pki.clients['operator'];
  if (operator === undefined) throw new Error('no client certificate');
  const node = await startServer([
    ...base,
    '--tls-cert',
    pki.server.certFile,
    '--tls-key',
    pki.server.keyFile,
    '--tls-client-ca',
    pki.caFile,
  ]);
  await node.ready();
  const client = createClient(
    IdGenerator,
    createGrpcTransport({
      baseUrl: `https://127.0.0.1:${node.port}`,
      nodeOptions: { ca: pki.ca, cert: operator.cert, key: operator.key, servername: 'localhost' },
    }),
  );
  await client.nextIds({ count: 1 });
  const status = await client.getStatus({});
  expect(status.detailsRedacted).toBe(false);
  expect(status.lastMintedMs > 0n).toBe(true);
  expect((await node.stop()).code).toBe(0);
});
