import { connect, constants as h2constants } from 'node:http2';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import fc from 'fast-check';
import {
  HpackDecoder,
  HpackError,
  STATIC_TABLE,
  decodeInteger,
  encodeHeaders,
  encodeInteger,
  encodeTableSizeUpdate,
} from './hpack.js';
import { isCleanField } from './field-rules.js';
import { frame } from './connection.test-helper.js';
import { huffmanEncodeLatin1, huffmanEncodedLengthLatin1 } from './huffman.js';

type Field = readonly [string, string];

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');

/** Decodes a whole block into pairs; returns the fields and the header list size. */
function decodeBlock(d: HpackDecoder, block: Buffer): { fields: Field[]; listSize: number } {
  const flat: string[] = [];
  const listSize = d.decode(block, 0, block.length, flat);
  return { fields: pairs(flat), listSize };
}

function pairs(flat: readonly string[]): Field[] {
  expect(flat.length % 2).toBe(0);
  const out: Field[] = [];
  for (let i = 0; i < flat.length; i += 2) out.push([flat[i] ?? '', flat[i + 1] ?? '']);
  return out;
}

const listSizeOf = (fields: readonly Field[]): number =>
  fields.reduce((n, [name, value]) => n + name.length + value.length + 32, 0);

function expectHpackError(d: HpackDecoder, block: Buffer, message?: RegExp): void {
  let thrown: unknown;
  try {
    d.decode(block, 0, block.length, []);
  } catch (e) {
    thrown = e;
  }
  expect(thrown).toBeInstanceOf(HpackError);
  if (message) expect((thrown as Error).message).toMatch(message);
}

// Block builders for hand-written representations (RFC 7541 §6).
const raw = (s: string): Buffer => Buffer.concat([encodeInteger(s.length, 7), Buffer.from(s, 'latin1')]);
function huff(s: string): Buffer {
  const out = Buffer.alloc(huffmanEncodedLengthLatin1(s));
  huffmanEncodeLatin1(s, out, 0);
  return Buffer.concat([encodeInteger(out.length, 7, 0x80), out]);
}
const indexed = (i: number): Buffer => encodeInteger(i, 7, 0x80);
/** Literal with incremental indexing; `name` is an index, a raw name, or an already encoded string. */
function withIndexing(name: number | string | Buffer, value: Buffer): Buffer {
  if (typeof name === 'number') return Buffer.concat([encodeInteger(name, 6, 0x40), value]);
  return Buffer.concat([Buffer.of(0x40), typeof name === 'string' ? raw(name) : name, value]);
}

describe('the static table', () => {
  it('is RFC 7541 Appendix A', () => {
    const spec = `
      :authority| :method|GET :method|POST :path|/ :path|/index.html :scheme|http :scheme|https :status|200
      :status|204 :status|206 :status|304 :status|400 :status|404 :status|500 accept-charset|
      accept-encoding|gzip,_deflate accept-language| accept-ranges| accept| access-control-allow-origin| age|
      allow| authorization| cache-control| content-disposition| content-encoding| content-language|
      content-length| content-location| content-range| content-type| cookie| date| etag| expect| expires|
      from| host| if-match| if-modified-since| if-none-match| if-range| if-unmodified-since| last-modified|
      link| location| max-forwards| proxy-authenticate| proxy-authorization| range| referer| refresh|
      retry-after| server| set-cookie| strict-transport-security| transfer-encoding| user-agent| vary| via|
      www-authenticate|`;
    const expected = spec
      .trim()
      .split(/\s+/)
      .map((e) => e.replace('_', ' ').split('|'));
    expect(STATIC_TABLE.length).toBe(61);
    expect(STATIC_TABLE.map(([n, v]) => [n, v])).toEqual(expected);
    expect(Object.isFrozen(STATIC_TABLE) && Object.isFrozen(STATIC_TABLE[0])).toBe(true);
  });

  it('decodes every static index', () => {
    const d = new HpackDecoder();
    const block = Buffer.concat(STATIC_TABLE.map((_, i) => indexed(i + 1)));
    expect(decodeBlock(d, block).fields).toEqual(STATIC_TABLE.map(([n, v]) => [n, v]));
  });
});

