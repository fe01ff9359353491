import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { bindRegion, cleanupAll, readmeExample, runTsExample, startEtcd, type EtcdServer } from '@idgen/testing';

// The README opens with a runnable example: run it, as written, against a real etcd, so the docs cannot rot
// (docs/style.md "Tests": a README snippet that a test runs).
jest.setTimeout(60_000);

let etcd: EtcdServer;

beforeAll(async () => {
  etcd = await startEtcd();
});

afterAll(async () => {
  await cleanupAll();
});

const README = join(__dirname, '..', 'README.md');

it('the README example runs and prints IDs it minted in its own process from a slot of the embedded range', async () => {
  // The README's setup step, before the example runs: bind the region's etcd to the example's region (idgen region init).
  const init = /^\$ npx @idgen\/cli region init --region (\d+) --etcd (\S+)$/m.exec(readFileSync(README, 'utf8'));
  expect(init?.slice(1)).toEqual(['2', 'http://127.0.0.1:2379']);
  await bindRegion(etcd, Number(init?.[1]));
  const { exit, child } = await runTsExample(readmeExample(README), {
    IDGEN_ETCD: etcd.clientUrl,
  });
  expect({ code: exit.code, output: exit.code === 0 ? '' : child.tail(20) }).toEqual({ code: 0, output: '' });
  const printed = JSON.parse(child.stdoutLines.join('\n')) as {
    id: string;
    hot: string;
    batch: string[];
    worker: number;
  };
  const ids = [printed.id, printed.hot, ...printed.batch].map((s) => BigInt(s));
  expect(new Set(ids).size).toBe(5);
  expect(ids.map((id) => DEFAULT_LAYOUT.decompose(id))).toEqual(
    ids.map(() => expect.objectContaining({ region: 2, worker: printed.worker })),
  );
  expect(printed.worker).toBeGreaterThanOrEqual(18);
});
