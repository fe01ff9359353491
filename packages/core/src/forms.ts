import { InvalidIdError } from './id.js';
import { DEFAULT_LAYOUT, ID_BITS, type Layout, MAX_ID } from './layout.js';

/*
 * The text and spread forms of an ID (issue 35, docs/design.md §1 "Forms"). Each is a pure pair: a format and its
 * exact inverse. They work on the two 32-bit halves of the ID through one 8-byte scratch view, so a call allocates
 * only its result (a bigint or a string), not the intermediate bigints a shift-and-mask chain would.
 */

const scratch = new DataView(new ArrayBuffer(8));

/** Length of {@link formatBase32Id}'s text: 13 × 5 = 65 bits hold the 63, the first character carries 3. */
export const BASE32_ID_LENGTH = 13;
/** Length of {@link formatPaddedId}'s text: 2^63 − 1 has 19 digits. */
export const PADDED_ID_LENGTH = 19;

/** Crockford's base32 alphabet: digits, then the letters without I, L, O and U, in ASCII (so byte) order. */
const ALPHABET = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
const ENCODE = Uint8Array.from(ALPHABET, (c) => c.charCodeAt(0));
/** Character code → 5-bit value, or −1. Lower case and Crockford's aliases (I, L → 1; O → 0) are read too. */
const DECODE = new Int8Array(128).fill(-1);
for (let v = 0; v < 32; v++) {
  DECODE[ALPHABET.charCodeAt(v)] = v;
  DECODE[ALPHABET.toLowerCase().charCodeAt(v)] = v;
}
for (const [alias, v] of [
  ['I', 1],
  ['L', 1],
  ['O', 0],
] as const) {
  DECODE[alias.charCodeAt(0)] = v;
  DECODE[alias.toLowerCase().charCodeAt(0)] = v;
}

function checkIdValue(id: bigint, what: string): void {
  if (typeof id !== 'bigint') {
    throw new TypeError(`${what}: an ID must be a bigint, got ${typeof id}`);
  }
  if (id < 0n || id > MAX_ID) throw new RangeError(`${what}: an ID must be from 0 to ${MAX_ID}, got ${id}`);
}

function shown(text: string): string {
  return JSON.stringify(text.length > 40 ? `${text.slice(0, 40)}…` : text);
}

function checkText(text: string, form: string, length: number): void {
  if (typeof text !== 'string') throw new TypeError(`a ${form} ID must be a string, got ${typeof text}`);
  if (text.length === 0) throw new InvalidIdError('empty', text, `a ${form} ID must not be empty`);
  if (text.length !== length) {
    throw new InvalidIdError(
      'wrong-length',
      text,
      `${shown(text)} is not a ${form} ID: it has ${text.length} characters, the form has exactly ${length}`,
    );
  }
}

/**
 * The 13-character Crockford base32 form of an ID, upper case: `104148763141017605n` → `'02WG2QY7D2405'`.
 *
 * Properties: fixed width and an alphabet in ASCII order, so comparing two such texts byte by byte (a JavaScript
 * `sort()`, a `COLLATE "C"` text column, an object store's key listing) gives the numeric order of the IDs, which
 * a plain decimal string does not (`"9…"` sorts after `"10…"`). The first character is `0`–`7` (it carries the top
 * 3 of the 63 bits). Safe in URLs and file names; no I, L, O or U, so it reads aloud without ambiguity.
 *
 * Throws `TypeError` for a value that is not a bigint and `RangeError` outside 0 … 2^63 − 1.
 */
export function formatBase32Id(id: bigint): string {
  checkIdValue(id, 'formatBase32Id');
  scratch.setBigUint64(0, id);
  const hi = scratch.getUint32(0); // bits 32–62 (31 bits)
  const lo = scratch.getUint32(4); // bits 0–31
  return String.fromCharCode(
    ENCODE[hi >>> 28] as number,
    ENCODE[(hi >>> 23) & 31] as number,
    ENCODE[(hi >>> 18) & 31] as number,
    ENCODE[(hi >>> 13) & 31] as number,
    ENCODE[(hi >>> 8) & 31] as number,
    ENCODE[(hi >>> 3) & 31] as number,
    ENCODE[((hi & 7) << 2) | (lo >>> 30)] as number,
    ENCODE[(lo >>> 25) & 31] as number,
    ENCODE[(lo >>> 20) & 31] as number,
    ENCODE[(lo >>> 15) & 31] as number,
    ENCODE[(lo >>> 10) & 31] as number,
    ENCODE[(lo >>> 5) & 31] as number,
    ENCODE[lo & 31] as number,
  );
}

