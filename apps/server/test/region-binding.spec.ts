// docs/design.md §5, region binding: a node starts only on an etcd bound to its own region code (idgen region init).
// Pointed at another region's etcd, or at one never bound, it exits 2 during its start with one line, having claimed
// nothing. Real etcd, real node processes.
import { bindRegion, cleanupAll, startEtcd } from '@idgen/testing';
import { etcdRange, parseLine, spawnServer } from './support.test-helper.js';

jest.setTimeout(90_000);
afterAll(() => cleanupAll());

const base = ['--time-source', 'none', '--lease-ttl', '4', '--metrics-listen', 'off', '--listen', '127.0.0.1:0'];

/** Starts a node on `region` against `url` and waits for its end: exit code, fatal lines, whether it became ready. */
async function started(
  url: string,
  region: number,
): Promise<{ code: number | null; fatal: string[]; exitCodes: unknown[]; ready: boolean }> {
  const proc = spawnServer(['--region', String(region), '--etcd', url, ...base]);
  const exit = await proc.exited;
  const lines = proc.stdoutLines.map(parseLine);
  const fatal = lines.filter((l) => l?.level === 'fatal');
  return {
    code: exit.code,
    fatal: fatal.map((l) => String(l?.msg)),
    exitCodes: fatal.map((l) => l?.['exitCode']),
    ready: lines.some((l) => l?.msg === 'ready'),
  };
}

describe("a node on another region's etcd, or on an unbound one", () => {
  it('region 3 against region 2’s etcd (bound to 2): exit 2 at start, one line naming both, no slot claimed', async () => {
    const etcd = await startEtcd();
    await bindRegion(etcd, 2);
    const node = await started(etcd.clientUrl, 3);
    expect(node).toMatchObject({ code: 2, ready: false, exitCodes: [2] });
    expect(node.fatal).toHaveLength(1);
    expect(node.fatal[0]).toMatch(
      /^this etcd serves region 2 \(\/idgen\/region\), not region 3: check --region and --etcd/,
    );
    expect(node.fatal[0]).not.toContain('\n');
    expect(await etcdRange(etcd.clientUrl, '/idgen/regions/3/workers/', true)).toEqual([]);
    expect(await etcdRange(etcd.clientUrl, '/idgen/regions/', true)).toEqual([]);
  });

  it('an etcd never bound: exit 2 at start, one line saying to run idgen region init', async () => {
    const etcd = await startEtcd();
    const node = await started(etcd.clientUrl, 2);
    expect(node).toMatchObject({ code: 2, ready: false, exitCodes: [2] });
    expect(node.fatal).toHaveLength(1);
    expect(node.fatal[0]).toMatch(/^this etcd was never bound to a region code \(\/idgen\/region is absent\)/);
    expect(node.fatal[0]).toContain('run "idgen region init --region 2 --etcd …"');
    expect(node.fatal[0]).not.toContain('\n');
    expect(await etcdRange(etcd.clientUrl, '/idgen/regions/', true)).toEqual([]);
  });
});
