import fc from 'fast-check';
import {
  HUFFMAN_CODES,
  HUFFMAN_CODE_LENGTHS,
  huffmanDecode,
  huffmanEncodeLatin1,
  huffmanEncodedLengthLatin1,
} from './huffman.js';

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');

function encode(src: Buffer): Buffer {
  const text = src.toString('latin1');
  const out = Buffer.alloc(huffmanEncodedLengthLatin1(text));
  expect(huffmanEncodeLatin1(text, out, 0)).toBe(out.length);
  return out;
}

/** Decodes into a scratch buffer of exactly the documented bound; null when invalid. */
function decode(src: Buffer): Buffer | null {
  const out = Buffer.alloc(Math.floor((src.length * 8) / 5));
  const n = huffmanDecode(src, 0, src.length, out);
  return n < 0 ? null : out.subarray(0, n);
}

/** Packs codes given as strings of '0'/'1' into octets; `pad` fills the last octet (bits, MSB first). */
function bits(code: string, pad = ''): Buffer {
  const all = code + pad;
  expect(all.length % 8).toBe(0);
  const out = Buffer.alloc(all.length / 8);
  for (let i = 0; i < all.length; i++) if (all[i] === '1') out[i >> 3] = (out[i >> 3] ?? 0) | (0x80 >> (i & 7));
  return out;
}

const codeBits = (sym: number): string =>
  (HUFFMAN_CODES[sym] ?? 0).toString(2).padStart(HUFFMAN_CODE_LENGTHS[sym] ?? 0, '0');

/**
 * A slow, obviously-correct decoder to check the state machine against: reads bit by bit, looks the
 * accumulated bits up in a map of all codes, and applies RFC 7541 §5.2's rules to what is left.
 */
function referenceDecode(src: Buffer): number[] | null {
  const byCode = new Map<string, number>();
  for (let s = 0; s <= 256; s++) byCode.set(codeBits(s), s);
  const out: number[] = [];
  let acc = '';
  for (const byte of src) {
    for (let i = 7; i >= 0; i--) {
      acc += (byte >> i) & 1;
      const sym = byCode.get(acc);
      if (sym === undefined) continue;
      if (sym === 256) return null;
      out.push(sym);
      acc = '';
    }
  }
  if (acc.length > 7 || /0/.test(acc)) return null;
  return out;
}

describe('the Huffman table', () => {
  it('has 257 codes of 5 to 30 bits, EOS being 30 ones', () => {
    expect(HUFFMAN_CODES.length).toBe(257);
    expect(HUFFMAN_CODE_LENGTHS.length).toBe(257);
    for (let s = 0; s <= 256; s++) {
      const len = HUFFMAN_CODE_LENGTHS[s] ?? 0;
      expect(len).toBeGreaterThanOrEqual(5);
      expect(len).toBeLessThanOrEqual(30);
      expect(HUFFMAN_CODES[s] ?? 0).toBeLessThan(2 ** len);
    }
    expect(HUFFMAN_CODES[256]).toBe(0x3fffffff);
    expect(HUFFMAN_CODE_LENGTHS[256]).toBe(30);
  });

  it('is the canonical code of its lengths and complete (Kraft sum 1), as RFC 7541 Appendix B is', () => {
    // Canonical Huffman: sort symbols by (length, symbol) and count up, shifting left when the length grows.
    const order = Array.from({ length: 257 }, (_, s) => s).sort(
      (a, b) => (HUFFMAN_CODE_LENGTHS[a] ?? 0) - (HUFFMAN_CODE_LENGTHS[b] ?? 0) || a - b,
    );
    let code = 0;
    let prevLen = HUFFMAN_CODE_LENGTHS[order[0] ?? 0] ?? 0;
    order.forEach((s, i) => {
      const len = HUFFMAN_CODE_LENGTHS[s] ?? 0;
      if (i > 0) {
        code = (code + 1) * 2 ** (len - prevLen);
        prevLen = len;
      }
      expect([s, HUFFMAN_CODES[s]]).toEqual([s, code]);
    });
    let kraft = 0;
    for (const len of HUFFMAN_CODE_LENGTHS) kraft += 2 ** -len;
    expect(kraft).toBe(1);
  });

  it('matches spot checks from RFC 7541 Appendix B', () => {
    expect(codeBits(48)).toBe('00000'); // '0'
    expect(codeBits(97)).toBe('00011'); // 'a'
    expect(codeBits(0)).toBe('1111111111000');
    expect(codeBits(10)).toBe('111111111111111111111111111100'); // LF, 30 bits
    expect(codeBits(255)).toBe('11111111111111111111101110');
  });
});