/**
 * Reads the base32 form ({@link formatBase32Id}): exactly 13 characters of Crockford's alphabet, in either case.
 * Crockford's aliases are read as he specifies, because people copy these texts by hand: `I` and `L` as `1`, `O`
 * as `0` (so `'O2WG2QY7D24O5'` is the same ID as `'02WG2QY7D2405'`; the format never writes them). `U`, hyphens,
 * spaces and check symbols are refused: the form has one width and one text per ID in its canonical case.
 *
 * Throws `TypeError` for a non-string, and {@link InvalidIdError} (a `RangeError`) naming the problem: `empty`,
 * `wrong-length`, `bad-character` (and which one, where), `out-of-range` (a first character above `7` would set bit
 * 63 or beyond).
 */
export function parseBase32Id(text: string): bigint {
  checkText(text, 'base32', BASE32_ID_LENGTH);
  let hi = 0;
  let lo = 0;
  for (let i = 0; i < BASE32_ID_LENGTH; i++) {
    const code = text.charCodeAt(i);
    const v = code < 128 ? (DECODE[code] as number) : -1;
    if (v < 0) {
      throw new InvalidIdError(
        'bad-character',
        text,
        `${shown(text)} is not a base32 ID: ${JSON.stringify(text[i])} at position ${i + 1} is not in ` +
          `Crockford's alphabet (${ALPHABET}, either case)`,
      );
    }
    if (i === 0 && v > 7) {
      throw new InvalidIdError(
        'out-of-range',
        text,
        `${shown(text)} is above ${formatBase32Id(MAX_ID)} (2^63 − 1): its first character must be 0–7`,
      );
    }
    // 65 bits through two 32-bit words: the bits that leave `lo` at the top enter `hi` at the bottom.
    hi = ((hi << 5) | (lo >>> 27)) >>> 0;
    lo = ((lo << 5) | v) >>> 0;
  }
  scratch.setUint32(0, hi);
  scratch.setUint32(4, lo);
  return scratch.getBigUint64(0);
}

/**
 * The zero-padded 19-digit decimal form of an ID: `104148763141017605n` → `'0104148763141017605'`.
 *
 * Properties: fixed width, so byte order equals numeric order like {@link formatBase32Id}, and still readable as
 * the decimal number by anything that ignores leading zeros (`BigInt('0104…')`, SQL `CAST`). Costs 6 characters
 * more than base32.
 *
 * Throws `TypeError` for a value that is not a bigint and `RangeError` outside 0 … 2^63 − 1.
 */
export function formatPaddedId(id: bigint): string {
  checkIdValue(id, 'formatPaddedId');
  return id.toString().padStart(PADDED_ID_LENGTH, '0');
}

/**
 * Reads the zero-padded decimal form ({@link formatPaddedId}): exactly 19 ASCII digits, at most 2^63 − 1.
 * Throws `TypeError` for a non-string, and {@link InvalidIdError} naming the problem: `empty`, `wrong-length`,
 * `bad-character`, `out-of-range`.
 */
export function parsePaddedId(text: string): bigint {
  checkText(text, 'decimal', PADDED_ID_LENGTH);
  for (let i = 0; i < PADDED_ID_LENGTH; i++) {
    const code = text.charCodeAt(i);
    if (code < 48 || code > 57) {
      throw new InvalidIdError(
        'bad-character',
        text,
        `${shown(text)} is not a 19-digit decimal ID: ${JSON.stringify(text[i])} at position ${i + 1} is not a digit`,
      );
    }
  }
  const id = BigInt(text);
  if (id > MAX_ID) {
    throw new InvalidIdError('out-of-range', text, `${shown(text)} is above ${MAX_ID} (2^63 − 1)`);
  }
  return id;
}

/**
 * A bit permutation of the 63 value bits as byte lookup tables: each of the 8 input bytes (the top one holds 7
 * bits) indexes 256 entries that hold the output bits it sets, as the high and low 32-bit words. Applying it is
 * 8 lookups and ORs per word, whatever the permutation.
 */
interface BitPermutation {
  readonly hi: Uint32Array;
  readonly lo: Uint32Array;
}

function permutationTables(destinationOf: readonly number[]): BitPermutation {
  const hi = new Uint32Array(8 * 256);
  const lo = new Uint32Array(8 * 256);
  for (let byte = 0; byte < 8; byte++) {
    for (let value = 0; value < 256; value++) {
      let h = 0;
      let l = 0;
      for (let bit = 0; bit < 8; bit++) {
        const from = byte * 8 + bit;
        if (from >= ID_BITS || ((value >>> bit) & 1) === 0) continue;
        const to = destinationOf[from] as number;
        if (to >= 32) h |= 1 << (to - 32);
        else l |= 1 << to;
      }
      hi[byte * 256 + value] = h >>> 0;
      lo[byte * 256 + value] = l >>> 0;
    }
  }
  return { hi, lo };
}

