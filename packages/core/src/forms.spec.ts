import fc from 'fast-check';
import {
  BASE32_ID_LENGTH,
  DEFAULT_LAYOUT,
  ID_FORMS,
  type InvalidIdError,
  type InvalidIdReason,
  MAX_ID,
  PADDED_ID_LENGTH,
  createIdForms,
  createKeyedForm,
  createLayout,
  createMinter,
  formatBase32Id,
  formatPaddedId,
  isIdForm,
  isInvalidIdError,
  parseBase32Id,
  parsePaddedId,
  spreadBitOrder,
  spreadId,
  unspreadId,
} from './index.js';

// Issue 35: each form is proved by properties over the whole 63-bit range, and at the edges.
const anyId = fc.bigInt({ min: 0n, max: MAX_ID });
const anyKey = fc.uint8Array({ minLength: 16, maxLength: 64 });
const RUNS = { numRuns: 5000 };

/** 0, 1, 2^63 − 1, every power of two and of ten with its neighbours: where a carry or a width changes. */
const EDGES: bigint[] = (() => {
  const edges = new Set<bigint>([0n, 1n, MAX_ID - 1n, MAX_ID]);
  for (let k = 0n; k < 63n; k++) for (const d of [-1n, 0n, 1n]) edges.add((1n << k) + d);
  for (let p = 1n; p <= MAX_ID; p *= 10n) for (const d of [-1n, 0n, 1n]) edges.add(p + d);
  return [...edges].filter((id) => id >= 0n && id <= MAX_ID).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
})();

function compare<T>(a: T, b: T): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function reasonOf(parse: () => unknown): InvalidIdReason | undefined {
  try {
    parse();
  } catch (e) {
    if (!isInvalidIdError(e)) throw e;
    expect(e).toBeInstanceOf(RangeError);
    return (e as InvalidIdError).reason;
  }
  return undefined;
}

describe('base32 form', () => {
  it('round-trips every ID, at 13 characters of the upper-case alphabet', () => {
    fc.assert(
      fc.property(anyId, (id) => {
        const text = formatBase32Id(id);
        expect(text).toMatch(/^[0-7][0-9A-HJKMNP-TV-Z]{12}$/);
        expect(parseBase32Id(text)).toBe(id);
        expect(parseBase32Id(text.toLowerCase())).toBe(id);
      }),
      RUNS,
    );
    for (const id of EDGES) expect(parseBase32Id(formatBase32Id(id))).toBe(id);
    expect(formatBase32Id(0n)).toBe('0000000000000');
    expect(formatBase32Id(MAX_ID)).toBe('7ZZZZZZZZZZZZ');
  });

  it('every 13-character text of the alphabet with a first character 0–7 is exactly one ID', () => {
    const symbol = fc.constantFrom(...'0123456789ABCDEFGHJKMNPQRSTVWXYZ');
    const text = fc.tuple(fc.constantFrom(...'01234567'), fc.array(symbol, { minLength: 12, maxLength: 12 }));
    fc.assert(
      fc.property(text, ([first, rest]) => {
        const t = first + rest.join('');
        expect(formatBase32Id(parseBase32Id(t))).toBe(t);
      }),
      RUNS,
    );
  });

  it("reads Crockford's aliases: I and L as 1, O as 0, in either case", () => {
    expect(parseBase32Id('O2WG2QY7D24O5')).toBe(104148763141017605n);
    expect(parseBase32Id('02wg2qy7d24o5')).toBe(104148763141017605n);
    expect(parseBase32Id('0000000000OIL')).toBe(parseBase32Id('0000000000011'));
    expect(parseBase32Id('0000000000oil')).toBe(33n);
  });

  it.each([
    ['', 'empty'],
    ['05KZK4MG0220', 'wrong-length'],
    ['05KZK4MG022050', 'wrong-length'],
    ['05KZK4MG0220U', 'bad-character'],
    ['05KZK4MG022-5', 'bad-character'],
    ['05KZK4MG022 5', 'bad-character'],
    ['05KZK4MG022é5', 'bad-character'],
    ['8000000000000', 'out-of-range'],
    ['ZZZZZZZZZZZZZ', 'out-of-range'],
  ] as const)('refuses %j (%s)', (text, reason) => {
    expect(reasonOf(() => parseBase32Id(text))).toBe(reason);
  });

  it('names the character and its position, and refuses what is not a string or not an ID', () => {
    expect(() => parseBase32Id('05KZK4MG0220U')).toThrow(/"U" at position 13/);
    expect(() => parseBase32Id(5 as unknown as string)).toThrow(TypeError);
    expect(() => formatBase32Id(-1n)).toThrow(RangeError);
    expect(() => formatBase32Id(MAX_ID + 1n)).toThrow(RangeError);
    expect(() => formatBase32Id(5 as unknown as bigint)).toThrow(TypeError);
  });
});

