// Each verb of the built `idgen` against a real etcd and real `idgen-server` processes (region 2, slots
// 3 and 4), then faults: a paused node, a poisoned last-ms record, an unreachable etcd or node.
import { Etcd3 } from 'etcd3';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { leaseKeys } from '@idgen/lease/records';
import { cleanupAll, freePort, startEtcd, type EtcdServer } from '@idgen/testing';
import { idgen, idgenJson, startNode, waitFor, type ServerNode } from './support.test-helper.js';

jest.setTimeout(120_000);

const REGION = 2;
const TTL_SECONDS = 6;
let etcd: EtcdServer;
let nodeA: ServerNode;
let nodeB: ServerNode;

interface StatusJson {
  nodes: {
    url: string;
    nodeId?: string;
    state: string;
    region?: number;
    worker?: number;
    fenceReason?: string;
    registered?: boolean;
    keepAliveAgeSeconds?: number;
    readinessReason?: string;
  }[];
}
interface LeasesJson {
  slots: {
    region: number;
    worker: number;
    holder: { nodeId: string; kind: string; address: string; ttlSeconds?: number; registered: boolean } | null;
    lastMs: { ms: number; ageMs: number; released: boolean; verdict: string } | null;
    flags: string[];
  }[];
}

beforeAll(async () => {
  etcd = await startEtcd();
  // The region's etcd is bound to its code before its first node.
  const init = await idgen(['region', 'init', '--sole-cluster', '--region', String(REGION), '--etcd', etcd.clientUrl]);
  expect(init).toMatchObject({ code: 0, stderr: '' });
  [nodeA, nodeB] = await Promise.all([
    startNode(etcd.clientUrl, { region: REGION, worker: 3, nodeId: 'node-a', ttlSeconds: TTL_SECONDS }),
    startNode(etcd.clientUrl, { region: REGION, worker: 4, nodeId: 'node-b', ttlSeconds: TTL_SECONDS }),
  ]);
  await Promise.all([nodeA.ready(), nodeB.ready()]);
});

afterAll(async () => {
  nodeB?.process.signal('SIGCONT');
  await cleanupAll();
});

const etcdArgs = (): string[] => ['--etcd', etcd.clientUrl];

