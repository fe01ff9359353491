// A client's deadline above --request-timeout-ms is capped by the server, never refused: a 30 s
// deadline, a common gRPC client default, on every route over gRPC and Connect.
import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { Health } from '@idgen/proto';
import { cleanupAll } from '@idgen/testing';
import { PROTOCOLS, idClient, idsOf, startServer, type ServerNode } from './support.test-helper.js';

jest.setTimeout(60_000);
afterAll(() => cleanupAll());

describe('a deadline longer than --request-timeout-ms', () => {
  let node: ServerNode;
  beforeAll(async () => {
    node = await startServer(['--time-source', 'none', '--metrics-listen', 'off', '--request-timeout-ms', '5000']);
    await node.ready();
  });
  afterAll(() => node.stop());

  it.each(PROTOCOLS)('is served on NextIds and GetStatus over %s', async (protocol) => {
    const client = idClient(node.baseUrl, protocol);
    expect(idsOf((await client.nextIds({ count: 2 }, { timeoutMs: 30_000 })).blocks)).toHaveLength(2);
    expect((await client.getStatus({}, { timeoutMs: 30_000 })).region).toBe(0);
  });

  it('is served on grpc.health.v1.Health/Check', async () => {
    const health = createClient(Health, createGrpcTransport({ baseUrl: node.baseUrl }));
    expect((await health.check({}, { timeoutMs: 30_000 })).status).toBeGreaterThan(0);
  });
});
