// HPACK Huffman code (RFC 7541 §5.2, Appendix B): a static, canonical code over the 256 octets plus
// EOS. Encoding is a plain bit packer; decoding runs a byte-at-a-time state machine built once at
// module load, so the hot path is one table lookup per input byte and no per-string allocation.

/**
 * Code of each symbol (0..255, then EOS at 256), right-aligned: symbol `s` is the low
 * `HUFFMAN_CODE_LENGTHS[s]` bits of `HUFFMAN_CODES[s]`, most significant bit first.
 * Copied from RFC 7541 Appendix B (via golang.org/x/net/http2/hpack, checked against python-hyper/hpack);
 * the spec tests re-derive every code from the lengths, since the HPACK code is canonical.
 */
export const HUFFMAN_CODES: Readonly<Uint32Array> = Uint32Array.of(
  0x1ff8,
  0x7fffd8,
  0xfffffe2,
  0xfffffe3,
  0xfffffe4,
  0xfffffe5,
  0xfffffe6,
  0xfffffe7,
  0xfffffe8,
  0xffffea,
  0x3ffffffc,
  0xfffffe9,
  0xfffffea,
  0x3ffffffd,
  0xfffffeb,
  0xfffffec,
  0xfffffed,
  0xfffffee,
  0xfffffef,
  0xffffff0,
  0xffffff1,
  0xffffff2,
  0x3ffffffe,
  0xffffff3,
  0xffffff4,
  0xffffff5,
  0xffffff6,
  0xffffff7,
  0xffffff8,
  0xffffff9,
  0xffffffa,
  0xffffffb,
  0x14,
  0x3f8,
  0x3f9,
  0xffa,
  0x1ff9,
  0x15,
  0xf8,
  0x7fa,
  0x3fa,
  0x3fb,
  0xf9,
  0x7fb,
  0xfa,
  0x16,
  0x17,
  0x18,
  0x0,
  0x1,
  0x2,
  0x19,
  0x1a,
  0x1b,
  0x1c,
  0x1d,
  0x1e,
  0x1f,
  0x5c,
  0xfb,
  0x7ffc,
  0x20,
  0xffb,
  0x3fc,
  0x1ffa,
  0x21,
  0x5d,
  0x5e,
  0x5f,
  0x60,
  0x61,
  0x62,
  0x63,
  0x64,
  0x65,
  0x66,
  0x67,
  0x68,
  0x69,
  0x6a,
  0x6b,
  0x6c,
  0x6d,
  0x6e,
  0x6f,
  0x70,
  0x71,
  0x72,
  0xfc,
  0x73,
  0xfd,
  0x1ffb,
  0x7fff0,
  0x1ffc,
  0x3ffc,
  0x22,
  0x7ffd,
  0x3,
  0x23,
  0x4,
  0x24,
  0x5,
  0x25,
  0x26,
  0x27,
  0x6,
  0x74,
  0x75,
  0x28,
  0x29,
  0x2a,
  0x7,
  0x2b,
  0x76,
  0x2c,
  0x8,
  0x9,
  0x2d,
  0x77,
  0x78,
  0x79,
  0x7a,
  0x7b,
  0x7ffe,
  0x7fc,
  0x3ffd,
  0x1ffd,
  0xffffffc,
  0xfffe6,
  0x3fffd2,
  0xfffe7,
  0xfffe8,
  0x3fffd3,
  0x3fffd4,
  0x3fffd5,
  0x7fffd9,
  0x3fffd6,
  0x7fffda,
  0x7fffdb,
  0x7fffdc,
  0x7fffdd,
  0x7fffde,
  0xffffeb,
  0x7fffdf,
  0xffffec,
  0xffffed,
  0x3fffd7,
  0x7fffe0,
  0xffffee,
  0x7fffe1,
  0x7fffe2,
  0x7fffe3,
  0x7fffe4,
  0x1fffdc,
  0x3fffd8,
  0x7fffe5,
  0x3fffd9,
  0x7fffe6,
  0x7fffe7,
  0xffffef,
  0x3fffda,
  0x1fffdd,
  0xfffe9,
  0x3fffdb,
  0x3fffdc,
  0x7fffe8,
  0x7fffe9,
  0x1fffde,
  0x7fffea,
  0x3fffdd,
  0x3fffde,
  0xfffff0,
  0x1fffdf,
  0x3fffdf,
  0x7fffeb,
  0x7fffec,
  0x1fffe0,
  0x1fffe1,
  0x3fffe0,
  0x1fffe2,
  0x7fffed,
  0x3fffe1,
  0x7fffee,
  0x7fffef,
  0xfffea,
  0x3fffe2,
  0x3fffe3,
  0x3fffe4,
  0x7ffff0,
  0x3fffe5,
  0x3fffe6,
  0x7ffff1,
  0x3ffffe0,
  0x3ffffe1,
  0xfffeb,
  0x7fff1,
  0x3fffe7,
  0x7ffff2,
  0x3fffe8,
  0x1ffffec,
  0x3ffffe2,
  0x3ffffe3,
  0x3ffffe4,
  0x7ffffde,
  0x7ffffdf,
  0x3ffffe5,
  0xfffff1,
  0x1ffffed,
  0x7fff2,
  0x1fffe3,
  0x3ffffe6,
  0x7ffffe0,
  0x7ffffe1,
  0x3ffffe7,
  0x7ffffe2,
  0xfffff2,
  0x1fffe4,
  0x1fffe5,
  0x3ffffe8,
  0x3ffffe9,
  0xffffffd,
  0x7ffffe3,
  0x7ffffe4,
  0x7ffffe5,
  0xfffec,
  0xfffff3,
  0xfffed,
  0x1fffe6,
  0x3fffe9,
  0x1fffe7,
  0x1fffe8,
  0x7ffff3,
  0x3fffea,
  0x3fffeb,
  0x1ffffee,
  0x1ffffef,
  0xfffff4,
  0xfffff5,
  0x3ffffea,
  0x7ffff4,
  0x3ffffeb,
  0x7ffffe6,
  0x3ffffec,
  0x3ffffed,
  0x7ffffe7,
  0x7ffffe8,
  0x7ffffe9,
  0x7ffffea,
  0x7ffffeb,
  0xffffffe,
  0x7ffffec,
  0x7ffffed,
  0x7ffffee,
  0x7ffffef,
  0x7fffff0,
  0x3ffffee,
  0x3fffffff,
);

