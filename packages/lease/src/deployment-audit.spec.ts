import { DEFAULT_LAYOUT } from '@idgen/core';
import { auditDeployment, judgeLastMs, whoisTenure, type Finding } from './deployment-audit.js';
import { leaseKeys } from './records.js';
import { regionBindingKey } from './region-binding.js';
import { parseWorkerRecord, regionViewOf, type EtcdKeyValue, type RegionView } from './region-view.js';
import type { Tenure } from './tenure-ledger.js';

// The audit's rules over records as etcd holds them: each view is parsed from key-values by regionViewOf, as the CLI
// and the chaos tool build theirs (unit specs: no etcd; the records the real nodes leave are judged in
// apps/cli/test/audit*.spec.ts and tools/chaos).

const PREFIX = '/idgen';
const layoutKv: EtcdKeyValue = {
  key: leaseKeys.layout(PREFIX),
  value: JSON.stringify({
    epochMs: DEFAULT_LAYOUT.epochMs,
    timestampBits: DEFAULT_LAYOUT.timestampBits,
    regionBits: DEFAULT_LAYOUT.regionBits,
    workerBits: DEFAULT_LAYOUT.workerBits,
    sequenceBits: DEFAULT_LAYOUT.sequenceBits,
  }),
  lease: '0',
};

const tenure = (o: Partial<Tenure> & Pick<Tenure, 'nodeId' | 'firstMs' | 'lastMs'>): Tenure => ({
  code: 1,
  worker: 0,
  kind: 'service',
  leaseId: `lease-${o.nodeId}`,
  end: o.lastMs === null ? 'open' : 'released',
  startedAt: '2026-12-07T00:00:00.000Z',
  ...o,
});

/** One region's etcd: bound to `code` in `clusterId`, with the tenure records given (slot `code/worker` of each). */
function view(name: string, code: number, tenures: readonly Tenure[], clusterId = `1${code}`): RegionView {
  const kvs: EtcdKeyValue[] = [
    layoutKv,
    {
      key: regionBindingKey(PREFIX),
      value: JSON.stringify({ code, clusterId, at: '2026-12-07T00:00:00.000Z' }),
      lease: '0',
    },
  ];
  const bySlot = new Map<string, Tenure[]>();
  for (const t of tenures) bySlot.set(`${t.code}/${t.worker}`, [...(bySlot.get(`${t.code}/${t.worker}`) ?? []), t]);
  for (const list of bySlot.values()) {
    const first = list[0] as Tenure;
    kvs.push({
      key: leaseKeys.tenures(PREFIX, first.code, first.worker),
      value: JSON.stringify({ tenures: list, compacted: { count: 0, maxLastMs: -1 } }),
      lease: '0',
    });
  }
  return regionViewOf({ name, where: `${name} (etcd test)`, prefix: PREFIX, clusterId, revision: '9', kvs });
}

const overlaps = (f: readonly Finding[]): Finding[] => f.filter((x) => x.kind === 'overlap');

