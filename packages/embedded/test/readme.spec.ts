import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { cleanupAll, spawnProcess, startEtcd, tempDir, tsNodeArgs, type EtcdServer } from '@idgen/testing';

// The README opens with a runnable example: run it, as written, against a real etcd, so the docs cannot rot
// (STYLE.md: "A README snippet that a test runs").
jest.setTimeout(60_000);

const WORKSPACE_NODE_MODULES = join(__dirname, '..', '..', '..', 'node_modules');

let etcd: EtcdServer;

beforeAll(async () => {
  etcd = await startEtcd();
});

afterAll(async () => {
  await cleanupAll();
});

/** The first ```ts block of the README. */
function firstExample(): string {
  const readme = readFileSync(join(__dirname, '..', 'README.md'), 'utf8');
  const match = /^```ts\n([\s\S]*?)^```$/m.exec(readme);
  if (match?.[1] === undefined) throw new Error('README.md has no ```ts block');
  expect(readme.indexOf('```ts')).toBeLessThan(readme.indexOf('\n## ')); // it opens the README
  return match[1];
}

it('the README example runs and prints IDs it minted in its own process from a slot of the embedded range', async () => {
  const dir = await tempDir('idgen-embedded-readme-');
  try {
    const file = join(dir.path, 'example.ts');
    writeFileSync(file, firstExample());
    const child = spawnProcess(process.execPath, tsNodeArgs(file), {
      env: { ...process.env, NODE_PATH: WORKSPACE_NODE_MODULES, IDGEN_ETCD: etcd.clientUrl },
    });
    const exit = await child.exited;
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
  } finally {
    await dir.remove();
  }
});
