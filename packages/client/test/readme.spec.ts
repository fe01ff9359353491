import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cleanupAll, spawnProcess, tempDir, tsNodeArgs } from '@idgen/testing';
import { IdLedger, regionOf, requireServerBuild, startServer, type ServerNode } from './harness.js';

// The README opens with a runnable example: run it, as written, against a real idgen-server process,
// so the docs cannot rot (STYLE.md: "A README snippet that a test runs").
jest.setTimeout(60_000);

const WORKSPACE_NODE_MODULES = join(__dirname, '..', '..', '..', 'node_modules');

let server: ServerNode;

beforeAll(async () => {
  requireServerBuild();
  server = await startServer({ region: 2 }); // standalone: one node, no etcd
});

afterAll(async () => {
  await server?.process.stop();
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

it('the README example runs and prints three kinds of IDs from the server', async () => {
  const dir = await tempDir('idgen-readme-');
  try {
    const file = join(dir.path, 'example.ts');
    writeFileSync(file, firstExample());
    const child = spawnProcess(process.execPath, tsNodeArgs(file), {
      // The example imports '@idgen/client' like a user would: resolve it from the workspace.
      env: { ...process.env, NODE_PATH: WORKSPACE_NODE_MODULES, IDGEN_NODES: server.url },
    });
    const exit = await child.exited;
    expect({ code: exit.code, output: exit.code === 0 ? '' : child.tail(20) }).toEqual({ code: 0, output: '' });
    const printed = JSON.parse(child.stdoutLines.join('\n')) as { id: string; batch: string[]; text: string };
    const ids = [printed.id, ...printed.batch, printed.text].map((s) => BigInt(s));
    const ledger = new IdLedger();
    ledger.add(...ids);
    expect(ledger.duplicates).toEqual([]);
    expect(ids).toHaveLength(5);
    expect(ids.map(regionOf)).toEqual([2, 2, 2, 2, 2]);
  } finally {
    await dir.remove();
  }
});
