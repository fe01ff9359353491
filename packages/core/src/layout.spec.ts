import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import fc from 'fast-check';
import {
  DEFAULT_EPOCH_MS,
  DEFAULT_LAYOUT,
  type InvalidIdError,
  MAX_ID,
  createLayout,
  formatId,
  createIdForms,
  isInvalidIdError,
  parseId,
} from './index.js';

interface Vectors {
  layout: {
    epoch: string;
    epochMs: number;
    timestampBits: number;
    regionBits: number;
    workerBits: number;
    sequenceBits: number;
  };
  valid: {
    id: string;
    timestampMs: number;
    time: string;
    region: number;
    worker: number;
    sequence: number;
    note: string;
    /** The ID in each form of docs/design.md §1 "Forms" (spread and keyed in decimal; keyed under `formsKey`). */
    forms: { base32: string; decimal: string; spread: string; keyed: string };
  }[];
  formsKey: string;
  invalid: { input: string; why: string }[];
}

// The vectors (a copy of the deployment's shared ids.json, kept in the repository): the contract every
// implementation of the layout is checked against. Missing vectors fail the run rather than skip it.
const vectorsPath = resolve(__dirname, '../test/vectors.json');
const vectors = JSON.parse(readFileSync(vectorsPath, 'utf8')) as Vectors;

describe('the default layout', () => {
  it('matches the vectors file and docs/design.md §1', () => {
    expect(DEFAULT_LAYOUT.toRecord()).toEqual({
      epochMs: vectors.layout.epochMs,
      timestampBits: vectors.layout.timestampBits,
      regionBits: vectors.layout.regionBits,
      workerBits: vectors.layout.workerBits,
      sequenceBits: vectors.layout.sequenceBits,
    });
    expect(new Date(DEFAULT_EPOCH_MS).toISOString()).toBe(vectors.layout.epoch);
    expect(DEFAULT_LAYOUT.timestampShift).toBe(22);
    expect(DEFAULT_LAYOUT.regionShift).toBe(19);
    expect(DEFAULT_LAYOUT.workerShift).toBe(12);
    expect(new Date(DEFAULT_EPOCH_MS + DEFAULT_LAYOUT.maxTimestamp).toISOString()).toBe('2093-09-06T15:47:35.551Z');
  });
});

describe.each(vectors.valid)('valid vector $id ($note)', (v) => {
  const id = BigInt(v.id);
  it('decomposes to its fields', () => {
    expect(DEFAULT_LAYOUT.decompose(parseId(v.id))).toEqual({
      timestampMs: v.timestampMs,
      region: v.region,
      worker: v.worker,
      sequence: v.sequence,
    });
  });
  it('composes from its fields', () => {
    expect(formatId(DEFAULT_LAYOUT.compose(v))).toBe(v.id);
  });
  it('converts to its time', () => {
    expect(DEFAULT_LAYOUT.dateOf(id).toISOString()).toBe(v.time);
    expect(DEFAULT_LAYOUT.unixMsOf(id)).toBe(DEFAULT_EPOCH_MS + v.timestampMs);
  });
  it('has each form, and each form reads back as the ID', () => {
    const forms = createIdForms({ key: vectors.formsKey });
    expect({
      base32: forms.format(id, 'base32'),
      decimal: forms.format(id, 'decimal'),
      spread: forms.format(id, 'spread').toString(),
      keyed: forms.format(id, 'keyed').toString(),
    }).toEqual(v.forms);
    expect(forms.parse(v.forms.base32, 'base32')).toBe(id);
    expect(forms.parse(v.forms.base32.toLowerCase(), 'base32')).toBe(id);
    expect(forms.parse(v.forms.decimal, 'decimal')).toBe(id);
    expect(forms.parse(v.forms.spread, 'spread')).toBe(id);
    expect(forms.parse(v.forms.keyed, 'keyed')).toBe(id);
  });
  it('lies within the first and last ID of its millisecond', () => {
    const ms = DEFAULT_EPOCH_MS + v.timestampMs;
    expect(DEFAULT_LAYOUT.firstIdOf(ms) <= id).toBe(true);
    expect(DEFAULT_LAYOUT.lastIdOf(ms) >= id).toBe(true);
  });
});

