// The field rules of RFC 9113 §8.2.1 / RFC 9110 §8.6 and the PRIORITY rules of RFC 9113 §6.3 / §6.4, on the
// rules themselves and on real connections (loopback, raw frames): a malformed request resets that one stream
// with PROTOCOL_ERROR and the connection keeps serving; RST_STREAM never goes out on an idle stream.
import type { H2Stream } from './connection.js';
import { RawClient, frame, startH2Server, words, type Frame } from './connection.test-helper.js';
import { isValidFieldName, isValidFieldValue, parseContentLength } from './field-rules.js';
import { ErrorCode, Flag, FrameType } from './frames.js';
import { HpackDecoder, encodeHeaders } from './hpack.js';

const GET: [string, string][] = [
  [':method', 'GET'],
  [':scheme', 'http'],
  [':path', '/'],
  [':authority', 'a'],
];
const POST: [string, string][] = [
  [':method', 'POST'],
  [':scheme', 'http'],
  [':path', '/'],
  [':authority', 'a'],
];
const END = Flag.END_HEADERS | Flag.END_STREAM;

function statusOf(f: Frame): string | undefined {
  const fields: string[] = [];
  new HpackDecoder(4096).decode(f.payload, 0, f.payload.length, fields, 1 << 20, 1000);
  return fields[fields.indexOf(':status') + 1];
}
const rstOn = (id: number) => (f: Frame) => f.type === FrameType.RST_STREAM && f.stream === id;
const headersOn = (id: number) => (f: Frame) => f.type === FrameType.HEADERS && f.stream === id;

describe('the field rules', () => {
  it('takes lowercase token names only (RFC 9110 §5.1, RFC 9113 §8.2.1)', () => {
    for (const ok of ['a', 'x-request-id', "!#$%&'*+-.^_`|~09az", 'content-length'])
      expect(isValidFieldName(ok)).toBe(true);
    for (const bad of [
      '',
      'a b',
      'a:b',
      ':a',
      'A',
      'x-Up',
      'a\x80',
      'é',
      'a(b',
      'a"b',
      'a\tb',
      'a\x00',
      'a\x7f',
      'a,b',
      'a/b',
    ]) {
      expect(isValidFieldName(bad)).toBe(false);
    }
  });

  it('refuses values with NUL, CR or LF anywhere or SP/HTAB at an end, keeps the rest (RFC 9113 §8.2.1)', () => {
    for (const ok of ['', 'a', 'a b', 'a\tb', '\x01\x7f\x80\xff', 'x\x0b', '\x0cy'])
      expect(isValidFieldValue(ok)).toBe(true);
    for (const bad of ['a\x00', '\x00', 'a\rb', 'a\nb', 'a\r\nb', ' a', 'a ', '\ta', 'a\t', ' ', '\t']) {
      expect(isValidFieldValue(bad)).toBe(false);
    }
  });

  it('reads content-length as 1*DIGIT only (RFC 9110 §8.6), unlike Number()', () => {
    expect(parseContentLength('0')).toBe(0);
    expect(parseContentLength('11')).toBe(11);
    expect(parseContentLength('007')).toBe(7);
    expect(parseContentLength(String(Number.MAX_SAFE_INTEGER))).toBe(Number.MAX_SAFE_INTEGER);
    for (const bad of [
      '',
      ' ',
      '0x0b',
      '1e3',
      ' 5',
      '5 ',
      '+5',
      '-1',
      '5, 5',
      '5.0',
      '١',
      'NaN',
      'Infinity',
      '9007199254740992',
      '1'.repeat(17),
    ]) {
      expect(parseContentLength(bad)).toBe(-1);
    }
  });
});

