// The tenure ledger's pure parts (tenure-ledger.ts): open, close, compact, and a parse that refuses garbage naming the
// key and the field.
import { CorruptRecordError } from './errors.js';
import type { LastMsRecord } from './records.js';
import {
  EMPTY_TENURE_RECORD,
  closeTenure,
  compactTenures,
  lastMsUpperBound,
  openTenure,
  parseTenureRecord,
} from './tenure-ledger.js';
import type { Tenure, TenureRecord } from './tenure-ledger.js';

const T0 = '2026-12-01T00:00:00.000Z';
const tenure = (leaseId: string, firstMs: number, lastMs: number | null, end: Tenure['end'] = 'released'): Tenure => ({
  code: 2,
  worker: 7,
  kind: 'service',
  nodeId: `node-${leaseId}`,
  leaseId,
  firstMs,
  lastMs,
  end: lastMs === null ? 'open' : end,
  startedAt: T0,
});
const record = (...tenures: Tenure[]): TenureRecord => ({ tenures, compacted: { count: 0, maxLastMs: -1 } });
const lastMs = (ms: number, released: boolean, leaseId: string, ttlMs = 2000): LastMsRecord => ({
  ms,
  released,
  nodeId: `node-${leaseId}`,
  leaseId,
  at: T0,
  ttlMs,
});

describe('lastMsUpperBound', () => {
  it.each([
    ['a clean release: its millisecond', lastMs(1000, true, 'a'), 2000, 1000],
    ['an unclean end: ms + its TTL', lastMs(1000, false, 'a', 6000), 2000, 7000],
    ["an unclean end: ms + the reader's TTL when larger", lastMs(1000, false, 'a', 2000), 6000, 7000],
  ])('%s', (_what, r, readerTtl, bound) => expect(lastMsUpperBound(r, readerTtl)).toBe(bound));
});

describe('openTenure', () => {
  const mine = tenure('b', 9001, null);
  it.each<[string, TenureRecord, LastMsRecord | undefined, TenureRecord | undefined]>([
    ['first tenure of a slot', EMPTY_TENURE_RECORD, undefined, record(mine)],
    [
      'after a closed one: appended',
      record(tenure('a', 1, 500)),
      lastMs(500, true, 'a'),
      record(tenure('a', 1, 500), mine),
    ],
    [
      'an open predecessor (crashed) closed expired at last-ms + TTL',
      record(tenure('a', 1, null)),
      lastMs(5000, false, 'a'),
      record({ ...tenure('a', 1, 7000, 'expired'), endedAt: T0 }, mine),
    ],
    [
      'an open predecessor whose own last-ms says released: closed released at it',
      record(tenure('a', 1, null)),
      lastMs(5000, true, 'a'),
      record({ ...tenure('a', 1, 5000, 'released'), endedAt: T0 }, mine),
    ],
    [
      "an open predecessor and another writer's released marker: expired at the marker",
      record(tenure('a', 1, null)),
      lastMs(5000, true, 'x'),
      record({ ...tenure('a', 1, 5000, 'expired'), endedAt: T0 }, mine),
    ],
    [
      'already on record (a late write of ours): nothing to write',
      record(tenure('a', 1, 500), mine),
      undefined,
      undefined,
    ],
  ])('%s', (_what, before, last, after) => {
    expect(openTenure(before, mine, last, 2000, T0)).toEqual(after);
  });

  it('keeps at most K tenures, folding the oldest into compacted', () => {
    let r: TenureRecord = EMPTY_TENURE_RECORD;
    for (let i = 0; i < 40; i++) {
      const next = openTenure(
        r,
        tenure(`l${i}`, i * 100 + 1, null),
        lastMs(i * 100 - 50, true, `l${i - 1}`),
        2000,
        T0,
        4,
      );
      r = next ?? r;
    }
    expect(r.tenures.map((t) => t.leaseId)).toEqual(['l36', 'l37', 'l38', 'l39']);
    expect(r.tenures.at(-1)?.end).toBe('open');
    expect(r.compacted).toEqual({ count: 36, maxLastMs: 35 * 100 + 50 });
  });
});

