// docs/runbook.md's disaster-recovery procedures, "etcd restored from a snapshot" and "Moving a region to a new etcd
// cluster", run step by step as written: the built `idgen`, real `idgen-server` processes, real etcd servers and a
// real `etcdctl snapshot save`/`restore` (the harness's restore runs `etcdctl snapshot restore` with a new token). Each
// case counts the IDs both nodes of one slot handed out: the old node's until it fenced, the new node's from its first.
// Issue 31 cases 3 and 4 minted equal IDs here on the code before the TTL ceiling and the one-live-cluster rule.
import { cleanupAll, startEtcd, tempDir, type EtcdServer } from '@idgen/testing';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { idgen, idgenJson, startNode, type ServerNode } from './support.test-helper.js';

jest.setTimeout(180_000);

const REGION = 1;

afterAll(() => cleanupAll());

/** One NextIds call over Connect JSON; undefined when the node refuses (fenced, not ready) or does not answer. */
async function nextIds(node: ServerNode, count: number): Promise<bigint[] | undefined> {
  try {
    const res = await fetch(`${node.url}/idgen.v1.IdGenerator/NextIds`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ count }),
      signal: AbortSignal.timeout(2000),
    });
    if (!res.ok) return undefined;
    const body = (await res.json()) as { blocks?: { first: string; count: number }[] };
    const out: bigint[] = [];
    for (const b of body.blocks ?? []) for (let i = 0; i < b.count; i++) out.push(BigInt(b.first) + BigInt(i));
    return out;
  } catch {
    return undefined;
  }
}

/** Asks `node` for IDs until `stop()` says so; resolves with every ID it handed out. */
function collect(node: ServerNode, stop: () => boolean): Promise<bigint[]> {
  return (async () => {
    const all: bigint[] = [];
    while (!stop()) {
      const got = await nextIds(node, 256);
      if (got !== undefined) all.push(...got);
      else await new Promise((r) => setTimeout(r, 20));
    }
    return all;
  })();
}

function duplicates(a: readonly bigint[], b: readonly bigint[]): number {
  const seen = new Set(a);
  return b.filter((id) => seen.has(id)).length;
}

async function region(name: string, ceiling: number): Promise<{ etcd: EtcdServer; snapshot: string }> {
  const etcd = await startEtcd();
  const init = await idgen([
    'region',
    'init',
    '--sole-cluster',
    '--region',
    String(REGION),
    '--etcd',
    etcd.clientUrl,
    '--lease-ttl-ceiling',
    String(ceiling),
  ]);
  expect(init).toMatchObject({ code: 0, stderr: '' });
  expect(init.stdout).toContain(`lease TTL ceiling ${ceiling} s`);
  const dir = await tempDir(`idgen-${name}`);
  return { etcd, snapshot: join(dir.path, 'snap.db') };
}