describe.each(vectors.invalid)('invalid vector $input ($why)', (v) => {
  it('is refused by parseId with an InvalidIdError that says why', () => {
    let caught: unknown;
    try {
      parseId(v.input);
    } catch (e) {
      caught = e;
    }
    expect(isInvalidIdError(caught)).toBe(true);
    expect(caught).toBeInstanceOf(RangeError);
    expect((caught as InvalidIdError).message.length).toBeGreaterThan(10);
  });
});

describe('parseId reasons', () => {
  it.each([
    ['', 'empty'],
    ['-1', 'negative'],
    ['12a4', 'not-decimal'],
    ['1.5', 'not-decimal'],
    [' 1', 'not-decimal'],
    ['+1', 'not-decimal'],
    ['01', 'not-decimal'],
    ['1e3', 'not-decimal'],
    ['0x10', 'not-decimal'],
    ['9223372036854775808', 'out-of-range'],
    ['18446744073709551616', 'out-of-range'],
    ['9'.repeat(400), 'out-of-range'],
  ])('%j is %s', (input, reason) => {
    expect(() => parseId(input)).toThrow(expect.objectContaining({ reason }));
  });
  it('names the range in the out-of-range message', () => {
    expect(() => parseId('9223372036854775808')).toThrow(/9223372036854775807/);
  });
  it('refuses values that are not strings', () => {
    expect(() => parseId(5 as unknown as string)).toThrow(/decimal string/);
  });
});

describe('field edges (table-driven)', () => {
  const L = DEFAULT_LAYOUT;
  const edges = [
    { name: 'all zero', f: { timestampMs: 0, region: 0, worker: 0, sequence: 0 }, id: 0n },
    { name: 'max sequence', f: { timestampMs: 0, region: 0, worker: 0, sequence: 4095 }, id: 4095n },
    { name: 'max worker', f: { timestampMs: 0, region: 0, worker: 127, sequence: 0 }, id: 127n << 12n },
    { name: 'max region', f: { timestampMs: 0, region: 7, worker: 0, sequence: 0 }, id: 7n << 19n },
    {
      name: 'max timestamp',
      f: { timestampMs: 2 ** 41 - 1, region: 0, worker: 0, sequence: 0 },
      id: (2n ** 41n - 1n) << 22n,
    },
    { name: '2^53', f: { timestampMs: 2 ** 31, region: 0, worker: 0, sequence: 0 }, id: 2n ** 53n },
    {
      name: '2^53 + 1 (not a safe number)',
      f: { timestampMs: 2 ** 31, region: 0, worker: 0, sequence: 1 },
      id: 2n ** 53n + 1n,
    },
    { name: '2^63 − 1', f: { timestampMs: 2 ** 41 - 1, region: 7, worker: 127, sequence: 4095 }, id: MAX_ID },
  ];
  it.each(edges)('$name composes and decomposes exactly', ({ f, id }) => {
    expect(L.compose(f)).toBe(id);
    expect(L.decompose(id)).toEqual(f);
    expect(parseId(formatId(id))).toBe(id);
  });

  it.each([
    [
      { timestampMs: -1, region: 0, worker: 0, sequence: 0 },
      /timestampMs must be an integer from 0 to 2199023255551, got -1/,
    ],
    [{ timestampMs: 2 ** 41, region: 0, worker: 0, sequence: 0 }, /timestampMs .* 0 to 2199023255551/],
    [{ timestampMs: 0, region: 8, worker: 0, sequence: 0 }, /region must be an integer from 0 to 7, got 8/],
    [{ timestampMs: 0, region: 0, worker: 128, sequence: 0 }, /worker must be an integer from 0 to 127, got 128/],
    [{ timestampMs: 0, region: 0, worker: 4200, sequence: 0 }, /worker .* 0 to 127, got 4200/],
    [{ timestampMs: 0, region: 0, worker: 0, sequence: 4096 }, /sequence must be an integer from 0 to 4095, got 4096/],
    [{ timestampMs: 0.5, region: 0, worker: 0, sequence: 0 }, /timestampMs/],
    [{ timestampMs: 0, region: Number.NaN, worker: 0, sequence: 0 }, /region .* got NaN/],
  ])('compose refuses %j rather than masking it', (f, message) => {
    expect(() => L.compose(f)).toThrow(RangeError);
    expect(() => L.compose(f)).toThrow(message);
  });

  it.each([[-1n], [MAX_ID + 1n], [2n ** 64n]])('decompose refuses %p', (id) => {
    expect(() => L.decompose(id)).toThrow(/from 0 to 9223372036854775807/);
    expect(() => formatId(id)).toThrow(RangeError);
  });

  it('gives the first and last ID of a millisecond', () => {
    const ms = DEFAULT_EPOCH_MS + 24831000123;
    expect(L.firstIdOf(ms)).toBe(L.compose({ timestampMs: 24831000123, region: 0, worker: 0, sequence: 0 }));
    expect(L.lastIdOf(ms)).toBe(L.compose({ timestampMs: 24831000123, region: 7, worker: 127, sequence: 4095 }));
    expect(L.lastIdOf(ms) + 1n).toBe(L.firstIdOf(ms + 1));
    expect(() => L.firstIdOf(DEFAULT_EPOCH_MS - 1)).toThrow(/from 1704067200000 \(2024-01-01T00:00:00.000Z\)/);
    expect(() => L.lastIdOf(DEFAULT_EPOCH_MS + 2 ** 41)).toThrow(RangeError);
  });
});

