// HPACK (RFC 7541): the header compression of HTTP/2. The decoder is on the server's hot path and is
// written to make little garbage: indexed fields hand back the strings already held by the tables,
// the dynamic table is a ring of preallocated arrays, and Huffman strings decode through one scratch
// Buffer. The encoder is deliberately minimal (no dynamic table), enough for responses and trailers.

import { isCleanField } from './field-rules.js';
import { huffmanDecode, huffmanEncodeLatin1, huffmanEncodedLengthLatin1 } from './huffman.js';

/**
 * The static table (RFC 7541 Appendix A): entry with HPACK index `i` (1..61) is at array index `i - 1`.
 * Frozen, because the decoder hands out these very strings for every indexed reference.
 */
export const STATIC_TABLE: readonly (readonly [string, string])[] = Object.freeze(
  (
    [
      [':authority', ''],
      [':method', 'GET'],
      [':method', 'POST'],
      [':path', '/'],
      [':path', '/index.html'],
      [':scheme', 'http'],
      [':scheme', 'https'],
      [':status', '200'],
      [':status', '204'],
      [':status', '206'],
      [':status', '304'],
      [':status', '400'],
      [':status', '404'],
      [':status', '500'],
      ['accept-charset', ''],
      ['accept-encoding', 'gzip, deflate'],
      ['accept-language', ''],
      ['accept-ranges', ''],
      ['accept', ''],
      ['access-control-allow-origin', ''],
      ['age', ''],
      ['allow', ''],
      ['authorization', ''],
      ['cache-control', ''],
      ['content-disposition', ''],
      ['content-encoding', ''],
      ['content-language', ''],
      ['content-length', ''],
      ['content-location', ''],
      ['content-range', ''],
      ['content-type', ''],
      ['cookie', ''],
      ['date', ''],
      ['etag', ''],
      ['expect', ''],
      ['expires', ''],
      ['from', ''],
      ['host', ''],
      ['if-match', ''],
      ['if-modified-since', ''],
      ['if-none-match', ''],
      ['if-range', ''],
      ['if-unmodified-since', ''],
      ['last-modified', ''],
      ['link', ''],
      ['location', ''],
      ['max-forwards', ''],
      ['proxy-authenticate', ''],
      ['proxy-authorization', ''],
      ['range', ''],
      ['referer', ''],
      ['refresh', ''],
      ['retry-after', ''],
      ['server', ''],
      ['set-cookie', ''],
      ['strict-transport-security', ''],
      ['transfer-encoding', ''],
      ['user-agent', ''],
      ['vary', ''],
      ['via', ''],
      ['www-authenticate', ''],
    ] as [string, string][]
  ).map((entry) => Object.freeze(entry)),
);

const STATIC_LENGTH = 61;

// The static table split into names and values by HPACK index (slot 0 unused), for the decoder's
// direct lookups. Same string values as STATIC_TABLE.
const STATIC_NAMES: string[] = [''];
const STATIC_VALUES: string[] = [''];
for (const [name, value] of STATIC_TABLE) {
  STATIC_NAMES.push(name);
  STATIC_VALUES.push(value);
}

/** Per-entry overhead in table size accounting (RFC 7541 §4.1). */
const ENTRY_OVERHEAD = 32;

/** Largest integer the decoder accepts: HPACK integers here are lengths, indexes and table sizes. */
const MAX_INTEGER = 0x7fffffff;

/**
 * Continuation octets allowed after an integer's prefix. Five already carry 35 bits, more than
 * {@link MAX_INTEGER} needs; a sixth can only be redundant zero padding, and a seventh is refused so a
 * peer cannot make us loop over an endless integer.
 */
const MAX_INTEGER_CONTINUATIONS = 6;

/**
 * The header block cannot be decoded: HTTP/2 treats this as a connection error of type
 * COMPRESSION_ERROR (RFC 9113 §4.3), since the dynamic tables of both ends may now disagree.
 */
export class HpackError extends Error {
  override readonly name = 'HpackError';
}

