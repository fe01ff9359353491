// Every verb of the BUILT idgen against a TLS deployment: @idgen/testing's
// startDeployment (two regions here: each its own etcd with TLS, client certificates, users and roles from
// deploy/etcd/roles.sh, bound with idgen region init; two idgen-server nodes each, serving TLS with mTLS). The operator
// reads as idgen-operator, given by flags, by IDGEN_* variables, and by etcdctl's ETCDCTL_* variables; the nodes are
// dialled with --tls-ca and the caller's client certificate. Without them the one line says why.
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { cleanupAll, startDeployment, type Deployment, type DeploymentRegion } from '@idgen/testing';

jest.setTimeout(300_000);

const CLI_MAIN = join(__dirname, '..', 'dist', 'main.js');

interface Run {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs the built CLI with only `env` of the IDGEN_* and ETCDCTL_* variables; resolves once it has exited. */
function idgen(args: readonly string[], env: Record<string, string> = {}): Promise<Run> {
  const base: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^(IDGEN_|ETCDCTL_)/.test(k)) base[k] = v;
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI_MAIN, ...args],
      { env: { ...base, ...env }, timeout: 120_000, encoding: 'utf8' },
      (error, stdout, stderr) => {
        resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : -1, stdout, stderr });
      },
    );
  });
}

/** The run's stdout, after checking it exited `code` (the run is shown when not). */
function expectCode(r: Run, code: number): string {
  expect({ code: r.code, stderr: r.stderr }).toEqual({ code, stderr: r.stderr });
  return r.stdout;
}

let dep: Deployment;
let r1: DeploymentRegion;

/** The node TLS flags of a caller: the CA of the nodes' certificates and the client certificate they accept. */
function nodeTlsArgs(): string[] {
  return ['--tls-ca', r1.caller.caFile, '--tls-cert', r1.caller.certFile, '--tls-key', r1.caller.keyFile];
}

/** etcdctl's variables for region 1's etcd as idgen-operator (ETCDCTL_USER in etcdctl's user:password form). */
function etcdctlEnv(): Record<string, string> {
  const password = readFileSync(r1.users['idgen-operator'].passwordFile, 'utf8').trim();
  return {
    ETCDCTL_ENDPOINTS: r1.etcd.endpoints.join(','),
    ETCDCTL_CACERT: r1.etcd.caFile,
    ETCDCTL_CERT: r1.etcd.certFile,
    ETCDCTL_KEY: r1.etcd.keyFile,
    ETCDCTL_USER: `idgen-operator:${password}`,
  };
}

/** The same as IDGEN_* variables (the names idgen-server reads), node TLS included. */
function idgenEnv(): Record<string, string> {
  return {
    IDGEN_ETCD: r1.etcd.endpoints.join(','),
    IDGEN_ETCD_CA: r1.etcd.caFile,
    IDGEN_ETCD_CERT: r1.etcd.certFile,
    IDGEN_ETCD_KEY: r1.etcd.keyFile,
    IDGEN_ETCD_USER: 'idgen-operator',
    IDGEN_ETCD_PASSWORD_FILE: r1.users['idgen-operator'].passwordFile,
    IDGEN_TLS_CA: r1.caller.caFile,
    IDGEN_TLS_CERT: r1.caller.certFile,
    IDGEN_TLS_KEY: r1.caller.keyFile,
  };
}

beforeAll(async () => {
  dep = await startDeployment({ regions: 2, nodesPerRegion: 2 });
  r1 = dep.region(1);
});

afterAll(async () => {
  await dep?.stop();
  await cleanupAll();
});

/** Every verb, with the etcd given by `etcd` (flags, or nothing when the environment gives it). */
async function everyVerb(etcd: readonly string[], nodeTls: readonly string[], env: Record<string, string>) {
  const layout = expectCode(await idgen(['layout', ...etcd, '--json'], env), 0);
  expect(JSON.parse(layout)).toMatchObject({ regionBits: 3, maxRegion: 7 });

  const leases = JSON.parse(expectCode(await idgen(['leases', '--region', '1', ...etcd, '--json'], env), 0)) as {
    slots: { holder: { nodeId: string } | null }[];
  };
  expect(leases.slots.map((s) => s.holder?.nodeId).sort()).toEqual(['r1-n0', 'r1-n1']);

  const status = JSON.parse(
    expectCode(await idgen(['status', '--region', '1', ...etcd, ...nodeTls, '--json'], env), 0),
  ) as { nodes: { url: string; state: string; nodeId: string }[] };
  expect(status.nodes.map((n) => [n.nodeId, n.state, n.url.slice(0, 8)]).sort()).toEqual([
    ['r1-n0', 'serving', 'https://'],
    ['r1-n1', 'serving', 'https://'],
  ]);

  const ids = expectCode(await idgen(['next', '-n', '3', '--region', '1', ...etcd, ...nodeTls], env), 0)
    .trim()
    .split('\n');
  expect(ids).toHaveLength(3);

  const decoded = expectCode(await idgen(['decode', ...ids, ...etcd], env), 0)
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { region: number; id: string });
  expect(decoded.map((d) => [d.id, d.region])).toEqual(ids.map((id) => [id, 1]));

  expect(expectCode(await idgen(['region', 'show', ...etcd], env), 0)).toMatch(/^region 1: bound .* in cluster /);

  expect(expectCode(await idgen(['whois', ids[0] ?? '', ...etcd], env), 0)).toMatch(
    new RegExp(`^${ids[0]}: region 1, worker \\d+, .*minted by r1-n[01] \\(service, lease `),
  );

  expect(expectCode(await idgen(['audit', ...etcd], env), 0)).toMatch(/^audit: 1 of 1 region\(s\) read, .*: clean$/m);
}

