// startDeployment (issue 22, item 1): a whole deployment on loopback, real etcd with TLS and the users and roles of
// deploy/etcd/roles.sh, bound with the real `idgen region init`, real TLS/mTLS nodes. Needs the built CLI and server
// (npx nx run-many -t build -p @idgen/testing @idgen/server @idgen/cli).
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { connect } from 'node:http2';
import { join } from 'node:path';
import { exportLines, writeDeploymentFile } from '../src/deployment-file.js';
import { ETCD_CLIENT_CN, startDeployment } from '../src/deployment.js';
import type { Deployment, DeploymentCaller, DeploymentNode, DeploymentRegion } from '../src/deployment.js';
import { cleanupAll, liveCount } from '../src/registry.js';

jest.setTimeout(240_000);
afterAll(() => cleanupAll());

/** `etcdctl get {prefix}/region` against the region: its exit code and output. */
function etcdctlGet(
  region: DeploymentRegion,
  options: { cert: boolean; user?: 'idgen-operator' },
): { status: number | null; out: string } {
  const args = ['--endpoints', region.etcd.endpoints.join(','), '--cacert', region.etcd.caFile];
  if (options.cert) args.push('--cert', region.etcd.certFile, '--key', region.etcd.keyFile);
  if (options.user !== undefined) {
    const password = readFileSync(region.users[options.user].passwordFile, 'utf8').trim();
    args.push('--user', options.user, '--password', password);
  }
  const r = spawnSync('etcdctl', [...args, '--dial-timeout=3s', '--command-timeout=5s', 'get', '/idgen/region'], {
    encoding: 'utf8',
    env: { ...process.env, ETCDCTL_API: '3' },
  });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

type Answer = { outcome: 'answered'; status: number; body: string } | { outcome: 'refused'; why: string };

/** Connect JSON `NextIds {"count":3}` over HTTP/2 with TLS, with or without the caller's client certificate. */
function nextIds(
  node: DeploymentNode,
  caller: DeploymentCaller,
  withCert: boolean | { cert: string; key: string },
): Promise<Answer> {
  return new Promise((resolve) => {
    let done = false;
    const finish = (a: Answer): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      session.destroy();
      resolve(a);
    };
    const session = connect(node.url, {
      ca: caller.ca,
      ...(withCert === true
        ? { cert: caller.cert, key: caller.key }
        : withCert === false
          ? {}
          : { cert: withCert.cert, key: withCert.key }),
    });
    // Not a timing assertion: a bound so that a hang fails with a message instead of the test's timeout.
    const timer = setTimeout(() => finish({ outcome: 'refused', why: 'no answer in 20 s' }), 20_000);
    session.on('error', (e) => finish({ outcome: 'refused', why: `session error: ${e.message}` }));
    session.on('close', () => finish({ outcome: 'refused', why: 'session closed' }));
    const req = session.request({
      ':method': 'POST',
      ':path': '/idgen.v1.IdGenerator/NextIds',
      'content-type': 'application/json',
    });
    let status = 0;
    let body = '';
    req.setEncoding('utf8');
    req.on('response', (h) => (status = Number(h[':status'])));
    req.on('data', (c: string) => (body += c));
    req.on('end', () =>
      finish(
        status === 0
          ? { outcome: 'refused', why: 'stream ended without a response' }
          : { outcome: 'answered', status, body },
      ),
    );
    req.on('error', (e) => finish({ outcome: 'refused', why: `stream error: ${e.message}` }));
    req.end(JSON.stringify({ count: 3 }));
  });
}

function idsOf(body: string): bigint[] {
  const parsed = JSON.parse(body) as { blocks?: { first: string; count: number }[] };
  const ids: bigint[] = [];
  for (const b of parsed.blocks ?? []) for (let i = 0; i < b.count; i++) ids.push(BigInt(b.first) + BigInt(i));
  return ids;
}