describe('HPACK integers (RFC 7541 §5.1, C.1)', () => {
  it('C.1.1: 10 with a 5-bit prefix is one octet', () => {
    expect(encodeInteger(10, 5).toString('hex')).toBe('0a');
    expect(decodeInteger(hex('0a'), 0, 1, 5)).toEqual({ value: 10, next: 1 });
  });

  it('C.1.2: 1337 with a 5-bit prefix is 1f 9a 0a', () => {
    expect(encodeInteger(1337, 5).toString('hex')).toBe('1f9a0a');
    expect(decodeInteger(hex('1f9a0a'), 0, 3, 5)).toEqual({ value: 1337, next: 3 });
    // The bits above the prefix belong to the representation, not the integer.
    expect(decodeInteger(hex('ff9a0a'), 0, 3, 5)).toEqual({ value: 1337, next: 3 });
    expect(encodeInteger(1337, 5, 0xe0).toString('hex')).toBe('ff9a0a');
  });

  it('C.1.3: 42 starting at an octet boundary (8-bit prefix) is 2a', () => {
    expect(encodeInteger(42, 8).toString('hex')).toBe('2a');
    expect(decodeInteger(hex('002a'), 1, 2, 8)).toEqual({ value: 42, next: 2 });
  });

  it('round-trips with every prefix size', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 0x7fffffff }), fc.integer({ min: 1, max: 8 }), (value, prefix) => {
        const b = encodeInteger(value, prefix);
        expect(decodeInteger(b, 0, b.length, prefix)).toEqual({ value, next: b.length });
      }),
    );
    // Boundaries: the prefix's maximum needs a continuation octet of 0.
    expect(encodeInteger(31, 5).toString('hex')).toBe('1f00');
    expect(encodeInteger(30, 5).toString('hex')).toBe('1e');
  });

  it('rejects integers above 2^31-1, endless continuations and truncation', () => {
    const max = encodeInteger(0x7fffffff, 7);
    expect(decodeInteger(max, 0, max.length, 7).value).toBe(0x7fffffff);
    const over = encodeInteger(0x80000000, 7);
    expect(() => decodeInteger(over, 0, over.length, 7)).toThrow(HpackError);
    expect(() => decodeInteger(hex('1fffffffff0f'), 0, 6, 5)).toThrow(/overflow/);
    // Redundant zero continuations: six are tolerated, seven are not.
    expect(decodeInteger(hex('1f 8080808080 00'), 0, 7, 5)).toEqual({ value: 31, next: 7 });
    expect(() => decodeInteger(hex('1f 808080808080 00'), 0, 8, 5)).toThrow(/too long/);
    expect(() => decodeInteger(hex('1f9a'), 0, 2, 5)).toThrow(/truncated/);
    expect(() => decodeInteger(hex('1f9a0a'), 0, 2, 5)).toThrow(/truncated/); // `end` is honoured
    expect(() => decodeInteger(hex(''), 0, 0, 5)).toThrow(HpackError);
  });
});

describe('RFC 7541 C.2: header field representations', () => {
  it('C.2.1: literal with indexing', () => {
    const d = new HpackDecoder();
    const block = hex('400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572');
    const { fields, listSize } = decodeBlock(d, block);
    expect(fields).toEqual([['custom-key', 'custom-header']]);
    expect(listSize).toBe(55);
    expect(d.tableEntries()).toEqual([['custom-key', 'custom-header']]);
    expect(d.tableSize).toBe(55);
    expect(d.tableLength).toBe(1);
  });

  it('C.2.2: literal without indexing', () => {
    const d = new HpackDecoder();
    expect(decodeBlock(d, hex('040c 2f73 616d 706c 652f 7061 7468')).fields).toEqual([[':path', '/sample/path']]);
    expect(d.tableEntries()).toEqual([]);
    expect(d.tableSize).toBe(0);
  });

  it('C.2.3: literal never indexed', () => {
    const d = new HpackDecoder();
    const block = hex('1008 7061 7373 776f 7264 0673 6563 7265 74');
    expect(decodeBlock(d, block).fields).toEqual([['password', 'secret']]);
    expect(d.tableEntries()).toEqual([]);
  });

  it('C.2.4: indexed field', () => {
    const d = new HpackDecoder();
    expect(decodeBlock(d, hex('82')).fields).toEqual([[':method', 'GET']]);
    expect(d.tableEntries()).toEqual([]);
  });
});

interface Step {
  block: string;
  fields: Field[];
  table: Field[];
  size: number;
}

const request1: Field[] = [
  [':method', 'GET'],
  [':scheme', 'http'],
  [':path', '/'],
  [':authority', 'www.example.com'],
];
const request2: Field[] = [...request1, ['cache-control', 'no-cache']];
const request3: Field[] = [
  [':method', 'GET'],
  [':scheme', 'https'],
  [':path', '/index.html'],
  [':authority', 'www.example.com'],
  ['custom-key', 'custom-value'],
];
const requestTables: Field[][] = [
  [[':authority', 'www.example.com']],
  [
    ['cache-control', 'no-cache'],
    [':authority', 'www.example.com'],
  ],
  [
    ['custom-key', 'custom-value'],
    ['cache-control', 'no-cache'],
    [':authority', 'www.example.com'],
  ],
];

const C3: Step[] = [
  {
    block: '8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d',
    fields: request1,
    table: requestTables[0] ?? [],
    size: 57,
  },
  { block: '8286 84be 5808 6e6f 2d63 6163 6865', fields: request2, table: requestTables[1] ?? [], size: 110 },
  {
    block: '8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65',
    fields: request3,
    table: requestTables[2] ?? [],
    size: 164,
  },
];

const C4: Step[] = [
  { block: '8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff', fields: request1, table: requestTables[0] ?? [], size: 57 },
  { block: '8286 84be 5886 a8eb 1064 9cbf', fields: request2, table: requestTables[1] ?? [], size: 110 },
  {
    block: '8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf',
    fields: request3,
    table: requestTables[2] ?? [],
    size: 164,
  },
];

const response1: Field[] = [
  [':status', '302'],
  ['cache-control', 'private'],
  ['date', 'Mon, 21 Oct 2013 20:13:21 GMT'],
  ['location', 'https://www.example.com'],
];
const response2: Field[] = [[':status', '307'], ...response1.slice(1)];
const cookie = 'foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1';
const response3: Field[] = [
  [':status', '200'],
  ['cache-control', 'private'],
  ['date', 'Mon, 21 Oct 2013 20:13:22 GMT'],
  ['location', 'https://www.example.com'],
  ['content-encoding', 'gzip'],
  ['set-cookie', cookie],
];
const responseTables: Field[][] = [
  [
    ['location', 'https://www.example.com'],
    ['date', 'Mon, 21 Oct 2013 20:13:21 GMT'],
    ['cache-control', 'private'],
    [':status', '302'],
  ],
  [
    [':status', '307'],
    ['location', 'https://www.example.com'],
    ['date', 'Mon, 21 Oct 2013 20:13:21 GMT'],
    ['cache-control', 'private'],
  ],
  [
    ['set-cookie', cookie],
    ['content-encoding', 'gzip'],
    ['date', 'Mon, 21 Oct 2013 20:13:22 GMT'],
  ],
];

