// `idgen status` says what each node runs, so a mixed-version region shows: a VERSION column (release and short
// commit), a line per region that runs more than one, and both fields in `--json`. Real etcd, three real `idgen-server`
// processes started with different IDGEN_COMMIT, the built `idgen`.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { cleanupAll, startEtcd, type EtcdServer } from '@idgen/testing';
import { idgen, idgenJson, startNode, waitFor, type ServerNode } from './support.test-helper.js';

jest.setTimeout(120_000);

const REGION = 4;
const VERSION = (
  JSON.parse(readFileSync(join(__dirname, '..', '..', 'server', 'package.json'), 'utf8')) as { version: string }
).version;
/** Two full git hashes, as CI sets IDGEN_COMMIT; the table shows their first 7 characters. */
const OLD = `aaaaaaa${'1'.repeat(33)}`;
const NEW = `bbbbbbb${'2'.repeat(33)}`;

let etcd: EtcdServer;
let nodes: ServerNode[];

interface StatusJson {
  nodes: { nodeId?: string; state: string; version?: string; commit?: string }[];
}

beforeAll(async () => {
  etcd = await startEtcd();
  const init = await idgen(['region', 'init', '--sole-cluster', '--region', String(REGION), '--etcd', etcd.clientUrl]);
  expect(init).toMatchObject({ code: 0, stderr: '' });
  // A rollout under way: two nodes on the new commit, one left on the old.
  nodes = await Promise.all(
    [
      { worker: 1, nodeId: 'v-new-1', commit: NEW },
      { worker: 2, nodeId: 'v-new-2', commit: NEW },
      { worker: 3, nodeId: 'v-old', commit: OLD },
    ].map((n) =>
      startNode(etcd.clientUrl, {
        region: REGION,
        worker: n.worker,
        nodeId: n.nodeId,
        ttlSeconds: 6,
        env: { IDGEN_COMMIT: n.commit },
      }),
    ),
  );
  await Promise.all(nodes.map((n) => n.ready()));
});

afterAll(() => cleanupAll());

const statusArgs = (): string[] => ['status', '--etcd', etcd.clientUrl, '--region', String(REGION)];

describe('idgen status in a region running two versions', () => {
  it('shows a VERSION column and says the region runs mixed versions, most-run first', async () => {
    const r = await idgen(statusArgs());
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/\s+DISCOVERY\s+VERSION$/);
    const rows = lines.slice(1, 4).map((l) => l.split(/\s+/));
    expect(rows.map((c) => [c[0], c[c.length - 1]])).toEqual([
      ['v-new-1', `${VERSION}+bbbbbbb`],
      ['v-new-2', `${VERSION}+bbbbbbb`],
      ['v-old', `${VERSION}+aaaaaaa`],
    ]);
    expect(lines.slice(4)).toEqual([
      `region ${REGION}: mixed versions: ${VERSION}+bbbbbbb (2 nodes), ${VERSION}+aaaaaaa (1)`,
    ]);
  });

  it('--json carries each node’s version and full commit', async () => {
    const { code, json } = await idgenJson<StatusJson>(statusArgs());
    expect(code).toBe(0);
    expect(json.nodes.map((n) => [n.nodeId, n.version, n.commit])).toEqual([
      ['v-new-1', VERSION, NEW],
      ['v-new-2', VERSION, NEW],
      ['v-old', VERSION, OLD],
    ]);
  });

  it('says nothing of versions once the region runs one (the old node stopped)', async () => {
    const old = nodes[2];
    if (old === undefined) throw new Error('no old node');
    await old.process.stop();
    await waitFor('the stopped node to leave etcd', async () => {
      const { json } = await idgenJson<StatusJson>(statusArgs());
      return json.nodes.length === 2;
    });
    const r = await idgen(statusArgs());
    expect(r.code).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines).toHaveLength(3);
    expect(lines.slice(1).map((l) => l.split(/\s+/).pop())).toEqual([`${VERSION}+bbbbbbb`, `${VERSION}+bbbbbbb`]);
    expect(r.stdout).not.toContain('mixed versions');
  });
});