describe('H2Connection resets a request with a malformed field, and only that stream', () => {
  let server: Awaited<ReturnType<typeof startH2Server>>;
  let raw: RawClient;
  const seen: string[] = [];
  beforeEach(async () => {
    seen.length = 0;
    server = await startH2Server((stream: H2Stream) => {
      seen.push(String(stream.id));
      stream.ondata = () => undefined;
      stream.onend = () => stream.respond(200, { 'content-length': 0 }, true);
    });
  });
  afterEach(async () => {
    raw?.close();
    await server.close();
  });

  /** Stream 1 is reset PROTOCOL_ERROR (never seen by the handler), stream 3 then gets its 200 on the same connection. */
  async function expectOnlyStream1Reset(): Promise<void> {
    const rst = await raw.waitFor(rstOn(1));
    expect(rst.payload.readUInt32BE(0)).toBe(ErrorCode.PROTOCOL_ERROR);
    raw.send(frame(FrameType.HEADERS, END, 3, encodeHeaders(GET)));
    expect(statusOf(await raw.waitFor(headersOn(3)))).toBe('200');
    expect(raw.frames.some((f) => f.type === FrameType.GOAWAY)).toBe(false);
    expect(seen).toEqual(['3']);
  }

  const badFields: [string, string, string][] = [
    ['a name with a space', 'x a', '1'],
    ['a colon inside a regular name', 'x:a', '1'],
    ['a name with an octet >= 0x80', 'x\x80', '1'],
    ['a name with a non-token char', 'x(a)', '1'],
    ['an empty name', '', '1'],
    ['a value with NUL', 'x-a', 'a\x00b'],
    ['a value with CR LF', 'x-a', 'a\r\nx-injected: 1'],
    ['a value with a lone LF', 'x-a', 'a\nb'],
  ];
  it.each(badFields)('%s', async (_, name, value) => {
    raw = await RawClient.open(server.port);
    raw.send(frame(FrameType.HEADERS, END, 1, encodeHeaders([...GET, [name, value]])));
    await expectOnlyStream1Reset();
  });

  // Malformed as well, but answered with the 400 RFC 9113 §8.2.1 recommends rather than reset (field-rules.ts says why).
  it.each([
    ['a leading SP', 'x-a', ' a'],
    ['a trailing HTAB', 'x-a', 'a\t'],
    ['only a SP', 'x-a', ' '],
    ['SP around a content-length (" 0")', 'content-length', ' 0'],
  ])('a value with %s: answered 400 (never seen by the handler), the connection kept', async (_, name, value) => {
    raw = await RawClient.open(server.port);
    raw.send(frame(FrameType.HEADERS, END, 1, encodeHeaders([...GET, [name, value]])));
    expect(statusOf(await raw.waitFor(headersOn(1)))).toBe('400');
    raw.send(frame(FrameType.HEADERS, END, 3, encodeHeaders(GET)));
    expect(statusOf(await raw.waitFor(headersOn(3)))).toBe('200');
    expect(raw.frames.some((f) => f.type === FrameType.GOAWAY || f.type === FrameType.RST_STREAM)).toBe(false);
    expect(seen).toEqual(['3']);
  });

  it('a pseudo-header value with CR LF', async () => {
    raw = await RawClient.open(server.port);
    const fields = GET.map(([n, v]): [string, string] => (n === ':path' ? [n, '/a\r\nb'] : [n, v]));
    raw.send(frame(FrameType.HEADERS, END, 1, encodeHeaders(fields)));
    await expectOnlyStream1Reset();
  });

  // Each with the body Number() would have matched, so only the parser can tell them apart from a good request.
  it.each(['0x0b', '1e3', '5.0', '+5', '1_0', '', '-0', '5, 5'])('a content-length of %j', async (length) => {
    raw = await RawClient.open(server.port);
    const fields: [string, string][] =
      length === '5, 5'
        ? [...POST, ['content-length', '5'], ['content-length', '5']]
        : [...POST, ['content-length', length]];
    const body = Buffer.alloc(length === '5, 5' ? 5 : Number(length) || 0, 0x61);
    raw.send(
      frame(FrameType.HEADERS, Flag.END_HEADERS, 1, encodeHeaders(fields)),
      frame(FrameType.DATA, Flag.END_STREAM, 1, body),
    );
    await expectOnlyStream1Reset();
  });

  it('a trailer with a malformed field resets the stream (RFC 9113 §8.1, §8.2.1)', async () => {
    raw = await RawClient.open(server.port);
    raw.send(
      frame(FrameType.HEADERS, Flag.END_HEADERS, 1, encodeHeaders(POST)),
      frame(FrameType.DATA, 0, 1, Buffer.from('x')),
      frame(FrameType.HEADERS, END, 1, encodeHeaders([['x-t', 'a\r\nb']])),
    );
    expect((await raw.waitFor(rstOn(1))).payload.readUInt32BE(0)).toBe(ErrorCode.PROTOCOL_ERROR);
    raw.send(frame(FrameType.HEADERS, END, 3, encodeHeaders(GET)));
    expect(statusOf(await raw.waitFor(headersOn(3)))).toBe('200');
  });

  it('a malformed value the peer put in its dynamic table is refused on every request that refers to it', async () => {
    raw = await RawClient.open(server.port);
    // Stream 1 brings `x-a: a\r\nb` as a literal with incremental indexing (RFC 7541 §6.2.1): refused, but the
    // table keeps it (HPACK state is the connection's), so a later request can name it by its index alone.
    const literal = (name: string, value: string): Buffer =>
      Buffer.concat([
        Buffer.from([0x40, name.length]),
        Buffer.from(name, 'latin1'),
        Buffer.from([value.length]),
        Buffer.from(value, 'latin1'),
      ]);
    raw.send(frame(FrameType.HEADERS, END, 1, Buffer.concat([encodeHeaders(GET), literal('x-a', 'a\r\nb')])));
    expect((await raw.waitFor(rstOn(1))).payload.readUInt32BE(0)).toBe(ErrorCode.PROTOCOL_ERROR);
    // Stream 3: the same field by its index only (62, the newest dynamic entry).
    raw.send(frame(FrameType.HEADERS, END, 3, Buffer.concat([encodeHeaders(GET), Buffer.from([0x80 | 62])])));
    expect((await raw.waitFor(rstOn(3))).payload.readUInt32BE(0)).toBe(ErrorCode.PROTOCOL_ERROR);
    raw.send(frame(FrameType.HEADERS, END, 5, encodeHeaders(GET)));
    expect(statusOf(await raw.waitFor(headersOn(5)))).toBe('200');
    expect(seen).toEqual(['5']);
  });

  it('still serves a well-formed request with every kind of valid field', async () => {
    raw = await RawClient.open(server.port);
    const fields: [string, string][] = [
      ...POST,
      ['content-length', '3'],
      ["x-!#$%&'*+-.^_`|~", 'inner SP and\tHTAB, obs-text \xe9, controls \x01\x7f'],
      ['te', 'Trailers'],
      ['x-empty', ''],
    ];
    raw.send(
      frame(FrameType.HEADERS, Flag.END_HEADERS, 1, encodeHeaders(fields)),
      frame(FrameType.DATA, Flag.END_STREAM, 1, Buffer.from('abc')),
    );
    expect(statusOf(await raw.waitFor(headersOn(1)))).toBe('200');
  });
});