describe('auditDeployment', () => {
  it('is clean for regions on their own codes whose tenures follow each other', () => {
    const r1 = view('r1', 1, [
      tenure({ nodeId: 'a', firstMs: 1000, lastMs: 1999 }),
      tenure({ nodeId: 'b', firstMs: 2000, lastMs: 2999 }),
    ]);
    const r2 = view('r2', 2, [tenure({ code: 2, nodeId: 'c', firstMs: 1000, lastMs: 2999 })]);
    expect(auditDeployment([r1, r2])).toEqual([]);
  });

  it('compares every pair of a slot: the long tenure overlaps the third past a second that never minted', () => {
    // Issue 31, item 6: sorted by first ms, A (r1) is followed by B (r2: a claim that never minted, an empty interval)
    // and then C (r3). Only A and C both minted in 5000…6000; neighbours alone name A and B, and miss A and C.
    const a = tenure({ nodeId: 'A', firstMs: 1000, lastMs: 10_000 });
    const b = tenure({ nodeId: 'B', firstMs: 2000, lastMs: 1999, end: 'expired' });
    const c = tenure({ nodeId: 'C', firstMs: 5000, lastMs: 6000 });
    const found = overlaps(auditDeployment([view('r1', 1, [a]), view('r2', 1, [b]), view('r3', 1, [c])]));
    expect(found).toHaveLength(1);
    expect(found[0]?.overlap).toEqual({
      code: 1,
      worker: 0,
      fromMs: 5000,
      toMs: 6000,
      holders: [
        'r1: A (service, lease lease-A, 1000…10000, released)',
        'r3: C (service, lease lease-C, 5000…6000, released)',
      ],
    });
    expect(found[0]?.message).toBe(
      'slot 1/0: r1: A (service, lease lease-A, 1000…10000, released) and r3: C (service, lease lease-C, 5000…6000, released) may both have minted in ms 5000…6000',
    );
  });

  it('names both later tenures of another etcd that a long one overlaps (a new cluster beside the old one)', () => {
    // Case 4's shape: the old cluster's holder (r1) kept minting while the new cluster's record (r1-new) shows two
    // tenures one after the other: each of them overlaps the old one.
    const old = tenure({ nodeId: 'old', firstMs: 0, lastMs: 10_000 });
    const n1 = tenure({ nodeId: 'new-1', firstMs: 100, lastMs: 200 });
    const n2 = tenure({ nodeId: 'new-2', firstMs: 5000, lastMs: null });
    const found = overlaps(auditDeployment([view('r1', 1, [old]), view('r1-new', 1, [n1, n2], '99')]));
    expect(found.map((f) => [f.overlap?.fromMs, f.overlap?.toMs])).toEqual([
      [100, 200],
      // The open tenure has no last-ms of its own on record: its extent ends before its first ms, it never minted.
    ]);
    const withLastMs = view('r1-new', 1, [n1, n2], '99');
    const slot = withLastMs.slots[0];
    expect(slot).toBeDefined();
    const minted: RegionView = {
      ...withLastMs,
      slots: [
        {
          ...(slot as NonNullable<typeof slot>),
          lastMs: { ms: 5500, released: false, nodeId: 'new-2', leaseId: 'lease-new-2', at: '', ttlMs: 3000 },
        },
      ],
    };
    const both = overlaps(auditDeployment([view('r1', 1, [old]), minted]));
    expect(
      both.map((f) => [f.overlap?.holders[1].split(':')[1]?.trim().split(' ')[0], f.overlap?.fromMs, f.overlap?.toMs]),
    ).toEqual([
      ['new-1', 100, 200],
      ['new-2', 5000, 10_000],
    ]);
  });

  it("does not take a tenure's copy in a restored etcd for a second holder, and names the holder it overlaps", () => {
    // A snapshot of r1 restored onto a new cluster carries A's tenure (same node, lease, first ms); B claimed there.
    const a = tenure({ nodeId: 'A', firstMs: 1000, lastMs: 9000 });
    const copy = tenure({ nodeId: 'A', firstMs: 1000, lastMs: 4999, end: 'expired' });
    const b = tenure({ nodeId: 'B', firstMs: 5000, lastMs: 7000 });
    const found = overlaps(auditDeployment([view('r1', 1, [a]), view('r1-new', 1, [copy, b], '99')]));
    expect(found.map((f) => f.overlap?.holders.map((h) => h.split(': ')[1]?.split(' ')[0]))).toEqual([['A', 'B']]);
  });

  it("judges a tenure copied onto a new cluster by its holder's own record: the overlap found, no false alarm", () => {
    // Case 4 as a chaos run left it: A released on the old etcd at 9000; its copy on the new cluster closed by B's claim
    // at the restore marker's bound (4999), B from 5000. A's own record decides: A and B overlap in 5000…7000.
    const a = tenure({ nodeId: 'A', leaseId: 'a1', firstMs: 1000, lastMs: 9000, end: 'released' });
    const copy = tenure({ nodeId: 'A', leaseId: 'a1', firstMs: 1000, lastMs: 4999, end: 'expired' });
    const b = tenure({ nodeId: 'B', leaseId: 'b1', firstMs: 5000, lastMs: 7000 });
    const found = overlaps(auditDeployment([view('old', 1, [a]), view('new', 1, [copy, b], '99')]));
    expect(found.map((f) => [f.overlap?.holders[0].split(':')[0], f.overlap?.fromMs, f.overlap?.toMs])).toEqual([
      ['old and new', 5000, 7000],
    ]);
    // A fenced and claimed again on the old etcd (a2, a3) while its first tenure's copy on the new cluster was closed
    // by B at the marker's bound (12000): every copy of a1 closed by a successor, the live etcd's bound (2999) holds;
    // a1 is not stretched over A's own a2 and a3.
    const a1 = tenure({ nodeId: 'A', leaseId: 'a1', firstMs: 1000, lastMs: 2999, end: 'expired' });
    const a2 = tenure({ nodeId: 'A', leaseId: 'a2', firstMs: 3000, lastMs: 5999, end: 'expired' });
    const a3 = tenure({ nodeId: 'A', leaseId: 'a3', firstMs: 6000, lastMs: 9000, end: 'released' });
    const a1copy = tenure({ nodeId: 'A', leaseId: 'a1', firstMs: 1000, lastMs: 12_000, end: 'expired' });
    const late = tenure({ nodeId: 'B', leaseId: 'b1', firstMs: 12_001, lastMs: 13_000 });
    expect(overlaps(auditDeployment([view('old', 1, [a1, a2, a3]), view('new', 1, [a1copy, late], '99')]))).toEqual([]);
  });

  it("bounds an etcd's copy of a tenure by its holder's journal closing it: no false alarm, the real overlap kept", () => {
    // Issue 32's simulator, seed 100: A's claim (a1) was lost during its floor's wait and minted nothing, and r0's copy
    // was closed `expired` by a successor up to 12494, over another holder's tenure: the audit named the two as holders
    // that may both have minted. A's journal closing a1 is A's own word.
    const a1 = tenure({ nodeId: 'A', leaseId: 'a1', firstMs: 6072, lastMs: 12_494, end: 'expired' });
    const b = tenure({ nodeId: 'B', leaseId: 'b1', firstMs: 9000, lastMs: 20_000 });
    const journal = (t: Tenure, lastMs: number) => ({
      source: `A/${t.leaseId}.json`,
      record: { tenure: t, ttlMs: 2000, lastMs, etcd: 'r0', updatedAt: '2026-12-07T00:00:00.000Z' },
    });
    const regions = [view('r0', 1, [a1]), view('r0-new', 1, [b], '99')];
    // Without a journal, r0's bound stands: a1 and b overlap in 9000…12494.
    expect(overlaps(auditDeployment(regions)).map((f) => [f.overlap?.fromMs, f.overlap?.toMs])).toEqual([
      [9000, 12_494],
    ]);
    // A's journal shows a1 closed before its first mint: a1 never minted, no overlap with b.
    const closedEmpty = { ...a1, lastMs: a1.firstMs - 1, end: 'fenced' as const };
    expect(overlaps(auditDeployment(regions, { entries: [journal(closedEmpty, -1)], problems: [] }))).toEqual([]);
    // Closed at 9500 by its holder: the overlap with b is 9000…9500, not to r0's bound.
    const closedLate = { ...a1, lastMs: 9500, end: 'fenced' as const };
    expect(
      overlaps(auditDeployment(regions, { entries: [journal(closedLate, 9400)], problems: [] })).map((f) => [
        f.overlap?.fromMs,
        f.overlap?.toMs,
      ]),
    ).toEqual([
      [9000, 9500],
      [9000, 9500],
    ]);
    // An open journal entry bounds nothing (its refreshes may lag the holder's newest last-ms).
    const open = { ...a1, lastMs: null, end: 'open' as const };
    const withOpen = overlaps(auditDeployment(regions, { entries: [journal(open, 7000)], problems: [] }));
    expect(withOpen.map((f) => [f.overlap?.fromMs, f.overlap?.toMs])).toContainEqual([9000, 12_494]);
  });

  it('leaves the order of one record to the record rule, which compares with everything before it', () => {
    const r1 = view('r1', 1, [
      tenure({ nodeId: 'a', firstMs: 1000, lastMs: 9000 }),
      tenure({ nodeId: 'b', firstMs: 9001, lastMs: 9500 }),
      tenure({ nodeId: 'c', firstMs: 5000, lastMs: 6000 }),
    ]);
    const found = overlaps(auditDeployment([r1]));
    expect(found).toHaveLength(1);
    expect(found[0]?.message).toMatch(/tenure c .* starts at 5000, at or below 9500/);
  });

  it('reports an etcd bound to another cluster than the one answering, and a code bound twice', () => {
    const r1 = view('r1', 1, []);
    const twin: RegionView = { ...view('r1-new', 1, []), clusterId: '77' };
    const found = auditDeployment([r1, twin]).map((f) => f.message);
    expect(found).toContain('region code 1 is bound in 2 etcds: r1, r1-new');
    expect(found.some((m) => m.includes('bound to code 1 in cluster 11, but answers from cluster 77'))).toBe(true);
  });

  it('lists a record it cannot read, and an etcd without a layout record', () => {
    const v = regionViewOf({
      name: 'r1',
      where: 'r1 (etcd test)',
      prefix: PREFIX,
      clusterId: '1',
      revision: '1',
      kvs: [{ key: leaseKeys.tenures(PREFIX, 1, 0), value: '{"tenures": 3}', lease: '0' }],
    });
    expect(v.unreadable).toEqual([
      `${leaseKeys.layout(PREFIX)} is absent (no layout record)`,
      expect.stringContaining('field tenures is not an array'),
    ]);
    expect(auditDeployment([v]).filter((f) => f.kind === 'unreadable')).toHaveLength(2);
  });
});

