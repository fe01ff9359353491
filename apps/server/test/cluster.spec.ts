// Two real server processes on one real etcd: boot, the three protocols, uniqueness, bad input.
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { bindRegion, cleanupAll, startEtcd, type EtcdServer } from '@idgen/testing';
import { Health, HealthCheckResponse_ServingStatus, LeaseMode, NodeState } from '@idgen/proto';
import {
  PROTOCOLS,
  decode,
  etcdRange,
  idClient,
  idsOf,
  rawGrpc,
  rawPost,
  stallAfter,
  startServer,
  type LogLine,
  type ServerNode,
} from './support.test-helper.js';

jest.setTimeout(120_000);

const REGION = 2;
let etcd: EtcdServer;
let nodes: ServerNode[] = [];
let readyLines: LogLine[] = [];

beforeAll(async () => {
  etcd = await startEtcd();
  await bindRegion(etcd, REGION); // idgen region init, before the region's first node
  const args = [
    '--region',
    String(REGION),
    '--etcd',
    etcd.clientUrl,
    '--time-source',
    'none',
    '--lease-ttl',
    '4',
    '--request-timeout-ms',
    '1500',
    '--status-details',
    'full',
  ];
  nodes = await Promise.all([
    startServer([...args, '--node-id', 'node-a']),
    startServer([...args, '--node-id', 'node-b']),
  ]);
  readyLines = await Promise.all(nodes.map((n) => n.ready()));
});

afterAll(async () => {
  await Promise.all(nodes.map((n) => n.stop()));
  await cleanupAll();
});

function node(i: number): ServerNode {
  const n = nodes[i];
  if (n === undefined) throw new Error(`no node ${i}`);
  return n;
}

