import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { cleanupAll, readmeExample, runTsExample } from '@idgen/testing';
import { IdLedger, regionOf, requireServerBuild, startServer, type ServerNode } from './harness.test-helper.js';

// The README opens with a runnable example: run it, as written, against a real idgen-server process,
// so the docs cannot rot (docs/style.md "Tests": a README snippet that a test runs).
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

/** The README's `@idgen/client/testing` example: the ```ts block after its `<!-- test-double example -->` marker. */
function testDoubleExample(readme: string): string {
  const match = /^<!-- test-double example -->\n```ts\n([\s\S]*?)^```$/m.exec(readme);
  if (match?.[1] === undefined) throw new Error('the README has no test-double example');
  return match[1];
}

it('the README test-double example runs as a test (node:test) and both of its tests pass', async () => {
  const code = testDoubleExample(readFileSync(join(__dirname, '..', 'README.md'), 'utf8'));
  const { exit, child } = await runTsExample(code);
  expect({ code: exit.code, output: exit.code === 0 ? '' : child.tail(40) }).toEqual({ code: 0, output: '' });
  const out = child.stdoutLines.join('\n');
  expect(out).toMatch(/pass 2/);
  expect(out).toMatch(/fail 0/);
});

/**
 * The root README's tour: the ```ts block after its `<!-- tour -->` marker, pointed at this test's node (region 2,
 * a free port) instead of `npm start`'s (region 0, port 8080), with deadlines for a loaded machine: the default 2 s
 * (500 ms an attempt) ran out on a cold connection at load 30, and the snippet is about the calls, not the deadlines.
 */
function tourExample(readme: string): string {
  const match = /<!-- tour[^>]*-->\s*```ts\n([\s\S]*?)^```$/m.exec(readme);
  if (match?.[1] === undefined) throw new Error('the root README has no tour example');
  return match[1].replace(
    "region: 0, nodes: ['http://127.0.0.1:8080']",
    `region: 2, nodes: ['${server.url}'], deadlineMs: 60_000, attemptTimeoutMs: 20_000`,
  );
}

it("the root README's tour runs and prints one ID of the node's region", async () => {
  const code = tourExample(readFileSync(join(__dirname, '..', '..', '..', 'README.md'), 'utf8'));
  expect(code).toContain(server.url);
  const { exit, child } = await runTsExample(code);
  expect({ code: exit.code, output: exit.code === 0 ? '' : child.tail(20) }).toEqual({ code: 0, output: '' });
  const printed = /^minted (\d+)$/.exec(child.stdoutLines.join('\n'));
  expect(printed).not.toBeNull();
  expect(regionOf(BigInt(printed?.[1] ?? '0'))).toBe(2);
});
