// DNS discovery against the TLS deployment fixture: three real nodes of region 2 with mTLS, a
// real resolver (node:dns) asking a DNS server the test starts on loopback, and three "pod IPs" (127.0.0.11-13 on
// one port, as a headless Service lists pods) forwarding to the nodes. The certificate covers the DNS name and
// 127.0.0.1, not the pod IPs: a client that got IDs checked the name.
import { cleanupAll, freePort, startDeployment, startDnsServer } from '@idgen/testing';
import type { Deployment, DeploymentRegion, TestDnsServer } from '@idgen/testing';
import { createIdClient, dns, isIdsUnavailableError, type DnsDiscovery, type IdClient } from '../src/index.js';
import { IdLedger, regionOf, requireServerBuild, steadyLoad, waitUntil } from './harness.test-helper.js';
import { startPodAddress, type PodAddress } from './pod-address.test-helper.js';

jest.setTimeout(600_000);

const NAME = 'idgen-server.region-2.svc.test';
const POD_IPS = ['127.0.0.11', '127.0.0.12', '127.0.0.13'];

let deployment: Deployment;
let region: DeploymentRegion;
let dnsServer: TestDnsServer;
let port: number;
let pods: PodAddress[] = [];

beforeAll(async () => {
  requireServerBuild();
  deployment = await startDeployment({ regions: [2], nodesPerRegion: 3 });
  region = deployment.region(2);
  dnsServer = await startDnsServer();
  port = await freePort();
  pods = await Promise.all(POD_IPS.map((ip, i) => startPodAddress(ip, port, region.nodes[i]?.address as string)));
});

beforeEach(() => {
  dnsServer.fail(undefined);
  dnsServer.set(NAME, POD_IPS);
});

afterAll(async () => {
  await Promise.all(pods.map((p) => p.close()));
  await deployment?.stop();
  await cleanupAll();
});

/** A client of region 2 over `discovery`, with the caller's client certificate. */
function clientOver(discovery: DnsDiscovery, extra: { deadlineMs?: number } = {}): IdClient {
  return createIdClient({
    region: 2,
    discovery,
    tls: { ca: region.caller.ca, cert: region.caller.cert, key: region.caller.key },
    bufferSize: 10,
    lowWater: 5,
    deadlineMs: extra.deadlineMs ?? 10_000,
  });
}

const hostsOf = (client: IdClient): string[] =>
  client
    .stats()
    .nodes.map((n) => new URL(n.url).hostname)
    .sort();

it('keeps getting IDs through a rolling restart of every node: 0 failed calls, 0 duplicates', async () => {
  const discovery = dns(`${NAME}:${port}`, { servers: [dnsServer.address], intervalMs: 1000 });
  const client = clientOver(discovery);
  const ledger = new IdLedger();
  const moved: PodAddress[] = [];
  let load: ReturnType<typeof steadyLoad> | undefined;
  try {
    await waitUntil('the client lists the three pod addresses', () => hostsOf(client).join() === POD_IPS.join());
    const running = steadyLoad([client], { callersPerClient: 4, pauseMs: 2, ledger });
    load = running;
    let ips = [...POD_IPS];
    for (const [i, node] of region.nodes.entries()) {
      // As on Kubernetes: a terminating pod leaves the Service's records, and comes back under a new IP once ready.
      ips = ips.filter((ip) => ip !== POD_IPS[i]);
      dnsServer.set(NAME, ips);
      await node.restart();
      const pod = await startPodAddress(`127.0.0.${21 + i}`, port, node.address);
      moved.push(pod);
      ips = [...ips, pod.ip];
      dnsServer.set(NAME, ips);
      const callsBefore = running.report.calls;
      await waitUntil('the client uses the new pod address', () => pod.bytesIn() > 0);
      await waitUntil('calls go on after the restart', () => running.report.calls > callsBefore + 100);
    }
    const report = await running.stop();
    expect(report.failures).toEqual([]);
    expect(ledger.duplicates).toEqual([]);
    expect(report.calls).toBeGreaterThan(300);
    expect([...report.regions.keys()]).toEqual([2]);
    expect(hostsOf(client)).toEqual(moved.map((p) => p.ip));
    expect(discovery.problem()).toBeUndefined();
  } finally {
    await load?.stop(); // a failed step must not leave the callers looping on a closed client
    await client.close();
    discovery.close();
    await Promise.all(moved.map((p) => p.close()));
  }
});