describe('whoisTenure', () => {
  it('names every tenure whose interval covers the millisecond, in any etcd', () => {
    const a = tenure({ nodeId: 'A', firstMs: 1000, lastMs: 10_000 });
    const c = tenure({ nodeId: 'C', firstMs: 5000, lastMs: 6000 });
    const views = [view('r1', 1, [a]), view('r3', 1, [c])];
    expect(whoisTenure(views, 1, 0, 2000).found.map((f) => f.tenure.nodeId)).toEqual(['A']);
    expect(whoisTenure(views, 1, 0, 5500).found.map((f) => f.tenure.nodeId)).toEqual(['A', 'C']);
    expect(whoisTenure(views, 1, 0, 20_000).found).toEqual([]);
  });
});

describe('judgeLastMs', () => {
  const now = 1_800_000_000_000;
  it.each([
    [now - 5_000, undefined, 'ok'],
    [now + 10, undefined, 'ok'],
    [now + 11, undefined, 'ahead'],
    [now + 6_020, undefined, 'ahead'],
    [now + 6_021, undefined, 'poisoned'],
    [now + 30_000, 60_000, 'ahead'],
    [now + 3_600_000, 60_000, 'poisoned'],
  ])('last-ms %d (ttlMs %p) against now is %s', (ms, ttlMs, verdict) => {
    const record = { ms, released: false, nodeId: 'n', at: '', ...(ttlMs === undefined ? {} : { ttlMs }) };
    expect(judgeLastMs(record, now)).toBe(verdict);
  });
});

describe('parseWorkerRecord', () => {
  it('reads a holder leniently: defaults for missing fields, undefined for garbage', () => {
    expect(parseWorkerRecord('{"nodeId":"n1"}')).toEqual({ nodeId: 'n1', kind: 'service', address: '', startedAt: '' });
    expect(parseWorkerRecord('{"nodeId":"e","kind":"embedded","address":"x","startedAt":"t"}')?.kind).toBe('embedded');
    expect(parseWorkerRecord('not json')).toBeUndefined();
    expect(parseWorkerRecord('{"id":1}')).toBeUndefined();
  });
});