describe('startDeployment', () => {
  let d: Deployment;

  beforeAll(async () => {
    d = await startDeployment({
      regions: 3,
      nodesPerRegion: 2,
      cluster: { region: 1 },
      // A stand-in for an embedded caller: told its region's etcd and credentials, it stays up until stopped.
      callers: {
        perRegion: 1,
        command: (region, index, deployment) => ({
          command: process.execPath,
          args: ['-e', 'console.log(`caller ${process.argv.slice(1).join(" ")}`); setInterval(() => {}, 1000);', '--'],
          env: {
            CALLER_ETCD_ARGS: deployment.cliArgs(region.code, 'idgen-node').join(' '),
            CALLER_INDEX: String(index),
          },
        }),
      },
    });
  });
  afterAll(() => d?.stop());

  it('has the regions, nodes, callers and files it says', async () => {
    expect(d.regions.map((r) => r.code)).toEqual([0, 1, 2]);
    expect(d.region(1).etcd.endpoints).toHaveLength(3);
    expect(d.region(0).etcd.endpoints).toHaveLength(1);
    for (const r of d.regions) {
      expect(r.nodes).toHaveLength(2);
      for (const e of r.etcd.endpoints) expect(e).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
      for (const u of Object.values(r.users)) expect(existsSync(u.passwordFile)).toBe(true);
      expect(r.callers).toHaveLength(1);
      await r.callers[0]?.waitForLine(/^caller/, 30_000);
      expect(d.cliArgs(r.code)).toEqual(
        expect.arrayContaining([
          '--etcd-user',
          'idgen-operator',
          '--etcd-password-file',
          r.users['idgen-operator'].passwordFile,
        ]),
      );
    }
  });

  it('writes the deployment file idgen audit reads, and export lines that point idgen at a region', async () => {
    const file = writeDeploymentFile(d);
    const audit = await d.cli(['audit', '--config', file, '--json']);
    expect({ code: audit.code, stderr: audit.stderr }).toEqual({ code: 0, stderr: '' });
    // The export lines, as a shell would take them (no flags given: every value comes from a variable).
    const lines = exportLines(d, 2);
    const env: NodeJS.ProcessEnv = {};
    for (const [k, v] of Object.entries(process.env))
      if (!k.startsWith('IDGEN_') && !k.startsWith('ETCDCTL_')) env[k] = v;
    for (const line of lines) {
      const m = /^export (IDGEN_[A-Z_]+)=(.*)$/.exec(line);
      if (m?.[1] === undefined || m[2] === undefined) throw new Error(`not an export line: ${line}`);
      env[m[1]] = m[2].replace(/^'(.*)'$/, '$1');
    }
    const cli = join(__dirname, '..', '..', '..', 'apps', 'cli', 'dist', 'main.js');
    const run = (args: string[]) =>
      spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', env, timeout: 60_000 });
    const leases = run(['leases', '--json']);
    expect({ code: leases.status, stderr: leases.stderr }).toEqual({ code: 0, stderr: '' });
    // status dials every node of region 2 with the caller's certificate, from IDGEN_TLS_*.
    const status = run(['status', '--json']);
    expect({ code: status.status, stderr: status.stderr }).toEqual({ code: 0, stderr: '' });
    const nodes = (JSON.parse(status.stdout) as { nodes: { state: string; region: number }[] }).nodes;
    expect(nodes.map((n) => [n.state, n.region])).toEqual([
      ['serving', 2],
      ['serving', 2],
    ]);
  });

  it("refuses a client without a user, and one without a certificate, at each region's etcd", () => {
    for (const r of d.regions) {
      const ok = etcdctlGet(r, { cert: true, user: 'idgen-operator' });
      expect(`region ${r.code}: ${ok.status}`).toBe(`region ${r.code}: 0`);
      expect(ok.out).toContain('/idgen/region');
      const noUser = etcdctlGet(r, { cert: true });
      expect(noUser.status).not.toBe(0);
      expect(noUser.out).toMatch(/permission denied/);
      const noCert = etcdctlGet(r, { cert: false, user: 'idgen-operator' });
      expect(noCert.status).not.toBe(0);
    }
  });

  it('idgen region show, as the operator, prints each region its code', async () => {
    for (const r of d.regions) {
      const res = await d.cli(['region', 'show', ...d.cliArgs(r.code, 'idgen-operator')]);
      if (res.code !== 0) throw new Error(`idgen region show (region ${r.code}): exit ${res.code}\n${res.stderr}`);
      expect(res).toMatchObject({ code: 0, stdout: expect.stringMatching(new RegExp(`^region ${r.code}: bound `)) });
    }
  });

  it("serves NextIds over TLS to the caller's certificate, with the region's code, and refuses no certificate and a stranger's", async () => {
    for (const r of d.regions) {
      for (const node of r.nodes) {
        const answer = await nextIds(node, r.caller, true);
        if (answer.outcome !== 'answered') throw new Error(`${node.nodeId}: ${answer.why}`);
        expect(answer.status).toBe(200);
        const ids = idsOf(answer.body);
        expect(ids).toHaveLength(3);
        for (const id of ids) expect((id >> 19n) & 7n).toBe(BigInt(r.code));
        expect((await nextIds(node, r.caller, false)).outcome).toBe('refused');
        // A certificate of the same CA but not the callers' name (--tls-client-names): refused too.
        const stranger = d.pki.clients[ETCD_CLIENT_CN];
        if (stranger === undefined) throw new Error('no etcd client certificate');
        expect((await nextIds(node, r.caller, stranger)).outcome).toBe('refused');
      }
    }
  });

  it('restarts a node on the same address and an etcd, and stop() leaves no process and no temp dir', async () => {
    const node = d.region(0).nodes[0] as DeploymentNode;
    const before = node.pid;
    await node.restart({ hard: true });
    expect(node.pid).not.toBe(before);
    expect((await nextIds(node, d.region(0).caller, true)).outcome).toBe('answered');

    // The region's etcd restarted (TLS, auth on) answers the operator again.
    const etcd = d.region(0).etcd.server;
    if ('stopAll' in etcd) throw new Error('region 0 has a single etcd');
    await etcd.restart({ hard: true });
    const shown = await d.cli(['region', 'show', ...d.cliArgs(0)]);
    if (shown.code !== 0) throw new Error(`idgen region show (region 0): exit ${shown.code}\n${shown.stderr}`);
    expect(shown).toMatchObject({ code: 0, stdout: expect.stringMatching(/^region 0: bound /) });

    const pids = d.pids();
    expect(pids.length).toBe(3 * 2 + (1 + 3 + 1) + 3); // nodes, etcd members, callers
    await d.stop();
    const alive = (pid: number): boolean => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    expect(pids.filter(alive)).toEqual([]);
    expect(d.pids()).toEqual([]);
    expect(existsSync(d.dir)).toBe(false);
    await d.stop(); // idempotent
  });
});

describe('startDeployment failing mid-start', () => {
  it('tears down what it started and rejects', async () => {
    let failedDir: string | undefined;
    await expect(
      startDeployment({
        regions: 1,
        nodesPerRegion: 1,
        serverArgs: ['--lease-ttl', '1'], // the node refuses it (2-60): exit 2 before /readyz
        log: (l) => {
          const m = /^pki in (.*)\/pki /.exec(l);
          if (m !== null) failedDir = m[1];
        },
      }),
    ).rejects.toThrow(/exited before \/readyz was 200/);
    expect(failedDir).toBeDefined();
    expect(existsSync(failedDir as string)).toBe(false);
    expect(liveCount()).toBe(0); // every process and temp dir of it untracked: ended and removed
  });
});