it('stops using an address once its record is removed; in-flight calls finish', async () => {
  const discovery = dns(`${NAME}:${port}`, { servers: [dnsServer.address], intervalMs: 300 });
  const client = clientOver(discovery);
  const ledger = new IdLedger();
  let load: ReturnType<typeof steadyLoad> | undefined;
  try {
    await waitUntil('the client lists the three pod addresses', () => hostsOf(client).join() === POD_IPS.join());
    const removed = pods[2] as PodAddress;
    await waitUntil('the third pod has served', async () => {
      ledger.add(...(await client.nextIds(10)));
      return removed.bytesIn() > 0;
    });
    const running = steadyLoad([client], { callersPerClient: 2, pauseMs: 2, ledger });
    load = running;
    dnsServer.set(NAME, POD_IPS.slice(0, 2));
    await waitUntil('the client no longer lists the removed address', () => !hostsOf(client).includes(removed.ip));
    // Its connection closes once the calls on it finish (the TLS close_notify is its last 24 bytes).
    await waitUntil('the client closes its connection to the removed address', () => removed.openConnections() === 0);
    const bytes = removed.bytesIn();
    const accepted = removed.accepted();
    const callsAt = running.report.calls;
    await waitUntil('300 more calls are served', () => running.report.calls > callsAt + 300);
    const report = await running.stop();
    expect(removed.bytesIn()).toBe(bytes);
    expect(removed.accepted()).toBe(accepted);
    expect(hostsOf(client)).toEqual(POD_IPS.slice(0, 2));
    expect(report.failures).toEqual([]);
    expect(ledger.duplicates).toEqual([]);
  } finally {
    await load?.stop();
    await client.close();
    discovery.close();
  }
});

it('re-resolves soon after a node fails, long before its interval', async () => {
  const discovery = dns(`${NAME}:${port}`, { servers: [dnsServer.address], intervalMs: 600_000, retryMs: 200 });
  const client = clientOver(discovery);
  const gone = pods[1] as PodAddress;
  try {
    await waitUntil('the client lists the three pod addresses', () => hostsOf(client).join() === POD_IPS.join());
    // The pod goes away (its address refuses) and its record with it; only the failure can make the client look.
    dnsServer.set(NAME, [POD_IPS[0] as string, POD_IPS[2] as string]);
    await gone.close();
    const queries = dnsServer.queries(NAME);
    await waitUntil(
      'the client drops the failed pod',
      async () => {
        await client.nextIds(10);
        return !hostsOf(client).includes(gone.ip);
      },
      30_000,
    );
    expect(dnsServer.queries(NAME)).toBeGreaterThan(queries);
  } finally {
    await client.close();
    discovery.close();
    pods[1] = await startPodAddress(gone.ip, port, region.nodes[1]?.address as string);
  }
});

it('keeps the last good set while DNS fails or has no records, and says so in problem()', async () => {
  const discovery = dns(`${NAME}:${port}`, { servers: [dnsServer.address], intervalMs: 200, timeoutMs: 500 });
  const client = clientOver(discovery);
  try {
    await waitUntil('the client lists the three pod addresses', () => hostsOf(client).join() === POD_IPS.join());
    for (const mode of ['servfail', 'silent'] as const) {
      dnsServer.fail(mode);
      await waitUntil(`problem() reports the ${mode} DNS`, () => discovery.problem() !== undefined);
      expect(discovery.problem()).toMatch(new RegExp(`^DNS ${NAME}: .*keeping the last 3 addresses$`));
      const ids = await client.nextIds(50);
      expect(ids.every((id) => regionOf(id) === 2)).toBe(true);
      expect(hostsOf(client)).toEqual(POD_IPS);
    }
    // No records at all is not taken as "no nodes": the last set stays.
    dnsServer.fail(undefined);
    dnsServer.remove(NAME);
    await waitUntil('problem() reports no records', () => /no A or AAAA records/.test(discovery.problem() ?? ''));
    expect(hostsOf(client)).toEqual(POD_IPS);
    dnsServer.set(NAME, POD_IPS);
    await waitUntil('problem() clears', () => discovery.problem() === undefined);
  } finally {
    await client.close();
    discovery.close();
  }
});

