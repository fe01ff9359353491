import fc from 'fast-check';
import { MAX_ID, createMinter, formatBase32Id, formatPaddedId, parseBase32Id } from './index.js';

// Issue 35 "Done when": sorting a million consecutive and random IDs as text in the sortable form gives the numeric
// order; as decimal strings it does not.
describe('a million IDs sorted as text', () => {
  const ids = new BigUint64Array(1_000_000);
  beforeAll(() => {
    // Half a worker's consecutive run (every sequence value, 123 ms), half random over the whole range.
    const minter = createMinter({ region: 2, worker: 17 });
    let nowMs = 1_728_898_200_123;
    for (let i = 0; i < 500_000; i++) {
      let id = minter.mintOne(nowMs);
      while (typeof id !== 'bigint') id = minter.mintOne(++nowMs);
      ids[i] = id;
    }
    const random = fc.sample(fc.bigInt({ min: 0n, max: MAX_ID }), { numRuns: 500_000, seed: 35 });
    random.forEach((id, i) => {
      ids[500_000 + i] = id;
    });
  });

  function numericOrder(): BigUint64Array {
    return ids.slice().sort();
  }

  /** The texts in a shuffled order (so the sort has work to do), sorted with JavaScript's default `sort()`. */
  function sortedAsText(format: (id: bigint) => string): string[] {
    const texts = Array.from(ids, format);
    let seed = 35;
    for (let i = texts.length - 1; i > 0; i--) {
      seed = (Math.imul(seed, 1_103_515_245) + 12_345) >>> 0;
      const j = seed % (i + 1);
      [texts[i], texts[j]] = [texts[j] as string, texts[i] as string];
    }
    return texts.sort();
  }

  it('in the base32 form, gives the numeric order', () => {
    const sorted = sortedAsText(formatBase32Id);
    const expected = numericOrder();
    expect(sorted).toHaveLength(1_000_000);
    let wrong = 0;
    sorted.forEach((text, i) => {
      if (parseBase32Id(text) !== expected[i]) wrong++;
    });
    expect(wrong).toBe(0);
  });

  it('in the zero-padded decimal form, gives the numeric order', () => {
    const sorted = sortedAsText(formatPaddedId);
    const expected = numericOrder();
    let wrong = 0;
    sorted.forEach((text, i) => {
      if (BigInt(text) !== expected[i]) wrong++;
    });
    expect(wrong).toBe(0);
  });

  it('as plain decimal strings, does not', () => {
    const sorted = sortedAsText((id) => id.toString());
    const expected = numericOrder();
    let wrong = 0;
    sorted.forEach((text, i) => {
      if (BigInt(text) !== expected[i]) wrong++;
    });
    // The random half spans every length from 1 to 19 digits; shorter numbers interleave with longer ones.
    expect(wrong).toBeGreaterThan(100_000);
  });
});
