import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  bindRegion,
  cleanupAll,
  etcdctl,
  freePort,
  serverLaunchArgs,
  shebangNodeFlags,
  spawnProcess,
  startEtcd,
  tempDir,
  type EtcdServer,
  type ProcessHandle,
  type TempDir,
} from '@idgen/testing';
import { decodeId } from '@idgen/core';
import * as treeRecords from '@idgen/lease/records';
import { ROOT, npm } from '../src/packages.js';
import { startVerdaccio, type LocalRegistry } from '../src/verdaccio.js';

// A rolling upgrade across versions (issue 25, item 4), the way a deploy runs one: the previous release
// (tools/registry-check/releases/0.1.0: the tarballs `nx release` 0.1.0 packed, published here to a real Verdaccio
// and installed from it by version) and this version (built from the tree) share one region's etcd, node by node,
// with two callers taking IDs all along: one on @idgen/client 0.1.0 from the registry, one on the tree's client.
// Each node position holds one worker slot of its own (`--workers 1`, `--workers 2`), so every restart hands the
// slot's `last-ms` from one version to the other. After each step every record in etcd must read with both
// versions' parsers (`@idgen/lease/records`). At the end: 0 failed calls (none unanswered after 5 s of asking again), 0
// duplicates, every ID of region 3.
jest.setTimeout(600_000);

const RELEASE = '0.1.0';
const RELEASE_DIR = join(ROOT, 'tools/registry-check/releases', RELEASE);
/** Publish order: dependencies first. */
const RELEASED = ['core', 'flags', 'proto', 'h2', 'clock-guard', 'lease', 'serving', 'client', 'server'];
const REGION = 3;
const PREFIX = '/idgen';
const SERVER_MAIN = join(ROOT, 'apps/server/dist/main.js');
const TREE_CLIENT = join(ROOT, 'packages/client/dist/cjs/index.js');

type Version = 'release' | 'tree';
type Records = typeof treeRecords;

let dir: TempDir;
let local: LocalRegistry;
let project: string;
let etcd: EtcdServer;
let releaseRecords: Records;

/**
 * A caller process: `nextIds(50)` in a loop on `clientModule`, its IDs to `out`, `progress N` every 500 IDs. A call
 * that fails is asked again, as a caller does, for up to 5 s: on a busy machine the one node left serving while the
 * other restarts may itself fence for a moment (a missed keep-alive), and both then answer UNAVAILABLE. A call still
 * unanswered after 5 s is a failed one; each retried answer is logged (`retriedCall`).
 */
const CALLER = `
const { createIdClient } = require(process.argv[2]);
const { createWriteStream } = require('node:fs');
const [, , , nodes, out, region] = process.argv;
const client = createIdClient({ region: Number(region), nodes: nodes.split(',') });
const ids = createWriteStream(out);
let stopping = false, n = 0, failed = 0, retried = 0, mark = 0;
process.on('SIGTERM', () => { stopping = true; });
(async () => {
  while (!stopping) {
    const giveUpAt = Date.now() + 5000;
    for (;;) {
      try {
        const got = await client.nextIds(50);
        ids.write(got.map(String).join('\\n') + '\\n');
        n += got.length;
        break;
      } catch (e) {
        if (Date.now() < giveUpAt) {
          retried++;
          console.log(JSON.stringify({ retriedCall: String(e && e.message) }));
          await new Promise((r) => setTimeout(r, 100));
          continue;
        }
        failed++;
        console.log(JSON.stringify({ failedCall: String(e && e.message) }));
        break;
      }
    }
    while (n >= (mark + 1) * 500) console.log('progress ' + ++mark);
    await new Promise((r) => setTimeout(r, 5));
  }
  await new Promise((r) => ids.end(r));
  await client.close();
  console.log(JSON.stringify({ done: true, n, failed, retried }));
})();
`;

