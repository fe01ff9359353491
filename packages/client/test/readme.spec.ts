import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  cleanupAll,
  findOnPath,
  freePort,
  readmeExample,
  runTsExample,
  spawnProcess,
  tempDirSync,
} from '@idgen/testing';
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

/** The repository's root, where the README tells a reader to run `npm start`. */
const REPO = join(__dirname, '..', '..', '..');

it('the README example runs against the node `npm start` runs (as the README says), and prints IDs of its region', async () => {
  // `npm start` as a reader runs it; only the port is this test's (8080 may be taken on a shared machine), and the
  // example is told that address and nothing else.
  const port = await freePort();
  const npm = findOnPath('npm');
  if (npm === undefined) throw new Error('npm not found on PATH');
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('IDGEN_')) env[k] = v;
  Object.assign(env, {
    IDGEN_LISTEN: `127.0.0.1:${port}`,
    IDGEN_METRICS_LISTEN: 'off',
    IDGEN_STATE_FILE: join(tempDirSync('npm-start').path, 'state.json'),
  });
  const started = spawnProcess(npm, ['start', '--silent'], { cwd: REPO, env });
  try {
    // `npm start` builds the server first (Nx, cached after the first build): minutes on a busy machine.
    await started.waitForLine(/"msg":"ready"/, 240_000);
    const { exit, child } = await runTsExample(readmeExample(join(__dirname, '..', 'README.md')), {
      IDGEN_NODES: `http://127.0.0.1:${port}`,
    });
    expect({ code: exit.code, output: exit.code === 0 ? '' : child.tail(20) }).toEqual({ code: 0, output: '' });
    const printed = JSON.parse(child.stdoutLines.join('\n')) as { id: string; batch: string[]; text: string };
    const ids = [printed.id, ...printed.batch, printed.text].map((s) => BigInt(s));
    const ledger = new IdLedger();
    ledger.add(...ids);
    expect(ledger.duplicates).toEqual([]);
    expect(ids).toHaveLength(5);
    expect(ids.map(regionOf)).toEqual([0, 0, 0, 0, 0]);
  } finally {
    started.signal('SIGTERM'); // npm hands it to the node (apps/server/test/deploy.spec.ts "npm start")
    await started.exited;
  }
}, 300_000);

it('the README example, given a region`s code and nodes, gets its IDs; pointed at another region`s node, one line and exit 1', async () => {
  const example = readmeExample(join(__dirname, '..', 'README.md'));
  const own = await runTsExample(example, { IDGEN_NODES: server.url, IDGEN_REGION: '2' });
  expect({ code: own.exit.code, output: own.exit.code === 0 ? '' : own.child.tail(20) }).toEqual({
    code: 0,
    output: '',
  });
  const printed = JSON.parse(own.child.stdoutLines.join('\n')) as { id: string };
  expect(regionOf(BigInt(printed.id))).toBe(2);
  // The README's default region (0) against region 2's node: the client refuses the IDs, the example says so.
  const foreign = await runTsExample(example, { IDGEN_NODES: server.url });
  expect(foreign.exit.code).toBe(1);
  expect(foreign.child.stdoutLines).toEqual([]);
  expect(foreign.child.stderrLines).toHaveLength(1);
  expect(foreign.child.stderrLines[0]).toMatch(/^no IDs right now: no IDs within \d+ ms: .*region 2/);
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