describe('zero-padded decimal form', () => {
  it('round-trips every ID, at 19 digits', () => {
    fc.assert(
      fc.property(anyId, (id) => {
        const text = formatPaddedId(id);
        expect(text).toMatch(/^[0-9]{19}$/);
        expect(parsePaddedId(text)).toBe(id);
        expect(BigInt(text)).toBe(id);
      }),
      RUNS,
    );
    for (const id of EDGES) expect(parsePaddedId(formatPaddedId(id))).toBe(id);
    expect(formatPaddedId(104148763141017605n)).toBe('0104148763141017605');
  });

  it.each([
    ['', 'empty'],
    ['104148763141017605', 'wrong-length'],
    ['00104148763141017605', 'wrong-length'],
    ['-104148763141017605', 'bad-character'],
    ['+104148763141017605', 'bad-character'],
    ['01041487631410176O5', 'bad-character'],
    ['9223372036854775808', 'out-of-range'],
    ['9999999999999999999', 'out-of-range'],
  ] as const)('refuses %j (%s)', (text, reason) => {
    expect(reasonOf(() => parsePaddedId(text))).toBe(reason);
  });
});

describe('the text forms sort as text in numeric order', () => {
  const forms = [
    ['base32', formatBase32Id],
    ['decimal', formatPaddedId],
  ] as const;
  it.each(forms)('%s: over random pairs', (_name, format) => {
    fc.assert(
      fc.property(anyId, anyId, (a, b) => {
        expect(compare(format(a), format(b))).toBe(compare(a, b));
      }),
      RUNS,
    );
  });
  it.each(forms)('%s: across every power of ten and of two, where plain decimal strings do not', (_name, format) => {
    let plainWrong = 0;
    for (let i = 1; i < EDGES.length; i++) {
      const lower = EDGES[i - 1] as bigint;
      const upper = EDGES[i] as bigint;
      expect(format(lower) < format(upper)).toBe(true);
      if (!(lower.toString() < upper.toString())) plainWrong++;
    }
    // 10^k − 1 against 10^k, for each of the 18 powers of ten up to 2^63, among others.
    expect(plainWrong).toBeGreaterThanOrEqual(18);
  });
});