describe("the runbook's DR procedures, as written", () => {
  it("a node whose TTL is above the deployment's ceiling exits 2 with one line, before it claims anything", async () => {
    const { etcd } = await region('dr-ceiling', 4);
    const node = await startNode(etcd.clientUrl, { region: REGION, worker: 0, nodeId: 'too-long', ttlSeconds: 8 });
    expect(await node.process.exited).toEqual({ code: 2, signal: null });
    const refusal = node.process.lines.filter((l) => l.includes('"level":"fatal"'));
    expect(refusal).toHaveLength(1);
    expect(refusal[0]).toMatch(
      /lease TTL 8 s is above this deployment's TTL ceiling of 4 s \(\/idgen\/lease-ceiling\)/,
    );
  });

  it('etcd restored from a snapshot (old host gone, new URL and token): the lost node on a longer TTL and the new node share no ID', async () => {
    const { etcd: old, snapshot } = await region('dr-restore', 30);
    await old.snapshot(snapshot); // the last backup, taken before the node below started
    const lost = await startNode(old.clientUrl, { region: REGION, worker: 0, nodeId: 'dr-lost', ttlSeconds: 30 });
    await lost.ready(120_000);
    let done = false;
    const lostIds = collect(lost, () => done);
    // Step 1: restore every member with a new cluster token (here onto a new host: another URL).
    const restored = await startEtcd();
    await restored.restore(snapshot, { clusterToken: `idgen-r1-restored-${Date.now()}` });
    old.pause(); // the disaster: the host is gone for the operator; the node, cut off, mints until its own deadline
    // Step 2: region restored; the old cluster's members were all replaced (the host is gone): --old-etcd-stopped.
    const step2 = await idgen([
      'region',
      'restored',
      '--region',
      String(REGION),
      '--etcd',
      restored.clientUrl,
      '--old-etcd-stopped',
      '--lease-ttl',
      '4',
    ]);
    expect(step2).toMatchObject({ code: 0, stderr: '' });
    expect(step2.stdout).toMatch(/marks cover a TTL of 30 s; the old cluster stated stopped\n$/);
    // Step 3: the region's nodes start against the restored etcd (a shorter TTL than the lost node's).
    const fresh = await startNode(restored.clientUrl, { region: REGION, worker: 0, nodeId: 'dr-new', ttlSeconds: 4 });
    await fresh.ready(120_000);
    const freshIds = collect(fresh, () => done);
    // Until the lost node has fenced (its deadline: 30 s − 1 s after its last keep-alive) and the new one has served.
    while ((await nextIds(lost, 1)) !== undefined) await new Promise((r) => setTimeout(r, 100));
    const more = await nextIds(fresh, 256);
    expect(more).toBeDefined();
    done = true;
    const [a, b] = await Promise.all([lostIds, freshIds]);
    expect(a.length).toBeGreaterThan(0);
    expect(b.length + (more?.length ?? 0)).toBeGreaterThan(0);
    expect(duplicates(a, [...b, ...(more ?? [])])).toBe(0);
    old.resume();
  });

  it('moving a region to a new etcd cluster while the old one runs: refused without proof; with --retire-etcd the old node fences and the two share no ID', async () => {
    const { etcd: old, snapshot } = await region('dr-move', 4);
    await old.snapshot(snapshot);
    const first = await startNode(old.clientUrl, { region: REGION, worker: 0, nodeId: 'move-old', ttlSeconds: 4 });
    await first.ready();
    let done = false;
    const oldIds = collect(first, () => done);

    // Step 1: the snapshot onto the new cluster, with a new token; the old cluster keeps running.
    const moved = await startEtcd();
    await moved.restore(snapshot, { clusterToken: `idgen-r1-moved-${Date.now()}` });
    // Without step 2's proof the move is refused, and nothing is written.
    const bare = await idgen(['region', 'restored', '--region', String(REGION), '--etcd', moved.clientUrl]);
    expect(bare).toMatchObject({ code: 1, stdout: '' });
    expect(bare.stderr).toMatch(/prove the old cluster gone first: --retire-etcd/);
    // Step 2: it answers, so retire it.
    const step2 = await idgenJson<{ generation: number; oldCluster: string }>([
      'region',
      'restored',
      '--region',
      String(REGION),
      '--etcd',
      moved.clientUrl,
      '--retire-etcd',
      old.clientUrl,
      '--lease-ttl',
      '4',
    ]);
    expect(step2).toMatchObject({ code: 0, json: { generation: 2, oldCluster: 'retired' } });
    // The old node fences at once: its worker key is gone.
    await first.process.waitForLine(/worker key .* deleted|was deleted|fenced/, 10_000);
    // Step 3: the region's nodes on the new cluster.
    const second = await startNode(moved.clientUrl, { region: REGION, worker: 0, nodeId: 'move-new', ttlSeconds: 4 });
    await second.ready(60_000);
    const newIds = collect(second, () => done);
    const more = await nextIds(second, 256);
    expect(more).toBeDefined();
    done = true;
    const [a, b] = await Promise.all([oldIds, newIds]);
    expect(a.length).toBeGreaterThan(0);
    expect(duplicates(a, [...b, ...(more ?? [])])).toBe(0);
    // A node started on the retired cluster refuses it with one line.
    const shown = await idgen(['region', 'show', '--etcd', old.clientUrl, '--json']);
    expect(shown.stdout).toContain('"retired"');
    done = true;
  });

  it('a second, fresh etcd bound to a code the deployment still serves: region init refused (exit 1, nothing written); with --retire-etcd the old node fences and the two share no ID', async () => {
    // Issue 31 case 4's other half: without the rule, `region init` on a fresh etcd succeeds whatever else serves the
    // code, and its node mints region 1 / worker 0 beside the old cluster's node (the audit saw it only afterwards).
    const { etcd: old } = await region('dr-init-twice', 4);
    const first = await startNode(old.clientUrl, { region: REGION, worker: 0, nodeId: 'init-old', ttlSeconds: 4 });
    await first.ready();
    let done = false;
    const oldIds = collect(first, () => done);
    const fresh = await startEtcd();
    const dir = await tempDir('idgen-init-twice');
    const deployment = join(dir.path, 'deployment.json');
    writeFileSync(deployment, JSON.stringify({ regions: [{ name: 'r1', etcd: [old.clientUrl] }] }));
    const init = ['region', 'init', '--region', String(REGION), '--etcd', fresh.clientUrl, '--lease-ttl-ceiling', '4'];
    // The deployment file names region 1's live etcd: refused, one line, exit 1, and the fresh etcd stays unbound.
    const bare = await idgen([...init, '--config', deployment]);
    expect(bare).toMatchObject({ code: 1, stdout: '' });
    expect(bare.stderr.trim().split('\n')).toHaveLength(1);
    expect(bare.stderr).toMatch(
      /region 1 is live in another cluster of the deployment \(region r1 .*prove the old one gone/,
    );
    expect((await idgen(['region', 'show', '--etcd', fresh.clientUrl])).code).toBe(1);
    // A proof without the deployment file is bad usage (exit 2): nothing names the cluster it proves gone.
    expect((await idgen([...init, '--old-etcd-stopped'])).code).toBe(2);
    // It answers, so retire it: the new binding is generation 2, and the old node fences at once.
    const moved = await idgenJson<{ record: { generation: number }; oldCluster: string }>([
      ...init,
      '--config',
      deployment,
      '--retire-etcd',
      old.clientUrl,
      '--json',
    ]);
    expect(moved).toMatchObject({ code: 0, json: { record: { generation: 2 }, oldCluster: 'retired' } });
    await first.process.waitForLine(/worker key .* deleted|was deleted|fenced/, 10_000);
    const second = await startNode(fresh.clientUrl, { region: REGION, worker: 0, nodeId: 'init-new', ttlSeconds: 4 });
    await second.ready(60_000);
    const more = await nextIds(second, 256);
    expect(more).toBeDefined();
    done = true;
    const a = await oldIds;
    expect(a.length).toBeGreaterThan(0);
    expect(duplicates(a, more ?? [])).toBe(0);
    // Run again with the same file: the fresh etcd is bound already, nothing written; the retired one is not live.
    expect((await idgenJson<{ changed: boolean }>([...init, '--config', deployment, '--json'])).json.changed).toBe(
      false,
    );
  });
});