describe('H2Connection never sends RST_STREAM on an idle stream (RFC 9113 §6.4, §5.1)', () => {
  let server: Awaited<ReturnType<typeof startH2Server>>;
  let raw: RawClient;
  beforeEach(async () => {
    server = await startH2Server((stream: H2Stream) => {
      stream.onend = () => stream.respond(200, { 'content-length': 0 }, true);
    });
  });
  afterEach(async () => {
    raw?.close();
    await server.close();
  });

  /** Opens and completes streams 1 and 3: 5 and above are idle, and so is 2 although it is below the last one opened. */
  async function openStreams(): Promise<void> {
    raw = await RawClient.open(server.port);
    raw.send(
      frame(FrameType.HEADERS, END, 1, encodeHeaders(GET)),
      frame(FrameType.HEADERS, END, 3, encodeHeaders(GET)),
    );
    await raw.waitFor(headersOn(3));
  }

  const priority = (dependsOn: number, length = 5): Buffer =>
    Buffer.concat([words(dependsOn), Buffer.from([16])]).subarray(0, length);
  const idleCases: [string, () => Buffer, number, number][] = [
    [
      'a PRIORITY of 4 bytes on idle stream 5',
      () => frame(FrameType.PRIORITY, 0, 5, priority(1, 4)),
      5,
      ErrorCode.FRAME_SIZE_ERROR,
    ],
    [
      'a PRIORITY of 6 bytes on idle stream 5',
      () => frame(FrameType.PRIORITY, 0, 5, Buffer.alloc(6)),
      5,
      ErrorCode.FRAME_SIZE_ERROR,
    ],
    [
      'a PRIORITY of 4 bytes on even stream 2',
      () => frame(FrameType.PRIORITY, 0, 2, priority(1, 4)),
      2,
      ErrorCode.FRAME_SIZE_ERROR,
    ],
    [
      'idle stream 5 depending on itself',
      () => frame(FrameType.PRIORITY, 0, 5, priority(5)),
      5,
      ErrorCode.PROTOCOL_ERROR,
    ],
    [
      'even stream 2 depending on itself',
      () => frame(FrameType.PRIORITY, 0, 2, priority(2)),
      2,
      ErrorCode.PROTOCOL_ERROR,
    ],
    ['DATA on even stream 2', () => frame(FrameType.DATA, 0, 2, Buffer.from('x')), 2, ErrorCode.PROTOCOL_ERROR],
    [
      'WINDOW_UPDATE on even stream 2',
      () => frame(FrameType.WINDOW_UPDATE, 0, 2, words(1)),
      2,
      ErrorCode.PROTOCOL_ERROR,
    ],
    ['RST_STREAM on even stream 2', () => frame(FrameType.RST_STREAM, 0, 2, words(8)), 2, ErrorCode.PROTOCOL_ERROR],
  ];
  it.each(idleCases)('%s: a connection error (GOAWAY), no RST_STREAM', async (_, bytes, id, code) => {
    await openStreams();
    raw.send(bytes());
    expect(await raw.goawayCode()).toBe(code);
    await raw.waitEnd();
    expect(raw.frames.filter(rstOn(id))).toEqual([]);
  });

  it('takes a well-formed PRIORITY on an idle stream, odd or even, and ignores it', async () => {
    await openStreams();
    raw.send(frame(FrameType.PRIORITY, 0, 7, priority(1)), frame(FrameType.PRIORITY, 0, 2, priority(0)));
    raw.send(frame(FrameType.HEADERS, END, 7, encodeHeaders(GET)));
    expect(statusOf(await raw.waitFor(headersOn(7)))).toBe('200');
    expect(raw.frames.some((f) => f.type === FrameType.RST_STREAM || f.type === FrameType.GOAWAY)).toBe(false);
  });

  it('still answers a bad PRIORITY on an open stream with RST_STREAM (a stream error, RFC 9113 §6.3), and keeps serving', async () => {
    raw = await RawClient.open(server.port);
    raw.send(
      frame(FrameType.HEADERS, Flag.END_HEADERS, 1, encodeHeaders(POST)),
      frame(FrameType.PRIORITY, 0, 1, priority(0, 4)),
    );
    expect((await raw.waitFor(rstOn(1))).payload.readUInt32BE(0)).toBe(ErrorCode.FRAME_SIZE_ERROR);
    raw.send(
      frame(FrameType.HEADERS, Flag.END_HEADERS, 3, encodeHeaders(POST)),
      frame(FrameType.PRIORITY, 0, 3, priority(3)),
    );
    expect((await raw.waitFor(rstOn(3))).payload.readUInt32BE(0)).toBe(ErrorCode.PROTOCOL_ERROR);
    raw.send(frame(FrameType.HEADERS, END, 5, encodeHeaders(GET)));
    expect(statusOf(await raw.waitFor(headersOn(5)))).toBe('200');
  });
});