describe('custom layouts', () => {
  it('accepts widths that total 63 and uses them', () => {
    const L = createLayout({ epochMs: 0, timestampBits: 42, regionBits: 2, workerBits: 9, sequenceBits: 10 });
    const id = L.compose({ timestampMs: 5, region: 3, worker: 511, sequence: 1023 });
    expect(id).toBe((5n << 21n) | (3n << 19n) | (511n << 10n) | 1023n);
    expect(L.decompose(id)).toEqual({ timestampMs: 5, region: 3, worker: 511, sequence: 1023 });
  });
  it.each([
    [{ timestampBits: 40 }, /must total 63 .*= 62/],
    [{ sequenceBits: 13 }, /must total 63 .*= 64/],
    [{ timestampBits: 0 }, /timestampBits must be an integer from 1 to 52/],
    [
      { timestampBits: 53, regionBits: 0, workerBits: 0, sequenceBits: 10 },
      /timestampBits must be an integer from 1 to 52/,
    ],
    [{ regionBits: -1 }, /regionBits must be an integer from 0 to 62/],
    [{ workerBits: 1.5 }, /workerBits/],
    [{ epochMs: -1 }, /epochMs must be an integer from 0 to/],
    [{ epochMs: 8.64e15 }, /epochMs must be an integer from 0 to/],
  ])('refuses %j', (options, message) => {
    expect(() => createLayout(options)).toThrow(RangeError);
    expect(() => createLayout(options)).toThrow(message);
  });
  it('lists the differences between two layouts', () => {
    const other = createLayout({ epochMs: 0 });
    expect(DEFAULT_LAYOUT.differences(other.toRecord(), 'in this process', 'in etcd')).toEqual([
      'epochMs: 1704067200000 in this process, 0 in etcd',
    ]);
    expect(DEFAULT_LAYOUT.differences(DEFAULT_LAYOUT.toRecord())).toEqual([]);
  });
});

describe('round trips (property)', () => {
  const fields = fc.record({
    timestampMs: fc.integer({ min: 0, max: 2 ** 41 - 1 }),
    region: fc.integer({ min: 0, max: 7 }),
    worker: fc.integer({ min: 0, max: 127 }),
    sequence: fc.integer({ min: 0, max: 4095 }),
  });
  it('decompose(compose(f)) = f and the decimal form round-trips', () => {
    fc.assert(
      fc.property(fields, (f) => {
        const id = DEFAULT_LAYOUT.compose(f);
        expect(id >= 0n && id <= MAX_ID).toBe(true);
        expect(DEFAULT_LAYOUT.decompose(id)).toEqual(f);
        expect(parseId(formatId(id))).toBe(id);
      }),
      { numRuns: 2000 },
    );
  });
  it('compose(decompose(id)) = id for every 63-bit id', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: MAX_ID }), (id) => {
        expect(DEFAULT_LAYOUT.compose(DEFAULT_LAYOUT.decompose(id))).toBe(id);
      }),
      { numRuns: 2000 },
    );
  });
  it('orders IDs by time first', () => {
    fc.assert(
      fc.property(fields, fields, (a, b) => {
        fc.pre(a.timestampMs !== b.timestampMs);
        const ia = DEFAULT_LAYOUT.compose(a);
        const ib = DEFAULT_LAYOUT.compose(b);
        expect(ia < ib).toBe(a.timestampMs < b.timestampMs);
      }),
    );
  });
});