// Where the last readInteger/readString call stopped. Module state rather than a returned object so
// that reading a field allocates nothing; every caller reads it right after the call.
let cursor = 0;

function readInteger(src: Buffer, p: number, end: number, prefixBits: number): number {
  if (p >= end) throw new HpackError('HPACK: header block truncated inside an integer');
  const max = (1 << prefixBits) - 1;
  let value = (src[p++] ?? 0) & max;
  if (value === max) {
    let multiplier = 1;
    for (let k = 0; ; k++) {
      if (k === MAX_INTEGER_CONTINUATIONS) throw new HpackError('HPACK: integer encoding too long');
      if (p >= end) throw new HpackError('HPACK: header block truncated inside an integer');
      const b = src[p++] ?? 0;
      value += (b & 0x7f) * multiplier;
      if (value > MAX_INTEGER) throw new HpackError('HPACK: integer overflows 2^31-1');
      if ((b & 0x80) === 0) break;
      multiplier *= 128;
    }
  }
  cursor = p;
  return value;
}

/**
 * Decodes one HPACK integer (RFC 7541 §5.1) whose first octet, at `start`, holds a `prefixBits`-bit
 * prefix (1..8). Returns the value and the offset after it. For tests and tools: the decoder uses the
 * same code without the result object. Throws {@link HpackError} when truncated or above 2^31-1.
 */
export function decodeInteger(
  src: Buffer,
  start: number,
  end: number,
  prefixBits: number,
): { value: number; next: number } {
  const value = readInteger(src, start, end, prefixBits);
  return { value, next: cursor };
}

function integerLength(value: number, prefixBits: number): number {
  const max = (1 << prefixBits) - 1;
  if (value < max) return 1;
  let n = 2;
  for (let rest = value - max; rest >= 128; rest = Math.floor(rest / 128)) n++;
  return n;
}

function writeInteger(out: Buffer, at: number, prefixBits: number, flags: number, value: number): number {
  const max = (1 << prefixBits) - 1;
  if (value < max) {
    out[at++] = flags | value;
    return at;
  }
  out[at++] = flags | max;
  let rest = value - max;
  while (rest >= 128) {
    out[at++] = (rest % 128) | 0x80;
    rest = Math.floor(rest / 128);
  }
  out[at++] = rest;
  return at;
}

/**
 * Encodes `value` as an HPACK integer (RFC 7541 §5.1) with a `prefixBits`-bit prefix (1..8), the
 * first octet's other bits set from `flags` (e.g. 0x20 for a table size update). Exposed for tests
 * (RFC 7541 C.1) and for callers that build representations by hand.
 */
export function encodeInteger(value: number, prefixBits: number, flags = 0): Buffer {
  if (!Number.isInteger(value) || value < 0 || value > Number.MAX_SAFE_INTEGER) {
    throw new RangeError(`HPACK integer out of range: ${value}`);
  }
  const out = Buffer.allocUnsafe(integerLength(value, prefixBits));
  writeInteger(out, 0, prefixBits, flags, value);
  return out;
}

// Node's Buffer has had `latin1Slice(start, end)` forever, but @types/node does not declare it. It
// skips toString's encoding lookup, which matters at a few strings per request.
interface Latin1Slicer {
  latin1Slice(start: number, end: number): string;
}
const hasLatin1Slice = typeof (Buffer.prototype as Partial<Latin1Slicer>).latin1Slice === 'function';

function latin1(buf: Buffer, start: number, end: number): string {
  return hasLatin1Slice ? (buf as Buffer & Latin1Slicer).latin1Slice(start, end) : buf.toString('latin1', start, end);
}

/** An array of `n` empty strings, built by push so V8 keeps it packed (no hole checks on reads). */
function emptyStrings(n: number): string[] {
  const a: string[] = [];
  for (let i = 0; i < n; i++) a.push('');
  return a;
}

function nextPowerOfTwo(n: number): number {
  let p = 1;
  while (p < n) p *= 2;
  return p;
}