describe('every verb against a TLS deployment with etcd users', () => {
  it('by flags: layout, leases, status (every TLS node serving), next, decode, region show, whois, audit', async () => {
    await everyVerb(dep.cliArgs(1), nodeTlsArgs(), {});
  });

  it("by etcdctl's ETCDCTL_* variables (ETCDCTL_USER user:password), and the node TLS by flags", async () => {
    await everyVerb([], nodeTlsArgs(), etcdctlEnv());
  });

  it('by IDGEN_* variables, node TLS included', async () => {
    await everyVerb([], [], idgenEnv());
  });

  it('a node that speaks TLS, dialled in plaintext, and one that wants a client certificate: one line each', async () => {
    const node = r1.nodes[0];
    if (node === undefined) throw new Error('no node');
    const plain = await idgen(['status', '--server', `http://${node.address}`]);
    expect(plain.code).toBe(3);
    expect(plain.stderr.trim()).toMatch(
      /^idgen status: http:\/\/127\.0\.0\.1:\d+: this node speaks TLS: use https:\/\//,
    );

    const noCert = await idgen(['status', '--server', node.url, '--tls-ca', r1.caller.caFile]);
    expect(noCert.code).toBe(3);
    expect(noCert.stderr.trim()).toMatch(/this node wants a client certificate: give --tls-cert and --tls-key/);

    const next = await idgen(['next', '--server', node.url, '--tls-ca', r1.caller.caFile, '--timeout-ms', '3000']);
    expect(next.code).toBe(3);
    expect(next.stderr.trim()).toMatch(/this node wants a client certificate/);

    // Through etcd without the node TLS flags: every node is unreachable, each saying it speaks TLS (exit 1).
    const viaEtcd = await idgen(['status', '--region', '1', ...dep.cliArgs(1), '--json']);
    expect(viaEtcd.code).toBe(1);
    const rows = (JSON.parse(viaEtcd.stdout) as { nodes: { state: string; error?: string }[] }).nodes;
    expect(rows.map((n) => [n.state, /this node speaks TLS/.test(n.error ?? '')])).toEqual([
      ['unreachable', true],
      ['unreachable', true],
    ]);
  });

  it('--json errors are JSON lines on stderr; next --region 9 is refused before any I/O', async () => {
    const r = await idgen(['layout', ...dep.cliArgs(1), '--etcd-ca', dep.pki.server.certFile, '--json']);
    expect(r.code).toBe(3);
    expect(r.stdout).toBe('');
    expect(JSON.parse(r.stderr)).toEqual({
      verb: 'layout',
      error: expect.stringMatching(/not signed by/),
      exitCode: 3,
    });

    const nine = await idgen(['next', '--region', '9', '--etcd', 'http://127.0.0.1:1']);
    expect(nine.code).toBe(2);
    expect(nine.stderr.trim()).toBe('idgen next: --region must be an integer from 0 to 7, got "9"');
  });

  // Last: region restored marks every slot unclean, and the fixture's running holders then fence (conservative).
  it('spare list as idgen-operator, and region restored as root over TLS (the verbs the fixture does not run itself)', async () => {
    const list = await idgen(['spare', 'list', ...dep.cliArgs(1), '--json']);
    expect(list.code).toBe(0);
    expect(JSON.stringify(JSON.parse(list.stdout))).toMatch(/"code":5/);

    const restored = await idgen([
      'region',
      'restored',
      '--region',
      '1',
      '--lease-ttl',
      '3',
      ...dep.cliArgs(1, 'root'),
    ]);
    expect({ code: restored.code, stderr: restored.stderr }).toEqual({ code: 0, stderr: '' });
    expect(restored.stdout).toMatch(/^region 1: 128 slot\(s\) of code\(s\) 1 marked unclean at \S+/);
  });
});
