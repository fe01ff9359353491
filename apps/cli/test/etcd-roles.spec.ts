// deploy/etcd/roles.sh against a real etcd with authentication: the roles it creates let a node write its prefix,
// an operator only read it, and the spare-code admin run `idgen spare` and touch nothing of the region's own leases.
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { cleanupAll, etcdctl, startEtcd, tempDirSync } from '@idgen/testing';
import { idgen, idgenJson } from './support.test-helper.js';

jest.setTimeout(90_000);
afterAll(() => cleanupAll());

const SCRIPT = join(__dirname, '..', '..', '..', 'deploy', 'etcd', 'roles.sh');

function roles(url: string, args: readonly string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync('bash', [SCRIPT, ...args], {
    encoding: 'utf8',
    env: { ...process.env, ETCDCTL_ENDPOINTS: url },
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** `etcdctl put` as `user`: `ok`, or etcd's refusal. */
function put(url: string, user: string, key: string): string {
  try {
    etcdctl(url, ['put', key, 'x'], { user });
    return 'ok';
  } catch (e) {
    return String((e as { stderr?: string }).stderr ?? e).trim();
  }
}

describe('deploy/etcd/roles.sh', () => {
  let url: string;
  let secrets: string;
  const users = { node: 'idgen-node', operator: 'idgen-operator', spare: 'idgen-spare-admin' } as const;

  beforeAll(async () => {
    url = (await startEtcd()).clientUrl;
    secrets = tempDirSync('etcd-roles').path;
    const first = roles(url, ['/idgen', '5', '6', '7']);
    expect(first).toMatchObject({ code: 0, stderr: '' });
    expect(first.stdout).toContain('role idgen-spare-admin:\n  read /idgen/\n  readwrite /idgen/spare-codes/\n');
    // Again: nothing to add, nothing fails.
    expect(roles(url, ['/idgen'])).toMatchObject({ code: 0, stderr: '' });
    etcdctl(url, ['put', '/idgen/layout', JSON.stringify(DEFAULT_LAYOUT.toRecord())]);
    // Each user is named after its role; root is etcd's own.
    for (const name of [...Object.values(users), 'root']) {
      etcdctl(url, ['user', 'add', `${name}:${name}-pw`, '--interactive=false']);
      etcdctl(url, ['user', 'grant-role', name, name]);
    }
    etcdctl(url, ['auth', 'enable']);
    // The region's etcd is bound to its code before its first node, as etcd's root.
    expect(await idgen(['region', 'init', '--sole-cluster', '--region', '2', ...auth('root')])).toMatchObject({
      code: 0,
    });
    // The registry (this etcd too) gets its deployment ID once, as the spare-code admin (idgen spare init).
    expect(await idgen(['spare', 'init', ...registryAuth(users.spare), ...deployment(users.spare)])).toMatchObject({
      code: 0,
    });
  });

  /** The deployment file as `user` (its one region, this etcd): lend, reclaim and adopt read every region in it. */
  const deployment = (user: string): string[] => {
    auth(user); // writes the password file
    const file = join(secrets, `deployment-${user}.json`);
    writeFileSync(
      file,
      JSON.stringify({ regions: [{ name: 'r2', etcd: [url], user, passwordFile: join(secrets, user) }] }),
    );
    return ['--config', file];
  };

  const auth = (user: string): string[] => {
    const file = join(secrets, user);
    writeFileSync(file, `${user}-pw\n`, { mode: 0o600 });
    return ['--etcd', url, '--etcd-user', user, '--etcd-password-file', file];
  };
  /** The same etcd and user as the deployment's spare-code registry (docs/design.md §7). */
  const registryAuth = (user: string): string[] => [
    '--registry',
    url,
    '--registry-user',
    user,
    '--registry-password-file',
    join(secrets, user),
  ];
  const as = (user: string): string => `${user}:${user}-pw`;

  it('lets a node read and write its prefix, and nothing else', () => {
    expect(put(url, as(users.node), '/idgen/regions/2/workers/0')).toBe('ok');
    expect(put(url, as(users.node), '/other/key')).toMatch(/permission denied/);
  });

  it('lets an operator read (idgen layout, leases) but not write: idgen spare lend is refused with exit 1', async () => {
    expect((await idgen(['layout', ...auth(users.operator)])).code).toBe(0);
    // A spare code of this region-2 etcd (region 2 holds the node test's 'x'; another home code is refused, exit 2).
    expect((await idgen(['leases', ...auth(users.operator), '--region', '5'])).code).toBe(0);
    expect(put(url, as(users.operator), '/idgen/regions/2/workers/1')).toMatch(/permission denied/);
    const lend = await idgen([
      'spare',
      'lend',
      '6',
      '--to-region',
      '2',
      ...auth(users.operator),
      ...registryAuth(users.operator),
      ...deployment(users.operator),
    ]);
    expect(lend.code).toBe(1);
    expect(lend.stderr).toMatch(/etcd denied it/);
    // It reads the region binding.
    expect(await idgen(['region', 'show', ...auth(users.operator)])).toMatchObject({ code: 0 });
  });

  it("lets the spare-code admin lend and list spare codes and write their last-ms, not the region's own leases", async () => {
    const lend = await idgen([
      'spare',
      'lend',
      '5',
      '--to-region',
      '2',
      ...auth(users.spare),
      ...registryAuth(users.spare),
      ...deployment(users.spare),
    ]);
    expect(lend.code).toBe(0);
    expect(lend.stdout).toMatch(/^spare code 5: lent, lent to region 2\nborrowers may first claim under it from \S+Z /);
    const list = await idgenJson<{ codes: { code: number; record: unknown }[] }>([
      'spare',
      'list',
      ...auth(users.spare),
    ]);
    expect(list.code).toBe(0);
    expect(list.json.codes).toContainEqual(
      expect.objectContaining({ code: 5, record: expect.objectContaining({ state: 'lent', lentTo: 2 }) }),
    );
    // The registry's record, where this etcd serves as the registry too.
    expect(
      JSON.parse(etcdctl(url, ['get', '--print-value-only', '/idgen/spare-registry/5'], { user: 'root:root-pw' })),
    ).toMatchObject({
      state: 'lent',
      lentTo: 2,
    });
    expect(put(url, as(users.spare), '/idgen/regions/5/last-ms/3')).toBe('ok'); // adopt's writes
    expect(put(url, as(users.spare), '/idgen/regions/2/last-ms/3')).toMatch(/permission denied/);
    expect(put(url, as(users.spare), '/idgen/regions/5/workers/3')).toMatch(/permission denied/);
    expect(put(url, as(users.spare), '/idgen/layout')).toMatch(/permission denied/);
  });

  it('refuses a bad prefix or code with exit 2 and one line, before any etcd call', () => {
    const prefix = roles('http://127.0.0.1:9', ['idgen']);
    expect(prefix).toMatchObject({ code: 2, stdout: '' });
    expect(prefix.stderr).toBe(
      'roles.sh: the prefix must start with /, not end with / and use [A-Za-z0-9._-/], got "idgen"\n',
    );
    const code = roles('http://127.0.0.1:9', ['/idgen', 'five']);
    expect(code).toMatchObject({ code: 2, stderr: 'roles.sh: a spare region code is a number, got "five"\n' });
  });
});
