// docs/runbook.md "Restoring the registry", run step by step as written: the `idgen` commands of the section's code
// blocks, in order, with the built `idgen`, against real etcds (the spare-code registry, region 2's and region 3's)
// and a real `etcdctl snapshot save` and `snapshot restore` of the registry. The backup is older than a loan of code
// 5 to region 2; on the code before the procedure, the lend of code 5 to region 3 after the restore was accepted.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cleanupAll, startEtcd, tempDirSync, type EtcdServer } from '@idgen/testing';
import { idgen, type IdgenRun } from './support.test-helper.js';

jest.setTimeout(120_000);

let registry: EtcdServer;
let regionTwo: EtcdServer;
let regionThree: EtcdServer;
let dir: string;

beforeAll(async () => {
  [registry, regionTwo, regionThree] = await Promise.all([startEtcd(), startEtcd(), startEtcd()]);
  dir = tempDirSync('cli-registry-restore').path;
});

afterAll(async () => {
  await cleanupAll();
});

/** The `idgen` lines of the runbook section's ```sh blocks, in order. */
function documentedCommands(): string[] {
  const runbook = readFileSync(join(__dirname, '../../../docs/runbook.md'), 'utf8');
  const start = runbook.indexOf('\n## Restoring the registry\n');
  expect(start).toBeGreaterThan(0);
  const section = runbook.slice(start + 1, runbook.indexOf('\n## ', start + 1));
  const out: string[] = [];
  for (const block of section.matchAll(/```sh\n([\s\S]*?)```/g))
    for (const line of (block[1] ?? '').split('\n').map((l) => l.trim())) if (line.startsWith('idgen ')) out.push(line);
  return out;
}

describe('docs/runbook.md "Restoring the registry", as written', () => {
  it('a restored registry is refused (exit 4), spare reconcile rebuilds it from the mirrors, and the live loan stands', async () => {
    const deployment = join(dir, 'deployment.json');
    writeFileSync(
      deployment,
      JSON.stringify({
        regions: [
          { name: 'r2', etcd: [regionTwo.clientUrl] },
          { name: 'r3', etcd: [regionThree.clientUrl] },
        ],
      }),
    );
    const vars: Record<string, string> = {
      $REGISTRY_URL: registry.clientUrl,
      $REGISTRY: `--registry ${registry.clientUrl}`,
      $ETCD_REGION_2: regionTwo.clientUrl,
      $ETCD_REGION_3: regionThree.clientUrl,
      'deployment.json': deployment,
    };
    const run = (line: string): Promise<IdgenRun> => {
      let text = line;
      // Longest names first ($REGISTRY_URL before $REGISTRY).
      for (const k of Object.keys(vars).sort((a, b) => b.length - a.length)) text = text.split(k).join(vars[k]);
      return idgen(text.split(/\s+/).slice(1));
    };
    const ok = async (args: string[]): Promise<void> => {
      const r = await idgen(args);
      if (r.code !== 0) throw new Error(`idgen ${args.join(' ')} exited ${String(r.code)}: ${r.stderr}`);
    };
    // Before: two regions bound, the registry initialised, a backup of it, then code 5 lent to region 2.
    await ok(['region', 'init', '--sole-cluster', '--region', '2', '--etcd', regionTwo.clientUrl]);
    await ok(['region', 'init', '--sole-cluster', '--region', '3', '--etcd', regionThree.clientUrl]);
    await ok(['spare', 'init', '--registry', registry.clientUrl, '--config', deployment]);
    const backup = join(dir, 'registry.db');
    await registry.snapshot(backup);
    await ok([
      'spare',
      'lend',
      '5',
      '--to-region',
      '2',
      '--etcd',
      regionTwo.clientUrl,
      '--registry',
      registry.clientUrl,
      '--config',
      deployment,
    ]);

    // Step 2: the registry restored from the backup (etcdctl snapshot restore), same token and URL.
    await registry.restore(backup);

    const commands = documentedCommands();
    expect(commands).toHaveLength(5);
    const [refused, reconcile, list, again, other] = commands as [string, string, string, string, string];
    // Step 3: a step is refused, nothing written.
    const r3 = await run(refused);
    expect(r3).toMatchObject({ code: 4, stdout: '' });
    expect(r3.stderr).toMatch(
      /^idgen spare lend: the spare-code registry answers at revision \d+, but \S.* saw it at revision \d+: its history went back \(restored from a backup\?\); run "idgen spare reconcile"/m,
    );
    // Step 4: reconcile.
    const r4 = await run(reconcile);
    expect(r4.code).toBe(0);
    expect(r4.stdout).toMatch(
      /^spare-code registry reconciled from 2 region\(s\): deployment [0-9a-f-]+, revision \d+/m,
    );
    expect(r4.stdout).toMatch(/^ {2}code 5: free -> lent \(from region r2 \(http:\/\/127\.0\.0\.1:\d+\)\)$/m);
    // Step 5: the registry agrees with region 2's mirror; the same loan again is accepted; region 3's is refused.
    const r5 = await run(list);
    expect(r5.code).toBe(0);
    expect(r5.stdout).toMatch(/^5\s+lent\s+2\s+0\s+\S+\s+lent to region 2$/m);
    const r6 = await run(again);
    expect(r6.code).toBe(0);
    // The record reconcile wrote anew holds new claims back a loan term and a quarter (docs/design.md §7): the
    // registry it rebuilt cannot know of a loan a region left out of the deployment file still holds.
    expect(r6.stdout).toMatch(
      /^spare code 5: lent, lent to region 2 \(already so: nothing written\)\nborrowers may first claim under it from \S+Z \(/,
    );
    const r7 = await run(other);
    expect(r7).toMatchObject({ code: 4, stdout: '' });
    expect(r7.stderr).toMatch(
      /in region r2 .* says spare code 5 is lent \(lent to region 2\), which contradicts this lend/,
    );
  });
});
