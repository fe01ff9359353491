import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { auditDeployment } from './deployment-audit.js';
import { leaseKeys } from './records.js';
import { regionBindingKey } from './region-binding.js';
import { regionViewOf, type EtcdKeyValue, type RegionView } from './region-view.js';
import type { Tenure } from './tenure-ledger.js';
import {
  WITNESS_KEEP,
  createFileTenureWitness,
  parseTenureWitness,
  readTenureWitnesses,
  witnessExtent,
  type TenureWitnessEntry,
  type TenureWitnessRecord,
} from './tenure-witness.js';

// The tenure witness (a holder's journal outside etcd) and the audit's rule over it. Unit specs on a temp directory;
// the records real nodes leave after a restore (issue 31, case 3) are judged in tools/chaos/test/disaster-recovery.

const tenure = (o: Partial<Tenure> = {}): Tenure => ({
  code: 1,
  worker: 0,
  kind: 'service',
  nodeId: 'lost',
  leaseId: '7',
  firstMs: 1000,
  lastMs: null,
  end: 'open',
  startedAt: 't',
  ...o,
});

const witness = (o: Partial<TenureWitnessRecord> = {}): TenureWitnessRecord => ({
  tenure: tenure(),
  ttlMs: 30_000,
  lastMs: 2000,
  etcd: 'http://old',
  updatedAt: 't',
  ...o,
});

/** A restored etcd bound to code 1 holding slot 1/0's record with `tenures`. */
function restored(tenures: readonly Tenure[]): RegionView {
  const layout = {
    epochMs: DEFAULT_LAYOUT.epochMs,
    timestampBits: DEFAULT_LAYOUT.timestampBits,
    regionBits: DEFAULT_LAYOUT.regionBits,
    workerBits: DEFAULT_LAYOUT.workerBits,
    sequenceBits: DEFAULT_LAYOUT.sequenceBits,
  };
  const kvs: EtcdKeyValue[] = [
    { key: leaseKeys.layout('/idgen'), value: JSON.stringify(layout), lease: '0' },
    { key: regionBindingKey('/idgen'), value: '{"code":1,"clusterId":"9","at":"t"}', lease: '0' },
    {
      key: leaseKeys.tenures('/idgen', 1, 0),
      value: JSON.stringify({ tenures, compacted: { count: 0, maxLastMs: -1 } }),
      lease: '0',
    },
  ];
  return regionViewOf({ name: 'r1', where: 'r1 (etcd new)', prefix: '/idgen', clusterId: '9', revision: '3', kvs });
}

const entry = (record: TenureWitnessRecord): TenureWitnessEntry => ({ source: '/j/1-0-7.json', record });
const overlaps = (views: RegionView[], entries: TenureWitnessEntry[]): string[] =>
  auditDeployment(views, { entries, problems: [] })
    .filter((f) => f.kind === 'overlap')
    .map((f) => f.message);

describe('the tenure witness in the audit', () => {
  it('names a lost holder the restored etcd does not show, against the new holder it overlaps', () => {
    // Case 3: the backup was older than the lost holder's claim; the new node's tenure starts at 9000, while the lost
    // holder's last acknowledged last-ms (2000) + its TTL (30 s) reaches 32000.
    const newcomer = tenure({ nodeId: 'new', leaseId: '3', firstMs: 9000, lastMs: 12_000, end: 'released' });
    expect(overlaps([restored([newcomer])], [])).toEqual([]);
    expect(overlaps([restored([newcomer])], [entry(witness())])).toEqual([
      'slot 1/0: journal /j/1-0-7.json: lost (service, lease 7, 1000…open, open) and r1: new (service, lease 3, 9000…12000, released) may both have minted in ms 9000…12000',
    ]);
  });

  it('judges the witness, not the restored copy of its tenure that a later claim closed too early', () => {
    // The backup held the lost holder's tenure open; the new claim closed it at the restore marker + the short TTL.
    const copy = tenure({ lastMs: 8999, end: 'expired' });
    const newcomer = tenure({ nodeId: 'new', leaseId: '3', firstMs: 9000, lastMs: 12_000, end: 'released' });
    const found = overlaps([restored([copy, newcomer])], [entry(witness())]);
    expect(found).toHaveLength(1);
    expect(found[0]).toMatch(/^slot 1\/0: journal .* lost .* and r1: new .* may both have minted in ms 9000…12000$/);
  });

  it('stays clean for a witnessed tenure its etcd shows, and for a successor above its extent', () => {
    const mine = tenure({ lastMs: 5000, end: 'fenced' });
    const next = tenure({ nodeId: 'next', leaseId: '8', firstMs: 32_011, lastMs: 40_000, end: 'released' });
    expect(overlaps([restored([mine, next])], [entry(witness({ tenure: mine }))])).toEqual([]);
    // Open in the journal (killed): its extent is the acked last-ms + TTL, below the successor's floor.
    expect(overlaps([restored([tenure({ lastMs: 32_010, end: 'expired' }), next])], [entry(witness())])).toEqual([]);
  });

  it('extends an open witness to its acked last-ms + TTL, a closed one to its last ms', () => {
    expect(witnessExtent(witness())).toBe(32_000);
    expect(witnessExtent(witness({ tenure: tenure({ lastMs: 4000, end: 'released' }) }))).toBe(4000);
    expect(witnessExtent(witness({ lastMs: -1 }))).toBe(999);
  });
});

describe('createFileTenureWitness', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'idgen-witness-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('keeps one file per tenure, replaced by each write, the newest queued winning', async () => {
    const w = createFileTenureWitness(join(dir, 'journal'));
    await w.opened(witness({ lastMs: 1000 }));
    w.refreshed(witness({ lastMs: 1500 }));
    w.refreshed(witness({ lastMs: 1600 }));
    await w.closed(witness({ lastMs: 1700, tenure: tenure({ lastMs: 1650, end: 'released' }) }));
    expect(await readdir(join(dir, 'journal'))).toEqual(['1-0-7.json']);
    const read = parseTenureWitness('f', await readFile(join(dir, 'journal', '1-0-7.json'), 'utf8'));
    expect(read).toMatchObject({ lastMs: 1700, tenure: { end: 'released', lastMs: 1650 } });
  });

  it(`prunes a slot's journal to the newest ${WITNESS_KEEP} tenures`, async () => {
    const w = createFileTenureWitness(dir);
    for (let i = 0; i < WITNESS_KEEP + 3; i++)
      await w.opened(witness({ tenure: tenure({ leaseId: String(100 + i), firstMs: 1000 * (i + 1) }) }));
    const names = await readdir(dir);
    expect(names).toHaveLength(WITNESS_KEEP);
    expect(names).not.toContain('1-0-100.json');
    expect(names).toContain(`1-0-${100 + WITNESS_KEEP + 2}.json`);
  });

  it('rejects the claim-time write when the journal cannot be written', async () => {
    const file = join(dir, 'not-a-dir');
    await writeFile(file, 'x');
    await expect(createFileTenureWitness(file).opened(witness())).rejects.toThrow(/EEXIST|ENOTDIR/);
  });

  it('reads every journal file, and reports the ones it cannot read', async () => {
    await createFileTenureWitness(dir).opened(witness());
    await writeFile(join(dir, '1-0-9.json'), '{"tenure": 3}');
    const { entries, problems } = await readTenureWitnesses([dir, join(dir, 'missing')]);
    expect(entries.map((e) => e.record.tenure.leaseId)).toEqual(['7']);
    expect(problems).toEqual([
      expect.stringContaining('field tenure is not an object'),
      expect.stringContaining('ENOENT'),
    ]);
  });
});
