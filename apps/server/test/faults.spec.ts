// Faults on real processes and a real etcd (docs/design.md §5, §8): a paused node whose slot was taken, a killed
// node and its successor, a clean stop. The rules checked are about order and refusal, never speed.
import { Code, ConnectError } from '@connectrpc/connect';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { NodeState } from '@idgen/proto';
import { bindRegion, cleanupAll, startEtcd, type EtcdServer } from '@idgen/testing';
import {
  decode,
  etcdRange,
  idClient,
  idsOf,
  sleep,
  startServer,
  waitFor,
  type ServerNode,
} from './support.test-helper.js';

jest.setTimeout(180_000);

const REGION = 1;
const TTL_SECONDS = 3;
let etcd: EtcdServer;

beforeAll(async () => {
  etcd = await startEtcd();
  await bindRegion(etcd, REGION); // idgen region init, before the region's first node
});
afterAll(() => cleanupAll());

function args(worker: number, nodeId: string): string[] {
  return [
    '--region',
    String(REGION),
    '--etcd',
    etcd.clientUrl,
    '--time-source',
    'none',
    '--lease-ttl',
    String(TTL_SECONDS),
    '--status-details',
    'full',
    '--workers',
    `${worker}-${worker}`,
    '--node-id',
    nodeId,
    '--metrics-listen',
    'off',
  ];
}

const workerKey = (w: number): string => `/idgen/regions/${REGION}/workers/${w}`;
const lastMsKey = (w: number): string => `/idgen/regions/${REGION}/last-ms/${w}`;
const nodeKey = (id: string): string => `/idgen/regions/${REGION}/nodes/${id}`;

async function take(node: ServerNode, calls: number, count = 50): Promise<bigint[]> {
  const client = idClient(node.baseUrl, 'connect-binary-h2');
  const out: bigint[] = [];
  for (let i = 0; i < calls; i++) out.push(...idsOf((await client.nextIds({ count })).blocks));
  return out;
}

const max = (ids: readonly bigint[]): bigint => ids.reduce((a, b) => (b > a ? b : a), -1n);
const min = (ids: readonly bigint[]): bigint => ids.reduce((a, b) => (b < a ? b : a), ids[0] ?? -1n);

async function slotFree(w: number): Promise<boolean> {
  return (await etcdRange(etcd.clientUrl, workerKey(w))).length === 0;
}

describe('a paused node whose slot was taken meanwhile (SIGSTOP past the TTL, SIGCONT)', () => {
  it('answers UNAVAILABLE, never an ID, until it holds a new lease; then mints above its successor', async () => {
    const worker = 5;
    const old = await startServer(args(worker, 'paused-node'));
    const oldReady = await old.ready();
    const before = await take(old, 5);

    old.process.signal('SIGSTOP');
    // etcd expires the paused node's lease after the TTL; only then can anyone claim the slot.
    await waitFor(`etcd to expire worker ${worker}`, () => slotFree(worker), 30_000);
    const successor = await startServer(args(worker, 'successor'));
    expect(await successor.ready()).toMatchObject({ worker });
    const successorIds = await take(successor, 5);
    expect(min(successorIds) > max(before)).toBe(true);

    old.process.signal('SIGCONT');
    // Every answer from the woken node is UNAVAILABLE: its fence deadline passed while it slept, and the
    // slot it held is someone else's now. It keeps trying to re-claim (only slot 5 is allowed: taken).
    const oldClient = idClient(old.baseUrl, 'connect-json-http1');
    const refusals = new Map<string, number>();
    const leaked: bigint[] = [];
    const until = Date.now() + 4_000;
    while (Date.now() < until) {
      try {
        leaked.push(...idsOf((await oldClient.nextIds({ count: 10 })).blocks));
      } catch (e) {
        const error = ConnectError.from(e);
        expect(error.code).toBe(Code.Unavailable);
        const reason = error.metadata.get('idgen-fence-reason') ?? '?';
        refusals.set(reason, (refusals.get(reason) ?? 0) + 1);
      }
      successorIds.push(...(await take(successor, 1)));
      await sleep(20);
    }
    expect(leaked).toEqual([]);
    expect([...refusals.values()].reduce((a, b) => a + b, 0)).toBeGreaterThan(10);
    expect((await fetch(`${old.baseUrl}/readyz`)).status).toBe(503);
    const status = await idClient(old.baseUrl, 'grpc-h2').getStatus({});
    expect(status.state).toBe(NodeState.FENCED);

    // The successor leaves cleanly; the old node re-claims the slot with a new lease and mints above it.
    expect((await successor.stop()).code).toBe(0);
    await waitFor(
      'the old node to be ready again',
      async () => (await fetch(`${old.baseUrl}/readyz`)).status === 200,
      30_000,
    );
    const after = await take(old, 5);
    expect(min(after) > max(successorIds)).toBe(true);
    for (const id of after) expect(decode(id)).toMatchObject({ region: REGION, worker });
    const again = await idClient(old.baseUrl, 'grpc-h2').getStatus({});
    expect(again.state).toBe(NodeState.SERVING);
    expect(again.leaseId).not.toBe(String(oldReady['leaseId']));
    expect((await old.stop()).code).toBe(0);
  });
});