const C5: Step[] = [
  {
    block: `4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
            2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d`,
    fields: response1,
    table: responseTables[0] ?? [],
    size: 222,
  },
  { block: '4803 3330 37c1 c0bf', fields: response2, table: responseTables[1] ?? [], size: 222 },
  {
    block: `88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
            54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
            5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31`,
    fields: response3,
    table: responseTables[2] ?? [],
    size: 215,
  },
];

const C6: Step[] = [
  {
    block: `4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
            2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3`,
    fields: response1,
    table: responseTables[0] ?? [],
    size: 222,
  },
  { block: '4883 640e ffc1 c0bf', fields: response2, table: responseTables[1] ?? [], size: 222 },
  {
    block: `88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
            77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
            9587 3160 65c0 03ed 4ee5 b106 3d50 07`,
    fields: response3,
    table: responseTables[2] ?? [],
    size: 215,
  },
];

const sequences: [string, number, Step[]][] = [
  ['C.3 requests without Huffman', 4096, C3],
  ['C.4 requests with Huffman', 4096, C4],
  ['C.5 responses without Huffman, 256-octet table', 256, C5],
  ['C.6 responses with Huffman, 256-octet table', 256, C6],
];

describe('RFC 7541 C.3-C.6: sequences of blocks on one decoder', () => {
  it.each(sequences)('%s', (_name, tableSize, steps) => {
    const d = new HpackDecoder(tableSize);
    for (const step of steps) {
      const { fields, listSize } = decodeBlock(d, hex(step.block));
      expect(fields).toEqual(step.fields);
      expect(listSize).toBe(listSizeOf(step.fields));
      expect(d.tableEntries()).toEqual(step.table);
      expect(d.tableSize).toBe(step.size);
      expect(d.tableLength).toBe(step.table.length);
    }
  });

  it('decodes a block inside a larger buffer, appending to what `out` holds', () => {
    const block = hex(`ffff ${C3[0]?.block ?? ''} ffff`);
    const out = ['keep', 'me'];
    const d = new HpackDecoder();
    expect(d.decode(block, 2, block.length - 2, out)).toBe(listSizeOf(request1));
    expect(pairs(out)).toEqual([['keep', 'me'], ...request1]);
  });

  it('rejects every truncation of every block with HpackError or decodes fewer fields', () => {
    for (const [, tableSize, steps] of sequences) {
      steps.forEach((step, i) => {
        const block = hex(step.block);
        for (let cut = 0; cut < block.length; cut++) {
          const d = new HpackDecoder(tableSize);
          for (const earlier of steps.slice(0, i)) decodeBlock(d, hex(earlier.block));
          expectPrefixBehaviour(d, block.subarray(0, cut), step.fields);
        }
      });
    }
  });
});

/** A strict prefix of a valid block either throws HpackError or yields a strict prefix of its fields. */
function expectPrefixBehaviour(d: HpackDecoder, prefix: Buffer, full: readonly Field[]): void {
  const out: string[] = [];
  try {
    d.decode(prefix, 0, prefix.length, out);
  } catch (e) {
    expect(e).toBeInstanceOf(HpackError);
    return;
  }
  const got = pairs(out);
  expect(got.length).toBeLessThan(full.length);
  expect(got).toEqual(full.slice(0, got.length));
}