const MISSING_UPDATE = 'HPACK: expected a dynamic table size update after SETTINGS_HEADER_TABLE_SIZE was lowered';

/** Ring capacity to preallocate: enough for a full 4096-octet table of minimal entries. */
const MAX_INITIAL_RING = 128;

/**
 * Decodes HPACK header blocks of one HTTP/2 connection (one decoder per connection: the dynamic table
 * is connection state). Fields come out as flat `[name, value, …]` pairs of latin1 strings, names as
 * sent (the HTTP/2 layer checks they are lowercase and valid). Any {@link HpackError} is fatal to the
 * connection: the table may be half-updated.
 */
export class HpackDecoder {
  // Ring buffer of dynamic entries: the newest at `head`, older ones at decreasing positions
  // (modulo the capacity, a power of two). Evicted slots are reset to '' so their strings can go.
  private names: string[];
  private values: string[];
  /** Per entry, 1 when its name and value pass the field checks ({@link isCleanField}), computed once at insertion. */
  private clean: Uint8Array;
  private mask: number;
  private head = 0;
  private count = 0;
  /** Current table size in octets (RFC 7541 §4.1). */
  private size = 0;
  /** The table's maximum size as last set by the peer's encoder (a size update) or by us lowering it. */
  private tableMax: number;
  /** The limit we advertise (SETTINGS_HEADER_TABLE_SIZE): no size update may exceed it. */
  private settingsMax: number;
  /** When ≥ 0, the next block must start with a size update ≤ this (we lowered the limit). */
  private requiredUpdate = -1;
  private scratch: Buffer = Buffer.alloc(256);
  private stoppedAtLimit = false;
  private lastClean = true;

  /**
   * `maxTableSize` is both the limit we advertise and the table's initial maximum size: 4096 (the
   * HTTP/2 default) unless the peer's encoder was told otherwise before its first block.
   */
  constructor(maxTableSize = 4096) {
    checkTableSize(maxTableSize);
    this.tableMax = maxTableSize;
    this.settingsMax = maxTableSize;
    const entries = Math.floor(maxTableSize / ENTRY_OVERHEAD);
    const capacity = nextPowerOfTwo(Math.max(1, Math.min(MAX_INITIAL_RING, entries)));
    this.names = emptyStrings(capacity);
    this.values = emptyStrings(capacity);
    this.clean = new Uint8Array(capacity);
    this.mask = capacity - 1;
  }

  /** True when the last {@link decode} stopped appending fields at one of its limits. */
  get truncated(): boolean {
    return this.stoppedAtLimit;
  }

  /**
   * True when every field the last {@link decode} gave passes the field checks of RFC 9113 §8.2.1
   * ({@link isCleanField}): the static table's entries all do, a literal is checked as it is decoded and a
   * dynamic entry once when it is inserted. Once a connection is warm most fields are indexed, so a request's
   * fields then cost no character scan at all; when false, the caller checks each field and says which failed.
   */
  get fieldsClean(): boolean {
    return this.lastClean;
  }

  /** Current dynamic table size in octets (sum of name + value lengths + 32 per entry). */
  get tableSize(): number {
    return this.size;
  }

  /** Number of entries in the dynamic table. */
  get tableLength(): number {
    return this.count;
  }

  /** The dynamic table's current maximum size in octets (the last size update, or the limit). */
  get maxTableSize(): number {
    return this.tableMax;
  }

  /**
   * Dynamic table entries, newest first (HPACK index 62 first). Allocates: for tests and diagnostics,
   * not for the request path.
   */
  tableEntries(): [string, string][] {
    const entries: [string, string][] = [];
    for (let d = 0; d < this.count; d++) {
      const pos = (this.head - d) & this.mask;
      entries.push([this.names[pos] ?? '', this.values[pos] ?? '']);
    }
    return entries;
  }

