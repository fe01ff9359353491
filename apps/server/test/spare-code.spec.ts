// docs/design.md §7: a node refuses to start on a region code its etcd records as lent out, or on a spare
// code its etcd never adopted, with exit 2 and one line; on an adopted code it starts. Real etcd, real node processes.
// One prefix serves one region code (docs/design.md §5, region binding): each code here has its own prefix, bound to it
// by idgen region init, except the lender's, bound to region 2.
import { DEFAULT_LAYOUT } from '@idgen/core';
import { bindRegion, cleanupAll, etcdctl, startEtcd } from '@idgen/testing';
import { parseLine, spawnServer, startServer } from './support.test-helper.js';

jest.setTimeout(90_000);
afterAll(() => cleanupAll());

const base = ['--time-source', 'none', '--lease-ttl', '4', '--metrics-listen', 'off', '--listen', '127.0.0.1:0'];

/** Starts a node on `region` under `prefix` and waits for its end: its exit code and its fatal lines. */
async function refused(url: string, region: number, prefix: string): Promise<{ code: number | null; fatal: string[] }> {
  const proc = spawnServer(['--region', String(region), '--etcd', url, '--etcd-prefix', prefix, ...base]);
  const exit = await proc.exited;
  const fatal = proc.stdoutLines
    .map(parseLine)
    .filter((l) => l?.level === 'fatal')
    .map((l) => String(l?.msg));
  return { code: exit.code, fatal };
}

describe('a node on a spare region code', () => {
  it('exits 2 with one line on a code lent out or not adopted, and starts on an adopted one', async () => {
    const url = (await startEtcd()).clientUrl;
    const lentRecord = JSON.stringify({ code: 5, state: 'lent', lentTo: 2, at: new Date().toISOString() });
    for (const [prefix, code] of [
      ['/idgen', 2],
      ['/idgen-5', 5],
      ['/idgen-6', 6],
      ['/idgen-7', 7],
    ] as const) {
      await bindRegion(url, code, prefix);
      etcdctl(url, ['put', `${prefix}/layout`, JSON.stringify(DEFAULT_LAYOUT.toRecord())]);
    }
    // Region 2's etcd (the borrower's) records code 5 as lent to it.
    etcdctl(url, ['put', '/idgen/spare-codes/5', lentRecord]);

    // A node on code 5 pointed at region 2's etcd: the region binding refuses it before the spare-code check.
    const onLender = await refused(url, 5, '/idgen');
    expect(onLender.code).toBe(2);
    expect(onLender.fatal).toHaveLength(1);
    expect(onLender.fatal[0]).toMatch(
      /^this etcd serves region 2 \(\/idgen\/region\), not region 5: check --region and --etcd/,
    );

    // An etcd bound to 5 whose record says 5 is lent out (restored, or written by hand): the spare-code check refuses.
    etcdctl(url, ['put', '/idgen-5/spare-codes/5', lentRecord]);
    const lent = await refused(url, 5, '/idgen-5');
    expect(lent.code).toBe(2);
    expect(lent.fatal).toHaveLength(1);
    expect(lent.fatal[0]).toMatch(
      /^region code 5 is a spare code this etcd lent to region 2 \(\/idgen-5\/spare-codes\/5 says lent\): no node may run on it here/,
    );

    // An etcd bound to 6 that never adopted it.
    const unadopted = await refused(url, 6, '/idgen-6');
    expect(unadopted.code).toBe(2);
    expect(unadopted.fatal).toHaveLength(1);
    expect(unadopted.fatal[0]).toMatch(
      /^region code 6 is a spare code \(spare codes 5, 6, 7\) and this etcd has no adoption record \/idgen-6\/spare-codes\/6: run "idgen spare adopt 6/,
    );
    // Nothing was claimed under either code.
    for (const prefix of ['/idgen', '/idgen-5', '/idgen-6'])
      expect(etcdctl(url, ['get', '--prefix', '--keys-only', `${prefix}/regions/`])).toBe('');

    const adopted = {
      code: 7,
      state: 'adopted',
      at: new Date().toISOString(),
      adoptedFrom: { lentTo: 3, reclaimedAt: '', workers: 0, maxLastMs: -1 },
    };
    etcdctl(url, ['put', '/idgen-7/spare-codes/7', JSON.stringify(adopted)]);
    const node = await startServer([
      '--region',
      '7',
      '--etcd',
      url,
      '--etcd-prefix',
      '/idgen-7',
      '--time-source',
      'none',
      '--lease-ttl',
      '4',
      '--metrics-listen',
      'off',
    ]);
    expect(await node.ready()).toMatchObject({ msg: 'ready' });
    expect((await node.stop()).code).toBe(0);
  });
});
