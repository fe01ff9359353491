// idgen region init | show, run as the built `idgen` against real etcd servers (docs/design.md §5, region binding):
// region 2's etcd is bound to 2 once, idempotently, and refused another code; a spare-code loan to region 3 is refused
// there (it belongs in region 3's etcd); show prints the binding, and exits 1 on an etcd never bound.
import { Etcd3 } from 'etcd3';
import { startEtcd, cleanupAll, tempDirSync } from '@idgen/testing';
import { idgen, idgenJson } from './support.test-helper.js';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

jest.setTimeout(60_000);

let regionTwo: string;
let unbound: string;
let restored: string;

beforeAll(async () => {
  [regionTwo, unbound, restored] = (await Promise.all([startEtcd(), startEtcd(), startEtcd()])).map(
    (e) => e.clientUrl,
  ) as [string, string, string];
});

afterAll(() => cleanupAll());

interface ShowJson {
  record: { code: number; clusterId: string; at: string } | null;
  clusterId: string;
  sameCluster?: boolean;
}

describe('idgen region', () => {
  it('init binds once (again: nothing written), refuses another code; show prints the binding', async () => {
    const two = ['--etcd', regionTwo];
    expect((await idgen(['region', 'init', '--sole-cluster', ...two])).code).toBe(2); // no --region
    expect((await idgen(['region', 'init', '--sole-cluster', '--region', '8', ...two])).code).toBe(2);

    const init = await idgen(['region', 'init', '--sole-cluster', '--region', '2', ...two]);
    expect(init).toMatchObject({ code: 0, stderr: '' });
    expect(init.stdout).toMatch(
      /^region 2: this etcd \(cluster \d+\) is now bound to region code 2; lease TTL ceiling 6 s\n$/,
    );

    const again = await idgen(['region', 'init', '--sole-cluster', '--region', '2', ...two]);
    expect(again).toMatchObject({ code: 0, stderr: '' });
    expect(again.stdout).toMatch(
      /^region 2: already bound \(cluster \d+, since \S+\); nothing written; lease TTL ceiling 6 s\n$/,
    );
    const againJson = await idgenJson<{ changed: boolean; record: { code: number } }>([
      'region',
      'init',
      '--sole-cluster',
      '--region',
      '2',
      ...two,
    ]);
    expect(againJson).toMatchObject({ code: 0, json: { changed: false, record: { code: 2 } } });

    const other = await idgen(['region', 'init', '--sole-cluster', '--region', '3', ...two]);
    expect(other).toMatchObject({ code: 1, stdout: '' });
    expect(other.stderr).toMatch(
      /^idgen region init: this etcd is already bound to region 2 \(\/idgen\/region, since \S+\): one etcd serves one region code\n$/,
    );

    const show = await idgen(['region', 'show', ...two]);
    expect(show).toMatchObject({ code: 0, stderr: '' });
    expect(show.stdout).toMatch(/^region 2: bound \S+ in cluster \d+\n$/);
    const shown = await idgenJson<ShowJson>(['region', 'show', ...two]);
    expect(shown.code).toBe(0);
    expect(shown.json).toEqual({
      record: { code: 2, clusterId: shown.json.clusterId, at: expect.any(String) },
      clusterId: expect.stringMatching(/^\d+$/),
      sameCluster: true,
    });
  });

  it('an etcd not bound yet needs --config or --sole-cluster: with neither, exit 1 and nothing written', async () => {
    // Typed under pressure, a fresh etcd bound to a code another cluster still serves mints that code's IDs twice
    // (issue 31 case 4): the step checks the deployment file's clusters, or the operator states there are none.
    const bare = await idgen(['region', 'init', '--region', '4', '--etcd', unbound]);
    expect(bare).toMatchObject({ code: 1, stdout: '' });
    expect(bare.stderr).toMatch(
      /^idgen region init: this etcd is not bound yet and no deployment file was given: give --config <deployment\.json>.*or state --sole-cluster when no other etcd cluster of the deployment serves region 4/,
    );
    const both = await idgen([
      'region',
      'init',
      '--region',
      '4',
      '--etcd',
      unbound,
      '--sole-cluster',
      '--config',
      'x.json',
    ]);
    expect(both.code).toBe(2);
    expect((await idgen(['region', 'show', '--etcd', unbound])).code).toBe(1); // still unbound
  });

  it('show exits 1 on an etcd never bound', async () => {
    const r = await idgen(['region', 'show', '--etcd', unbound]);
    expect(r).toMatchObject({ code: 1, stdout: '' });
    expect(r.stderr).toMatch(/^idgen region show: \/idgen\/region is absent: this etcd was never bound/);
    const json = await idgenJson<ShowJson>(['region', 'show', '--etcd', unbound]);
    expect(json).toMatchObject({ code: 1, json: { record: null, clusterId: expect.stringMatching(/^\d+$/) } });
  });

  it("spare lend to region 3 against region 2's etcd exits 1: the loan belongs in region 3's etcd", async () => {
    expect((await idgen(['region', 'init', '--sole-cluster', '--region', '2', '--etcd', regionTwo])).code).toBe(0);
    // The registry (here region 2's etcd) is never asked: the binding refuses first.
    const deployment = join(tempDirSync('cli-region').path, 'deployment.json');
    writeFileSync(deployment, JSON.stringify({ regions: [{ name: 'r2', etcd: [regionTwo] }] }));
    const r = await idgen([
      'spare',
      'lend',
      '5',
      '--to-region',
      '3',
      '--etcd',
      regionTwo,
      '--registry',
      regionTwo,
      '--config',
      deployment,
    ]);
    expect(r).toMatchObject({ code: 1, stdout: '' });
    expect(r.stderr).toMatch(/^idgen spare lend: this etcd serves region 2 \(\/idgen\/region\), not region 3/);
    const list = await idgenJson<{ codes: { code: number; record: unknown }[] }>([
      'spare',
      'list',
      '--etcd',
      regionTwo,
    ]);
    expect(list.json.codes.find((c) => c.code === 5)).toMatchObject({ record: null }); // nothing recorded
  });

  it('restored marks every slot unclean as of now (never lowering a record) and rebinds; another code exits 1', async () => {
    const etcd = ['--etcd', restored];
    expect((await idgen(['region', 'init', '--sole-cluster', '--region', '2', ...etcd])).code).toBe(0);
    const kv = new Etcd3({ hosts: [restored] });
    try {
      const ahead = Date.now() + 3_600_000;
      const aheadRecord = { ms: ahead, released: true, nodeId: 'n', at: 't', ttlMs: 6000 };
      await kv.put('/idgen/regions/2/last-ms/3').value(JSON.stringify(aheadRecord));
      const wrong = await idgen(['region', 'restored', '--region', '3', ...etcd]);
      expect(wrong).toMatchObject({ code: 1, stdout: '' });
      expect(wrong.stderr).toMatch(/^idgen region restored: this etcd serves region 2 .*, not region 3/);

      const from = Date.now();
      const r = await idgenJson<{ written: number; codes: number[]; ms: number; clusterId: string }>([
        'region',
        'restored',
        '--region',
        '2',
        ...etcd,
      ]);
      const to = Date.now();
      expect(r).toMatchObject({ code: 0, json: { written: 128, codes: [2] } });
      const read = async (w: number) =>
        JSON.parse((await kv.get(`/idgen/regions/2/last-ms/${w}`).string()) ?? 'null') as {
          ms: number;
          released: boolean;
          nodeId: string;
        };
      const marked = await read(4);
      expect(marked).toMatchObject({ released: false, nodeId: 'region-restored' });
      expect(marked.ms).toBeGreaterThanOrEqual(from);
      expect(marked.ms).toBeLessThanOrEqual(to);
      // A record above now keeps its millisecond, marked unclean.
      expect(await read(3)).toMatchObject({ ms: ahead, released: false, nodeId: 'region-restored' });
      const binding = JSON.parse((await kv.get('/idgen/region').string()) ?? 'null') as { restoredAt?: string };
      expect(typeof binding.restoredAt).toBe('string');
    } finally {
      kv.close();
    }
    const text = await idgen(['region', 'restored', '--region', '2', ...etcd]);
    expect(text.stdout).toMatch(
      /^region 2: 128 slot\(s\) of code\(s\) 2 marked unclean at \S+ .*\(unchanged\), generation 1; marks cover a TTL of 6 s\n$/,
    );
  });
});