describe('against two serving nodes', () => {
  it('status --etcd --region shows both serving, on their slots and in discovery, exit 0', async () => {
    const table = await idgen(['status', ...etcdArgs(), '--region', String(REGION)]);
    expect(table.stderr).toBe('');
    expect(table.code).toBe(0);
    const lines = table.stdout.trim().split('\n');
    expect(lines[0]).toMatch(
      /^NODE\s+ADDRESS\s+REGION\s+WORKER\s+STATE\s+READINESS\s+FENCE\s+KEEPALIVE\s+CLOCK\s+FLOOR\s+LAST-MINTED\s+DISCOVERY\s+VERSION$/,
    );
    expect(lines.slice(1).map((l) => l.split(/\s+/).slice(0, 5))).toEqual([
      ['node-a', nodeA.url.replace('http://', ''), '2', '3', 'serving'],
      ['node-b', nodeB.url.replace('http://', ''), '2', '4', 'serving'],
    ]);
    // READINESS: "ready" from a server that reports readiness (GetStatus fields 19-23), "-" from one before it.
    for (const l of lines.slice(1)) expect(['ready', '-']).toContain(l.split(/\s+/)[5]);

    const { code, json } = await idgenJson<StatusJson>(['status', ...etcdArgs(), '--region', String(REGION)]);
    expect(code).toBe(0);
    expect(json.nodes).toMatchObject([
      { nodeId: 'node-a', state: 'serving', region: REGION, worker: 3, fenceReason: '', registered: true },
      { nodeId: 'node-b', state: 'serving', region: REGION, worker: 4, fenceReason: '', registered: true },
    ]);
    for (const n of json.nodes) expect([undefined, 'ready']).toContain(n.readinessReason);
    for (const n of json.nodes) expect(n.keepAliveAgeSeconds).toBeGreaterThanOrEqual(0);
  });

  it('status --server asks one node', async () => {
    const { code, json } = await idgenJson<StatusJson>(['status', '--server', nodeA.url]);
    expect(code).toBe(0);
    expect(json.nodes).toHaveLength(1);
    expect(json.nodes[0]).toMatchObject({ url: nodeA.url, nodeId: 'node-a', state: 'serving', worker: 3 });
    expect(json.nodes[0]).not.toHaveProperty('registered');
  });

  it("next -n 5 through etcd discovery prints 5 distinct IDs that decode to region 2 and a node's slot", async () => {
    const r = await idgen(['next', '-n', '5', ...etcdArgs(), '--region', String(REGION)]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const ids = r.stdout.trim().split('\n');
    expect(ids).toHaveLength(5);
    expect(new Set(ids).size).toBe(5);
    const decoded = await idgen(['decode'], r.stdout);
    expect(decoded.code).toBe(0);
    const fields = decoded.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { id: string; region: number; worker: number });
    expect(fields.map((f) => f.id)).toEqual(ids);
    for (const f of fields) {
      expect(f.region).toBe(REGION);
      expect([3, 4]).toContain(f.worker);
    }
  });

  it('next --server --json prints the IDs of that node', async () => {
    const { code, json } = await idgenJson<{ ids: string[] }>(['next', '-n', '3', '--server', nodeB.url]);
    expect(code).toBe(0);
    expect(json.ids).toHaveLength(3);
    const decoded = await idgen(['decode', ...json.ids]);
    for (const line of decoded.stdout.trim().split('\n'))
      expect(JSON.parse(line)).toMatchObject({ region: REGION, worker: 4 });
  });

  it('layout prints the record the nodes wrote (docs/design.md §1 defaults)', async () => {
    const { code, json } = await idgenJson<Record<string, unknown>>(['layout', ...etcdArgs()]);
    expect(code).toBe(0);
    expect(json).toMatchObject({
      ...DEFAULT_LAYOUT.toRecord(),
      epoch: '2024-01-01T00:00:00.000Z',
      maxRegion: 7,
      maxWorker: 127,
      spareCodes: [5, 6, 7],
    });
    const table = await idgen(['layout', ...etcdArgs()]);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/^epoch\s+2024-01-01T00:00:00\.000Z \(1704067200000 Unix ms\)$/m);
    expect(table.stdout).toMatch(/^sequence\s+12 bits/m);
    expect(table.stdout).toMatch(/^spare codes\s+5, 6, 7 \(held for new regions; loans: idgen spare list\)$/m);
  });

  it('leases shows each slot held, its TTL, in discovery, last-ms fresh and not released, exit 0', async () => {
    const { code, json } = await idgenJson<LeasesJson>(['leases', ...etcdArgs(), '--region', String(REGION)]);
    expect(code).toBe(0);
    expect(
      json.slots.map((s) => [s.worker, s.holder?.nodeId, s.holder?.kind, s.holder?.address, s.holder?.registered]),
    ).toEqual([
      [3, 'node-a', 'service', nodeA.url.replace('http://', ''), true],
      [4, 'node-b', 'service', nodeB.url.replace('http://', ''), true],
    ]);
    for (const s of json.slots) {
      expect(s.holder?.ttlSeconds).toBeGreaterThan(0);
      expect(s.lastMs).toMatchObject({ released: false, verdict: 'ok' });
      expect(s.flags).toEqual([]);
    }
    const table = await idgen(['leases', ...etcdArgs(), '--region', String(REGION)]);
    expect(table.code).toBe(0);
    expect(table.stdout.split('\n')[0]).toMatch(
      /^REGION\s+WORKER\s+HOLDER\s+KIND\s+ADDRESS\s+TTL\s+DISCOVERY\s+LAST-MS\s+AGE\s+RELEASED\s+FLAGS$/,
    );
    expect(table.stdout).toMatch(/^2\s+3\s+node-a\s+service\s+\S+\s+\ds\s+yes\s+\S+Z\s+\d+\.\ds ago\s+no\s+-$/m);
  });
});