describe('a killed node and a newcomer on its slot (SIGKILL)', () => {
  it("mints the newcomer's IDs above every ID of the dead node", async () => {
    const worker = 7;
    const dead = await startServer(args(worker, 'killed-node'));
    await dead.ready();
    const deadIds = await take(dead, 10, 100);
    await dead.process.kill();
    // No release: the slot frees only when etcd expires the lease, and last-ms says "not released".
    await waitFor(`etcd to expire worker ${worker}`, () => slotFree(worker), 30_000);
    const record = JSON.parse((await etcdRange(etcd.clientUrl, lastMsKey(worker)))[0]?.value ?? '{}') as {
      ms: number;
      released: boolean;
    };
    expect(record.released).toBe(false);
    // last-ms is the clock at the last acknowledged keep-alive; the holder could not mint past last-ms + TTL.
    expect(decode(max(deadIds)).timestampMs + DEFAULT_LAYOUT.epochMs).toBeLessThan(record.ms + TTL_SECONDS * 1000);

    const newcomer = await startServer(args(worker, 'newcomer'));
    expect(await newcomer.ready()).toMatchObject({ worker });
    const newIds = await take(newcomer, 10, 100);
    expect(min(newIds) > max(deadIds)).toBe(true);
    // An unclean end: the newcomer waits until its clock passes last-ms + TTL (docs/design.md §5).
    expect(decode(min(newIds)).timestampMs + DEFAULT_LAYOUT.epochMs).toBeGreaterThan(record.ms + TTL_SECONDS * 1000);
    expect((await newcomer.stop()).code).toBe(0);
  });
});

describe('a clean stop (SIGTERM)', () => {
  it('exits 0 with the slot released in etcd: worker and node keys gone, last-ms marked released', async () => {
    const worker = 9;
    const node = await startServer(args(worker, 'leaving-node'));
    await node.ready();
    expect(await etcdRange(etcd.clientUrl, nodeKey('leaving-node'))).toHaveLength(1);
    const ids = await take(node, 5);
    expect(await node.stop()).toEqual({ code: 0, signal: null });

    expect(await etcdRange(etcd.clientUrl, workerKey(worker))).toEqual([]);
    expect(await etcdRange(etcd.clientUrl, nodeKey('leaving-node'))).toEqual([]);
    const record = JSON.parse((await etcdRange(etcd.clientUrl, lastMsKey(worker)))[0]?.value ?? '{}') as {
      ms: number;
      released: boolean;
      nodeId: string;
    };
    expect(record).toMatchObject({ released: true, nodeId: 'leaving-node' });
    expect(record.ms).toBeGreaterThanOrEqual(decode(max(ids)).timestampMs + DEFAULT_LAYOUT.epochMs);
    const logs = node.logs();
    expect(logs.find((l) => l.msg === 'stopped')).toMatchObject({ signal: 'SIGTERM', released: true });

    // The next holder may start above the released millisecond at once.
    const next = await startServer(args(worker, 'next-node'));
    await next.ready();
    expect(min(await take(next, 2)) > max(ids)).toBe(true);
    expect((await next.stop()).code).toBe(0);
  });
});

describe('etcd unreachable at boot', () => {
  it('keeps retrying with backoff: alive, not ready, refusing with UNAVAILABLE; ready once etcd answers', async () => {
    const stalled = await startEtcd();
    await bindRegion(stalled, REGION);
    stalled.pause();
    try {
      const node = await startServer([
        '--region',
        String(REGION),
        '--etcd',
        stalled.clientUrl,
        '--time-source',
        'none',
        '--lease-ttl',
        String(TTL_SECONDS),
        '--workers',
        '11-11',
        '--node-id',
        'patient-node',
        '--metrics-listen',
        'off',
      ]);
      await sleep(3_000);
      expect(node.process.exitStatus()).toBeUndefined();
      expect((await fetch(`${node.baseUrl}/healthz`)).status).toBe(200);
      expect((await fetch(`${node.baseUrl}/readyz`)).status).toBe(503);
      const refused = await idClient(node.baseUrl, 'grpc-h2')
        .nextIds({ count: 1 })
        .then(
          () => undefined,
          (e: unknown) => ConnectError.from(e),
        );
      expect(refused?.code).toBe(Code.Unavailable);
      expect((await idClient(node.baseUrl, 'grpc-h2').getStatus({})).state).toBe(NodeState.STARTING);

      stalled.resume();
      expect(await node.ready(60_000)).toMatchObject({ worker: 11 });
      expect(await take(node, 1)).toHaveLength(50);
      expect((await node.stop()).code).toBe(0);
    } finally {
      stalled.resume();
      await stalled.stop();
    }
  });
});
