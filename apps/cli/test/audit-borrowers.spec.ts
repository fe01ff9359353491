/**
 * `idgen audit` after a spare code was lent twice (issue 31, cases 1, 2 and 5 end here: a borrower's etcd restored
 * after its loan moved on, the registry restored, two registries during a split): two regions' borrowers hold slot 5/0
 * at once, each in its own etcd. The records are the real lease code's (two etcds, `idgen spare lend` with a registry
 * each, a home holder and an embedded borrower per region); the audit with the deployment file names the overlap:
 * both holders, the slot, the milliseconds (issue 31, item 6), not only the double loan.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEtcdLease, type LeaseTarget, type WorkerLease } from '@idgen/lease';
import { QUICK_LEASE_SETTINGS, bindRegion, cleanupAll, startEtcd, type EtcdServer } from '@idgen/testing';
import { idgen, idgenJson } from './support.js';

jest.setTimeout(180_000);

const target = (): LeaseTarget => ({
  assign: () => undefined,
  extend: () => undefined,
  unassign: () => undefined,
  lastMintedMs: () => -1,
});

const leases: WorkerLease[] = [];
let etcds: EtcdServer[];

afterAll(async () => {
  await Promise.all(leases.map((l) => l.release()));
  await cleanupAll();
});

interface AuditJson {
  clean: boolean;
  findings: { kind: string; message: string; overlap?: { code: number; worker: number; holders: string[] } }[];
}

it('names both borrowers of slot 5/0 and the milliseconds they share, beside the double loan', async () => {
  // Regions 2 and 3, each with a registry of its own (case 5: an operator who could not reach the registry).
  etcds = await Promise.all([startEtcd(), startEtcd(), startEtcd(), startEtcd()]);
  const [r2, r3, reg2, reg3] = etcds as [EtcdServer, EtcdServer, EtcdServer, EtcdServer];
  await bindRegion(r2, 2, '/idgen');
  await bindRegion(r3, 3, '/idgen');
  const lease = (etcd: EtcdServer, region: number, nodeId: string, borrow: boolean): WorkerLease => {
    const l = createEtcdLease(
      {
        endpoints: [etcd.clientUrl],
        region,
        workers: '0-0',
        nodeId,
        ...(borrow ? { kind: 'embedded' as const, borrowSpare: true } : {}),
        ...QUICK_LEASE_SETTINGS,
      },
      target(),
    );
    leases.push(l);
    return l;
  };
  // The home slot held first (it writes the layout record, and a borrower borrows only with its home range full).
  const homes = [lease(r2, 2, 'home-2', false), lease(r3, 3, 'home-3', false)];
  await Promise.all(homes.map((l) => l.start()));
  for (const [etcd, region, registry] of [
    [r2, 2, reg2],
    [r3, 3, reg3],
  ] as const) {
    const r = await idgen([
      'spare',
      'lend',
      '5',
      '--to-region',
      String(region),
      '--etcd',
      etcd.clientUrl,
      '--registry',
      registry.clientUrl,
    ]);
    expect(r).toMatchObject({ code: 0 });
  }
  const borrowers = [lease(r2, 2, 'borrower-2', true), lease(r3, 3, 'borrower-3', true)];
  await Promise.all(borrowers.map((l) => l.start()));
  expect(borrowers.map((l) => l.snapshot().region)).toEqual([5, 5]);

  const file = join(mkdtempSync(join(tmpdir(), 'idgen-audit-borrowers-')), 'deployment.json');
  writeFileSync(
    file,
    JSON.stringify({
      regions: [
        { name: 'r2', etcd: [r2.clientUrl] },
        { name: 'r3', etcd: [r3.clientUrl] },
      ],
    }),
  );
  const { code, json } = await idgenJson<AuditJson>(['audit', '--config', file, '--json']);
  expect({ code, clean: json.clean }).toEqual({ code: 1, clean: false });
  expect(json.findings.map((f) => f.kind)).toContain('double-loan');
  const overlaps = json.findings.filter((f) => f.kind === 'overlap');
  expect(overlaps).toHaveLength(1);
  expect(overlaps[0]?.overlap).toMatchObject({ code: 5, worker: 0 });
  expect(overlaps[0]?.message).toMatch(
    /^slot 5\/0: r[23]: borrower-[23] \(embedded, lease \d+, \d+…open, open\) and r[23]: borrower-[23] \(embedded, lease \d+, \d+…open, open\) may both have minted in ms \d+…\d+$/,
  );
  expect(new Set(overlaps[0]?.overlap?.holders.map((h) => h.split(' ')[1]))).toEqual(
    new Set(['borrower-2', 'borrower-3']),
  );
});