describe('two nodes on one etcd', () => {
  it('both become ready, on different workers, registered in discovery', async () => {
    const workers = readyLines.map((l) => l['worker']);
    expect(workers.every((w) => typeof w === 'number')).toBe(true);
    expect(new Set(workers).size).toBe(2);
    for (const l of readyLines) expect(l).toMatchObject({ region: REGION, mode: 'etcd' });
    const registered = await etcdRange(etcd.clientUrl, `/idgen/regions/${REGION}/nodes/`, true);
    expect(registered.map((kv) => kv.key).sort()).toEqual([
      `/idgen/regions/${REGION}/nodes/node-a`,
      `/idgen/regions/${REGION}/nodes/node-b`,
    ]);
    for (const kv of registered) {
      const value = JSON.parse(kv.value) as { address: string; worker: number };
      expect(nodes.map((n) => `127.0.0.1:${n.port}`)).toContain(value.address);
      expect(workers).toContain(value.worker);
    }
  });

  it('GetStatus reports the slot, the lease and the layout', async () => {
    const status = await idClient(node(0).baseUrl, 'grpc-h2').getStatus({});
    expect(status).toMatchObject({
      region: REGION,
      worker: readyLines[0]?.['worker'],
      nodeId: 'node-a',
      state: NodeState.SERVING,
      leaseMode: LeaseMode.ETCD,
      layout: { epochMs: 1_704_067_200_000n, timestampBits: 41, regionBits: 3, workerBits: 7, sequenceBits: 12 },
    });
    expect(status.leaseId).toMatch(/^\d+$/);
    expect(status.keepAliveAgeSeconds).toBeGreaterThanOrEqual(0);
    expect(status.keepAliveAgeSeconds).toBeLessThan(4);
  });

  it('serves NextIds over Connect JSON (HTTP/1.1), Connect binary and gRPC (h2c): right region, increasing per node, unique across nodes', async () => {
    const sizes = [1, 2, 7, 100, 999, 4096, 4095, 1, 3000, 64];
    const perNode = async (i: number): Promise<bigint[]> => {
      const clients = PROTOCOLS.map((p) => idClient(node(i).baseUrl, p));
      const worker = readyLines[i]?.['worker'];
      const all: bigint[] = [];
      let last = -1n;
      for (let round = 0; round < 12; round++) {
        for (const [c, client] of clients.entries()) {
          const count = sizes[(round * 3 + c) % sizes.length] ?? 1;
          const res = await client.nextIds({ count });
          const ids = idsOf(res.blocks);
          expect(ids).toHaveLength(count);
          for (const id of ids) {
            // Strictly increasing per node, across calls and protocols.
            expect(id > last).toBe(true);
            last = id;
          }
          const first = ids[0] as bigint;
          expect(decode(first)).toMatchObject({ region: REGION, worker });
          expect(decode(last)).toMatchObject({ region: REGION, worker });
          all.push(...ids);
        }
      }
      return all;
    };
    const [a, b] = await Promise.all([perNode(0), perNode(1)]);
    const everything = new Set<bigint>([...(a ?? []), ...(b ?? [])]);
    expect(everything.size).toBe((a?.length ?? 0) + (b?.length ?? 0));
  });

  it('answers grpc.health.v1 Check SERVING, /readyz 200 and /healthz 200', async () => {
    const health = createClient(Health, createGrpcTransport({ baseUrl: node(1).baseUrl }));
    expect((await health.check({ service: '' })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    expect((await health.check({ service: 'idgen.v1.IdGenerator' })).status).toBe(
      HealthCheckResponse_ServingStatus.SERVING,
    );
    await expect(health.check({ service: 'nope.v1.Nope' })).rejects.toMatchObject({ code: Code.NotFound });
    expect((await fetch(`${node(1).baseUrl}/readyz`)).status).toBe(200);
    expect((await fetch(`${node(1).baseUrl}/healthz`)).status).toBe(200);
  });
});

describe('bad input over the wire: the right code, and the node keeps serving', () => {
  const nextIds = '/idgen.v1.IdGenerator/NextIds';

  async function stillServing(n: ServerNode): Promise<void> {
    const res = await idClient(n.baseUrl, 'connect-json-http1').nextIds({ count: 2 });
    expect(idsOf(res.blocks)).toHaveLength(2);
    expect(n.process.exitStatus()).toBeUndefined();
  }

  it.each(PROTOCOLS)(
    'count 0 and count above --max-count: INVALID_ARGUMENT naming the range (%s)',
    async (protocol) => {
      const client = idClient(node(0).baseUrl, protocol);
      for (const count of [0, 4097, 4_294_967_295]) {
        const error = await client.nextIds({ count }).then(
          () => undefined,
          (e: unknown) => ConnectError.from(e),
        );
        expect(error?.code).toBe(Code.InvalidArgument);
        expect(error?.rawMessage).toBe(`count must be from 1 to 4096, got ${count}`);
      }
      await stillServing(node(0));
    },
  );

  it.each([
    ['malformed JSON', '{"count":'],
    ['a wrong field type', '{"count":"three"}'],
    ['a negative count', '{"count":-1}'],
    ['a fractional count', '{"count":1.5}'],
    ['an empty object (count 0)', '{}'],
    ['JSON that is not an object', '[1,2,3]'],
  ])('%s over Connect JSON: HTTP 400 invalid_argument', async (_what, body) => {
    const res = await rawPost(node(0).baseUrl, nextIds, body, 'application/json');
    expect(res.status).toBe(400);
    expect((JSON.parse(res.text) as { code: string }).code).toBe('invalid_argument');
    await stillServing(node(0));
  });

  it('bytes that are not protobuf: INVALID_ARGUMENT; random bytes never crash it', async () => {
    // A length-delimited field whose length varint never ends: undecodable.
    const broken = new Uint8Array([0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
    const res = await rawPost(node(1).baseUrl, nextIds, broken, 'application/proto');
    expect(res.status).toBe(400);
    expect((JSON.parse(res.text) as { code: string }).code).toBe('invalid_argument');
    // Seeded random buffers: each is either undecodable (400) or decodes to some count (200 or 400).
    let seed = 42;
    const random = (): number => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed;
    };
    const statuses = new Set<number>();
    for (let i = 0; i < 100; i++) {
      const bytes = new Uint8Array(1 + (random() % 64)).map(() => random() % 256);
      const r = await rawPost(node(1).baseUrl, nextIds, bytes, 'application/proto');
      statuses.add(r.status);
    }
    expect([...statuses].every((s) => s === 200 || s === 400)).toBe(true);
    await stillServing(node(1));
  });

  it('bytes that are not protobuf over gRPC and gRPC-Web: INVALID_ARGUMENT (3), not INTERNAL', async () => {
    const broken = new Uint8Array([0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
    const grpc = await rawGrpc(node(0).baseUrl, nextIds, broken);
    expect(grpc).toMatchObject({ status: 200, grpcStatus: '3' });
    expect(grpc.grpcMessage).toMatch(/^parse binary/);
    const frame = new Uint8Array([0, 0, 0, 0, 2, 0xff, 0xff]);
    const web = await fetch(`${node(0).baseUrl}${nextIds}`, {
      method: 'POST',
      headers: { 'content-type': 'application/grpc-web+proto' },
      body: frame,
    });
    const body = Buffer.from(await web.arrayBuffer());
    expect(body[0]).toBe(0x80);
    expect(body.subarray(5).toString()).toMatch(/grpc-status: 3\r\n/);
    // A well-formed gRPC frame still works: count=3.
    const ok = await rawGrpc(node(0).baseUrl, nextIds, new Uint8Array([0x08, 0x03]));
    expect(ok).toMatchObject({ status: 200, grpcStatus: '0' });
    await stillServing(node(0));
  });

  it('a gRPC message above the size limit: RESOURCE_EXHAUSTED (8)', async () => {
    const res = await rawGrpc(node(1).baseUrl, nextIds, new Uint8Array(200_000).fill(0x78));
    expect(res.grpcStatus).toBe('8');
    await stillServing(node(1));
  });

  it('a body that never finishes, headers that never end, a connection that says nothing: cut at the deadline', async () => {
    const port = node(1).port;
    const slowBody = await stallAfter(
      port,
      `POST ${nextIds} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"cou`,
      20_000,
    );
    const slowHeaders = await stallAfter(port, `POST ${nextIds} HTTP/1.1\r\nhost: x\r\n`, 20_000);
    const silent = await stallAfter(port, 'PO', 20_000);
    for (const r of [slowBody, slowHeaders, silent]) expect(r.outcome).toBe('closed');
    await stillServing(node(1));
  });

  it('an unknown method or path: 404, and a GET on an RPC: not served', async () => {
    expect(
      (await rawPost(node(0).baseUrl, '/idgen.v1.IdGenerator/DeleteEverything', '{}', 'application/json')).status,
    ).toBe(404);
    expect((await rawPost(node(0).baseUrl, '/no.such.Service/Method', '{}', 'application/json')).status).toBe(404);
    expect((await fetch(`${node(0).baseUrl}/`)).status).toBe(404);
    const get = await fetch(`${node(0).baseUrl}${nextIds}`);
    expect(get.status).toBeGreaterThanOrEqual(400);
    await stillServing(node(0));
  });

  it('an unknown method over gRPC: UNIMPLEMENTED', async () => {
    // Watch is deliberately not implemented (a held-open stream per prober is a resource to pile up).
    const health = createClient(Health, createGrpcTransport({ baseUrl: node(0).baseUrl }));
    const stream = health.watch({ service: '' });
    await expect(
      (async () => {
        for await (const _ of stream) return;
      })(),
    ).rejects.toMatchObject({ code: Code.Unimplemented });
    await stillServing(node(0));
  });

  it('a huge body: RESOURCE_EXHAUSTED (or the connection is cut), never read whole', async () => {
    const huge = `{"count":1,"pad":"${'x'.repeat(8 * 1024 * 1024)}"}`;
    const res = await rawPost(node(1).baseUrl, nextIds, huge, 'application/json').catch((e: unknown) => ({
      status: 0,
      text: String(e),
    }));
    if (res.status !== 0) {
      expect(res.status).toBe(429);
      expect((JSON.parse(res.text) as { code: string }).code).toBe('resource_exhausted');
    }
    await stillServing(node(1));
  });

  it('counts requests by method and code in /metrics', async () => {
    const text = await (await fetch(String(node(0).metricsUrl))).text();
    expect(text).toMatch(
      /idgen_server_requests_total\{[^}]*rpc_method="NextIds"[^}]*rpc_response_status_code="invalid_argument"[^}]*\} [1-9]/,
    );
    expect(text).toMatch(/idgen_server_request_duration_bucket\{[^}]*rpc_method="NextIds"/);
    // The packages' own metrics reach the same exporter.
    expect(text).toMatch(/idgen_ids_minted_total/);
    expect(text).toMatch(/idgen_lease/);
  });
});