/** Bit length of each code in {@link HUFFMAN_CODES} (5 to 30 bits; EOS is 30 ones). */
export const HUFFMAN_CODE_LENGTHS: Readonly<Uint8Array> = Uint8Array.of(
  13,
  23,
  28,
  28,
  28,
  28,
  28,
  28,
  28,
  24,
  30,
  28,
  28,
  30,
  28,
  28,
  28,
  28,
  28,
  28,
  28,
  28,
  30,
  28,
  28,
  28,
  28,
  28,
  28,
  28,
  28,
  28,
  6,
  10,
  10,
  12,
  13,
  6,
  8,
  11,
  10,
  10,
  8,
  11,
  8,
  6,
  6,
  6,
  5,
  5,
  5,
  6,
  6,
  6,
  6,
  6,
  6,
  6,
  7,
  8,
  15,
  6,
  12,
  10,
  13,
  6,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  8,
  7,
  8,
  13,
  19,
  13,
  14,
  6,
  15,
  5,
  6,
  5,
  6,
  5,
  6,
  6,
  6,
  5,
  7,
  7,
  6,
  6,
  6,
  5,
  6,
  7,
  6,
  5,
  5,
  6,
  7,
  7,
  7,
  7,
  7,
  15,
  11,
  14,
  13,
  28,
  20,
  22,
  20,
  20,
  22,
  22,
  22,
  23,
  22,
  23,
  23,
  23,
  23,
  23,
  24,
  23,
  24,
  24,
  22,
  23,
  24,
  23,
  23,
  23,
  23,
  21,
  22,
  23,
  22,
  23,
  23,
  24,
  22,
  21,
  20,
  22,
  22,
  23,
  23,
  21,
  23,
  22,
  22,
  24,
  21,
  22,
  23,
  23,
  21,
  21,
  22,
  21,
  23,
  22,
  23,
  23,
  20,
  22,
  22,
  22,
  23,
  22,
  22,
  23,
  26,
  26,
  20,
  19,
  22,
  23,
  22,
  25,
  26,
  26,
  26,
  27,
  27,
  26,
  24,
  25,
  19,
  21,
  26,
  27,
  27,
  26,
  27,
  24,
  21,
  21,
  26,
  26,
  28,
  27,
  27,
  27,
  20,
  24,
  20,
  21,
  22,
  21,
  21,
  23,
  22,
  22,
  25,
  25,
  24,
  24,
  26,
  23,
  26,
  27,
  26,
  26,
  27,
  27,
  27,
  27,
  27,
  28,
  27,
  27,
  27,
  27,
  27,
  26,
  30,
);