  /**
   * Sets the limit we advertise as SETTINGS_HEADER_TABLE_SIZE. Call it when the peer acknowledges
   * the SETTINGS frame carrying the new value (RFC 9113 §6.5.3): from then on, size updates above it
   * are refused. When the limit drops below the table's current maximum, the table shrinks now and
   * the peer's next block must begin with a size update no larger than the smallest limit set since
   * its last block (RFC 7541 §4.2), as nghttp2 also requires.
   */
  setMaxTableSize(n: number): void {
    checkTableSize(n);
    if (n < this.tableMax) {
      this.requiredUpdate = this.requiredUpdate < 0 ? n : Math.min(this.requiredUpdate, n);
      this.resize(n);
    }
    this.settingsMax = n;
  }

  /**
   * Decodes the complete header block `block[start, end)` (HEADERS plus any CONTINUATION payloads,
   * joined by the caller) and appends its fields to `out` as `name, value` pairs. Returns the header
   * list size (RFC 7541 §4.1: name + value octets + 32 per field), for SETTINGS_MAX_HEADER_LIST_SIZE.
   * Throws {@link HpackError} on any malformed input (fields decoded before the error stay in `out`),
   * RangeError when `[start, end)` is not inside `block` (a caller bug, not a peer error).
   *
   * Limits are applied while decoding, not after: once the list passes `maxListSize` octets or `out` holds
   * `maxFields` fields, no more fields are appended (the block is still decoded to its end, so the dynamic
   * table stays in step with the peer's) and {@link truncated} is true. A block of 4 KB that references one
   * large table entry thousands of times (an "HPACK bomb") so costs a walk over its bytes, not a list of it.
   */
  decode(
    block: Buffer,
    start: number,
    end: number,
    out: string[],
    maxListSize = Infinity,
    maxFields = Infinity,
  ): number {
    if (start < 0 || start > end || end > block.length) {
      throw new RangeError(`HPACK: block range [${start}, ${end}) outside a buffer of ${block.length} octets`);
    }
    let p = start;
    let listSize = 0;
    let fieldSeen = false;
    const maxOut = maxFields * 2;
    let keep = true;
    let clean = true;
    while (p < end) {
      const b = block[p] ?? 0;
      if (this.requiredUpdate >= 0 && (b & 0xe0) !== 0x20) {
        throw new HpackError(MISSING_UPDATE);
      }
      if ((b & 0x80) !== 0) {
        // Indexed field (RFC 7541 §6.1): the common case once a connection is warm.
        let index = b & 0x7f;
        if (index === 0x7f) {
          index = readInteger(block, p, end, 7);
          p = cursor;
        } else {
          p++;
        }
        let name: string;
        let value: string;
        if (index <= STATIC_LENGTH) {
          if (index === 0) throw new HpackError('HPACK: index 0');
          name = STATIC_NAMES[index] ?? '';
          value = STATIC_VALUES[index] ?? '';
        } else {
          const pos = this.position(index);
          name = this.names[pos] ?? '';
          value = this.values[pos] ?? '';
          if (this.clean[pos] !== 1) clean = false;
        }
        listSize += name.length + value.length + ENTRY_OVERHEAD;
        if (keep && (listSize > maxListSize || out.length >= maxOut)) keep = false;
        if (keep) out.push(name, value);
        fieldSeen = true;
        continue;
      }
      if ((b & 0xe0) === 0x20) {
        // Dynamic table size update (RFC 7541 §6.3): only before the first field of a block.
        if (fieldSeen) throw new HpackError('HPACK: dynamic table size update after a field');
        const n = readInteger(block, p, end, 5);
        p = cursor;
        if (n > this.settingsMax) {
          throw new HpackError(`HPACK: table size update to ${n} exceeds the limit ${this.settingsMax}`);
        }
        if (this.requiredUpdate >= 0) {
          if (n > this.requiredUpdate) {
            throw new HpackError(`HPACK: table size update to ${n} exceeds the lowered limit ${this.requiredUpdate}`);
          }
          this.requiredUpdate = -1;
        }
        this.resize(n);
        continue;
      }
      // Literal field (RFC 7541 §6.2): with incremental indexing (01, 6-bit index), or without
      // indexing (0000) or never indexed (0001), both with a 4-bit index. Index 0: a literal name.
      const indexing = (b & 0x40) !== 0;
      const index = readInteger(block, p, end, indexing ? 6 : 4);
      p = cursor;
      let name: string;
      if (index === 0) {
        name = this.readString(block, p, end);
        p = cursor;
      } else if (index <= STATIC_LENGTH) {
        name = STATIC_NAMES[index] ?? '';
      } else {
        name = this.names[this.position(index)] ?? '';
      }
      const value = this.readString(block, p, end);
      p = cursor;
      const fieldClean = isCleanField(name, value);
      if (!fieldClean) clean = false;
      if (indexing) this.insert(name, value, fieldClean);
      listSize += name.length + value.length + ENTRY_OVERHEAD;
      if (keep && (listSize > maxListSize || out.length >= maxOut)) keep = false;
      if (keep) out.push(name, value);
      fieldSeen = true;
    }
    this.stoppedAtLimit = !keep;
    this.lastClean = clean;
    if (this.requiredUpdate >= 0) throw new HpackError(MISSING_UPDATE);
    return listSize;
  }