it('checks the certificate against the DNS name: a name the certificate lacks gets no ID', async () => {
  dnsServer.set('not-on-the-cert.test', POD_IPS);
  const discovery = dns(`not-on-the-cert.test:${port}`, { servers: [dnsServer.address] });
  const client = clientOver(discovery, { deadlineMs: 1500 });
  try {
    const outcome = await client.nextId().then(
      (id) => `an ID: ${id}`,
      (e: unknown) => (isIdsUnavailableError(e) ? 'IdsUnavailableError' : `another error: ${String(e)}`),
    );
    expect(outcome).toBe('IdsUnavailableError');
    expect(client.stats().nodes.every((n) => n.lastFailure !== undefined)).toBe(true);
  } finally {
    await client.close();
    discovery.close();
  }
});

it('takes a dns://server/host:port target in `nodes`, and its close() stops the resolving', async () => {
  const client = createIdClient({
    region: 2,
    nodes: [`dns://${dnsServer.address}/${NAME}:${port}`],
    tls: { ca: region.caller.ca, cert: region.caller.cert, key: region.caller.key },
  });
  const ledger = new IdLedger();
  ledger.add(...(await client.nextIds(100)));
  expect(hostsOf(client)).toEqual(POD_IPS);
  await client.close();
  const queries = dnsServer.queries(NAME);
  // The default interval is 5 s: past 2 of them, a timer left behind would have asked again.
  await new Promise((resolve) => setTimeout(resolve, 11_000));
  expect(dnsServer.queries(NAME)).toBe(queries);
  expect(ledger.duplicates).toEqual([]);
});

describe('dns() on its own', () => {
  it('resolves A and AAAA, with IPv6 addresses bracketed and the name as the TLS server name', async () => {
    dnsServer.set('mixed.test', ['127.0.0.21', '::1']);
    const discovery = dns(`dns:///mixed.test:8080`, { servers: [dnsServer.address] });
    try {
      expect(await discovery.list()).toEqual([
        { address: '127.0.0.21:8080', servername: 'mixed.test' },
        { address: '[::1]:8080', servername: 'mixed.test' },
      ]);
    } finally {
      discovery.close();
    }
  });

  it('bounds a resolve by its deadline and names DNS when it has never had an answer', async () => {
    dnsServer.fail('silent');
    const discovery = dns(`${NAME}:${port}`, { servers: [dnsServer.address], timeoutMs: 400 });
    const started = performance.now();
    try {
      await expect(discovery.list()).rejects.toThrow(new RegExp(`^DNS ${NAME}: no answer within 400 ms`));
      expect(performance.now() - started).toBeLessThan(2000);
    } finally {
      discovery.close();
    }
  });

  it('close() stops the timer at once: no query after it', async () => {
    dnsServer.set('timer.test', POD_IPS);
    const discovery = dns(`timer.test:${port}`, { servers: [dnsServer.address], intervalMs: 100 });
    const seen: number[] = [];
    discovery.watch((nodes) => seen.push(nodes.length));
    // A and AAAA per resolve: three resolves.
    await waitUntil('three resolves', () => dnsServer.queries('timer.test') >= 6);
    discovery.close();
    const queries = dnsServer.queries('timer.test');
    // Ten intervals: a timer left behind would have asked again.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect(dnsServer.queries('timer.test')).toBe(queries);
    expect(seen).toEqual([3]);
  });

  it('refuses targets without a port', () => {
    expect(() => dns('idgen-server.test')).toThrow(/host:port/);
    expect(() => dns('dns:///idgen-server.test:0')).toThrow(/port 1 … 65535/);
  });
});
