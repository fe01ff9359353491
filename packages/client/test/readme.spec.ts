import { join } from 'node:path';
import { cleanupAll, readmeExample, runTsExample } from '@idgen/testing';
import { IdLedger, regionOf, requireServerBuild, startServer, type ServerNode } from './harness.js';

// The README opens with a runnable example: run it, as written, against a real idgen-server process,
// so the docs cannot rot (STYLE.md: "A README snippet that a test runs").
jest.setTimeout(60_000);

let server: ServerNode;

beforeAll(async () => {
  requireServerBuild();
  server = await startServer({ region: 2 }); // standalone: one node, no etcd
});

afterAll(async () => {
  await server?.process.stop();
  await cleanupAll();
});

it('the README example runs and prints three kinds of IDs from the server', async () => {
  const { exit, child } = await runTsExample(readmeExample(join(__dirname, '..', 'README.md')), {
    IDGEN_NODES: server.url,
  });
  expect({ code: exit.code, output: exit.code === 0 ? '' : child.tail(20) }).toEqual({ code: 0, output: '' });
  const printed = JSON.parse(child.stdoutLines.join('\n')) as { id: string; batch: string[]; text: string };
  const ids = [printed.id, ...printed.batch, printed.text].map((s) => BigInt(s));
  const ledger = new IdLedger();
  ledger.add(...ids);
  expect(ledger.duplicates).toEqual([]);
  expect(ids).toHaveLength(5);
  expect(ids.map(regionOf)).toEqual([2, 2, 2, 2, 2]);
});