  /** Ring position of the dynamic entry with HPACK index `index` (> 61), or HpackError. */
  private position(index: number): number {
    const d = index - STATIC_LENGTH - 1;
    if (d >= this.count) {
      throw new HpackError(`HPACK: index ${index} beyond the table (${STATIC_LENGTH + this.count} entries)`);
    }
    return (this.head - d) & this.mask;
  }

  /** Reads a string literal (RFC 7541 §5.2) starting at `p`; leaves the end offset in `cursor`. */
  private readString(block: Buffer, p: number, end: number): string {
    if (p >= end) throw new HpackError('HPACK: header block truncated before a string');
    const huffman = ((block[p] ?? 0) & 0x80) !== 0;
    const length = readInteger(block, p, end, 7);
    p = cursor;
    if (length > end - p) throw new HpackError('HPACK: string runs past the end of the header block');
    const stop = p + length;
    cursor = stop;
    if (!huffman) return latin1(block, p, stop);
    // Every code is at least 5 bits, so the decoded string is at most 8/5 the input's length.
    const need = Math.floor((length * 8) / 5);
    if (this.scratch.length < need) this.scratch = Buffer.allocUnsafe(nextPowerOfTwo(need));
    const n = huffmanDecode(block, p, stop, this.scratch);
    if (n < 0) throw new HpackError('HPACK: invalid Huffman-coded string');
    return latin1(this.scratch, 0, n);
  }

  /** Adds an entry (RFC 7541 §4.4): evicts oldest entries to make room; too big an entry empties the table. */
  private insert(name: string, value: string, clean: boolean): void {
    const entrySize = name.length + value.length + ENTRY_OVERHEAD;
    if (entrySize > this.tableMax) {
      while (this.count > 0) this.evictOldest();
      return;
    }
    while (this.size + entrySize > this.tableMax) this.evictOldest();
    if (this.count === this.names.length) this.grow();
    this.head = (this.head + 1) & this.mask;
    this.names[this.head] = name;
    this.values[this.head] = value;
    this.clean[this.head] = clean ? 1 : 0;
    this.count++;
    this.size += entrySize;
  }

  private evictOldest(): void {
    const pos = (this.head - this.count + 1) & this.mask;
    this.size -= (this.names[pos] ?? '').length + (this.values[pos] ?? '').length + ENTRY_OVERHEAD;
    this.names[pos] = '';
    this.values[pos] = '';
    this.count--;
  }

  /** Sets the table's maximum size, evicting oldest entries until the table fits (RFC 7541 §4.3). */
  private resize(n: number): void {
    this.tableMax = n;
    while (this.size > n) this.evictOldest();
  }