describe('closeTenure', () => {
  const mine = tenure('b', 9001, null);
  it.each<[string, TenureRecord, TenureRecord | undefined]>([
    [
      'closes its open tenure',
      record(tenure('a', 1, 500), mine),
      record(tenure('a', 1, 500), { ...tenure('b', 9001, 9500), endedAt: T0 }),
    ],
    ['already closed: nothing to write', record({ ...tenure('b', 9001, 9400) }), undefined],
    [
      'missing (its open write was lost): appended closed, an open one before it closed below its first ms',
      record(tenure('a', 1, null)),
      record({ ...tenure('a', 1, 9000, 'expired'), endedAt: T0 }, { ...tenure('b', 9001, 9500), endedAt: T0 }),
    ],
  ])('%s', (_what, before, after) => {
    expect(closeTenure(before, mine, 'released', 9500, T0)).toEqual(after);
  });

  it('never closes below firstMs − 1 (a holder that minted nothing)', () => {
    expect(closeTenure(record(mine), mine, 'fenced', -1, T0)?.tenures[0]).toMatchObject({
      lastMs: 9000,
      end: 'fenced',
    });
  });
});

describe('compactTenures', () => {
  it('leaves a short record alone and folds the rest', () => {
    const r = record(tenure('a', 1, 10), tenure('b', 11, 20), tenure('c', 21, 30));
    expect(compactTenures(r, 3)).toBe(r);
    expect(compactTenures(r, 1)).toEqual({ tenures: [tenure('c', 21, 30)], compacted: { count: 2, maxLastMs: 20 } });
  });
});

describe('parseTenureRecord', () => {
  const good = JSON.stringify(record(tenure('a', 1, 500), tenure('b', 501, null)));
  it('reads what the ledger writes', () => {
    expect(parseTenureRecord('k', good)).toEqual(record(tenure('a', 1, 500), tenure('b', 501, null)));
  });

  const bad = (
    mutate: (o: { tenures: Record<string, unknown>[]; compacted: Record<string, unknown> }) => void,
  ): string => {
    const o = JSON.parse(good) as { tenures: Record<string, unknown>[]; compacted: Record<string, unknown> };
    mutate(o);
    return JSON.stringify(o);
  };
  const nth = (o: { tenures: Record<string, unknown>[] }, i: number): Record<string, unknown> => o.tenures[i] ?? {};
  it.each([
    ['not JSON', '{', /not JSON/],
    ['an array', '[]', /not a JSON object/],
    ['no tenures', '{"compacted":{"count":0,"maxLastMs":-1}}', /field tenures is not an array/],
    ['no compacted', '{"tenures":[]}', /field compacted is not an object/],
    ['a negative count', bad((o) => (o.compacted['count'] = -1)), /field compacted\.count/],
    ['a fractional maxLastMs', bad((o) => (o.compacted['maxLastMs'] = 1.5)), /field compacted\.maxLastMs/],
    [
      'a tenure not an object',
      bad((o) => (o.tenures[0] = 7 as unknown as Record<string, unknown>)),
      /field tenures\[0\] is not an object/,
    ],
    ['an unknown end', bad((o) => (nth(o, 0)['end'] = 'gone')), /field tenures\[0\]\.end is not one of/],
    ['an unknown kind', bad((o) => (nth(o, 0)['kind'] = 'robot')), /field tenures\[0\]\.kind/],
    ['a string firstMs', bad((o) => (nth(o, 1)['firstMs'] = '501')), /field tenures\[1\]\.firstMs/],
    [
      'a closed tenure without lastMs',
      bad((o) => (nth(o, 0)['lastMs'] = null)),
      /field tenures\[0\]\.lastMs is not an integer/,
    ],
    ['an open tenure with lastMs', bad((o) => (nth(o, 1)['lastMs'] = 600)), /field tenures\[1\]\.lastMs is not null/],
    [
      'an open tenure that is not the last',
      bad((o) => o.tenures.reverse()),
      /field tenures\[0\]\.end is open but it is not the last/,
    ],
    ['no leaseId', bad((o) => delete nth(o, 0)['leaseId']), /field tenures\[0\]\.leaseId is not a string/],
  ])('refuses %s, naming the key and the field', (_what, raw, message) => {
    expect(() => parseTenureRecord('/idgen/regions/2/tenures/7', raw)).toThrow(CorruptRecordError);
    expect(() => parseTenureRecord('/idgen/regions/2/tenures/7', raw)).toThrow(/\/idgen\/regions\/2\/tenures\/7/);
    expect(() => parseTenureRecord('/idgen/regions/2/tenures/7', raw)).toThrow(message);
  });
});