describe('Huffman encoding and decoding', () => {
  // The Huffman-coded strings of RFC 7541 C.4 and C.6.
  const vectors: [string, string][] = [
    ['www.example.com', 'f1e3 c2e5 f23a 6ba0 ab90 f4ff'],
    ['no-cache', 'a8eb 1064 9cbf'],
    ['custom-key', '25a8 49e9 5ba9 7d7f'],
    ['custom-value', '25a8 49e9 5bb8 e8b4 bf'],
    ['302', '6402'],
    ['307', '640e ff'],
    ['private', 'aec3 771a 4b'],
    ['Mon, 21 Oct 2013 20:13:21 GMT', 'd07a be94 1054 d444 a820 0595 040b 8166 e082 a62d 1bff'],
    ['Mon, 21 Oct 2013 20:13:22 GMT', 'd07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff'],
    ['https://www.example.com', '9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3'],
    ['gzip', '9bd9 ab'],
    [
      'foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1',
      '94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07',
    ],
  ];

  it.each(vectors)('encodes and decodes %j as RFC 7541 Appendix C shows', (text, coded) => {
    const raw = Buffer.from(text, 'latin1');
    expect(encode(raw).toString('hex')).toBe(hex(coded).toString('hex'));
    expect(huffmanEncodedLengthLatin1(text)).toBe(hex(coded).length);
    const viaString = Buffer.alloc(hex(coded).length);
    expect(huffmanEncodeLatin1(text, viaString, 0)).toBe(viaString.length);
    expect(viaString.toString('hex')).toBe(hex(coded).toString('hex'));
    expect(decode(hex(coded))?.toString('latin1')).toBe(text);
  });

  it('round-trips every octet value alone, and all 256 in one string', () => {
    for (let b = 0; b < 256; b++) {
      const coded = encode(Buffer.of(b));
      expect(coded.length).toBe(Math.ceil((HUFFMAN_CODE_LENGTHS[b] ?? 0) / 8));
      expect(referenceDecode(coded)).toEqual([b]);
      expect(decode(coded)).toEqual(Buffer.of(b));
    }
    const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    expect(decode(encode(all))).toEqual(all);
    expect(decode(encode(Buffer.from(all).reverse()))).toEqual(Buffer.from(all).reverse());
  });

  it('round-trips random octet strings, and encodes at an offset', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), fc.nat({ max: 7 }), (bytes, offset) => {
        const src = Buffer.from(bytes);
        const length = huffmanEncodedLengthLatin1(src.toString('latin1'));
        const out = Buffer.alloc(offset + length + 1, 0xaa);
        expect(huffmanEncodeLatin1(src.toString('latin1'), out, offset)).toBe(offset + length);
        expect(out[offset + length]).toBe(0xaa);
        expect(decode(out.subarray(offset, offset + length))).toEqual(src);
      }),
      { numRuns: 500 },
    );
  });

  it('decodes a subrange of a larger buffer', () => {
    const coded = hex('00 f1e3 c2e5 f23a 6ba0 ab90 f4ff 00');
    const out = Buffer.alloc(32);
    const n = huffmanDecode(coded, 1, coded.length - 1, out);
    expect(out.toString('latin1', 0, n)).toBe('www.example.com');
  });

  it('decodes the empty string', () => {
    expect(huffmanDecode(Buffer.alloc(0), 0, 0, Buffer.alloc(0))).toBe(0);
    expect(huffmanEncodedLengthLatin1('')).toBe(0);
  });

  it('rejects EOS inside the string (RFC 7541 §5.2)', () => {
    const eos = codeBits(256);
    expect(decode(bits(eos, '11'))).toBeNull(); // EOS alone, padded
    expect(decode(bits(codeBits(97) + eos, '11111'))).toBeNull(); // 'a' then EOS
    expect(decode(bits(eos + codeBits(97), '11111'))).toBeNull(); // EOS then 'a'
    expect(decode(hex('ffff ffff'))).toBeNull();
  });

  it('rejects padding longer than 7 bits', () => {
    expect(decode(bits(codeBits(97), '111'))).toEqual(Buffer.from('a')); // 3 bits: fine
    expect(decode(bits(codeBits(97), '111' + '11111111'))).toBeNull(); // 11 bits
    expect(decode(hex('ff'))).toBeNull(); // 8 bits, no symbol
    expect(decode(bits(codeBits(48) + codeBits(48) + codeBits(48), '1' + '11111111'))).toBeNull(); // 9 bits
    expect(decode(hex('1f ff'))).toBeNull(); // 'a' + 3 padding bits, then a padding octet
  });

  it('rejects padding that is not all ones (a truncated code)', () => {
    expect(decode(bits(codeBits(97), '110'))).toBeNull();
    expect(decode(bits(codeBits(97), '000'))).toBeNull();
    expect(decode(bits(codeBits(97), '011'))).toBeNull();
    // A long code cut short: the first 8 bits of code 0 (13 bits) look like padding but are not < 8 bits of ones.
    expect(decode(bits(codeBits(0).slice(0, 8)))).toBeNull();
  });

  it('agrees with a bit-by-bit reference decoder on arbitrary input, valid or not', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 40 }), (bytes) => {
        const src = Buffer.from(bytes);
        const expected = referenceDecode(src);
        const got = decode(src);
        expect(got === null ? null : [...got]).toEqual(expected);
        // A valid string has exactly one coding, so re-encoding gives the input back.
        if (got !== null) expect(encode(got)).toEqual(src);
      }),
      { numRuns: 2000 },
    );
  });

  it('agrees with the reference decoder on strings of long codes with noise at the end', () => {
    const longCodes = fc.integer({ min: 0, max: 255 }).filter((s) => (HUFFMAN_CODE_LENGTHS[s] ?? 0) >= 20);
    fc.assert(
      fc.property(fc.array(longCodes, { maxLength: 10 }), fc.uint8Array({ maxLength: 3 }), (syms, noise) => {
        const src = Buffer.concat([encode(Buffer.from(syms)), Buffer.from(noise)]);
        const got = decode(src);
        expect(got === null ? null : [...got]).toEqual(referenceDecode(src));
      }),
      { numRuns: 500 },
    );
  });
});
