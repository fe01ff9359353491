// What an operator meets first (issue 33), with the BUILT idgen against real etcds and a real TLS node:
// - a node dialled by an address its certificate does not name (a pod IP; the certificate names the Service) is
//   reported as a name mismatch naming the certificate's names, and --tls-servername / IDGEN_TLS_SERVERNAME name
//   the server expected, as grpcurl's -servername does;
// - a mistyped --region is refused against the etcd's binding with one line, exit 2, by every verb that takes it;
// - a wrong etcd password is worded as the node words it; endpoints from ETCDCTL_ENDPOINTS are named.
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  bindRegion,
  cleanupAll,
  enableEtcdAuth,
  makeTestPki,
  serverLaunchArgs,
  spawnProcess,
  startEtcd,
  tempDirSync,
} from '@idgen/testing';
import type { EtcdServer, TestPki } from '@idgen/testing';
import { IDGEN_BIN, SERVER_MAIN_JS, type IdgenRun } from './support.test-helper.js';

jest.setTimeout(120_000);

/** Deadlines far above what etcd and a TLS handshake take on a busy machine: bounds on a hang, not timings. */
const SLOW = ['--timeout-ms', '20000', '--dial-timeout-ms', '20000'];
afterAll(() => cleanupAll());

/** Runs the built `idgen` with `args` and extra variables (no IDGEN_* or ETCDCTL_* of the test's own). */
function idgenWith(args: readonly string[], env: Record<string, string> = {}): Promise<IdgenRun> {
  const clean: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env))
    if (!k.startsWith('IDGEN_') && !k.startsWith('ETCDCTL_')) clean[k] = v;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [IDGEN_BIN, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...clean, ...env },
      timeout: 60_000,
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('a TLS node dialled by an address its certificate does not name', () => {
  let pki: TestPki;
  /** The node's URL at 127.0.0.2: its certificate names 127.0.0.1, localhost and a DNS name, not this address. */
  let url = '';

  beforeAll(async () => {
    pki = makeTestPki({ name: 'servername' });
    const node = spawnProcess(process.execPath, [
      ...serverLaunchArgs(SERVER_MAIN_JS),
      '--standalone',
      '--state-file',
      join(tempDirSync('servername-state').path, 'state.json'),
      '--time-source',
      'none',
      '--listen',
      '127.0.0.2:0',
      '--metrics-listen',
      'off',
      '--tls-cert',
      pki.server.certFile,
      '--tls-key',
      pki.server.keyFile,
    ]);
    const open = JSON.parse(await node.waitForLine(/"msg":"serving port open/, 30_000)) as { listen?: string };
    url = `https://127.0.0.2:${
      String(open.listen ?? '')
        .split(':')
        .pop() ?? ''
    }`;
    await node.waitForLine(/"msg":"ready"/, 30_000);
  });

  it('status and next say it is a name mismatch and name the certificate`s names, not a wrong CA', async () => {
    for (const args of [
      ['status', '--server', url, '--tls-ca', pki.caFile],
      ['next', '--server', url, '--tls-ca', pki.caFile],
    ]) {
      const r = await idgenWith(args);
      expect(r.code).not.toBe(0);
      const said = `${r.stdout}${r.stderr}`;
      expect(said).toContain(
        'its certificate is for IP Address:127.0.0.1, DNS:localhost, DNS:idgen-server.region-2.svc.test, not 127.0.0.2: ' +
          'name mismatch: give the name it has with --tls-servername',
      );
      expect(said).not.toMatch(/wrong CA|not signed by/);
    }
  });

  it('--tls-servername and IDGEN_TLS_SERVERNAME name the server expected: status serves, next mints', async () => {
    const status = await idgenWith([
      'status',
      '--server',
      url,
      '--tls-ca',
      pki.caFile,
      '--tls-servername',
      'localhost',
      '--json',
      ...SLOW,
    ]);
    expect(status.stderr).toBe('');
    expect(JSON.parse(status.stdout)).toMatchObject({ nodes: [{ state: 'serving', region: 0 }] });
    expect(status.code).toBe(0);
    const next = await idgenWith(['next', '--server', url, '--tls-ca', pki.caFile, '-n', '3', ...SLOW], {
      IDGEN_TLS_SERVERNAME: 'idgen-server.region-2.svc.test',
    });
    expect(next.stderr).toBe('');
    expect(next.code).toBe(0);
    expect(next.stdout.trim().split('\n')).toHaveLength(3);
    // A name the certificate does not carry is a mismatch too, named as such.
    const wrong = await idgenWith(['status', '--server', url, '--tls-ca', pki.caFile, '--tls-servername', 'other']);
    expect(`${wrong.stdout}${wrong.stderr}`).toContain('not other: name mismatch');
    const bad = await idgenWith(['status', '--server', url, '--tls-servername', 'no spaces']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toBe('idgen status: --tls-servername "no spaces" is not a DNS name\n');
  });
});

describe('--region against the etcd`s binding', () => {
  let etcd: EtcdServer;

  beforeAll(async () => {
    etcd = await startEtcd();
    await bindRegion(etcd, 2);
  });

  it.each([['leases'], ['status'], ['next']])(
    'idgen %s --region 1 on region 2`s etcd: one line, exit 2',
    async (verb) => {
      const r = await idgenWith([verb, '--etcd', etcd.clientUrl, '--region', '1', ...SLOW]);
      expect(r.stdout).toBe('');
      expect(r.stderr).toBe(
        `idgen ${verb}: etcd ${etcd.clientUrl}: this etcd serves region 2 (/idgen/region), not region 1: check --region and --etcd\n`,
      );
      expect(r.code).toBe(2);
    },
  );

  it('the bound region and a spare code pass the check', async () => {
    for (const region of ['2', '5']) {
      const r = await idgenWith(['leases', '--etcd', etcd.clientUrl, '--region', region, ...SLOW]);
      expect(r.stderr).not.toContain('this etcd serves');
      expect(r.code).not.toBe(2);
    }
  });

  it('endpoints from ETCDCTL_ENDPOINTS are named in what next says', async () => {
    const r = await idgenWith(['next', '--region', '2', ...SLOW], {
      ETCDCTL_ENDPOINTS: etcd.clientUrl.replace(/^http:\/\//, ''),
    });
    expect(r.stderr).toBe(`idgen next: no serving node in region 2 (etcd ${etcd.clientUrl}, prefix /idgen)\n`);
    expect(r.code).toBe(1);
  });
});

describe('etcd refusing the credentials', () => {
  it('a wrong password is worded as the node words it, exit 3 (etcd not usable), for every reading verb', async () => {
    const etcd = await startEtcd();
    await bindRegion(etcd, 2);
    enableEtcdAuth(etcd.clientUrl, 'root-password', [
      { name: 'idgen-operator', password: 'right', prefix: '/idgen/', permission: 'read' },
    ]);
    const wrong = join(tempDirSync('wrong-password').path, 'password');
    writeFileSync(wrong, 'wrong\n');
    const auth = ['--etcd', etcd.clientUrl, '--etcd-user', 'idgen-operator', '--etcd-password-file', wrong];
    for (const verb of ['leases', 'status']) {
      const r = await idgenWith([verb, ...auth, ...SLOW]);
      expect(r.stderr).toMatch(
        new RegExp(
          `^idgen ${verb}: (etcd ${etcd.clientUrl}: )?etcd refused the credentials \\(--etcd-user / --etcd-password-file\\): .*authentication failed`,
        ),
      );
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.code).toBe(3);
    }
  });
});