describe('the dynamic table', () => {
  it('evicts oldest entries first and empties on an entry larger than the table (RFC 7541 §4.4)', () => {
    const d = new HpackDecoder(100);
    decodeBlock(d, Buffer.concat([withIndexing('a', raw('1'.repeat(30))), withIndexing('b', raw('2'.repeat(30)))]));
    // 63 + 63 octets do not fit in 100: the first entry goes.
    expect(d.tableEntries()).toEqual([['b', '2'.repeat(30)]]);
    expect(d.tableSize).toBe(63);
    decodeBlock(d, withIndexing('c', raw('3')));
    expect(d.tableEntries()).toEqual([
      ['c', '3'],
      ['b', '2'.repeat(30)],
    ]);
    expect(d.tableSize).toBe(97);
    // A literal naming an entry that its own insertion evicts still gets that name (RFC 7541 §4.4).
    const { fields } = decodeBlock(d, withIndexing(63, raw('x'.repeat(40))));
    expect(fields).toEqual([['b', 'x'.repeat(40)]]);
    expect(d.tableEntries()).toEqual([['b', 'x'.repeat(40)]]);
    expect(d.tableSize).toBe(73);
    decodeBlock(d, withIndexing('big', raw('y'.repeat(100))));
    expect(d.tableEntries()).toEqual([]);
    expect(d.tableSize).toBe(0);
  });

  it('applies size updates at the start of a block, evicting as needed (RFC 7541 §4.3, §6.3)', () => {
    const d = new HpackDecoder();
    decodeBlock(d, hex(C3[0]?.block ?? ''));
    decodeBlock(d, hex(C3[1]?.block ?? ''));
    expect(d.tableSize).toBe(110);
    // Two updates in a row are allowed: shrink to 60 (evicts the oldest), then back to 4096.
    const block = Buffer.concat([encodeTableSizeUpdate(60), encodeTableSizeUpdate(4096), indexed(62)]);
    const { fields } = decodeBlock(d, block);
    expect(fields).toEqual([['cache-control', 'no-cache']]);
    expect(d.tableEntries()).toEqual([['cache-control', 'no-cache']]);
    expect(d.maxTableSize).toBe(4096);
    decodeBlock(d, encodeTableSizeUpdate(0));
    expect(d.tableEntries()).toEqual([]);
    expect(d.maxTableSize).toBe(0);
    // With a zero-size table, indexing literals pass through without being stored.
    expect(decodeBlock(d, withIndexing('k', raw('v'))).fields).toEqual([['k', 'v']]);
    expect(d.tableLength).toBe(0);
  });

  it('rejects a size update after a field', () => {
    expectHpackError(new HpackDecoder(), Buffer.concat([indexed(2), encodeTableSizeUpdate(100)]), /after a field/);
    const late = Buffer.concat([encodeTableSizeUpdate(100), indexed(2), encodeTableSizeUpdate(0)]);
    expectHpackError(new HpackDecoder(), late);
  });

  it('rejects a size update above the limit, and accepts one up to a raised limit', () => {
    expectHpackError(new HpackDecoder(), encodeTableSizeUpdate(4097), /exceeds the limit/);
    expectHpackError(new HpackDecoder(256), encodeTableSizeUpdate(257));
    decodeBlock(new HpackDecoder(256), encodeTableSizeUpdate(256));
    const d = new HpackDecoder();
    d.setMaxTableSize(8192);
    decodeBlock(d, encodeTableSizeUpdate(8192));
    expect(d.maxTableSize).toBe(8192);
    expectHpackError(d, encodeTableSizeUpdate(8193));
  });

  it('requires a size update after SETTINGS_HEADER_TABLE_SIZE is lowered (RFC 7541 §4.2)', () => {
    const primed = (): HpackDecoder => {
      const d = new HpackDecoder();
      decodeBlock(d, hex(C3[0]?.block ?? ''));
      decodeBlock(d, hex(C3[1]?.block ?? ''));
      return d;
    };
    // Lowering shrinks the table at once (the peer cannot refer to entries before its update).
    let d = primed();
    d.setMaxTableSize(60);
    expect(d.tableEntries()).toEqual([['cache-control', 'no-cache']]);
    expectHpackError(d, indexed(2), /expected a dynamic table size update/);
    d = primed();
    d.setMaxTableSize(60);
    expectHpackError(d, Buffer.alloc(0), /expected a dynamic table size update/);
    d = primed();
    d.setMaxTableSize(60);
    expectHpackError(d, Buffer.concat([encodeTableSizeUpdate(61), indexed(2)]), /exceeds/);
    d = primed();
    d.setMaxTableSize(60);
    const updated = Buffer.concat([encodeTableSizeUpdate(60), indexed(62)]);
    expect(decodeBlock(d, updated).fields).toEqual([['cache-control', 'no-cache']]);
    expect(decodeBlock(d, indexed(62)).fields).toEqual([['cache-control', 'no-cache']]); // once is enough
    // Lowered then raised between blocks: the smallest value must be signalled first.
    d = primed();
    d.setMaxTableSize(0);
    d.setMaxTableSize(4096);
    expectHpackError(d, Buffer.concat([encodeTableSizeUpdate(4096), indexed(2)]), /lowered limit/);
    d = primed();
    d.setMaxTableSize(0);
    d.setMaxTableSize(4096);
    decodeBlock(d, Buffer.concat([encodeTableSizeUpdate(0), encodeTableSizeUpdate(4096), indexed(2)]));
    expect(d.maxTableSize).toBe(4096);
    // Raising the limit (or setting it equal) asks nothing of the peer.
    d = primed();
    d.setMaxTableSize(4096);
    d.setMaxTableSize(10000);
    expect(decodeBlock(d, indexed(62)).fields).toEqual([['cache-control', 'no-cache']]);
    expect(() => d.setMaxTableSize(-1)).toThrow(RangeError);
    expect(() => new HpackDecoder(1.5)).toThrow(RangeError);
  });

  it('grows past its preallocated ring and stays consistent under wrap-around', () => {
    const d = new HpackDecoder(65536);
    const inserted: Field[] = [];
    for (let i = 0; i < 1000; i++) {
      const field: Field = [`n${i % 7}`, `v${i}`];
      inserted.unshift(field);
      decodeBlock(d, withIndexing(field[0], raw(field[1])));
    }
    // The newest entries that fit in 65536 octets.
    let n = 0;
    while (n < inserted.length && listSizeOf(inserted.slice(0, n + 1)) <= 65536) n++;
    const size = listSizeOf(inserted.slice(0, n));
    expect(d.tableLength).toBe(n);
    expect(d.tableSize).toBe(size);
    expect(d.tableEntries()).toEqual(inserted.slice(0, n));
    const refs = Buffer.concat([indexed(62), indexed(61 + n)]);
    expect(decodeBlock(d, refs).fields).toEqual([inserted[0], inserted[n - 1]]);
  });

  it('matches a simple array model over random sequences of blocks', () => {
    type Op =
      | { kind: 'insert'; name: string; value: string; huffman: boolean; nameRef: number }
      | { kind: 'ref'; pick: number }
      | { kind: 'literal'; pick: number; value: string; never: boolean };
    const text = fc.string({ unit: fc.constantFrom('a', 'b', '-', 'Z', '\u00e9', ' '), maxLength: 40 });
    const op: fc.Arbitrary<Op> = fc.oneof(
      fc.record({
        kind: fc.constant('insert' as const),
        name: text,
        value: text,
        huffman: fc.boolean(),
        nameRef: fc.nat(100),
      }),
      fc.record({ kind: fc.constant('ref' as const), pick: fc.nat() }),
      fc.record({ kind: fc.constant('literal' as const), pick: fc.nat(), value: text, never: fc.boolean() }),
    );
    const block = fc.record({
      updates: fc.array(fc.nat(600), { maxLength: 2 }),
      ops: fc.array(op, { maxLength: 12 }),
    });
    fc.assert(
      fc.property(fc.constantFrom(0, 64, 256, 600), fc.array(block, { maxLength: 12 }), (limit, blocks) => {
        const d = new HpackDecoder(limit);
        let model: Field[] = [];
        let max: number = limit;
        const evict = (): void => {
          let size = listSizeOf(model);
          while (size > max) {
            const last = model.pop();
            size -= (last?.[0].length ?? 0) + (last?.[1].length ?? 0) + 32;
          }
        };
        for (const b of blocks) {
          const parts: Buffer[] = [];
          const want: Field[] = [];
          for (const u of b.updates) {
            const n = u % (limit + 1);
            parts.push(encodeTableSizeUpdate(n));
            max = n;
            evict();
          }
          for (const o of b.ops) {
            if (o.kind === 'ref' || o.kind === 'literal') {
              // Refer to a static entry or, when there are any, a dynamic one.
              const count = 61 + model.length;
              const index = 1 + (o.pick % count);
              const entry = index <= 61 ? STATIC_TABLE[index - 1] : model[index - 62];
              if (!entry) throw new Error('model bug');
              if (o.kind === 'ref') {
                parts.push(indexed(index));
                want.push([entry[0], entry[1]]);
              } else {
                parts.push(encodeInteger(index, 4, o.never ? 0x10 : 0x00), raw(o.value));
                want.push([entry[0], o.value]);
              }
              continue;
            }
            const useRef = o.nameRef < 61 + model.length && o.nameRef % 3 === 0;
            const refName = o.nameRef < 61 ? STATIC_TABLE[o.nameRef]?.[0] : model[o.nameRef - 61]?.[0];
            const name = useRef ? (refName ?? '') : o.name;
            const value = o.huffman ? huff(o.value) : raw(o.value);
            parts.push(withIndexing(useRef ? o.nameRef + 1 : o.huffman ? huff(name) : raw(name), value));
            want.push([name, o.value]);
            if (name.length + o.value.length + 32 > max) {
              model = [];
            } else {
              model.unshift([name, o.value]);
              evict();
            }
          }
          const { fields, listSize } = decodeBlock(d, Buffer.concat(parts));
          expect(fields).toEqual(want);
          expect(listSize).toBe(listSizeOf(want));
          expect(d.tableEntries()).toEqual(model);
          expect(d.tableSize).toBe(listSizeOf(model));
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe('malformed blocks', () => {
  it('rejects index 0, as an indexed field and as a dynamic name', () => {
    expectHpackError(new HpackDecoder(), hex('80'), /index 0/);
    // A literal with name index 0 is a literal name, not an error.
    expect(decodeBlock(new HpackDecoder(), hex('00 0161 0162')).fields).toEqual([['a', 'b']]);
  });

  it('rejects indexes past the table', () => {
    expectHpackError(new HpackDecoder(), indexed(62), /beyond the table/);
    expectHpackError(new HpackDecoder(), withIndexing(62, raw('v')), /beyond the table/);
    expectHpackError(new HpackDecoder(), Buffer.concat([encodeInteger(62, 4), raw('v')]), /beyond the table/);
    expectHpackError(new HpackDecoder(), Buffer.concat([encodeInteger(62, 4, 0x10), raw('v')]), /beyond the table/);
    expectHpackError(new HpackDecoder(), indexed(0x7fffffff));
    const d = new HpackDecoder();
    decodeBlock(d, hex(C3[0]?.block ?? ''));
    decodeBlock(d, indexed(62));
    expectHpackError(d, indexed(63), /beyond the table/);
  });

  it('rejects strings running past the end of the block', () => {
    expectHpackError(new HpackDecoder(), hex('00 0561 6263'), /past the end/);
    expectHpackError(new HpackDecoder(), hex('00 0161 05'), /past the end/);
    expectHpackError(new HpackDecoder(), hex('00 0161'), /truncated/);
    expectHpackError(new HpackDecoder(), hex('0f'), /truncated/);
    // `end` bounds the block even when the buffer goes on.
    const d = new HpackDecoder();
    const buf = hex('00 0161 0162');
    expect(() => d.decode(buf, 0, buf.length - 1, [])).toThrow(HpackError);
    // A range outside the buffer is the caller's bug, not the peer's.
    expect(() => d.decode(buf, 0, buf.length + 1, [])).toThrow(RangeError);
    expect(() => d.decode(buf, 3, 2, [])).toThrow(RangeError);
  });

  it('rejects invalid Huffman strings inside a block', () => {
    expectHpackError(new HpackDecoder(), hex('00 81ff 0162'), /Huffman/); // 8 bits of padding
    expectHpackError(new HpackDecoder(), hex('00 811e 0162'), /Huffman/); // padding with a 0 bit
    expectHpackError(new HpackDecoder(), hex('00 84ffffffff 0162'), /Huffman/); // EOS
  });

  it('decodes latin1, not utf8', () => {
    const block = Buffer.concat([
      Buffer.of(0x00),
      raw('x'),
      raw('caf\u00e9 \u00ff'),
      Buffer.of(0x00),
      raw('y'),
      huff('\u00e9\u0080'),
    ]);
    const { fields } = decodeBlock(new HpackDecoder(), block);
    expect(fields).toEqual([
      ['x', 'caf\u00e9 \u00ff'],
      ['y', '\u00e9\u0080'],
    ]);
    expect(decodeBlock(new HpackDecoder(), hex('00 0178 02c3a9')).fields).toEqual([['x', '\u00c3\u00a9']]);
  });

  it('grows its Huffman scratch buffer for long strings', () => {
    const long = 'z'.repeat(5000) + '\u00ff'.repeat(300);
    const d = new HpackDecoder();
    expect(decodeBlock(d, Buffer.concat([Buffer.of(0x00), huff('k'), huff(long)])).fields).toEqual([['k', long]]);
    expect(decodeBlock(d, Buffer.concat([Buffer.of(0x00), huff('k'), huff('short')])).fields).toEqual([['k', 'short']]);
  });

  it('throws only HpackError on arbitrary bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), fc.constantFrom(0, 256, 4096), (bytes, size) => {
        const d = new HpackDecoder(size);
        const block = Buffer.from(bytes);
        try {
          const out: string[] = [];
          const listSize = d.decode(block, 0, block.length, out);
          expect(listSize).toBe(listSizeOf(pairs(out)));
        } catch (e) {
          expect(e).toBeInstanceOf(HpackError);
        }
      }),
      { numRuns: 3000 },
    );
  });
});

const headerName = fc.stringMatching(/^[a-z0-9-]{1,20}$/);
const latin1Char = fc
  .oneof(fc.integer({ min: 0x20, max: 0x7e }), fc.integer({ min: 0x80, max: 0xff }))
  .map((c) => String.fromCharCode(c));
const headerValue = fc.string({ unit: latin1Char, maxLength: 100 });
const staticName = fc.constantFrom(...STATIC_TABLE.map(([n]) => n));
const headerList: fc.Arbitrary<Field[]> = fc.array(
  fc.oneof(
    fc.tuple(headerName, headerValue),
    fc.tuple(staticName, headerValue),
    fc.constantFrom(...STATIC_TABLE).map(([n, v]): Field => [n, v]),
  ),
  { maxLength: 20 },
);

describe('encodeHeaders', () => {
  it('uses the static table: exact matches indexed, name matches with an indexed name', () => {
    expect(encodeHeaders([[':status', '200']]).toString('hex')).toBe('88');
    expect(
      encodeHeaders([
        [':method', 'POST'],
        [':authority', ''],
      ]).toString('hex'),
    ).toBe('8381');
    expect(encodeHeaders([[':status', '201']]).toString('hex')).toBe('0803323031');
    // content-type is index 31: 4-bit prefix 15, continuation 16.
    const ascii = (s: string): string => Buffer.from(s).toString('hex');
    expect(encodeHeaders([['content-type', 'application/grpc']]).toString('hex')).toBe(
      `0f1010${ascii('application/grpc')}`,
    );
    expect(encodeHeaders([['grpc-status', '0']]).toString('hex')).toBe(`000b${ascii('grpc-status')}0130`);
    expect(encodeHeaders([]).length).toBe(0);
  });

  it('Huffman-codes strings when that is shorter and only then', () => {
    // The Huffman strings of RFC 7541 C.4.3.
    expect(encodeHeaders([['custom-key', 'custom-value']], { huffman: true }).toString('hex')).toBe(
      '00 88 25a849e95ba97d7f 89 25a849e95bb8e8b4bf'.replace(/ /g, ''),
    );
    expect(encodeHeaders([[':status', '302']], { huffman: true }).toString('hex')).toBe('08826402');
    // One 26-bit code is longer than the raw octet.
    expect(encodeHeaders([['x', '\u00ff']], { huffman: true }).toString('hex')).toBe('00017801ff');
    expect(encodeHeaders([['custom-key', 'custom-value']]).toString('hex')).toBe(
      `000a${Buffer.from('custom-key').toString('hex')}0c${Buffer.from('custom-value').toString('hex')}`,
    );
  });

  it('encodes long strings with multi-octet lengths', () => {
    const value = 'v'.repeat(300);
    const block = encodeHeaders([['x-long', value]]);
    expect(block.subarray(8, 11).toString('hex')).toBe('7fad01'); // 300 = 127 + 173
    expect(decodeBlock(new HpackDecoder(), block).fields).toEqual([['x-long', value]]);
  });

  it('encodes table size updates (001xxxxx, 5-bit prefix)', () => {
    expect(encodeTableSizeUpdate(0).toString('hex')).toBe('20');
    expect(encodeTableSizeUpdate(30).toString('hex')).toBe('3e');
    expect(encodeTableSizeUpdate(1337).toString('hex')).toBe('3f9a0a');
    expect(encodeTableSizeUpdate(4096).toString('hex')).toBe('3fe11f');
    expect(() => encodeTableSizeUpdate(-1)).toThrow(RangeError);
  });

  it.each([false, true])('round-trips random header lists through the decoder (huffman: %s)', (huffman) => {
    fc.assert(
      fc.property(headerList, (fields) => {
        const block = encodeHeaders(fields, { huffman });
        const d = new HpackDecoder();
        const { fields: got, listSize } = decodeBlock(d, block);
        expect(got).toEqual(fields);
        expect(listSize).toBe(listSizeOf(fields));
        expect(d.tableLength).toBe(0);
      }),
      { numRuns: 500 },
    );
  });

  it('produces blocks whose every strict prefix decodes fewer fields or throws HpackError', () => {
    fc.assert(
      fc.property(headerList, fc.boolean(), (fields, huffman) => {
        const block = encodeHeaders(fields, { huffman });
        for (let cut = 0; cut < block.length; cut++) {
          expectPrefixBehaviour(new HpackDecoder(), block.subarray(0, cut), fields);
        }
      }),
      { numRuns: 200 },
    );
  });
});

// --- Cross-check with nghttp2 ---------------------------------------------------------------------
// Node's http2 client compresses headers with nghttp2. A bare TCP server reads its frames, so the
// decoder sees real nghttp2 blocks: Huffman, indexing, eviction and, after we lower
// SETTINGS_HEADER_TABLE_SIZE, nghttp2's mandatory size update.

interface Capture {
  /** Decoded header lists by stream, in the order HEADERS arrived. */
  readonly byStream: Map<number, Field[]>;
  readonly sawSizeUpdate: boolean;
}

async function captureNghttp2(
  batches: readonly (readonly Record<string, string>[])[],
  lowerTableTo?: number,
): Promise<Capture> {
  const decoder = new HpackDecoder();
  const byStream = new Map<number, Field[]>();
  let sawSizeUpdate = false;
  let expected = 0;
  for (const batch of batches) expected += batch.length;
  let settingsAcked: () => void = () => undefined;
  const acked = new Promise<void>((resolve) => (settingsAcked = resolve));
  let done: () => void = () => undefined;
  let failed: (e: unknown) => void = () => undefined;
  const finished = new Promise<void>((resolve, reject) => {
    done = resolve;
    failed = reject;
  });
  const sockets: Socket[] = [];

  const server = createServer((socket) => {
    sockets.push(socket);
    const settings = Buffer.alloc(lowerTableTo === undefined ? 0 : 6);
    if (lowerTableTo !== undefined) {
      settings.writeUInt16BE(h2constants.NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, 0);
      settings.writeUInt32BE(lowerTableTo, 2);
    }
    socket.write(frame(0x4, 0, 0, settings));
    let buf = Buffer.alloc(0);
    let prefaceSeen = false;
    let headerStream = 0;
    let headerBlock: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => {
      try {
        buf = Buffer.concat([buf, chunk]);
        if (!prefaceSeen) {
          if (buf.length < 24) return;
          buf = buf.subarray(24);
          prefaceSeen = true;
        }
        while (buf.length >= 9) {
          const length = buf.readUIntBE(0, 3);
          if (buf.length < 9 + length) return;
          const type = buf[3] ?? 0;
          const flags = buf[4] ?? 0;
          const stream = buf.readUInt32BE(5) & 0x7fffffff;
          let payload = buf.subarray(9, 9 + length);
          buf = buf.subarray(9 + length);
          if (type === 0x4 && (flags & 0x1) === 0) socket.write(frame(0x4, 0x1, 0, Buffer.alloc(0)));
          if (type === 0x4 && (flags & 0x1) !== 0 && lowerTableTo !== undefined) {
            // Our SETTINGS is acknowledged: the new limit applies from the next block on.
            decoder.setMaxTableSize(lowerTableTo);
            settingsAcked();
          }
          if (type === 0x1 || type === 0x9) {
            if (type === 0x1) {
              const pad = (flags & 0x8) !== 0 ? (payload[0] ?? 0) : 0;
              payload = payload.subarray((flags & 0x8) !== 0 ? 1 : 0, payload.length - pad);
              if ((flags & 0x20) !== 0) payload = payload.subarray(5);
              headerStream = stream;
              headerBlock = [];
            }
            headerBlock.push(payload);
            if ((flags & 0x4) !== 0) {
              const block = Buffer.concat(headerBlock);
              if (((block[0] ?? 0) & 0xe0) === 0x20) sawSizeUpdate = true;
              byStream.set(headerStream, decodeBlock(decoder, block).fields);
              if (byStream.size === expected) done();
            }
          }
        }
      } catch (e) {
        failed(e);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const client = connect(`http://127.0.0.1:${port}`);
  client.on('error', () => undefined);
  try {
    for (const [i, batch] of batches.entries()) {
      if (i > 0 && lowerTableTo !== undefined) await acked;
      for (const headers of batch) {
        const req = client.request(headers, { endStream: true });
        req.on('error', () => undefined);
      }
      // Let nghttp2 send this batch before the next one is queued.
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await finished;
    return { byStream, sawSizeUpdate };
  } finally {
    client.destroy();
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => server.close(resolve));
  }
}

describe("cross-check with nghttp2's encoder (node:http2 client)", () => {
  const requestArb = fc.record({
    path: fc.stringMatching(/^\/[a-z0-9/._-]{0,30}$/),
    extra: fc.uniqueArray(
      fc.tuple(
        headerName.map((n) => `x-${n}`),
        headerValue,
      ),
      {
        maxLength: 12,
        selector: ([n]) => n,
      },
    ),
  });
  const toHeaders = (r: { path: string; extra: [string, string][] }): Record<string, string> => ({
    ':method': 'POST',
    ':path': r.path,
    'content-type': 'application/grpc',
    te: 'trailers',
    ...Object.fromEntries(r.extra),
  });
  const sortedRegular = (fields: readonly Field[]): Field[] =>
    fields.filter(([n]) => !n.startsWith(':')).sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));

  async function check(batches: Record<string, string>[][], lowerTableTo?: number): Promise<Capture> {
    const capture = await captureNghttp2(batches, lowerTableTo);
    const all = batches.flat();
    all.forEach((headers, i) => {
      const got = capture.byStream.get(2 * i + 1);
      expect(got).toBeDefined();
      const fields = got ?? [];
      expect(fields.find(([n]) => n === ':path')?.[1]).toBe(headers[':path']);
      expect(fields.find(([n]) => n === ':method')?.[1]).toBe('POST');
      expect(fields.find(([n]) => n === ':authority')?.[1]).toMatch(/^127\.0\.0\.1:\d+$/);
      const want = Object.entries(headers).filter(([n]) => !n.startsWith(':'));
      expect(sortedRegular(fields)).toEqual(sortedRegular(want));
    });
    return capture;
  }

  it('decodes random request sequences on one connection (indexing and eviction)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(requestArb, { minLength: 1, maxLength: 12 }), async (requests) => {
        await check([requests.map(toHeaders)]);
      }),
      { numRuns: 15 },
    );
  });

  it('sees the size update nghttp2 sends after we lower SETTINGS_HEADER_TABLE_SIZE', async () => {
    const headers = (i: number): Record<string, string> => ({
      ':method': 'POST',
      ':path': `/svc/M${i}`,
      'x-id': `value-${i}`,
      'x-same': 'same',
    });
    const capture = await check(
      [
        [headers(0), headers(1)],
        [headers(2), headers(3)],
      ],
      64,
    );
    expect(capture.sawSizeUpdate).toBe(true);
  });
});

describe('limits applied while decoding', () => {
  it('stops collecting fields past the list size or field count, and still keeps the table in step', () => {
    const d = new HpackDecoder(4096);
    // A 4,000-byte entry, then a block referencing it 1,000 times (an "HPACK bomb": 4 MB of header list).
    decodeBlock(d, withIndexing('x-bomb', raw('a'.repeat(4_000))));
    const bomb = Buffer.alloc(1_000, 0x80 | 62);
    const out: string[] = [];
    const listSize = d.decode(bomb, 0, bomb.length, out, 16 * 1024, 64);
    expect(d.truncated).toBe(true);
    expect(out.length).toBe(2 * 4); // 4 fields of 4,038 octets fit in 16 KiB, the 5th does not
    expect(listSize).toBe(1_000 * (6 + 4_000 + 32)); // still the whole list's size, for the caller's 431
    // A literal with indexing after the limit still goes into the table, so the next block agrees with the peer.
    const late = Buffer.concat([Buffer.alloc(10, 0x80 | 62), withIndexing('x-late', raw('v'))]);
    const kept: string[] = [];
    d.decode(late, 0, late.length, kept, 100, 64);
    expect(kept).toEqual([]);
    expect(d.tableEntries()[0]).toEqual(['x-late', 'v']);
    const next = decodeBlock(d, indexed(62));
    expect(d.truncated).toBe(false);
    expect(next.fields).toEqual([['x-late', 'v']]);
    // The field count: 64 fields kept, no more.
    const many: string[] = [];
    const hundred = Buffer.alloc(100, 0x82); // :method GET
    d.decode(hundred, 0, hundred.length, many, Infinity, 64);
    expect(many.length).toBe(128);
    expect(d.truncated).toBe(true);
  });
});

describe('fieldsClean: the field checks of RFC 9113 §8.2.1 done once per literal and table entry', () => {
  const literalIndexed = (name: string, value: string): number[] => [
    0x40,
    name.length,
    ...Buffer.from(name, 'latin1'),
    value.length,
    ...Buffer.from(value, 'latin1'),
  ];
  const decodeAll = (d: HpackDecoder, bytes: number[]): string[] => {
    const out: string[] = [];
    d.decode(Buffer.from(bytes), 0, bytes.length, out);
    return out;
  };

  it('every static table entry passes the checks, so indexed static fields are clean', () => {
    expect(STATIC_TABLE.filter(([n, v]) => !isCleanField(n, v))).toEqual([]);
    const d = new HpackDecoder();
    decodeAll(d, [0x82, 0x84, 0x86]); // :method GET, :path /, :scheme http
    expect(d.fieldsClean).toBe(true);
  });

  it('a bad literal makes its block unclean, and so does every later reference to its table entry', () => {
    const d = new HpackDecoder();
    expect(decodeAll(d, literalIndexed('x-bad', 'a\r\nb'))).toEqual(['x-bad', 'a\r\nb']);
    expect(d.fieldsClean).toBe(false);
    decodeAll(d, [0x82]);
    expect(d.fieldsClean).toBe(true);
    expect(decodeAll(d, [0x82, 0xbe])).toEqual([':method', 'GET', 'x-bad', 'a\r\nb']); // 62: the newest entry
    expect(d.fieldsClean).toBe(false);
    decodeAll(d, literalIndexed('Upper', 'v'));
    expect(d.fieldsClean).toBe(false);
    decodeAll(d, literalIndexed('x-good', 'v'));
    expect(d.fieldsClean).toBe(true);
    decodeAll(d, [0xbe, 0xbf]); // x-good (clean), then Upper (not)
    expect(d.fieldsClean).toBe(false);
    decodeAll(d, [0xbe]);
    expect(d.fieldsClean).toBe(true);
  });

  it('keeps each entry’s mark when the table grows past its first ring', () => {
    const d = new HpackDecoder(65_536);
    d.setMaxTableSize(65_536);
    for (let i = 0; i < 300; i++) decodeAll(d, literalIndexed(`x-${i}`, i === 0 ? ' padded' : 'v'));
    decodeAll(d, [0xbe]); // the newest, x-299
    expect(d.fieldsClean).toBe(true);
    // Index 361 (61 + 300: x-0, the padded one): the 7-bit prefix full, then 361 - 127 = 234 in two octets.
    decodeAll(d, [0xff, 0x80 | (234 & 0x7f), 234 >> 7]);
    expect(d.fieldsClean).toBe(false);
  });
});