/** The end-of-string symbol: never emitted; its code's prefix (all ones) is the only legal padding. */
const EOS = 256;

// Decoder table entry layout (one Int32 per state × input byte):
//   bits 0-7   state after the byte (an internal node of the code tree; 0 is the root)
//   bits 8-15  first symbol completed within the byte
//   bits 16-23 second symbol completed within the byte (codes are at least 5 bits, so at most two fit)
//   bits 24-25 how many symbols were completed (0, 1 or 2)
//   bit  26    the byte completes EOS: the string is invalid
const FAIL = 1 << 26;

/**
 * The decoding state machine. A state is a node of the code tree (a partial code read so far);
 * `DECODE_TABLE[(state << 8) | byte]` says what reading the 8 bits of `byte` from there emits and where
 * it ends. `ACCEPTS[state]` says whether input may end in that state: only at the root or after at most
 * 7 bits that are all ones (a prefix of EOS), per RFC 7541 §5.2.
 */
const { DECODE_TABLE, ACCEPTS } = buildDecoder();

function buildDecoder(): { DECODE_TABLE: Int32Array; ACCEPTS: Uint8Array } {
  // The code tree: 257 leaves need exactly 256 internal nodes. A child of 0 means "not yet created"
  // (the root is nobody's child); a negative child -(s + 1) is the leaf of symbol s.
  const zero = new Int16Array(256);
  const one = new Int16Array(256);
  const depth = new Uint8Array(256);
  const allOnes = new Uint8Array(256);
  allOnes[0] = 1;
  let nodes = 1;
  for (let sym = 0; sym <= EOS; sym++) {
    const code = HUFFMAN_CODES[sym] ?? 0;
    const len = HUFFMAN_CODE_LENGTHS[sym] ?? 0;
    let node = 0;
    for (let i = len - 1; i >= 0; i--) {
      const bit = (code >>> i) & 1;
      const children = bit === 1 ? one : zero;
      const child = children[node] ?? 0;
      if (i === 0) {
        if (child !== 0) throw new Error(`HPACK Huffman table: code of symbol ${sym} collides`);
        children[node] = -(sym + 1);
      } else if (child === 0) {
        if (nodes === 256) throw new Error('HPACK Huffman table: more than 256 internal nodes');
        children[node] = nodes;
        depth[nodes] = (depth[node] ?? 0) + 1;
        allOnes[nodes] = bit === 1 ? (allOnes[node] ?? 0) : 0;
        node = nodes++;
      } else if (child < 0) {
        throw new Error(`HPACK Huffman table: code of symbol ${sym} extends another code`);
      } else {
        node = child;
      }
    }
  }
  if (nodes !== 256) throw new Error('HPACK Huffman table: the code is not complete');

  const accepts = new Uint8Array(256);
  for (let s = 0; s < 256; s++) accepts[s] = s === 0 || (allOnes[s] === 1 && (depth[s] ?? 0) <= 7) ? 1 : 0;

  // Walk the tree 4 bits at a time first (4 bits complete at most one code, codes being at least 5
  // bits long), then compose two nibble steps per byte: much cheaper than 8 tree steps per entry.
  const nibbles = new Int32Array(256 * 16);
  for (let state = 0; state < 256; state++) {
    for (let nibble = 0; nibble < 16; nibble++) {
      let node = state;
      let entry = 0;
      for (let i = 3; i >= 0; i--) {
        const child = (((nibble >>> i) & 1) === 1 ? one[node] : zero[node]) ?? 0;
        if (child >= 0) {
          node = child;
        } else if (child === -(EOS + 1)) {
          entry = FAIL;
          break;
        } else {
          entry = ((-child - 1) << 8) | (1 << 24);
          node = 0;
        }
      }
      nibbles[(state << 4) | nibble] = entry === FAIL ? FAIL : entry | node;
    }
  }
  const table = new Int32Array(256 * 256);
  for (let state = 0; state < 256; state++) {
    for (let byte = 0; byte < 256; byte++) {
      const high = nibbles[(state << 4) | (byte >>> 4)] ?? FAIL;
      const low = (high & FAIL) !== 0 ? FAIL : (nibbles[((high & 0xff) << 4) | (byte & 0xf)] ?? FAIL);
      if ((low & FAIL) !== 0) {
        table[(state << 8) | byte] = FAIL;
        continue;
      }
      const highCount = high >>> 24;
      const lowCount = low >>> 24;
      // The low nibble's symbol (if any) goes in the first or second slot after the high nibble's.
      const syms = (high & 0xff00) | (lowCount === 0 ? 0 : (low & 0xff00) << (8 * highCount));
      table[(state << 8) | byte] = (low & 0xff) | syms | ((highCount + lowCount) << 24);
    }
  }
  return { DECODE_TABLE: table, ACCEPTS: accepts };
}

