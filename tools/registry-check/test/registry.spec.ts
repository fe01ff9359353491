import { readFileSync, writeFileSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import {
  cleanupAll,
  spawnProcess,
  startEtcd,
  tempDir,
  type EtcdServer,
  type ProcessHandle,
  type TempDir,
} from '@idgen/testing';
import {
  LIBRARY_NODE_MAJOR,
  PUBLIC_PACKAGES,
  ROOT,
  RUNTIME_NODE_MAJOR,
  installSize,
  nodeBinary,
  npm,
  packPackage,
  run,
} from '../src/packages.js';
import { recordInstallSize } from '../src/install-sizes.js';
import { startVerdaccio, type LocalRegistry } from '../src/verdaccio.js';

// The proof that a team can use idgen from a registry: every public package is published to a real npm
// registry (Verdaccio) on loopback, then a fresh project outside the workspace installs @idgen/client and
// @idgen/core from it (third-party packages come from the default registry; `@idgen` only from ours),
// and an ESM script, a CommonJS script and a `tsc --strict` TypeScript file take IDs from a real
// standalone idgen-server. The READMEs' examples then run from a registry install too. Every library program runs on
// Node 24 (the runtime) and again on Node 22 (the libraries' floor), both fetched by tools/scripts/node.sh
// (no binary, no round trip: it fails), and installs run with `--engine-strict`, so an `engines` (ours or a
// dependency's) that refuses Node 22 fails the install.
jest.setTimeout(900_000);

const SERVER_MAIN = join(ROOT, 'apps/server/dist/main.js');
const TSC = join(ROOT, 'node_modules/typescript/bin/tsc');

let dir: TempDir;
let registry: string;
let local: LocalRegistry;
let server: ProcessHandle;
let serverUrl: string;
let etcd: EtcdServer;
const published: string[] = [];
/** The Node binaries every installed library program runs on: the runtime first, then the libraries' floor. */
const runtimes: { major: number; node: string }[] = [];

/** A node started with `args` (on loopback, no time source, no metrics), by default from the workspace's build. */
async function startServer(
  args: readonly string[],
  command: readonly [string, ...string[]] = [process.execPath, SERVER_MAIN],
): Promise<{ process: ProcessHandle; url: string }> {
  const [cmd, ...first] = command;
  const child = spawnProcess(cmd, [
    ...first,
    '--time-source',
    'none',
    '--listen',
    '127.0.0.1:0',
    '--metrics-listen',
    'off',
    ...args,
  ]);
  const open = JSON.parse(await child.waitForLine(/"msg":"serving port open/, 30_000)) as { listen: string };
  await child.waitForLine(/"msg":"ready"/, 30_000);
  return { process: child, url: `http://127.0.0.1:${open.listen.split(':').pop() ?? ''}` };
}

/** A fresh project: its own package.json, `@idgen` from our registry only, and its own npm cache. */
function freshProject(name: string): string {
  return local.freshProject(name);
}

/** npm's install under `node` (npm's `#!/usr/bin/env node` takes the first `node` on the PATH), with engines enforced. */
function installCommand(project: string, specs: readonly string[], node: string): ReturnType<typeof npm> {
  const env = { ...process.env, PATH: `${dirname(node)}${delimiter}${process.env['PATH'] ?? ''}` };
  return npm(['install', '--prefer-online', '--no-package-lock', '--engine-strict', ...specs], project, env);
}

/** Installs `specs` with npm running on `node` (the runtime unless given); fails with npm's output when it fails. */
async function install(project: string, specs: readonly string[], node = nodeOf(RUNTIME_NODE_MAJOR)): Promise<void> {
  const r = await installCommand(project, specs, node);
  expect({ code: r.code, stderr: r.code === 0 ? '' : r.stderr }).toEqual({ code: 0, stderr: '' });
}

function nodeOf(major: number): string {
  const found = runtimes.find((r) => r.major === major);
  if (found === undefined) throw new Error(`no Node ${major} binary fetched`);
  return found.node;
}

function figures(project: string): { packages: number; mb: number; names: string[] } {
  const size = installSize(join(project, 'node_modules'));
  return { packages: size.packages, mb: Math.round((size.bytes / 1e6) * 10) / 10, names: size.names };
}

/** Runs `file` with `node` in `cwd`; returns its stdout lines, failing with its output (and Node) when it fails. */
async function runNode(
  file: string,
  cwd: string,
  env: NodeJS.ProcessEnv = {},
  node = process.execPath,
): Promise<string[]> {
  const r = await run(node, [file], { cwd, env: { ...process.env, ...env }, timeoutMs: 60_000 });
  expect({ node, file, code: r.code, stderr: r.code === 0 ? '' : r.stderr }).toEqual({
    node,
    file,
    code: 0,
    stderr: '',
  });
  return r.stdout.split('\n').filter((l) => l.length > 0);
}

/**
 * Runs `files` in order on each of {@link runtimes}, the runtimes side by side (an embedded source waits out its start
 * hold, one lease TTL: in turn the Node 22 run would add that wait per file): every file's lines, Node 24's first.
 */
async function runOnEach(files: readonly string[], cwd: string, env: NodeJS.ProcessEnv = {}): Promise<string[]> {
  const started = Date.now();
  const perRuntime = await Promise.all(
    runtimes.map(async ({ major, node }) => {
      const lines: string[] = [];
      for (const file of files) lines.push(...(await runNode(file, cwd, env, node)));
      return { major, lines, ms: Date.now() - started };
    }),
  );
  console.log(`${files.join(', ')} on ${perRuntime.map((r) => `Node ${r.major} (${r.ms} ms)`).join(' and ')}`);
  return perRuntime.flatMap((r) => r.lines);
}

let operator: string | undefined;

/**
 * `npx @idgen/cli region init --region N --etcd URL`: what the READMEs tell an operator to run once against a region's
 * etcd before its first node or embedded source (docs/design.md §5, region binding). Run from an operator's project of
 * its own with @idgen/cli installed from the registry: a bare `npm exec` in a fresh project would reuse any
 * @idgen/cli@0.1.0 left in npm's npx cache by an earlier run (npm_config_cache from the environment overrides the
 * project's cache), which may predate `idgen region`.
 */
async function regionInit(etcdUrl: string, region: number): Promise<void> {
  if (operator === undefined) {
    const project = freshProject('operator');
    await install(project, ['@idgen/cli@0.1.0']);
    operator = project;
  }
  const r = await npm(
    [
      'exec',
      '--package',
      '@idgen/cli@0.1.0',
      '--',
      'idgen',
      'region',
      'init',
      '--sole-cluster',
      '--region',
      String(region),
      '--etcd',
      etcdUrl,
    ],
    operator,
  );
  expect({ code: r.code, stderr: r.code === 0 ? '' : r.stderr }).toEqual({ code: 0, stderr: '' });
  expect(r.stdout).toMatch(
    new RegExp(`^region ${region}: (this etcd \\(cluster \\d+\\) is now bound|already bound)`, 'm'),
  );
}

/** `tsc --strict` with the workspace's compiler; types come from the project's node_modules. */
async function tscStrict(project: string, files: readonly string[]): Promise<void> {
  const r = await run(
    process.execPath,
    [
      TSC,
      '--strict',
      '--module',
      'nodenext',
      '--moduleResolution',
      'nodenext',
      '--target',
      'es2022',
      '--types',
      'node',
      '--typeRoots',
      join(ROOT, 'node_modules/@types'),
      '--outDir',
      'out',
      '--rootDir',
      '.',
      ...files,
    ],
    { cwd: project },
  );
  expect({ code: r.code, output: r.code === 0 ? '' : r.stdout + r.stderr }).toEqual({ code: 0, output: '' });
}

beforeAll(async () => {
  // Both runtimes first: a Node 22 that cannot be fetched fails every test here (it is never skipped).
  const started = Date.now();
  for (const major of [RUNTIME_NODE_MAJOR, LIBRARY_NODE_MAJOR]) runtimes.push({ major, node: await nodeBinary(major) });
  const versions = await Promise.all(
    runtimes.map(async (r) => (await run(r.node, ['--version'], { cwd: ROOT })).stdout.trim()),
  );
  console.log(`registry round trip on ${versions.join(' and ')} (binaries ready in ${Date.now() - started} ms)`);
  expect(versions.map((v) => v.split('.')[0])).toEqual([`v${RUNTIME_NODE_MAJOR}`, `v${LIBRARY_NODE_MAJOR}`]);

  dir = await tempDir('idgen-registry-');
  local = await startVerdaccio(dir.path);
  registry = local.url;

  for (const pkg of PUBLIC_PACKAGES) {
    const tgz = await packPackage(pkg, join(dir.path, 'stage', pkg.name), join(dir.path, 'tarballs'));
    await local.publish(tgz);
    published.push(pkg.name);
  }

  const standalone = await startServer(['--standalone', '--state-file', join(dir.path, 's.json'), '--region', '2']);
  server = standalone.process;
  serverUrl = standalone.url;
});

afterAll(async () => {
  await server?.stop();
  await local?.stop();
  await etcd?.stop();
  await cleanupAll();
});

it('the registry holds every public package, and only from this run', async () => {
  expect(published).toEqual(PUBLIC_PACKAGES.map((p) => p.name));
  for (const name of published) {
    const r = await fetch(`${registry}${name.replace('/', '%2f')}`);
    expect(r.status).toBe(200);
    const doc = (await r.json()) as {
      'dist-tags': { latest: string };
      versions: Record<string, { exports?: unknown }>;
    };
    const latest = doc.versions[doc['dist-tags'].latest];
    expect(JSON.stringify(latest?.exports ?? {})).not.toContain('@idgen/source');
  }
  const missing = await fetch(`${registry}left-pad`);
  expect(missing.status).toBe(404); // no uplink: nothing is fetched on anyone's behalf
});

it('@idgen/client and @idgen/core install from the registry alone, in under 10 packages, and serve ESM, CommonJS and strict TypeScript on Node 24 and 22', async () => {
  const app = freshProject('app');
  await install(app, ['@idgen/client@0.1.0', '@idgen/core@0.1.0']);
  const size = figures(app);
  console.log(
    `registry install of @idgen/client + @idgen/core: ${size.packages} packages, ${size.mb} MB (${size.names.join(', ')})`,
  );
  recordInstallSize('npm install @idgen/client @idgen/core', size);
  expect(size.packages).toBeLessThan(10);
  expect(size.names).not.toContain('etcd3');
  expect(size.names).not.toContain('@idgen/lease');
  const resolved = JSON.parse(readFileSync(join(app, 'node_modules/@idgen/client/package.json'), 'utf8')) as {
    version: string;
  };
  expect(resolved.version).toBe('0.1.0');

  // Generous deadlines: these check what the install serves (ESM, CommonJS, types), not how fast a loaded machine
  // answers a first call (a CI run at load ~6 saw two 500 ms attempts time out); the run's 60 s timeout ends a hang.
  writeFileSync(
    join(app, 'esm.mjs'),
    `import { createIdClient } from '@idgen/client';
import { DEFAULT_LAYOUT } from '@idgen/core';
const client = createIdClient({ region: 2, nodes: [process.env.IDGEN_NODES], deadlineMs: 30000, attemptTimeoutMs: 10000 });
const ids = await client.nextIds(3);
await client.close();
console.log(JSON.stringify({ kind: 'esm', regions: ids.map((id) => DEFAULT_LAYOUT.decompose(id).region), ids: ids.map(String) }));
`,
  );
  writeFileSync(
    join(app, 'cjs.cjs'),
    `const { createIdClient } = require('@idgen/client');
const { DEFAULT_LAYOUT, parseId } = require('@idgen/core');
(async () => {
  const client = createIdClient({ region: 2, nodes: [process.env.IDGEN_NODES], deadlineMs: 30000, attemptTimeoutMs: 10000 });
  const id = await client.nextIdString();
  await client.close();
  console.log(JSON.stringify({ kind: 'cjs', regions: [DEFAULT_LAYOUT.decompose(parseId(id)).region], ids: [id] }));
})().catch((e) => { console.error(e); process.exit(1); });
`,
  );
  writeFileSync(
    join(app, 'typed.mts'),
    `import { createIdClient, isIdsUnavailableError, type IdClient } from '@idgen/client';
import { DEFAULT_LAYOUT, formatId, type IdFields } from '@idgen/core';

const client: IdClient = createIdClient({
  region: 2,
  nodes: [process.env['IDGEN_NODES'] ?? ''],
  deadlineMs: 30000,
  attemptTimeoutMs: 10000,
});
try {
  const id: bigint = await client.nextId();
  const fields: IdFields = DEFAULT_LAYOUT.decompose(id);
  console.log(JSON.stringify({ kind: 'ts', regions: [fields.region], ids: [formatId(id)] }));
} catch (e) {
  if (isIdsUnavailableError(e)) console.error(e.attempts.length);
  throw e;
} finally {
  await client.close();
}
`,
  );
  await tscStrict(app, ['typed.mts']);
  const env = { IDGEN_NODES: serverUrl };
  const outputs = (await runOnEach(['esm.mjs', 'cjs.cjs', join('out', 'typed.mjs')], app, env)).map(
    (l) => JSON.parse(l) as { kind: string; regions: number[]; ids: string[] },
  );
  expect(outputs.map((o) => o.kind)).toEqual(['esm', 'cjs', 'ts', 'esm', 'cjs', 'ts']); // Node 24, then Node 22
  const ids = outputs.flatMap((o) => o.ids);
  expect(ids).toHaveLength(10);
  expect(new Set(ids).size).toBe(10);
  expect(outputs.flatMap((o) => o.regions)).toEqual(Array<number>(10).fill(2));

  // The engine check has teeth: @idgen/cli is a command on the runtime (`>=24`), so npm on Node 22 refuses it.
  // It also shows npm ran on Node 22. `--dry-run`: npm checks engines on the resolved tree, before any download.
  const refused = await installCommand(
    freshProject('cli-on-22'),
    ['--dry-run', '@idgen/cli@0.1.0'],
    nodeOf(LIBRARY_NODE_MAJOR),
  );
  expect({ failed: refused.code !== 0, ebadengine: /EBADENGINE[\s\S]*@idgen\/cli/.test(refused.stderr) }).toEqual({
    failed: true,
    ebadengine: true,
  });
});

it('with @idgen/discovery the install grows by etcd3 and gRPC, and every README example runs from the registry install (installed on Node 22, run on 24 and 22)', async () => {
  const app = freshProject('app-discovery');
  const floor = nodeOf(LIBRARY_NODE_MAJOR); // npm on Node 22 with engines enforced: every library and dependency admits it
  await install(app, ['@idgen/client@0.1.0', '@idgen/discovery@0.1.0'], floor);
  const size = figures(app);
  console.log(`registry install of @idgen/client + @idgen/discovery: ${size.packages} packages, ${size.mb} MB`);
  recordInstallSize('npm install @idgen/client @idgen/discovery', size);
  expect(size.names).toEqual(expect.arrayContaining(['etcd3', '@idgen/lease', '@idgen/discovery']));
  expect(size.names).not.toContain('@idgen/clock-guard');

  await install(
    app,
    [
      '@idgen/core@0.1.0',
      '@idgen/proto@0.1.0',
      '@idgen/clock-guard@0.1.0',
      '@idgen/lease@0.1.0',
      '@idgen/serving@0.1.0',
    ],
    floor,
  );
  const examples: string[] = [];
  // h2's example (a server that listens until stopped) is compiled, not run.
  for (const pkg of ['core', 'proto', 'h2', 'clock-guard', 'lease', 'serving', 'client', 'discovery']) {
    const readme = readFileSync(join(ROOT, 'packages', pkg, 'README.md'), 'utf8');
    const match = /^```ts\n([\s\S]*?)^```$/m.exec(readme);
    expect({ pkg, example: match?.[1] !== undefined }).toEqual({ pkg, example: true });
    writeFileSync(join(app, `readme-${pkg}.mts`), match?.[1] ?? '');
    examples.push(`readme-${pkg}.mts`);
  }
  // The client README's test double (`@idgen/client/testing`) example is a test file of its own: compiled, then run
  // with `node --test` below.
  const clientReadme = readFileSync(join(ROOT, 'packages/client/README.md'), 'utf8');
  const testDouble = /^<!-- test-double example -->\n```ts\n([\s\S]*?)^```$/m.exec(clientReadme)?.[1];
  expect({ example: testDouble !== undefined }).toEqual({ example: true });
  writeFileSync(join(app, 'readme-client-testing.mts'), testDouble ?? '');
  examples.push('readme-client-testing.mts');
  await tscStrict(app, examples);
  for (const { node } of runtimes) {
    const testRun = await run(node, ['--test', '--test-reporter=tap', join('out', 'readme-client-testing.mjs')], {
      cwd: app,
      env: process.env,
      timeoutMs: 60_000,
    });
    expect({ node, code: testRun.code, output: testRun.code === 0 ? '' : testRun.stdout + testRun.stderr }).toEqual({
      node,
      code: 0,
      output: '',
    });
    expect(testRun.stdout).toMatch(/^# pass 2$/m);
    expect(testRun.stdout).toMatch(/^# fail 0$/m);
  }

  etcd = await startEtcd();
  await regionInit(etcd.clientUrl, 2); // before the region's first node
  const registered = await startServer(['--region', '2', '--etcd', etcd.clientUrl]);
  try {
    for (const { major, node } of runtimes) {
      const started = Date.now();
      await readmeExamples(app, node, etcd.clientUrl);
      console.log(`README examples on Node ${major} (${Date.now() - started} ms)`);
    }
  } finally {
    await registered.process.stop();
  }
});

/** The READMEs' examples, compiled into `app`/out, run on `node` against the standalone server and a registered one. */
async function readmeExamples(app: string, node: string, etcdUrl: string): Promise<void> {
  const out = async (pkg: string, env: NodeJS.ProcessEnv = {}): Promise<Record<string, unknown>[]> =>
    (await runNode(join('out', `readme-${pkg}.mjs`), app, env, node)).map(
      (l) => JSON.parse(l) as Record<string, unknown>,
    );
  expect(await out('core')).toEqual([
    {
      id: '104148763141017605',
      time: '2024-10-14T09:30:00.123Z',
      timestampMs: 24831000123,
      region: 2,
      worker: 17,
      sequence: 5,
    },
    { rejected: 'negative' },
  ]);
  expect(await out('proto')).toEqual([
    { request: { count: 3 }, response: { blocks: [{ first: '385364472618811392', count: 3 }] } },
  ]);
  expect(await out('clock-guard')).toEqual([{ fenced: 'not-assigned' }, { id: expect.any(String), state: 'serving' }]);
  expect(await out('lease')).toEqual([{ id: expect.any(String), state: 'alive', worker: expect.any(Number) }]);
  const [embedded] = await out('serving');
  const blocks = (embedded?.['blocks'] ?? []) as { first: string; count: number }[];
  expect({
    ready: embedded?.['ready'],
    ids: blocks.reduce((n, b) => n + b.count, 0),
    regions: [...new Set(blocks.map((b) => regionOf(b.first)))],
  }).toEqual({
    ready: 200,
    ids: 3,
    regions: [3],
  });
  const [client] = await out('client', { IDGEN_NODES: serverUrl, IDGEN_REGION: '2' });
  expect(Object.keys(client ?? {})).toEqual(['id', 'batch', 'text']);
  const [discovered] = await out('discovery', { IDGEN_ETCD: etcdUrl });
  expect(discovered).toEqual({ nodes: 1, id: expect.any(String) });
  expect(regionOf(String(discovered?.['id']))).toBe(2);
}

it('@idgen/embedded installs from the registry alone, without Connect or the client, and mints in-process against a real etcd (ESM, CommonJS, strict TypeScript, its README; installed on Node 22, run on 24 and 22)', async () => {
  const app = freshProject('app-embedded');
  await install(app, ['@idgen/embedded@0.1.0'], nodeOf(LIBRARY_NODE_MAJOR));
  const size = figures(app);
  console.log(`registry install of @idgen/embedded: ${size.packages} packages, ${size.mb} MB`);
  recordInstallSize('npm install @idgen/embedded', size);
  expect(size.names).toEqual(
    expect.arrayContaining([
      '@idgen/embedded',
      '@idgen/lease',
      '@idgen/clock-guard',
      '@idgen/core',
      'etcd3',
      '@opentelemetry/api',
    ]),
  );
  for (const absent of ['@idgen/client', '@idgen/proto', '@connectrpc/connect', '@bufbuild/protobuf'])
    expect(size.names).not.toContain(absent);

  // Generous deadlines: these check what the install serves (ESM, CommonJS, types), not how fast a loaded machine
  // answers a first call (a CI run at load ~6 saw two 500 ms attempts time out); the run's 60 s timeout ends a hang.
  writeFileSync(
    join(app, 'esm.mjs'),
    `import { createEmbeddedIdSource } from '@idgen/embedded';
const source = createEmbeddedIdSource({ etcd: { endpoints: [process.env.IDGEN_ETCD] }, region: 2, timeSource: 'none' });
try {
  await source.ready();
  const ids = [source.nextIdSync(), await source.nextId(), ...(await source.nextIds(2))];
  console.log(JSON.stringify({ kind: 'esm', worker: source.status().worker, ids: ids.map(String) }));
} finally {
  await source.close();
}
`,
  );
  writeFileSync(
    join(app, 'cjs.cjs'),
    `const { createEmbeddedIdSource } = require('@idgen/embedded');
(async () => {
  const source = createEmbeddedIdSource({ etcd: { endpoints: [process.env.IDGEN_ETCD] }, region: 2, timeSource: 'none' });
  try {
    await source.ready();
    console.log(JSON.stringify({ kind: 'cjs', worker: source.status().worker, ids: [source.nextIdStringSync()] }));
  } finally {
    await source.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
`,
  );
  writeFileSync(
    join(app, 'typed.mts'),
    `import { createEmbeddedIdSource, isIdsUnavailableError, type EmbeddedIdSource } from '@idgen/embedded';

const source: EmbeddedIdSource = createEmbeddedIdSource({ etcd: { endpoints: [process.env['IDGEN_ETCD'] ?? ''] }, region: 2, timeSource: 'none' });
try {
  await source.ready();
  const id: string = await source.nextIdString();
  console.log(JSON.stringify({ kind: 'ts', worker: source.status().worker, ids: [id] }));
} catch (e) {
  if (isIdsUnavailableError(e)) console.error(e.reason, e.waitedMs);
  throw e;
} finally {
  await source.close();
}
`,
  );
  const readme = readFileSync(join(ROOT, 'packages/embedded/README.md'), 'utf8');
  writeFileSync(join(app, 'readme-embedded.mts'), /^```ts\n([\s\S]*?)^```$/m.exec(readme)?.[1] ?? '');
  await tscStrict(app, ['typed.mts', 'readme-embedded.mts']);

  etcd ??= await startEtcd();
  // The README's setup step, from the registry: bind the region's etcd to the example's region before its first source.
  const init = /^\$ npx @idgen\/cli region init --region (\d+) --etcd (\S+)$/m.exec(readme);
  expect(init?.slice(1)).toEqual(['2', 'http://127.0.0.1:2379']);
  await regionInit(etcd.clientUrl, Number(init?.[1]));
  const env = { IDGEN_ETCD: etcd.clientUrl };
  const outputs = (await runOnEach(['esm.mjs', 'cjs.cjs', join('out', 'typed.mjs')], app, env)).map(
    (l) => JSON.parse(l) as { kind: string; worker: number; ids: string[] },
  );
  expect(outputs.map((o) => o.kind)).toEqual(['esm', 'cjs', 'ts', 'esm', 'cjs', 'ts']); // Node 24, then Node 22
  const ids = outputs.flatMap((o) => o.ids);
  expect(ids).toHaveLength(12);
  expect(new Set(ids).size).toBe(12);
  expect(ids.map(regionOf)).toEqual(Array<number>(12).fill(2));
  for (const o of outputs) expect(o.worker).toBeGreaterThanOrEqual(18); // the embedded range

  const examples = (await runOnEach([join('out', 'readme-embedded.mjs')], app, env)).map(
    (l) => JSON.parse(l) as { id: string; hot: string; batch: string[]; worker: number },
  );
  const shape = {
    id: expect.any(String),
    hot: expect.any(String),
    batch: [expect.any(String), expect.any(String), expect.any(String)],
    worker: expect.any(Number),
  };
  expect(examples).toEqual([shape, shape]); // Node 24, then Node 22
  expect(examples.map((e) => regionOf(e.id))).toEqual([2, 2]);
});

it('npx @idgen/cli decode runs from the registry, outside the repository', async () => {
  const project = freshProject('npx');
  const r = await npm(
    ['exec', '--yes', '--package', '@idgen/cli@0.1.0', '--', 'idgen', 'decode', '104148763141017605'],
    project,
  );
  expect({ code: r.code, stderr: r.code === 0 ? '' : r.stderr }).toEqual({ code: 0, stderr: '' });
  expect(JSON.parse(r.stdout.trim())).toEqual({
    id: '104148763141017605',
    timestampMs: 24831000123,
    time: '2024-10-14T09:30:00.123Z',
    region: 2,
    worker: 17,
    sequence: 5,
  });
});

it('@idgen/server installs from the registry by version and its idgen-server runs a standalone node outside the repository: NextIds answers with IDs of its region', async () => {
  const project = freshProject('server');
  await install(project, ['@idgen/server@0.1.0']);
  const installed = JSON.parse(readFileSync(join(project, 'node_modules/@idgen/server/package.json'), 'utf8')) as {
    version: string;
    bin: Record<string, string>;
  };
  expect(installed.version).toBe('0.1.0');
  // The installed command, as `npx idgen-server` would run it (its shebang's V8 flag included), on the runtime.
  const node = await startServer(
    ['--standalone', '--state-file', join(project, 'state.json'), '--region', '4'],
    [
      nodeOf(RUNTIME_NODE_MAJOR),
      '--max-semi-space-size=16',
      join(project, 'node_modules/@idgen/server', installed.bin['idgen-server'] ?? 'missing-bin'),
    ],
  );
  try {
    const url = node.url;
    const res = await fetch(`${url}/idgen.v1.IdGenerator/NextIds`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"count":3}',
      signal: AbortSignal.timeout(10_000),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { blocks: { first: string; count: number }[] };
    expect(body.blocks.reduce((n, b) => n + b.count, 0)).toBe(3);
    for (const b of body.blocks) expect(regionOf(b.first)).toBe(4);
  } finally {
    await node.process.stop();
  }
});

/** The region of a decimal ID under the default layout (bits 19-21). */
function regionOf(id: string): number {
  return Number((BigInt(id) >> 19n) & 7n);
}
