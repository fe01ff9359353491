import { createDiscoveryReader, type DiscoveryReader } from '@idgen/discovery';
import { bindRegion, cleanupAll, startEtcd, type EtcdServer } from '@idgen/testing';
import { createIdClient, isIdsUnavailableError, type IdClient, type IdClientOptions } from '../src/index.js';
import {
  IdLedger,
  regionOf,
  requireServerBuild,
  sleep,
  startServer,
  steadyLoad,
  waitUntil,
  type ServerNode,
} from './harness.test-helper.js';

// Node and region faults against real idgen-server processes and a real etcd:
// region 1 has three nodes found through discovery, region 2 one node given statically. One etcd serves both, each
// region under its own prefix bound to its code (one prefix serves one region code, docs/design.md §5).
// The tests run in order and each leaves fewer nodes alive, down to none, then one comes back.
jest.setTimeout(120_000);

const DEADLINE_MS = 2000;
const ATTEMPT_TIMEOUT_MS = 300;
/** Region 2's prefix; region 1's is the default, /idgen. */
const REGION_2_PREFIX = '/idgen-region-2';

let etcd: EtcdServer;
let reader: DiscoveryReader;
const home: ServerNode[] = [];
let neighbour: ServerNode;
const clients: IdClient[] = [];
const ledger = new IdLedger();

function newClient(extra: Partial<IdClientOptions> = {}): IdClient {
  const client = createIdClient({
    region: 1,
    discovery: reader,
    fallbackRegions: [{ region: 2, nodes: [neighbour.url] }],
    bufferSize: 20,
    lowWater: 10,
    deadlineMs: DEADLINE_MS,
    attemptTimeoutMs: ATTEMPT_TIMEOUT_MS,
    ...extra,
  });
  clients.push(client);
  return client;
}

beforeAll(async () => {
  requireServerBuild();
  etcd = await startEtcd();
  await bindRegion(etcd, 1);
  await bindRegion(etcd, 2, REGION_2_PREFIX);
  const started = await Promise.all([
    startServer({ region: 1, etcd: etcd.clientUrl }),
    startServer({ region: 1, etcd: etcd.clientUrl }),
    startServer({ region: 1, etcd: etcd.clientUrl }),
    startServer({ region: 2, etcd: etcd.clientUrl, etcdPrefix: REGION_2_PREFIX }),
  ]);
  home.push(...started.slice(0, 3));
  neighbour = started[3] as ServerNode;
  reader = createDiscoveryReader({ endpoints: [etcd.clientUrl], region: 1 });
});

afterAll(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await reader?.close();
  await Promise.all([...home, neighbour].filter((s) => s !== undefined).map((s) => s.process.kill()));
  await etcd?.stop();
  await cleanupAll();
});

/** Waits until every client lists `n` home nodes (discovery has caught up). */
async function homeNodesListed(n: number): Promise<void> {
  await waitUntil(`the clients list ${n} home nodes`, () =>
    clients.every((c) => c.stats().nodes.filter((node) => node.region === 1).length === n),
  );
}

it('SIGKILL one of three nodes under steady load: zero failed nextId() calls', async () => {
  const loadClients = [newClient(), newClient(), newClient(), newClient()];
  await homeNodesListed(3);
  const load = steadyLoad(loadClients, { callersPerClient: 2, pauseMs: 1, ledger });
  await sleep(1500);
  const victim = home[0] as ServerNode;
  await victim.process.kill();
  await sleep(2500);
  const report = await load.stop();
  expect(report.failures).toEqual([]);
  expect(report.calls).toBeGreaterThan(1000);
  // Every ID still came from the home region: the other two nodes absorbed the load.
  expect([...report.regions.keys()]).toEqual([1]);
  await Promise.all(loadClients.map((c) => c.close()));
  clients.length = 0;
});

it('SIGSTOP a node (it hangs rather than refuses): callers move on within the deadline', async () => {
  const loadClients = [newClient(), newClient()];
  const frozen = home[1] as ServerNode;
  const load = steadyLoad(loadClients, { callersPerClient: 2, pauseMs: 1, ledger });
  await sleep(1000);
  frozen.process.signal('SIGSTOP');
  await sleep(3000);
  const report = await load.stop();
  frozen.process.signal('SIGCONT');
  expect(report.failures).toEqual([]);
  expect(report.maxLatencyMs).toBeLessThan(DEADLINE_MS);
  // Each client found the frozen node out by its attempt timeout, at least once.
  const timeouts = loadClients.flatMap((c) =>
    c.stats().nodes.filter((n) => n.url === frozen.url && n.lastFailure?.code === 'deadline_exceeded'),
  );
  expect(timeouts.length).toBeGreaterThan(0);
  await frozen.process.kill();
  await Promise.all(loadClients.map((c) => c.close()));
  clients.length = 0;
});

it('every home node down: fails over to the neighbour region, whose IDs carry its code', async () => {
  const client = newClient({ prefill: false });
  const last = home[2] as ServerNode;
  await waitUntil('the client lists the last home node', () => client.stats().nodes.some((n) => n.url === last.url));
  await last.process.kill();
  const ids: bigint[] = [];
  for (let i = 0; i < 50; i++) ids.push(await client.nextId());
  ledger.add(...ids);
  expect(new Set(ids.map(regionOf))).toEqual(new Set([2]));
  expect(client.stats().failovers).toBeGreaterThan(0);
});

let recoveryClient: IdClient;

it('everything down: IdsUnavailableError once the buffer is spent, never an invented ID', async () => {
  recoveryClient = newClient({ deadlineMs: 1000 });
  await waitUntil('the buffer is full', () => recoveryClient.stats().buffered >= 20);
  await neighbour.process.kill();
  const got: bigint[] = [];
  let error: unknown;
  for (let i = 0; i < 1000 && error === undefined; i++) {
    try {
      got.push(await recoveryClient.nextId());
    } catch (e) {
      error = e;
    }
  }
  ledger.add(...got);
  expect(got.length).toBeGreaterThan(0); // the buffer was spent first…
  expect(got.length).toBeLessThanOrEqual(20);
  expect(isIdsUnavailableError(error)).toBe(true); // …then the typed error, after the deadline
  if (!isIdsUnavailableError(error)) throw error;
  // It waited out its deadline first (Node timers may fire up to a millisecond early on performance.now()).
  expect(error.waitedMs).toBeGreaterThanOrEqual(995);
  expect(error.attempts.length).toBeGreaterThan(0);
});

it('recovers when a node returns', async () => {
  const back = await startServer({ region: 1, etcd: etcd.clientUrl });
  home.push(back);
  let id: bigint | undefined;
  await waitUntil('nextId() succeeds again', async () => {
    id = await recoveryClient.nextId().catch(() => undefined);
    return id !== undefined;
  });
  ledger.add(id as bigint);
  expect(regionOf(id as bigint)).toBe(1);
});

it('no ID was handed out twice across every test above', () => {
  expect(ledger.size).toBeGreaterThan(1000);
  expect(ledger.duplicates).toEqual([]);
});
