// `idgen leases` against a real etcd where an embedded source (@idgen/embedded, in this process) holds a slot of
// the embedded range beside nothing else: its KIND is `embedded`, it has no address and is not in discovery.
import { createEmbeddedIdSource, type EmbeddedIdSource } from '@idgen/embedded';
import { cleanupAll, startEtcd, type EtcdServer } from '@idgen/testing';
import { idgen, idgenJson } from './support.test-helper.js';

jest.setTimeout(120_000);

let etcd: EtcdServer;
let source: EmbeddedIdSource;

interface LeasesJson {
  slots: {
    region: number;
    worker: number;
    holder: { nodeId: string; kind: string; address: string; ttlSeconds?: number; registered: boolean } | null;
    lastMs: { released: boolean; verdict: string } | null;
    flags: string[];
  }[];
}

beforeAll(async () => {
  etcd = await startEtcd();
  // The region's etcd is bound to its code before its first holder.
  expect(await idgen(['region', 'init', '--sole-cluster', '--region', '2', '--etcd', etcd.clientUrl])).toMatchObject({
    code: 0,
  });
  source = createEmbeddedIdSource({
    etcd: { endpoints: [etcd.clientUrl] },
    region: 2,
    nodeId: 'orders-embedded-1',
    timeSource: 'none',
  });
  await source.ready();
});

afterAll(async () => {
  await source?.close();
  await cleanupAll();
});

it('leases shows an embedded holder as kind embedded, with no address and not in discovery, exit 0', async () => {
  const worker = source.status().worker as number;
  expect(worker).toBeGreaterThanOrEqual(18); // the embedded range's default, 18-127
  source.nextIdSync();

  const { code, json } = await idgenJson<LeasesJson>(['leases', '--etcd', etcd.clientUrl, '--region', '2']);
  expect(code).toBe(0);
  expect(
    json.slots.map((s) => [
      s.region,
      s.worker,
      s.holder?.nodeId,
      s.holder?.kind,
      s.holder?.address,
      s.holder?.registered,
      s.flags,
    ]),
  ).toEqual([[2, worker, 'orders-embedded-1', 'embedded', '', false, []]]);
  expect(json.slots[0]?.lastMs).toMatchObject({ released: false, verdict: 'ok' });

  const table = await idgen(['leases', '--etcd', etcd.clientUrl, '--region', '2']);
  expect(table.code).toBe(0);
  expect(table.stdout.split('\n')[0]).toMatch(
    /^REGION\s+WORKER\s+HOLDER\s+KIND\s+ADDRESS\s+TTL\s+DISCOVERY\s+LAST-MS\s+AGE\s+RELEASED\s+FLAGS$/,
  );
  expect(table.stdout).toMatch(
    new RegExp(
      `^2\\s+${worker}\\s+orders-embedded-1\\s+embedded\\s+-\\s+\\ds\\s+no\\s+\\S+Z\\s+\\d+\\.\\ds ago\\s+no\\s+-$`,
      'm',
    ),
  );
});
