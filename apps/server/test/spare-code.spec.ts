// docs/design.md §7 (issue 17): a node refuses to start on a region code its etcd records as lent out, or on a spare
// code its etcd never adopted, with exit 2 and one line; on an adopted code it starts. Real etcd, real node processes.
import { DEFAULT_LAYOUT } from '@idgen/core';
import { cleanupAll, etcdctl, startEtcd } from '@idgen/testing';
import { parseLine, spawnServer, startServer } from './support.js';

jest.setTimeout(90_000);
afterAll(() => cleanupAll());

const base = ['--time-source', 'none', '--lease-ttl', '4', '--metrics-listen', 'off', '--listen', '127.0.0.1:0'];

/** Starts a node on `region` and waits for its end: its exit code and its fatal lines. */
async function refused(url: string, region: number): Promise<{ code: number | null; fatal: string[] }> {
  const proc = spawnServer(['--region', String(region), '--etcd', url, ...base]);
  const exit = await proc.exited;
  const fatal = proc.stdoutLines
    .map(parseLine)
    .filter((l) => l?.level === 60)
    .map((l) => String(l?.msg));
  return { code: exit.code, fatal };
}

describe('a node on a spare region code', () => {
  it('exits 2 with one line on a code lent out or not adopted, and starts on an adopted one', async () => {
    const url = (await startEtcd()).clientUrl;
    etcdctl(url, ['put', '/idgen/layout', JSON.stringify(DEFAULT_LAYOUT.toRecord())]);
    etcdctl(url, [
      'put',
      '/idgen/spare-codes/5',
      JSON.stringify({ code: 5, state: 'lent', lentTo: 2, at: new Date().toISOString() }),
    ]);

    const lent = await refused(url, 5);
    expect(lent.code).toBe(2);
    expect(lent.fatal).toHaveLength(1);
    expect(lent.fatal[0]).toMatch(
      /^region code 5 is a spare code this etcd lent to region 2 \(\/idgen\/spare-codes\/5 says lent\): no node may run on it here/,
    );

    const unadopted = await refused(url, 6);
    expect(unadopted.code).toBe(2);
    expect(unadopted.fatal).toHaveLength(1);
    expect(unadopted.fatal[0]).toMatch(
      /^region code 6 is a spare code \(spare codes 5, 6, 7\) and this etcd has no adoption record \/idgen\/spare-codes\/6: run "idgen spare adopt 6/,
    );
    // Nothing was claimed under either code.
    expect(etcdctl(url, ['get', '--prefix', '--keys-only', '/idgen/regions/'])).toBe('');

    const adopted = {
      code: 7,
      state: 'adopted',
      at: new Date().toISOString(),
      adoptedFrom: { lentTo: 3, reclaimedAt: '', workers: 0, maxLastMs: -1 },
    };
    etcdctl(url, ['put', '/idgen/spare-codes/7', JSON.stringify(adopted)]);
    const node = await startServer([
      '--region',
      '7',
      '--etcd',
      url,
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