function permute(id: bigint, p: BitPermutation): bigint {
  scratch.setBigUint64(0, id);
  const a = scratch.getUint32(0);
  const b = scratch.getUint32(4);
  const { hi, lo } = p;
  let h = 0;
  let l = 0;
  for (let byte = 0; byte < 4; byte++) {
    const i = byte * 256 + ((b >>> (byte * 8)) & 255);
    const j = (byte + 4) * 256 + ((a >>> (byte * 8)) & 255);
    h |= (hi[i] as number) | (hi[j] as number);
    l |= (lo[i] as number) | (lo[j] as number);
  }
  scratch.setUint32(0, h >>> 0);
  scratch.setUint32(4, l >>> 0);
  return scratch.getBigUint64(0);
}

/** How many low timestamp bits lead the spread form: 8 bits, 256 key ranges, one per millisecond mod 256. */
export const SPREAD_LEADING_TIMESTAMP_BITS = 8;

/**
 * The order of the ID's bits in the spread form, fastest-changing first, as ID bit positions: this list's first
 * entry becomes bit 62 (the top value bit) of the spread form, its last bit 0.
 */
export function spreadBitOrder(layout: Layout = DEFAULT_LAYOUT): number[] {
  const lead = Math.min(SPREAD_LEADING_TIMESTAMP_BITS, layout.timestampBits);
  const range = (from: number, count: number): number[] => Array.from({ length: count }, (_, i) => from + i);
  return [
    ...range(layout.timestampShift, lead),
    ...range(0, layout.sequenceBits),
    ...range(layout.workerShift, layout.workerBits),
    ...range(layout.regionShift, layout.regionBits),
    ...range(layout.timestampShift + lead, layout.timestampBits - lead),
  ];
}

const spreadTables = new WeakMap<Layout, { forward: BitPermutation; inverse: BitPermutation }>();

function spreadOf(layout: Layout): { forward: BitPermutation; inverse: BitPermutation } {
  let tables = spreadTables.get(layout);
  if (tables === undefined) {
    const order = spreadBitOrder(layout);
    const forward = new Array<number>(ID_BITS);
    const inverse = new Array<number>(ID_BITS);
    order.forEach((from, k) => {
      forward[from] = ID_BITS - 1 - k;
      inverse[ID_BITS - 1 - k] = from;
    });
    tables = { forward: permutationTables(forward), inverse: permutationTables(inverse) };
    spreadTables.set(layout, tables);
  }
  return tables;
}

/**
 * The spread form of an ID: a fixed permutation of its 63 value bits that puts the fast-changing bits first, for
 * a key in a range-sharded store (CockroachDB, Spanner, TiKV, HBase, Bigtable), where time-ordered keys send every
 * insert to the last range. Still a positive signed 64-bit integer (bit 63 stays 0).
 *
 * From the top value bit (62) down, for the default layout: timestamp bits 0–7 (lowest first), sequence bits 0–11,
 * worker bits 0–6, region bits 0–2, timestamp bits 8–40 ({@link spreadBitOrder} lists it for any layout). So the
 * top 8 bits, the key range among 256 equal ones, are the millisecond mod 256: a worker's IDs move to a distant
 * range every millisecond whether it mints one ID a millisecond or 4,096; and the IDs of one millisecond lie
 * evenly across their range (sequence bit 0 halves it). What is given up: the spread form is not time-ordered.
 *
 * Throws `TypeError` for a value that is not a bigint and `RangeError` outside 0 … 2^63 − 1.
 */
export function spreadId(id: bigint, layout: Layout = DEFAULT_LAYOUT): bigint {
  checkIdValue(id, 'spreadId');
  return permute(id, spreadOf(layout).forward);
}

/**
 * The ID of a spread form ({@link spreadId}'s exact inverse, for the same layout). Every value from 0 to 2^63 − 1
 * is the spread form of exactly one ID. Throws `TypeError` for a value that is not a bigint and
 * {@link InvalidIdError} (`out-of-range`) outside 0 … 2^63 − 1.
 */
export function unspreadId(spread: bigint, layout: Layout = DEFAULT_LAYOUT): bigint {
  if (typeof spread !== 'bigint') throw new TypeError(`unspreadId: a spread ID must be a bigint, got ${typeof spread}`);
  if (spread < 0n || spread > MAX_ID) {
    throw new InvalidIdError(
      'out-of-range',
      String(spread),
      `${spread} is not a spread ID: spread IDs are from 0 to ${MAX_ID}`,
    );
  }
  return permute(spread, spreadOf(layout).inverse);
}