interface Caller {
  readonly name: string;
  readonly process: ProcessHandle;
  readonly out: string;
}

function startCaller(name: string, clientModule: string, nodes: readonly string[]): Caller {
  const out = join(dir.path, `${name}.ids`);
  const child = spawnProcess(process.execPath, [
    join(project, 'caller.cjs'),
    clientModule,
    nodes.join(','),
    out,
    String(REGION),
  ]);
  return { name, process: child, out };
}

/** The caller's latest `progress N` (0 before the first). */
function progressOf(c: Caller): number {
  const marks = [...c.process.tail(200).matchAll(/^progress (\d+)$/gm)].map((m) => Number(m[1]));
  return marks.length === 0 ? 0 : Math.max(...marks);
}

/** Waits until every caller has taken `ids` more IDs than now (a step is done under load, not after a sleep). */
async function progress(callers: readonly Caller[], ids = 1000): Promise<void> {
  await Promise.all(
    callers.map((c) => c.process.waitForLine(new RegExp(`^progress ${progressOf(c) + ids / 500}$`), 60_000)),
  );
}

interface Node {
  readonly version: Version;
  readonly process: ProcessHandle;
  /** The worker its `lease: alive` line named. */
  readonly worker: number;
}

/** The argv of a node of `version` (after `node`), with the settings every node here shares. */
function nodeArgs(version: Version, port: number, worker: number, name: string): string[] {
  const bin = join(project, 'node_modules/@idgen/server/bin/idgen-server.js');
  const command = version === 'tree' ? serverLaunchArgs(SERVER_MAIN) : [...shebangNodeFlags(bin), bin];
  return [
    ...command,
    '--region',
    String(REGION),
    '--etcd',
    etcd.clientUrl,
    '--listen',
    `127.0.0.1:${port}`,
    '--metrics-listen',
    'off',
    '--time-source',
    'none',
    '--lease-ttl',
    '3',
    '--workers',
    String(worker),
    '--node-id',
    name,
  ];
}

async function startNode(version: Version, position: string, port: number, worker: number): Promise<Node> {
  const child = spawnProcess(process.execPath, nodeArgs(version, port, worker, `upgrade-${position}-${version}`));
  const alive = JSON.parse(await child.waitForLine(/"msg":"lease: alive"/, 60_000)) as { worker: number };
  await child.waitForLine(/"msg":"ready"/, 60_000);
  return { version, process: child, worker: alive.worker };
}

/** The installed release's version of a package, as npm resolved it. */
function installedVersion(name: string): string {
  const manifest = join(project, 'node_modules', name, 'package.json');
  return (JSON.parse(readFileSync(manifest, 'utf8')) as { version: string }).version;
}

/** Every key and value under `PREFIX/` (etcdctl's JSON, base64 both ways; not another prefix that begins the same). */
function etcdContents(): { key: string; value: string }[] {
  const out = JSON.parse(etcdctl(etcd.clientUrl, ['get', `${PREFIX}/`, '--prefix', '-w', 'json'])) as {
    kvs?: { key: string; value?: string }[];
  };
  return (out.kvs ?? []).map((kv) => ({
    key: Buffer.from(kv.key, 'base64').toString('utf8'),
    value: Buffer.from(kv.value ?? '', 'base64').toString('utf8'),
  }));
}

