import { createDiscoveryReader, type DiscoveryReader } from '@idgen/discovery';
import { bindRegion, cleanupAll, startEtcd, type EtcdServer } from '@idgen/testing';
import { createIdClient, type IdClient } from '../src/index.js';
import {
  IdLedger,
  regionOf,
  requireServerBuild,
  startServer,
  waitUntil,
  workerOf,
  type ServerNode,
} from './harness.test-helper.js';

// Against a real etcd and real idgen-server processes: the client follows the region's serving
// nodes as @idgen/discovery's reader lists them (docs/design.md §5 "nodes" keys).
jest.setTimeout(90_000);

let etcd: EtcdServer;
let reader: DiscoveryReader;
let client: IdClient;
const ledger = new IdLedger();
const servers: ServerNode[] = [];

beforeAll(async () => {
  requireServerBuild();
  etcd = await startEtcd();
  await bindRegion(etcd, 1); // region 1's etcd, bound before its first node (idgen region init)
  reader = createDiscoveryReader({ endpoints: [etcd.clientUrl], region: 1 });
  client = createIdClient({ region: 1, discovery: reader, bufferSize: 10, lowWater: 5, deadlineMs: 5000 });
});

afterAll(async () => {
  await client?.close();
  await reader?.close();
  await Promise.all(servers.map((s) => s.process.kill()));
  await etcd?.stop();
  await cleanupAll();
});

const urls = (): string[] =>
  client
    .stats()
    .nodes.map((n) => n.url)
    .sort();

/** Takes IDs (in batches that force refills) until `n` distinct workers have served. */
async function drawUntilWorkers(n: number): Promise<Set<number>> {
  const workers = new Set<number>();
  await waitUntil(`${n} workers have served`, async () => {
    const ids = await client.nextIds(10);
    ledger.add(...ids);
    ids.forEach((id) => workers.add(workerOf(id)));
    return workers.size >= n;
  });
  return workers;
}

it('uses a node once it registers in discovery', async () => {
  const a = await startServer({ region: 1, etcd: etcd.clientUrl });
  servers.push(a);
  const id = await client.nextId();
  ledger.add(id);
  expect(regionOf(id)).toBe(1);
  expect(urls()).toEqual([a.url]);
});

it('picks up a node that starts', async () => {
  const b = await startServer({ region: 1, etcd: etcd.clientUrl });
  servers.push(b);
  await waitUntil('the client lists the new node', () => urls().length === 2);
  expect(urls()).toEqual([servers[0]?.url, b.url].sort());
  expect((await drawUntilWorkers(2)).size).toBe(2);
});

it('drops a node that stops, and keeps serving from the others', async () => {
  const b = servers[1] as ServerNode;
  await b.process.stop(); // SIGTERM: the node deregisters before it exits (docs/design.md §5 shutdown)
  await waitUntil('the client no longer lists the stopped node', () => !urls().includes(b.url));
  expect(urls()).toEqual([servers[0]?.url]);
  const before = client.stats().retries;
  for (let i = 0; i < 20; i++) ledger.add(...(await client.nextIds(10)));
  expect(client.stats().retries).toBe(before); // the stopped node is no longer even tried
});

it('no ID was handed out twice', () => {
  expect(ledger.size).toBeGreaterThan(200);
  expect(ledger.duplicates).toEqual([]);
});
