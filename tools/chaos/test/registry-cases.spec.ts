/**
 * Issue 31's registry cases, as the fault `disaster-recovery` draws them (src/faults/registry-cases.ts): real etcds, the
 * built `idgen` for the operator's steps, embedded sources (in this process) as the borrowers and the adopter, the
 * deployment audit in process. On this code each case's step is refused (the borrower never claims under the dead
 * loan; the lend exits 4), no ID is handed out twice, and the audit is clean: the fault's verdict PASS, which also
 * requires the refusal (the fault was really applied). On the code without the fixes the same run found the
 * duplicates (the report in tools/chaos/README.md, "disaster-recovery").
 *
 * Needs the built CLI (the test target builds it), etcd and etcdctl/etcdutl (docs/toolchain.md).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { cleanupAll, tempDir } from '@idgen/testing';
import { REGISTRY_CASES, judgeRegistryCase, runRegistryCase } from '../src/faults/registry-cases.js';

jest.setTimeout(240_000);

const CLI = join(__dirname, '..', '..', '..', 'apps/cli/dist/main.js');

afterAll(async () => {
  await cleanupAll();
});

describe.each(REGISTRY_CASES)('registry case %s, real etcds and holders', (registryCase) => {
  it('the step is refused, no ID is handed out twice, the audit is clean: PASS', async () => {
    if (!existsSync(CLI)) throw new Error(`${CLI} is missing: npx nx run @idgen/cli:build`);
    const dir = await tempDir(`reg-${registryCase}`);
    const d = await runRegistryCase(
      {
        cliMain: CLI,
        region: 1,
        leaseTtlSeconds: 3,
        dir: dir.path,
        index: 1,
        overlapMs: 10_000,
        announce: (target) => process.stdout.write(`${target}\n`),
      },
      registryCase,
    );
    const j = judgeRegistryCase(d);
    process.stdout.write(`${j.notes.join('\n')}\n`);
    expect({ refused: d.refused, common: d.common, audit: d.audit.ok }).toEqual({
      refused: true,
      common: 0,
      audit: true,
    });
    expect(j.safetyViolation).toBeUndefined();
  });
});