/** Reads one record with one version's parsers; returns what it refused, or undefined. */
function refusal(records: Records, key: string, value: string): string | undefined {
  const rest = key.slice(PREFIX.length);
  try {
    if (rest === '/layout') records.parseLayoutRecord(key, value);
    else if (rest === '/region') records.parseRegionBinding(key, value);
    // The TTL ceiling `region init` pins: a version without its parser never reads the key (nothing to refuse).
    else if (rest === '/lease-ceiling') (records as Partial<Records>).parseTtlCeiling?.(key, value);
    else if (/^\/regions\/\d+\/last-ms\/\d+$/.test(rest)) records.parseLastMsRecord(key, value);
    else if (/^\/regions\/\d+\/tenures\/\d+$/.test(rest)) records.parseTenureRecord(key, value);
    else if (/^\/regions\/\d+\/nodes\//.test(rest)) records.parseServingNode(key, value);
    else if (/^\/regions\/\d+\/workers\/\d+$/.test(rest)) {
      const o = JSON.parse(value) as { nodeId?: unknown };
      if (typeof o.nodeId !== 'string') return 'a worker record without a nodeId';
    } else return `a key neither version's parsers know`;
    return undefined;
  } catch (e) {
    return (e as Error).message;
  }
}

/** Every record in etcd, read by both versions: the refusals (none, when the versions can share a region). */
function unreadableRecords(): string[] {
  const problems: string[] = [];
  for (const { key, value } of etcdContents()) {
    for (const [version, records] of [
      ['release', releaseRecords],
      ['tree', treeRecords],
    ] as const) {
      const why = refusal(records, key, value);
      if (why !== undefined) problems.push(`${version} cannot read ${key}: ${why}`);
    }
  }
  return problems;
}

beforeAll(async () => {
  dir = await tempDir('idgen-upgrade-');
  local = await startVerdaccio(dir.path);
  const tarballs = readdirSync(RELEASE_DIR).filter((f) => f.endsWith('.tgz'));
  expect(tarballs.sort()).toEqual(RELEASED.map((p) => `idgen-${p}-${RELEASE}.tgz`).sort());
  for (const p of RELEASED) await local.publish(join(RELEASE_DIR, `idgen-${p}-${RELEASE}.tgz`));

  project = local.freshProject('previous-release');
  const r = await npm(
    ['install', '--prefer-online', '--no-package-lock', `@idgen/server@${RELEASE}`, `@idgen/client@${RELEASE}`],
    project,
  );
  expect({ code: r.code, stderr: r.code === 0 ? '' : r.stderr }).toEqual({ code: 0, stderr: '' });
  writeFileSync(join(project, 'caller.cjs'), CALLER);
  // The installed release's own parsers.
  releaseRecords = require(join(project, 'node_modules/@idgen/lease/dist/cjs/entries/records.js')) as Records;

  etcd = await startEtcd();
  await bindRegion(etcd, REGION);
});

afterAll(async () => {
  await etcd?.stop();
  await local?.stop();
  await cleanupAll();
});

it('the previous release comes from the registry by version', () => {
  for (const p of ['@idgen/server', '@idgen/client', '@idgen/lease', '@idgen/core']) {
    expect({ pkg: p, version: installedVersion(p) }).toEqual({ pkg: p, version: RELEASE });
  }
});

it('a node-by-node upgrade to the tree and a rollback to the release, under load: 0 failed calls, 0 duplicates', async () => {
  const ports = { A: await freePort(), B: await freePort() };
  const workers = { A: 1, B: 2 };
  const urls = Object.values(ports).map((p) => `http://127.0.0.1:${p}`);
  const nodes: Record<'A' | 'B', Node> = {
    A: await startNode('release', 'A', ports.A, workers.A),
    B: await startNode('release', 'B', ports.B, workers.B),
  };
  const releaseClient = join(project, 'node_modules/@idgen/client/dist/cjs/index.js');
  const callers = [startCaller('release-client', releaseClient, urls), startCaller('tree-client', TREE_CLIENT, urls)];
  await progress(callers);

  // Upgrade A, then B; roll B back, then A. Each step under load, with every record readable by both versions.
  const steps: ['A' | 'B', Version][] = [
    ['A', 'tree'],
    ['B', 'tree'],
    ['B', 'release'],
    ['A', 'release'],
  ];
  const handovers: string[] = [];
  for (const [position, version] of steps) {
    const before = nodes[position];
    const exit = await before.process.stop(15_000);
    expect({ position, from: before.version, exit: exit.code }).toEqual({ position, from: before.version, exit: 0 });
    nodes[position] = await startNode(version, position, ports[position], workers[position]);
    handovers.push(`${position}: worker ${before.worker} ${before.version} → ${nodes[position].worker} ${version}`);
    await progress(callers);
    expect({ after: `${position} → ${version}`, problems: unreadableRecords() }).toEqual({
      after: `${position} → ${version}`,
      problems: [],
    });
  }
  expect(handovers).toEqual([
    `A: worker 1 release → 1 tree`,
    `B: worker 2 release → 2 tree`,
    `B: worker 2 tree → 2 release`,
    `A: worker 1 tree → 1 release`,
  ]);

  const totals = await Promise.all(
    callers.map(async (c) => {
      c.process.signal('SIGTERM');
      const done = JSON.parse(await c.process.waitForLine(/"done":true/, 30_000)) as { n: number; failed: number };
      await c.process.exited;
      return { caller: c.name, ...done };
    }),
  );
  console.log(`rolling upgrade ${RELEASE} ⇄ tree: ${JSON.stringify(totals)}; ${handovers.join('; ')}`);
  expect(totals.map((t) => ({ caller: t.caller, failed: t.failed }))).toEqual(
    callers.map((c) => ({ caller: c.name, failed: 0 })),
  );

  const seen = new Set<bigint>();
  let duplicates = 0;
  const regions = new Set<number>();
  for (const c of callers) {
    for (const line of readFileSync(c.out, 'utf8').split('\n')) {
      if (line === '') continue;
      const id = BigInt(line);
      if (seen.has(id)) duplicates++;
      seen.add(id);
      regions.add(decodeId(id).region);
    }
  }
  expect({ duplicates, regions: [...regions] }).toEqual({ duplicates: 0, regions: [REGION] });
  expect(seen.size).toBe(totals.reduce((a, t) => a + t.n, 0));
  expect(seen.size).toBeGreaterThanOrEqual(2 * 5 * 1000);

  await Promise.all(Object.values(nodes).map((n) => n.process.stop(15_000)));
});

it('a node refuses a record of a newer schema with one line, and exits; the release before the field cannot', async () => {
  // A deployment under its own prefix, whose layout record a later release rewrote as schema 2.
  const prefix = '/idgen-future';
  await bindRegion(etcd, REGION, prefix);
  const layout = { epochMs: 1_704_067_200_000, timestampBits: 41, regionBits: 3, workerBits: 7, sequenceBits: 12 };
  etcdctl(etcd.clientUrl, ['put', `${prefix}/layout`, JSON.stringify({ ...layout, schema: 2 })]);

  const tree = spawnProcess(process.execPath, [
    ...nodeArgs('tree', await freePort(), 3, 'future-tree'),
    '--etcd-prefix',
    prefix,
  ]);
  const exit = await tree.exited;
  const fatal = tree
    .tail(50)
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { level: string; msg: string; exitCode?: number })
    .filter((l) => l.level === 'fatal');
  expect({ code: exit.code, fatal: fatal.length, exitCode: fatal[0]?.exitCode }).toEqual({
    code: 2,
    fatal: 1,
    exitCode: 2,
  });
  expect(fatal[0]?.msg).toMatch(
    /^etcd key \/idgen-future\/layout holds an unreadable value \(schema 2, and this release reads schemas up to 1: a later release wrote it; run that release or a newer one here/,
  );
  expect(fatal[0]?.msg).not.toContain('\n');

  // 0.1.0 has no schema check: it reads the fields it knows and serves. What the field protects from now on.
  const old = spawnProcess(process.execPath, [
    ...nodeArgs('release', await freePort(), 3, 'future-release'),
    '--etcd-prefix',
    prefix,
  ]);
  await old.waitForLine(/"msg":"ready"/, 60_000);
  expect((await old.stop(15_000)).code).toBe(0);
});