/**
 * Decodes the Huffman-coded octets `src[start, end)` into `out` from index 0. Returns how many octets
 * were written, or -1 when the input is not a valid HPACK Huffman string (it contains EOS, or ends in
 * padding longer than 7 bits or with a 0 bit): the caller reports that as COMPRESSION_ERROR.
 * `out` is the caller's scratch buffer and must hold floor(8 × (end − start) / 5) octets (the shortest
 * code is 5 bits); reusing one buffer is what keeps decoding free of garbage.
 */
export function huffmanDecode(src: Buffer, start: number, end: number, out: Buffer): number {
  let state = 0;
  let n = 0;
  for (let i = start; i < end; i++) {
    const e = DECODE_TABLE[(state << 8) | (src[i] ?? 0)] ?? FAIL;
    if ((e & FAIL) !== 0) return -1;
    const count = e >>> 24;
    if (count !== 0) {
      out[n++] = (e >>> 8) & 0xff;
      if (count === 2) out[n++] = (e >>> 16) & 0xff;
    }
    state = e & 0xff;
  }
  return ACCEPTS[state] === 1 ? n : -1;
}

/**
 * Octets the Huffman coding of a latin1 string takes (codes padded to a whole octet), to size a buffer or
 * choose raw. Each char is one octet, the low 8 bits of its code unit, as `Buffer.write(s, 'latin1')` would
 * store it: the encoder works on strings and needs no temporary Buffer.
 */
export function huffmanEncodedLengthLatin1(src: string): number {
  let bits = 0;
  for (let i = 0; i < src.length; i++) bits += HUFFMAN_CODE_LENGTHS[src.charCodeAt(i) & 0xff] ?? 0;
  return (bits + 7) >>> 3;
}

// The bit packer keeps fewer than 8 pending bits between symbols; adding a code of up to 24 bits
// stays below 2^31, so int32 shifts are safe. Longer codes (25-30 bits) are pushed in two parts.
let pending = 0;
let pendingBits = 0;

function pushCode(out: Buffer, at: number, code: number, len: number): number {
  if (len > 24) {
    at = pushCode(out, at, code >>> 16, len - 16);
    code &= 0xffff;
    len = 16;
  }
  pending = (pending << len) | code;
  pendingBits += len;
  while (pendingBits >= 8) {
    pendingBits -= 8;
    out[at++] = (pending >>> pendingBits) & 0xff;
  }
  pending &= (1 << pendingBits) - 1;
  return at;
}

function flushPadding(out: Buffer, at: number): number {
  if (pendingBits > 0) {
    // Pad with the most significant bits of EOS, i.e. ones (RFC 7541 §5.2).
    out[at++] = ((pending << (8 - pendingBits)) | (0xff >>> pendingBits)) & 0xff;
  }
  pending = 0;
  pendingBits = 0;
  return at;
}

/**
 * Huffman-codes the latin1 string `src` (see {@link huffmanEncodedLengthLatin1}) into `out` at offset `at` and
 * returns the offset after the last octet written. `out` must have huffmanEncodedLengthLatin1(src) octets free.
 */
export function huffmanEncodeLatin1(src: string, out: Buffer, at: number): number {
  pending = 0;
  pendingBits = 0;
  for (let i = 0; i < src.length; i++) {
    const sym = src.charCodeAt(i) & 0xff;
    at = pushCode(out, at, HUFFMAN_CODES[sym] ?? 0, HUFFMAN_CODE_LENGTHS[sym] ?? 0);
  }
  return flushPadding(out, at);
}