describe('spread form', () => {
  const layouts = fc
    .tuple(fc.integer({ min: 1, max: 52 }), fc.integer({ min: 0, max: 10 }), fc.integer({ min: 1, max: 30 }))
    .filter(([t, r, s]) => t + r + s <= 63)
    .map(([timestampBits, regionBits, sequenceBits]) =>
      createLayout({
        timestampBits,
        regionBits,
        sequenceBits,
        workerBits: 63 - timestampBits - regionBits - sequenceBits,
      }),
    );

  it('round-trips every ID and stays a positive signed 64-bit integer', () => {
    fc.assert(
      fc.property(anyId, (id) => {
        const spread = spreadId(id);
        expect(spread >= 0n && spread <= MAX_ID).toBe(true);
        expect(unspreadId(spread)).toBe(id);
        expect(spreadId(unspreadId(id))).toBe(id);
      }),
      RUNS,
    );
    for (const id of EDGES) expect(unspreadId(spreadId(id))).toBe(id);
  });

  it('is a permutation of the 63 bits for any layout, and round-trips under it', () => {
    fc.assert(
      fc.property(layouts, anyId, (layout, id) => {
        expect([...spreadBitOrder(layout)].sort((a, b) => a - b)).toEqual(Array.from({ length: 63 }, (_, i) => i));
        expect(unspreadId(spreadId(id, layout), layout)).toBe(id);
      }),
      { numRuns: 300 },
    );
  });

  it('moves each ID bit to the documented place (default layout)', () => {
    // From the top: timestamp bits 0–7, sequence 0–11, worker 0–6, region 0–2, timestamp 8–40.
    expect(spreadId(1n << 22n)).toBe(1n << 62n); // timestamp bit 0
    expect(spreadId(1n << 29n)).toBe(1n << 55n); // timestamp bit 7
    expect(spreadId(1n)).toBe(1n << 54n); // sequence bit 0
    expect(spreadId(1n << 11n)).toBe(1n << 43n); // sequence bit 11
    expect(spreadId(1n << 12n)).toBe(1n << 42n); // worker bit 0
    expect(spreadId(1n << 19n)).toBe(1n << 35n); // region bit 0
    expect(spreadId(1n << 30n)).toBe(1n << 32n); // timestamp bit 8
    expect(spreadId(1n << 62n)).toBe(1n); // timestamp bit 40
  });

  it('refuses a value outside 0 … 2^63 − 1', () => {
    expect(reasonOf(() => unspreadId(MAX_ID + 1n))).toBe('out-of-range');
    expect(reasonOf(() => unspreadId(-1n))).toBe('out-of-range');
    expect(() => spreadId(-1n)).toThrow(RangeError);
    expect(() => unspreadId('1' as unknown as bigint)).toThrow(TypeError);
  });

  /** Share of the largest of 256 equal key ranges (the spread form's top 8 value bits) over `ids`. */
  function largestBucketShare(ids: Iterable<bigint>): { share: number; count: number } {
    const buckets = new Uint32Array(256);
    let count = 0;
    for (const id of ids) {
      const bucket = Number(spreadId(id) >> 55n);
      buckets[bucket] = (buckets[bucket] as number) + 1;
      count++;
    }
    return { share: Math.max(...buckets) / count, count };
  }

  /** A million consecutive IDs of one worker (region 2, worker 17) from the core's own minter. */
  function* mintedRun(idsPerMs: number, startMs: number): Generator<bigint> {
    const minter = createMinter({ region: 2, worker: 17 });
    let nowMs = startMs;
    let inThisMs = 0;
    for (let n = 0; n < 1_000_000; n++) {
      if (inThisMs === idsPerMs) {
        nowMs++;
        inThisMs = 0;
      }
      let id = minter.mintOne(nowMs);
      while (typeof id !== 'bigint') id = minter.mintOne(++nowMs);
      inThisMs++;
      yield id;
    }
  }

  // Measured, largest share of any of the 256 ranges: 0.4096% at 4,096 IDs/ms (a millisecond's 4,096 IDs share one
  // range; 1,000,000 IDs span 245 ms, so 11 ranges get none), 0.4000% at 100 IDs/ms, 0.3907% at one ID/ms, against
  // an even 1/256 = 0.3906% (×1.049, ×1.024, ×1.000). The bound allows 10% over even.
  it.each([
    ['every sequence value of each millisecond', 4096],
    ['one ID a millisecond', 1],
    ['a hundred IDs a millisecond', 100],
  ])('puts a million consecutive IDs of one worker evenly into 256 key ranges: %s', (_name, idsPerMs) => {
    const startMs = DEFAULT_LAYOUT.epochMs + 24_831_000_123;
    const { share, count } = largestBucketShare(mintedRun(idsPerMs, startMs));
    expect(count).toBe(1_000_000);
    expect(share).toBeLessThan(1.1 / 256);
  });

  it('the plain ID does not: a million consecutive IDs all fall in one key range', () => {
    const buckets = new Set<bigint>();
    for (const id of mintedRun(4096, DEFAULT_LAYOUT.epochMs + 24_831_000_123)) buckets.add(id >> 55n);
    expect(buckets.size).toBe(1);
  });
});