  /** Doubles the ring (only when a limit above 4096 lets more entries in than preallocated). */
  private grow(): void {
    const capacity = this.names.length * 2;
    const names = emptyStrings(capacity);
    const values = emptyStrings(capacity);
    const clean = new Uint8Array(capacity);
    // Copy oldest to newest into 0 .. count-1, so the newest lands at count-1.
    for (let i = 0; i < this.count; i++) {
      const pos = (this.head - this.count + 1 + i) & this.mask;
      names[i] = this.names[pos] ?? '';
      values[i] = this.values[pos] ?? '';
      clean[i] = this.clean[pos] ?? 0;
    }
    this.names = names;
    this.values = values;
    this.clean = clean;
    this.mask = capacity - 1;
    this.head = this.count - 1;
  }
}

function checkTableSize(n: number): void {
  if (!Number.isInteger(n) || n < 0 || n > 0xffffffff) throw new RangeError(`HPACK table size out of range: ${n}`);
}

// Static table lookups for the encoder: a name's first index (entries sharing a name are adjacent).
const STATIC_NAME_INDEX = new Map<string, number>();
for (let i = STATIC_LENGTH; i >= 1; i--) STATIC_NAME_INDEX.set(STATIC_NAMES[i] ?? '', i);

/** Options of {@link encodeHeaders}. */
export interface EncodeOptions {
  /** Huffman-code each string when that is shorter (default false: raw strings are cheaper to make). */
  readonly huffman?: boolean;
}

/**
 * Encodes a header list as one HPACK block without touching the dynamic table, so the peer's decoder
 * state never depends on ours and the encoder keeps no connection state. Per field: an exact static
 * match becomes an indexed field (`:status: 200` → 0x88); a static name match a literal without
 * indexing with an indexed name; anything else a literal without indexing with a literal name.
 * Strings are latin1 (one octet per char) and names are expected lowercase: nothing is validated.
 */
export function encodeHeaders(fields: readonly (readonly [string, string])[], options?: EncodeOptions): Buffer {
  const huffman = options?.huffman === true;
  // Upper bound: raw strings (Huffman is only used when shorter), 1 + 5 octets per length/index.
  let bound = 0;
  for (const [name, value] of fields) bound += name.length + value.length + 18;
  const out = Buffer.allocUnsafe(bound);
  let at = 0;
  for (const [name, value] of fields) {
    const first = STATIC_NAME_INDEX.get(name);
    if (first === undefined) {
      out[at++] = 0x00;
      at = writeString(out, at, name, huffman);
      at = writeString(out, at, value, huffman);
      continue;
    }
    let exact = 0;
    for (let i = first; i <= STATIC_LENGTH && STATIC_NAMES[i] === name; i++) {
      if (STATIC_VALUES[i] === value) {
        exact = i;
        break;
      }
    }
    if (exact !== 0) {
      out[at++] = 0x80 | exact;
    } else {
      at = writeInteger(out, at, 4, 0x00, first);
      at = writeString(out, at, value, huffman);
    }
  }
  return out.subarray(0, at);
}

function writeString(out: Buffer, at: number, s: string, huffman: boolean): number {
  if (huffman) {
    const length = huffmanEncodedLengthLatin1(s);
    if (length < s.length) {
      at = writeInteger(out, at, 7, 0x80, length);
      return huffmanEncodeLatin1(s, out, at);
    }
  }
  at = writeInteger(out, at, 7, 0x00, s.length);
  return at + out.write(s, at, s.length, 'latin1');
}

/**
 * A dynamic table size update (RFC 7541 §6.3, `001xxxxx`). When the peer lowers its
 * SETTINGS_HEADER_TABLE_SIZE, our next block must begin with one (RFC 7541 §4.2; nghttp2 enforces it).
 * Since {@link encodeHeaders} never adds entries, any size up to the peer's setting will do, 0 included.
 */
export function encodeTableSizeUpdate(size: number): Buffer {
  return encodeInteger(size, 5, 0x20);
}
