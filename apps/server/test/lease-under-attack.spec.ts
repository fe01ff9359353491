// No client can cost a node its lease (docs/design.md §8 item 4): a real etcd with the default lease TTL
// (6 s), one node, and each attack of abuse-attacker.js in turn, plus a NextIds(4096) burst for 30 s, while
// /readyz is polled every 250 ms. The node must keep its slot throughout: no `lease` fence, no lease churn,
// /readyz 200 at every poll, and a probe's NextIds(1) served during the burst.
import { join } from 'node:path';
import { bindRegion, cleanupAll, spawnProcess, startEtcd } from '@idgen/testing';
import { idClient, startServer, type ServerNode } from './support.test-helper.js';

jest.setTimeout(400_000);
afterAll(() => cleanupAll());

const ATTACKS: [string, number][] = [
  ['nextids-4096', 30_000],
  ['continuation', 4_000],
  ['hpack-bomb', 4_000],
  ['settings', 4_000],
  ['made-you-reset', 4_000],
  ['rapid-reset', 4_000],
  ['stream-limit', 4_000],
  ['ping', 4_000],
  ['empty-data', 4_000],
  ['window-update', 4_000],
  ['unknown-type', 4_000],
];

/** A counter's value from a Prometheus text scrape (0 when the series is absent). */
function counter(text: string, name: string, label: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(label));
  return line === undefined ? 0 : Number(line.split(' ').pop());
}

describe('the lease under attack (real etcd, default TTL)', () => {
  let node: ServerNode;

  beforeAll(async () => {
    const etcd = await startEtcd();
    await bindRegion(etcd, 2); // idgen region init, before the region's first node
    node = await startServer(['--region', '2', '--etcd', etcd.clientUrl, '--time-source', 'none', '--workers', '7']);
    await node.ready(30_000);
  });
  afterAll(() => node.stop());

  it.each(ATTACKS)('%s for %d ms: the node keeps its slot, /readyz stays 200, a probe is served', async (name, ms) => {
    const probe = idClient(node.baseUrl, 'grpc-h2');
    const attacker = spawnProcess(process.execPath, [
      join(__dirname, 'abuse-attacker.js'),
      name,
      String(node.port),
      String(ms),
    ]);
    let polls = 0;
    const notReady: number[] = [];
    let probes = 0;
    let probeFailures = 0;
    while (attacker.exitStatus() === undefined) {
      const res = await fetch(`${node.baseUrl}/readyz`, { signal: AbortSignal.timeout(2_000) }).catch(() => undefined);
      polls++;
      if (res?.status !== 200) notReady.push(res?.status ?? 0);
      probes++;
      const ok = await probe.nextIds({ count: 1 }, { signal: AbortSignal.timeout(2_000) }).then(
        (r) => r.blocks.length === 1,
        () => false,
      );
      if (!ok) probeFailures++;
      await new Promise((r) => setTimeout(r, 250));
    }
    expect((await attacker.exited).code).toBe(0);
    const metrics = await (await fetch(node.metricsUrl ?? '')).text();
    const lost = counter(metrics, 'idgen_lease_churn_total', 'event="lost"');
    const leaseFences = counter(metrics, 'idgen_fences_total', 'reason="lease"');
    const failures = counter(metrics, 'idgen_lease_keepalive_failures_total', '');
    console.log(
      `${name}: ${polls} /readyz polls, ${notReady.length} not 200; probes ${probeFailures}/${probes} failed; keep-alive failures so far ${failures}`,
    );
    expect(node.process.exitStatus()).toBeUndefined();
    expect(lost).toBe(0);
    expect(leaseFences).toBe(0);
    expect(notReady).toEqual([]);
    expect(probeFailures).toBeLessThanOrEqual(Math.floor(probes / 10));
  });
});