describe('keyed form', () => {
  it('round-trips every ID both ways under any key (a bijection of 0 … 2^63 − 1)', () => {
    // reveal ∘ hide = identity makes hide injective, hide ∘ reveal = identity makes it onto: a bijection.
    fc.assert(
      fc.property(anyKey, anyId, (key, id) => {
        const form = createKeyedForm(key);
        const keyed = form.hide(id);
        expect(keyed >= 0n && keyed <= MAX_ID).toBe(true);
        expect(form.reveal(keyed)).toBe(id);
        expect(form.hide(form.reveal(id))).toBe(id);
      }),
      { numRuns: 2000 },
    );
    const form = createKeyedForm('000102030405060708090a0b0c0d0e0f');
    for (const id of EDGES) expect(form.reveal(form.hide(id))).toBe(id);
  });

  it('gives 100,000 consecutive IDs 100,000 distinct keyed forms', () => {
    const form = createKeyedForm('000102030405060708090a0b0c0d0e0f');
    const keyed = new BigUint64Array(100_000);
    const first = 104148763141017605n;
    for (let i = 0; i < keyed.length; i++) keyed[i] = form.hide(first + BigInt(i));
    keyed.sort();
    let repeats = 0;
    for (let i = 1; i < keyed.length; i++) if (keyed[i] === keyed[i - 1]) repeats++;
    expect(repeats).toBe(0);
  });

  it('two keys disagree', () => {
    fc.assert(
      fc.property(anyKey, anyKey, fc.array(anyId, { minLength: 64, maxLength: 64 }), (k1, k2, ids) => {
        fc.pre(Buffer.compare(k1, k2) !== 0);
        const a = createKeyedForm(k1);
        const b = createKeyedForm(k2);
        // Two keyed permutations agreeing on an ID has odds of 2^-63 each: none of 64 may agree.
        expect(ids.filter((id) => a.hide(id) === b.hide(id))).toEqual([]);
      }),
      { numRuns: 500 },
    );
  });

  it('hides time and sequence: one flipped ID bit flips about half the keyed bits, and order is lost', () => {
    const form = createKeyedForm('00112233445566778899aabbccddeeff');
    let flipped = 0;
    let pairs = 0;
    let increasing = 0;
    const start = 104148763141017605n;
    for (let i = 0n; i < 20_000n; i++) {
      const a = form.hide(start + i);
      const b = form.hide(start + i + 1n);
      if (b > a) increasing++;
      flipped += (a ^ b).toString(2).replaceAll('0', '').length;
      pairs++;
    }
    // An ideal permutation flips 31.5 of 63 bits on average and orders consecutive IDs at random.
    expect(flipped / pairs).toBeGreaterThan(29);
    expect(flipped / pairs).toBeLessThan(34);
    expect(increasing / pairs).toBeGreaterThan(0.45);
    expect(increasing / pairs).toBeLessThan(0.55);
  });

  it.each([
    ['a key too short', new Uint8Array(15), /16 to 64 bytes/],
    ['a key too long', new Uint8Array(65), /16 to 64 bytes/],
    ['hex text too short', '00112233', /16 to 64 bytes/],
    ['text that is not hex', 'not-a-key-not-a-key-not-a-key-not', /hex digits/],
    ['hex digits not in pairs', '00112233445566778899aabbccddeeff0', /hex digits/],
    ['a number', 5, /Uint8Array or a hex string/],
  ])('refuses %s', (_name, key, message) => {
    expect(() => createKeyedForm(key as Uint8Array)).toThrow(message);
  });

  it('refuses a keyed value outside 0 … 2^63 − 1', () => {
    const form = createKeyedForm(new Uint8Array(16));
    expect(reasonOf(() => form.reveal(MAX_ID + 1n))).toBe('out-of-range');
    expect(() => form.hide(-1n)).toThrow(RangeError);
  });
});

describe('IdForms', () => {
  const forms = createIdForms({ key: '000102030405060708090a0b0c0d0e0f' });

  it('formats and parses every form, the integer forms also from their decimal text', () => {
    fc.assert(
      fc.property(anyId, fc.constantFrom(...ID_FORMS), (id, form) => {
        const value = forms.format(id, form);
        expect(forms.parse(value, form)).toBe(id);
        if (typeof value === 'bigint') expect(forms.parse(value.toString(), form)).toBe(id);
      }),
      RUNS,
    );
  });

  it('refuses an unknown form, naming the four, and the keyed form without a key', () => {
    expect(() => forms.format(1n, 'hex' as 'base32')).toThrow(/base32, decimal, spread, keyed/);
    expect(() => createIdForms().format(1n, 'keyed')).toThrow(/needs the deployment's key/);
    expect(() => createIdForms().parse('1', 'keyed')).toThrow(TypeError);
    expect(() => forms.check('plain')).toThrow(/the forms are base32, decimal, spread, keyed/);
    expect(() => createIdForms().check('keyed')).toThrow(/keyedFormKey/);
    expect(forms.check('keyed')).toBe('keyed');
    expect(isIdForm('spread')).toBe(true);
    expect(isIdForm('plain')).toBe(false);
  });

  it('checks the text lengths it documents', () => {
    expect(formatBase32Id(MAX_ID)).toHaveLength(BASE32_ID_LENGTH);
    expect(formatPaddedId(0n)).toHaveLength(PADDED_ID_LENGTH);
  });
});