describe('faults', () => {
  it('a poisoned last-ms (an hour ahead) is flagged POISONED with exit 1; other regions stay clean', async () => {
    const client = new Etcd3({ hosts: etcd.clientUrl });
    const key = leaseKeys.lastMs('/idgen', 5, 9);
    try {
      const ms = Date.now() + 3_600_000;
      await client
        .put(key)
        .value(JSON.stringify({ ms, released: true, nodeId: 'forger', at: new Date().toISOString() }));
      const { code, json, stderr } = await idgenJson<LeasesJson>(['leases', ...etcdArgs()]);
      expect(code).toBe(1);
      const slot = json.slots.find((s) => s.region === 5 && s.worker === 9);
      expect(slot).toMatchObject({
        holder: null,
        lastMs: { ms, released: true, verdict: 'poisoned' },
        flags: ['poisoned'],
      });
      expect(stderr).toMatch(/region 5 worker 9: poisoned/);
      const table = await idgen(['leases', ...etcdArgs(), '--region', '5']);
      expect(table.code).toBe(1);
      expect(table.stdout).toMatch(/^5\s+9\s+-\s+-\s+-\s+-\s+-\s+\S+Z\s+\d+\.\ds AHEAD\s+yes\s+POISONED$/m);
      // Region 2 alone has nothing wrong.
      expect((await idgen(['leases', ...etcdArgs(), '--region', String(REGION)])).code).toBe(0);
      // A corrupt record is a problem too.
      await client.put(key).value('not json');
      const corrupt = await idgenJson<LeasesJson>(['leases', ...etcdArgs(), '--region', '5']);
      expect(corrupt.code).toBe(1);
      expect(corrupt.json.slots[0]?.flags[0]).toMatch(/^corrupt: .*not JSON/);
    } finally {
      await client.delete().key(key);
      client.close();
    }
  });

  it('a paused node (SIGSTOP) shows unreachable (exit 1); past its TTL its slot is free and not released; woken, it serves again', async () => {
    nodeB.process.signal('SIGSTOP');
    // Asked within the TTL (6 s) the paused node is still in etcd; node-a has 2.5 s to answer on a loaded machine.
    const paused = await idgenJson<StatusJson>([
      'status',
      ...etcdArgs(),
      '--region',
      String(REGION),
      '--timeout-ms',
      '2500',
    ]);
    expect(paused.code).toBe(1);
    expect(paused.json.nodes.map((n) => [n.nodeId, n.state])).toEqual([
      ['node-a', 'serving'],
      ['node-b', 'unreachable'],
    ]);

    // etcd expires the paused node's lease: worker key and discovery record go, last-ms stays, not released.
    let slots: LeasesJson['slots'] = [];
    await waitFor("etcd to expire the paused node's lease", async () => {
      slots = (await idgenJson<LeasesJson>(['leases', ...etcdArgs(), '--region', String(REGION)])).json.slots;
      return slots.find((s) => s.worker === 4)?.holder === null;
    });
    expect(slots.find((s) => s.worker === 4)?.lastMs).toMatchObject({ released: false, verdict: 'ok' });
    const onlyA = await idgenJson<StatusJson>(['status', ...etcdArgs(), '--region', String(REGION)]);
    expect(onlyA.code).toBe(0);
    expect(onlyA.json.nodes.map((n) => n.nodeId)).toEqual(['node-a']);

    // Woken, node-b finds its lease gone, claims its slot again, waits out the floor, serves.
    nodeB.process.signal('SIGCONT');
    await waitFor(
      'node-b to serve again',
      async () => {
        const r = await idgenJson<StatusJson>(['status', ...etcdArgs(), '--region', String(REGION)]);
        return r.code === 0 && r.json.nodes.length === 2;
      },
      30_000,
    );
  });

  it('exit 3 when etcd or the node cannot be reached', async () => {
    const nobody = `http://127.0.0.1:${await freePort()}`;
    for (const args of [
      ['status', '--etcd', nobody, '--timeout-ms', '1500'],
      ['leases', '--etcd', nobody, '--timeout-ms', '1500'],
      ['layout', '--etcd', nobody, '--timeout-ms', '1500'],
      ['status', '--server', nobody, '--timeout-ms', '1500'],
      ['next', '--server', nobody, '--timeout-ms', '1500'],
      ['next', '--etcd', nobody, '--region', String(REGION), '--timeout-ms', '1500'],
    ]) {
      const r = await idgen(args);
      expect([args[0], r.code]).toEqual([args[0], 3]);
      expect(r.stderr).toMatch(new RegExp(`^idgen ${args[0]}: `));
    }
  });

  it('next and status exit 1 for a region with no node', async () => {
    const next = await idgen(['next', ...etcdArgs(), '--region', '6']);
    expect(next.code).toBe(1);
    expect(next.stdout).toBe('');
    expect(next.stderr).toMatch(/^idgen next: no serving node in region 6/);
    const status = await idgen(['status', ...etcdArgs(), '--region', '6']);
    expect(status.code).toBe(1);
    expect(status.stderr).toMatch(/^idgen status: no nodes found in etcd for region 6/);
  });

  it('layout exits 1 on a prefix no node ever used', async () => {
    const r = await idgen(['layout', ...etcdArgs(), '--etcd-prefix', '/nobody']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/no layout record at \/nobody\/layout/);
  });
});
