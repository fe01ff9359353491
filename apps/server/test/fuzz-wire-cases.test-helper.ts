// Generated requests for fuzz-wire.spec.ts (fast-check arbitraries). Each case is one HTTP request over
// HTTP/1.1, h2c or a raw TCP connection, labelled with a category for the counts the lead reports, and, when
// the generator knows the request is well-formed and in range, with the count it must be served
// (`mustServe`): a valid request that is refused is as much a failure as a crash (docs/design.md §6).
import { gzipSync } from 'node:zlib';
import fc from 'fast-check';

/** The serving port's limits the generators aim at (the spec starts the node with exactly these). */
export const FUZZ_LIMITS = { maxCount: 4096, maxBodyBytes: 65_536 } as const;

/** How a case travels. */
export type Transport = 'h1' | 'h2' | 'raw';

/** The message inside a request, before framing and compression, when there is one. */
export interface LogicalMessage {
  readonly format: 'binary' | 'json';
  readonly bytes: Uint8Array;
}

/** One generated request. */
export interface WireCase {
  readonly category: string;
  readonly transport: Transport;
  readonly method: string;
  readonly path: string;
  /** Lower-case header names; values are plain printable ASCII. */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Uint8Array;
  /** For `raw`: the exact bytes written to the socket (method, path, headers and body are unused). */
  readonly raw?: Uint8Array;
  /** The message the server decodes, if the framing around it is right; used to check a success. */
  readonly message?: LogicalMessage;
  /** The request is well-formed and in range: it must be answered with exactly this many IDs. */
  readonly mustServe?: number;
}

export const NEXT_IDS = '/idgen.v1.IdGenerator/NextIds';
export const GET_STATUS = '/idgen.v1.IdGenerator/GetStatus';
export const HEALTH_CHECK = '/grpc.health.v1.Health/Check';
const HEALTH_LIST = '/grpc.health.v1.Health/List';
const HEALTH_WATCH = '/grpc.health.v1.Health/Watch';

const enc = new TextEncoder();

// ---------------------------------------------------------------------------------------------------------
// Protobuf wire pieces (by hand: the point is to produce what a correct encoder never would)

/** Base-128 varint of `v` (any size: 2^64 and above produce over-long varints a decoder must refuse). */
export function varint(v: bigint): number[] {
  const out: number[] = [];
  let x = v < 0n ? v & ((1n << 64n) - 1n) : v;
  while (x >= 0x80n) {
    out.push(Number(x & 0x7fn) | 0x80);
    x >>= 7n;
  }
  out.push(Number(x));
  return out;
}

function tag(field: number, wireType: number): number[] {
  return varint((BigInt(field) << 3n) | BigInt(wireType));
}

/** `NextIdsRequest{count}` as protoc would write it (proto3: a zero count is no field at all). */
export function countMessage(count: number): Uint8Array {
  return count === 0 ? new Uint8Array(0) : new Uint8Array([0x08, ...varint(BigInt(count))]);
}

/** Counts at and around every limit the API has (docs/design.md §6: 1..max-count; uint32 on the wire). */
const limitCount = fc.constantFrom(
  0,
  1,
  2,
  FUZZ_LIMITS.maxCount - 1,
  FUZZ_LIMITS.maxCount,
  FUZZ_LIMITS.maxCount + 1,
  65_535,
  65_536,
  65_537,
  2 ** 31 - 1,
  2 ** 31,
  2 ** 32 - 1,
);
/** Any uint32 count, weighted towards the limits and small valid values. */
const anyCount = fc.oneof(
  { weight: 4, arbitrary: limitCount },
  { weight: 4, arbitrary: fc.integer({ min: 1, max: 64 }) },
  { weight: 2, arbitrary: fc.integer({ min: 1, max: FUZZ_LIMITS.maxCount }) },
  { weight: 1, arbitrary: fc.integer({ min: 0, max: 2 ** 32 - 1 }) },
);

const fieldNumber = fc.oneof(fc.integer({ min: 2, max: 20 }), fc.integer({ min: 2, max: 2 ** 29 - 1 }));

/** One unknown field, correctly encoded (a decoder must skip it). */
const unknownField: fc.Arbitrary<number[]> = fc.oneof(
  fc.tuple(fieldNumber, fc.bigInt({ min: 0n, max: (1n << 64n) - 1n })).map(([f, v]) => [...tag(f, 0), ...varint(v)]),
  fc.tuple(fieldNumber, fc.uint8Array({ minLength: 8, maxLength: 8 })).map(([f, b]) => [...tag(f, 1), ...b]),
  fc
    .tuple(fieldNumber, fc.uint8Array({ maxLength: 40 }))
    .map(([f, b]) => [...tag(f, 2), ...varint(BigInt(b.length)), ...b]),
  fc.tuple(fieldNumber, fc.uint8Array({ minLength: 4, maxLength: 4 })).map(([f, b]) => [...tag(f, 5), ...b]),
  // A group (wire types 3 and 4, deprecated but legal to skip), empty or with one varint inside.
  fc.tuple(fieldNumber, fc.boolean()).map(([f, inner]) => [...tag(f, 3), ...(inner ? [0x08, 0x01] : []), ...tag(f, 4)]),
);

/** Field 1 with a wire type other than varint: a decoder must refuse it (or, for length-delimited, may treat it as packed). */
const wrongWireType: fc.Arbitrary<number[]> = fc.oneof(
  fc.uint8Array({ minLength: 8, maxLength: 8 }).map((b) => [0x09, ...b]),
  fc.uint8Array({ minLength: 4, maxLength: 4 }).map((b) => [0x0d, ...b]),
  fc.uint8Array({ maxLength: 12 }).map((b) => [0x0a, ...varint(BigInt(b.length)), ...b]),
  fc.constant<number[]>([0x0b, 0x0c]),
  fc.constantFrom<number[]>([0x0c], [0x0e], [0x0f], [0x0b]),
);

/** Varints a uint32 field cannot hold, or that never end. */
const hugeVarint: fc.Arbitrary<number[]> = fc.oneof(
  fc.bigInt({ min: 1n << 32n, max: (1n << 64n) - 1n }).map((v) => [0x08, ...varint(v)]),
  fc.integer({ min: 10, max: 20 }).map((n) => [0x08, ...new Array<number>(n).fill(0xff), 0x01]),
  fc.integer({ min: 1, max: 12 }).map((n) => [0x08, ...new Array<number>(n).fill(0x80)]),
  // A length-delimited unknown field whose length varint is huge.
  fc.bigInt({ min: 1n << 20n, max: (1n << 64n) - 1n }).map((v) => [0x12, ...varint(v), 0x00]),
);

/** A protobuf body for NextIdsRequest: valid, valid with unknown fields, or broken in one of many ways. */
const protoBody: fc.Arbitrary<{ bytes: Uint8Array; count?: number; kind: string }> = fc.oneof(
  { weight: 6, arbitrary: anyCount.map((count) => ({ bytes: countMessage(count), count, kind: 'valid' })) },
  {
    weight: 3,
    arbitrary: fc
      .tuple(anyCount, fc.array(unknownField, { minLength: 1, maxLength: 4 }), fc.boolean())
      .map(([count, unknown, before]) => {
        const known = [...countMessage(count)];
        const extra = unknown.flat();
        return {
          bytes: new Uint8Array(before ? [...extra, ...known] : [...known, ...extra]),
          count,
          kind: 'unknown-fields',
        };
      }),
  },
  {
    weight: 1,
    // The same field twice: the last one wins (protobuf rules).
    arbitrary: fc.tuple(anyCount, anyCount).map(([a, b]) => ({
      bytes: new Uint8Array([...countMessage(a), 0x08, ...varint(BigInt(b))]),
      count: b,
      kind: 'repeated-field',
    })),
  },
  { weight: 3, arbitrary: fc.uint8Array({ maxLength: 96 }).map((bytes) => ({ bytes, kind: 'random-bytes' })) },
  {
    weight: 2,
    arbitrary: fc.tuple(anyCount, fc.array(unknownField, { maxLength: 3 }), fc.nat()).map(([count, unknown, cut]) => {
      const all = [...countMessage(count), ...unknown.flat()];
      return { bytes: new Uint8Array(all.slice(0, all.length === 0 ? 0 : cut % all.length)), kind: 'truncated' };
    }),
  },
  { weight: 2, arbitrary: wrongWireType.map((b) => ({ bytes: new Uint8Array(b), kind: 'wrong-wire-type' })) },
  { weight: 2, arbitrary: hugeVarint.map((b) => ({ bytes: new Uint8Array(b), kind: 'huge-varint' })) },
  // Field number 0 and numbers above 2^29-1 are invalid tags.
  {
    weight: 1,
    arbitrary: fc
      .constantFrom(
        [0x00, 0x01],
        [0x02, 0x00],
        [0xf8, 0xff, 0xff, 0xff, 0x7f, 0x01],
        [0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x00],
      )
      .map((b) => ({ bytes: new Uint8Array(b), kind: 'bad-tag' })),
  },
);

// ---------------------------------------------------------------------------------------------------------
// JSON bodies

const countJsonValue: fc.Arbitrary<{ text: string; count?: number }> = fc.oneof(
  { weight: 5, arbitrary: anyCount.map((c) => ({ text: String(c), count: c })) },
  { weight: 2, arbitrary: anyCount.map((c) => ({ text: JSON.stringify(String(c)), count: c })) },
  {
    weight: 4,
    arbitrary: fc
      .constantFrom<string>(
        '-1',
        '-4096',
        '1.5',
        '4096.5',
        '0.0000001',
        '1e3',
        '1e400',
        '-0',
        '4294967296',
        '18446744073709551616',
        '99999999999999999999999999999999',
        'null',
        'true',
        'false',
        '[]',
        '[1]',
        '{}',
        '{"count":1}',
        '"abc"',
        '""',
        '" 3"',
        '"0x10"',
        '"1e3"',
        '"-1"',
        'NaN',
        'Infinity',
        '"Infinity"',
        '"NaN"',
        '01',
        '+1',
        '.5',
        '"\\u0000"',
      )
      .map((text) => ({ text })),
  },
  { weight: 2, arbitrary: fc.double().map((d) => ({ text: Number.isFinite(d) ? JSON.stringify(d) : String(d) })) },
  { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => ({ text: JSON.stringify(v) ?? 'null' })) },
);

const junkKey = fc.oneof(
  fc.constantFrom('extra', 'Count', 'COUNT', 'count ', '__proto__', 'constructor', 'blocks', '@type', ''),
  fc.string({ maxLength: 12 }),
);

const jsonBody: fc.Arbitrary<{ bytes: Uint8Array; count?: number; kind: string }> = fc.oneof(
  {
    weight: 6,
    arbitrary: countJsonValue.map((v) => ({ bytes: enc.encode(`{"count":${v.text}}`), count: v.count, kind: 'count' })),
  },
  {
    weight: 3,
    arbitrary: fc
      .tuple(countJsonValue, fc.dictionary(junkKey, fc.jsonValue({ maxDepth: 4 }), { minKeys: 1, maxKeys: 4 }))
      .map(([v, extra]) => {
        const rest = Object.entries(extra)
          .filter(([k]) => k !== 'count')
          .map(([k, x]) => `${JSON.stringify(k)}:${JSON.stringify(x) ?? 'null'}`);
        return {
          bytes: enc.encode(`{${[...rest, `"count":${v.text}`].join(',')}}`),
          count: v.count,
          kind: 'unknown-fields',
        };
      }),
  },
  { weight: 1, arbitrary: fc.constant({ bytes: enc.encode('{}'), count: 0, kind: 'empty-object' }) },
  { weight: 2, arbitrary: fc.json({ maxDepth: 4 }).map((t) => ({ bytes: enc.encode(t), kind: 'random-json' })) },
  {
    weight: 2,
    arbitrary: fc.string({ maxLength: 64, unit: 'binary' }).map((t) => ({ bytes: enc.encode(t), kind: 'random-text' })),
  },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }).map((bytes) => ({ bytes, kind: 'random-bytes' })) },
  {
    weight: 1,
    // Deep nesting: a recursive parser must not blow its stack.
    arbitrary: fc.integer({ min: 100, max: 5_000 }).map((depth) => ({
      bytes: enc.encode(`{"count":1,"x":${'['.repeat(depth)}${']'.repeat(depth)}}`),
      kind: 'deep-nesting',
    })),
  },
  {
    weight: 1,
    arbitrary: fc.tuple(anyCount, fc.nat()).map(([c, cut]) => {
      const t = `{"count":${c}}`;
      return { bytes: enc.encode(t.slice(0, cut % t.length)), kind: 'truncated' };
    }),
  },
  {
    weight: 1,
    arbitrary: fc
      .tuple(anyCount, anyCount)
      .map(([a, b]) => ({ bytes: enc.encode(`{"count":${a},"count":${b}}`), kind: 'duplicate-key' })),
  },
);

// ---------------------------------------------------------------------------------------------------------
// gRPC / gRPC-Web framing

interface Framed {
  readonly body: Uint8Array;
  /** True when the body is exactly one uncompressed frame holding `message`. */
  readonly wellFramed: boolean;
  readonly kind: string;
}

function frame(flags: number, length: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(5 + payload.length);
  out[0] = flags;
  new DataView(out.buffer).setUint32(1, length >>> 0);
  out.set(payload, 5);
  return out;
}

function framings(message: Uint8Array): fc.Arbitrary<Framed> {
  return fc.oneof(
    { weight: 8, arbitrary: fc.constant({ body: frame(0, message.length, message), wellFramed: true, kind: 'frame' }) },
    {
      weight: 2,
      arbitrary: fc
        .integer({ min: -5, max: 64 })
        .filter((d) => d !== 0)
        .map((d) => ({
          body: frame(0, Math.max(0, message.length + d), message),
          wellFramed: false,
          kind: d > 0 ? 'length-beyond-body' : 'length-short-of-body',
        })),
    },
    {
      weight: 1,
      arbitrary: fc
        .constantFrom(0xffffffff, 0x7fffffff, 65_537, 1 << 24)
        .map((len) => ({ body: frame(0, len, message), wellFramed: false, kind: 'huge-length-prefix' })),
    },
    {
      weight: 2,
      arbitrary: fc.integer({ min: 0, max: 4 }).map((n) => ({
        body: frame(0, message.length, message).subarray(0, n),
        wellFramed: false,
        kind: 'truncated-header',
      })),
    },
    {
      weight: 1,
      arbitrary: fc.constant({ body: frame(1, message.length, message), wellFramed: false, kind: 'compressed-flag' }),
    },
    {
      weight: 1,
      arbitrary: fc
        .integer({ min: 2, max: 255 })
        .map((f) => ({ body: frame(f, message.length, message), wellFramed: false, kind: 'odd-flags' })),
    },
    {
      weight: 1,
      arbitrary: fc.constant({
        body: new Uint8Array([...frame(0, message.length, message), ...frame(0, message.length, message)]),
        wellFramed: false,
        kind: 'two-frames',
      }),
    },
    {
      weight: 1,
      arbitrary: fc.uint8Array({ minLength: 1, maxLength: 8 }).map((tail) => ({
        body: new Uint8Array([...frame(0, message.length, message), ...tail]),
        wellFramed: false,
        kind: 'trailing-garbage',
      })),
    },
    { weight: 1, arbitrary: fc.constant({ body: new Uint8Array(0), wellFramed: false, kind: 'empty-body' }) },
  );
}

// ---------------------------------------------------------------------------------------------------------
// Headers

const printable = fc.string({
  unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)),
  maxLength: 40,
});
const token = fc.string({
  unit: fc.constantFrom(...'abcdefghijklmnopqrstuvwxyz0123456789-_'.split('')),
  minLength: 1,
  maxLength: 20,
});

const timeoutHeaders: fc.Arbitrary<Record<string, string>> = fc.oneof(
  fc.constant({}),
  fc
    .constantFrom('1', '100', '60000', '0', '-1', 'abc', '1.5', '99999999999', '', ' ')
    .map((v) => ({ 'connect-timeout-ms': v })),
  fc
    .constantFrom('1S', '100m', '10H', '99999999H', '1', 'S', 'abc', '-1S', '123456789S', '0n')
    .map((v) => ({ 'grpc-timeout': v })),
  fc.constantFrom('1', '2', '0', 'abc', '').map((v) => ({ 'connect-protocol-version': v })),
);

const junkHeaders: fc.Arbitrary<Record<string, string>> = fc.oneof(
  { weight: 3, arbitrary: fc.constant({}) },
  {
    weight: 1,
    arbitrary: fc.dictionary(
      token.map((t) => `x-${t}`),
      printable,
      { maxKeys: 8 },
    ),
  },
  // Many headers: the h2 server takes at most 64 pairs, node:http 16 KiB.
  {
    weight: 1,
    arbitrary: fc
      .integer({ min: 20, max: 120 })
      .map((n) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`x-many-${i}`, 'v'.repeat(i % 50)]))),
  },
  { weight: 1, arbitrary: fc.integer({ min: 4_000, max: 40_000 }).map((n) => ({ 'x-long': 'y'.repeat(n) })) },
);

const transport: fc.Arbitrary<'h1' | 'h2'> = fc.constantFrom('h1', 'h2');

// ---------------------------------------------------------------------------------------------------------
// Categories

const inRange = (count: number | undefined): count is number =>
  count !== undefined && count >= 1 && count <= FUZZ_LIMITS.maxCount;

const connectProto: fc.Arbitrary<WireCase> = fc
  .tuple(
    transport,
    protoBody,
    fc.constantFrom('none', 'none', 'none', 'gzip', 'gzip-garbage', 'identity', 'br-garbage', 'zstd'),
    fc.boolean(),
  )
  .map(([t, body, compression, versionHeader]) => {
    const headers: Record<string, string> = { 'content-type': 'application/proto' };
    if (versionHeader) headers['connect-protocol-version'] = '1';
    let bytes = body.bytes;
    if (compression === 'gzip') {
      headers['content-encoding'] = 'gzip';
      bytes = gzipSync(bytes);
    } else if (compression === 'gzip-garbage') {
      headers['content-encoding'] = 'gzip';
    } else if (compression === 'br-garbage') {
      headers['content-encoding'] = 'br';
      bytes = new Uint8Array([0xff, ...bytes]);
    } else if (compression !== 'none') {
      headers['content-encoding'] = compression;
    }
    const decodable = compression === 'none' || compression === 'identity' || compression === 'gzip';
    return {
      category: `connect-proto/${body.kind}`,
      transport: t,
      method: 'POST',
      path: NEXT_IDS,
      headers,
      body: bytes,
      ...(decodable ? { message: { format: 'binary' as const, bytes: body.bytes } } : {}),
      ...(decodable && body.kind !== 'random-bytes' && inRange(body.count) ? { mustServe: body.count } : {}),
    };
  });

const connectJson: fc.Arbitrary<WireCase> = fc
  .tuple(
    transport,
    jsonBody,
    fc.constantFrom(
      'application/json',
      'application/json',
      'application/json; charset=utf-8',
      'application/json;charset=UTF-8',
      'Application/JSON',
    ),
    fc.boolean(),
  )
  .map(([t, body, contentType, gzip]) => ({
    category: `connect-json/${body.kind}`,
    transport: t,
    method: 'POST',
    path: NEXT_IDS,
    headers: { 'content-type': contentType, ...(gzip ? { 'content-encoding': 'gzip' } : {}) },
    body: gzip ? gzipSync(body.bytes) : body.bytes,
    message: { format: 'json' as const, bytes: body.bytes },
    // Only the plain forms: the exact content types the Connect protocol names, and a count that is a JSON number or decimal string.
    ...(body.kind === 'count' && inRange(body.count) && contentType !== 'Application/JSON'
      ? { mustServe: body.count }
      : {}),
  }));

const grpcLike = (web: boolean): fc.Arbitrary<WireCase> =>
  fc
    .tuple(
      web ? transport : fc.constantFrom<'h1' | 'h2'>('h2', 'h2', 'h2', 'h1'),
      fc.oneof(
        { weight: 4, arbitrary: protoBody.map((b) => ({ ...b, format: 'binary' as const })) },
        { weight: 1, arbitrary: jsonBody.map((b) => ({ ...b, format: 'json' as const })) },
      ),
      fc.constantFrom(undefined, undefined, undefined, 'identity', 'gzip', 'snappy', ''),
      fc.oneof({ weight: 3, arbitrary: fc.constant({}) }, { weight: 1, arbitrary: timeoutHeaders }),
      fc.boolean(),
    )
    .chain(([t, body, encoding, timeouts, plusProto]) =>
      framings(body.bytes).map((framed): WireCase => {
        const base = web ? 'application/grpc-web' : 'application/grpc';
        const contentType = body.format === 'json' ? `${base}+json` : plusProto ? `${base}+proto` : base;
        const headers: Record<string, string> = { 'content-type': contentType, ...timeouts };
        if (!web) headers['te'] = 'trailers';
        if (encoding !== undefined) headers['grpc-encoding'] = encoding;
        let payload = framed.body;
        if (encoding === 'gzip' && framed.wellFramed) {
          const z = gzipSync(body.bytes);
          payload = frame(1, z.length, z);
        }
        const decodable =
          framed.wellFramed && (encoding === undefined || encoding === 'identity' || encoding === 'gzip');
        const wellFormed =
          body.format === 'binary'
            ? body.kind === 'valid' || body.kind === 'unknown-fields' || body.kind === 'repeated-field'
            : body.kind === 'count';
        const valid = decodable && Object.keys(timeouts).length === 0 && wellFormed;
        return {
          category: `${web ? 'grpc-web' : 'grpc'}/${framed.kind}/${body.format === 'json' ? 'json-' : ''}${body.kind}`,
          transport: t,
          method: 'POST',
          path: NEXT_IDS,
          headers,
          body: payload,
          ...(decodable ? { message: { format: body.format, bytes: body.bytes } } : {}),
          ...(valid && inRange(body.count) ? { mustServe: body.count } : {}),
        };
      }),
    );

const wrongContentType: fc.Arbitrary<WireCase> = fc
  .tuple(
    transport,
    fc.oneof(
      fc.constantFrom(
        undefined,
        '',
        'text/plain',
        'application/xml',
        'application/x-www-form-urlencoded',
        'multipart/form-data; boundary=x',
        'application/protobuf',
        'application/x-protobuf',
        'application/proto; charset=utf-8',
        'application/json; charset=latin1',
        'application/connect+proto',
        'application/connect+json',
        'application/grpc-web-text',
        'application/grpc+xml',
        'application/grpc-web+thrift',
        'application/',
        '*/*',
        'application/json, application/proto',
      ),
      printable,
    ),
    fc.oneof(protoBody, jsonBody),
    fc.constantFrom(NEXT_IDS, NEXT_IDS, GET_STATUS, HEALTH_CHECK),
  )
  .map(([t, contentType, body, path]) => ({
    category: 'content-type',
    transport: t,
    method: 'POST',
    path,
    headers: contentType === undefined ? ({} as Record<string, string>) : { 'content-type': contentType },
    body: body.bytes,
  }));

const pathSegment = fc.oneof(
  fc.constantFrom(
    'idgen.v1.IdGenerator/NextIdz',
    'idgen.v1.IdGenerator/DeleteEverything',
    'idgen.v1.IdGenerator/',
    'idgen.v1.IdGenerator',
    'idgen.v1.IdGenerator/NextIds/',
    'idgen.v1.IdGenerator//NextIds',
    'IDGEN.V1.IDGENERATOR/NEXTIDS',
    'idgen.v2.IdGenerator/NextIds',
    'grpc.health.v1.Health/Watch',
    'grpc.health.v1.Health/Nope',
    'grpc.reflection.v1.ServerReflection/ServerReflectionInfo',
    '',
    'healthz/',
    'readyz?x=1',
    'metrics',
    '..%2F..%2Fetc%2Fpasswd',
    '%00',
    '%ff%fe',
    'idgen.v1.IdGenerator/NextIds?count=3',
    'idgen.v1.IdGenerator/NextIds#frag',
  ),
  fc.array(token, { minLength: 1, maxLength: 4 }).map((parts) => parts.join('/')),
  fc.string({ maxLength: 30 }).map((s) => encodeURIComponent(s)),
  fc.integer({ min: 1_000, max: 12_000 }).map((n) => 'a'.repeat(n)),
);

const methodAndPath: fc.Arbitrary<WireCase> = fc
  .tuple(
    transport,
    fc.constantFrom('GET', 'GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD'),
    fc.oneof(
      { weight: 3, arbitrary: pathSegment.map((p) => `/${p}`) },
      {
        weight: 2,
        arbitrary: fc.constantFrom(
          NEXT_IDS,
          GET_STATUS,
          HEALTH_CHECK,
          HEALTH_LIST,
          HEALTH_WATCH,
          '/healthz',
          '/readyz',
        ),
      },
      {
        weight: 1,
        // Connect GET requests (idempotent methods only: NextIds is not one).
        arbitrary: fc
          .tuple(fc.constantFrom(NEXT_IDS, GET_STATUS), anyCount, fc.constantFrom('json', 'proto', 'xml'))
          .map(
            ([p, c, e]) =>
              `${p}?connect=v1&encoding=${e}&message=${encodeURIComponent(e === 'json' ? `{"count":${c}}` : Buffer.from(countMessage(c)).toString('base64url'))}${e === 'proto' ? '&base64=1' : ''}`,
          ),
      },
    ),
    fc.constantFrom(undefined, 'application/json', 'application/proto', 'application/grpc', 'application/grpc-web'),
    fc.oneof(
      fc.constant(new Uint8Array(0)),
      protoBody.map((b) => b.bytes),
      jsonBody.map((b) => b.bytes),
    ),
  )
  .map(([t, method, path, contentType, body]) => ({
    category: `method-path/${method}`,
    transport: t,
    method,
    path,
    headers:
      contentType === undefined
        ? {}
        : { 'content-type': contentType, ...(contentType === 'application/grpc' ? { te: 'trailers' } : {}) },
    // Node's HTTP/1.1 client will not send a body with HEAD; keep the case about the method.
    body: method === 'HEAD' ? new Uint8Array(0) : body,
  }));

/** Bodies above --max-body-bytes, in every framing. */
const oversized: fc.Arbitrary<WireCase> = fc
  .tuple(
    transport,
    fc.integer({ min: FUZZ_LIMITS.maxBodyBytes + 1, max: 4 * FUZZ_LIMITS.maxBodyBytes }),
    fc.constantFrom('json', 'proto', 'grpc', 'grpc-web', 'proto-gzip'),
  )
  .map(([t, size, kind]): WireCase => {
    const pad = size - 16;
    let headers: Record<string, string>;
    let body: Uint8Array;
    if (kind === 'json') {
      headers = { 'content-type': 'application/json' };
      body = enc.encode(`{"count":1,"pad":"${'x'.repeat(pad)}"}`);
    } else {
      // count=1 and an unknown length-delimited field 2 carrying the padding.
      const message = new Uint8Array([0x08, 0x01, 0x12, ...varint(BigInt(pad)), ...new Uint8Array(pad).fill(0x78)]);
      if (kind === 'proto') {
        headers = { 'content-type': 'application/proto' };
        body = message;
      } else if (kind === 'proto-gzip') {
        // Small on the wire, large once inflated: the limit applies to the decompressed size.
        headers = { 'content-type': 'application/proto', 'content-encoding': 'gzip' };
        body = gzipSync(message);
      } else {
        headers = {
          'content-type': kind === 'grpc' ? 'application/grpc' : 'application/grpc-web+proto',
          ...(kind === 'grpc' ? { te: 'trailers' } : {}),
        };
        body = frame(0, message.length, message);
      }
    }
    return {
      category: `oversized/${kind}`,
      transport: kind === 'grpc' ? 'h2' : t,
      method: 'POST',
      path: NEXT_IDS,
      headers,
      body,
    };
  });

/** Valid requests with odd headers: timeouts, protocol versions, junk, many or long headers. */
const oddHeaders: fc.Arbitrary<WireCase> = fc
  .tuple(transport, fc.integer({ min: 1, max: 16 }), timeoutHeaders, junkHeaders, fc.constantFrom('json', 'proto'))
  .map(([t, count, timeouts, junk, kind]) => ({
    category: 'headers',
    transport: t,
    method: 'POST',
    path: NEXT_IDS,
    headers: { ...junk, ...timeouts, 'content-type': kind === 'json' ? 'application/json' : 'application/proto' },
    body: kind === 'json' ? enc.encode(`{"count":${count}}`) : countMessage(count),
    message: {
      format: kind === 'json' ? ('json' as const) : ('binary' as const),
      bytes: kind === 'json' ? enc.encode(`{"count":${count}}`) : countMessage(count),
    },
  }));

/** Health and status RPCs with junk bodies. */
const otherRpcs: fc.Arbitrary<WireCase> = fc
  .tuple(
    transport,
    fc.constantFrom(GET_STATUS, HEALTH_CHECK, HEALTH_LIST),
    fc.constantFrom('json', 'proto'),
    fc.oneof(fc.constant(''), fc.constant('idgen.v1.IdGenerator'), fc.string({ maxLength: 300 })),
    fc.uint8Array({ maxLength: 32 }),
    fc.boolean(),
  )
  .map(([t, path, kind, service, junk, useJunk]) => {
    let body: Uint8Array;
    if (kind === 'json') body = useJunk ? junk : enc.encode(path === HEALTH_CHECK ? JSON.stringify({ service }) : '{}');
    else
      body = useJunk
        ? junk
        : path === HEALTH_CHECK
          ? new Uint8Array([0x0a, ...varint(BigInt(enc.encode(service).length)), ...enc.encode(service)])
          : new Uint8Array(0);
    return {
      category: `other-rpc${path.slice(path.lastIndexOf('/'))}`,
      transport: t,
      method: 'POST',
      path,
      headers: { 'content-type': kind === 'json' ? 'application/json' : 'application/proto' },
      body,
    };
  });

/** Raw bytes on a TCP connection: malformed HTTP/1.1, bad chunking, lying lengths, a fake HTTP/2 preface. */
const rawH1: fc.Arbitrary<WireCase> = fc
  .oneof(
    fc
      .uint8Array({ minLength: 3, maxLength: 200 })
      .map((b) => ({ bytes: new Uint8Array([...b, 13, 10, 13, 10]), kind: 'random-bytes' })),
    fc.tuple(printable, printable).map(([a, b]) => ({
      bytes: enc.encode(`${a} ${b} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`),
      kind: 'bad-request-line',
    })),
    fc
      .constantFrom(
        `POST ${NEXT_IDS} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\nzz\r\n{"count":1}\r\n0\r\n\r\n`,
        `POST ${NEXT_IDS} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\nb\r\n{"count":1}\r\n0\r\n\r\n`,
        `POST ${NEXT_IDS} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 11\r\ncontent-length: 12\r\nconnection: close\r\n\r\n{"count":1}`,
        `POST ${NEXT_IDS} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 11\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n0\r\n\r\n`,
        `POST ${NEXT_IDS} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: -1\r\nconnection: close\r\n\r\n`,
        `POST ${NEXT_IDS} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 99999999999999999999\r\nconnection: close\r\n\r\n`,
        `POST ${NEXT_IDS} HTTP/1.0\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"count":1}`,
        `POST ${NEXT_IDS} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"count":1}POST ${NEXT_IDS} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 11\r\nconnection: close\r\n\r\n{"count":2}`,
        `GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`,
        `GET /readyz HTTP/2.0\r\nhost: x\r\nconnection: close\r\n\r\n`,
        `GET /readyz HTTP/9.9\r\nhost: x\r\nconnection: close\r\n\r\n`,
        `POST ${NEXT_IDS} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nexpect: 100-continue\r\ncontent-length: 11\r\nconnection: close\r\n\r\n{"count":1}`,
        `POST ${NEXT_IDS} HTTP/1.1\r\nhost: x\r\nupgrade: h2c\r\nconnection: Upgrade, HTTP2-Settings, close\r\nhttp2-settings: AAMAAABkAAQAAP__\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"count":1}`,
        'PRI * HTTP/1.1\r\nhost: x\r\n\r\n',
        'PRIVATE / HTTP/1.1\r\n\r\n',
        '\r\n\r\n\r\n\r\n',
        `POST ${NEXT_IDS} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nbad header line\r\nconnection: close\r\n\r\n`,
        `POST ${NEXT_IDS} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\x00\r\nconnection: close\r\n\r\n`,
      )
      .map((s) => ({ bytes: new Uint8Array(Buffer.from(s, 'latin1')), kind: 'malformed-http' })),
  )
  .map(({ bytes, kind }) => ({
    category: `raw-h1/${kind}`,
    transport: 'raw' as const,
    method: '',
    path: '',
    headers: {},
    body: new Uint8Array(0),
    raw: bytes,
  }));

const PREFACE = 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n';
const EMPTY_SETTINGS = '\x00\x00\x00\x04\x00\x00\x00\x00\x00';

/**
 * Raw HTTP/2 after a correct preface: frames that are connection errors (RFC 9113), each answered with GOAWAY.
 * (Not generated: a frame header announcing a long payload that never comes; that is a connection still
 * receiving a frame, held until the idle timeout like any idle connection.)
 */
const rawH2: fc.Arbitrary<WireCase> = fc
  .constantFrom(
    ['headers-on-stream-0', `${PREFACE}${EMPTY_SETTINGS}\x00\x00\x01\x01\x05\x00\x00\x00\x00\x82`],
    ['window-update-0', `${PREFACE}${EMPTY_SETTINGS}\x00\x00\x04\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00`],
    ['settings-bad-length', `${PREFACE}\x00\x00\x05\x04\x00\x00\x00\x00\x00abcde`],
    ['bad-hpack', `${PREFACE}${EMPTY_SETTINGS}\x00\x00\x04\x01\x05\x00\x00\x00\x01\xff\xff\xff\xff`],
    ['data-on-idle-stream', `${PREFACE}${EMPTY_SETTINGS}\x00\x00\x04\x00\x00\x00\x00\x00\x01abcd`],
    ['frame-above-max-size', `${PREFACE}${EMPTY_SETTINGS}\x01\x00\x00\x00\x00\x00\x00\x00\x01${'x'.repeat(100)}`],
    ['no-settings-first', `${PREFACE}garbage-after-preface\r\n\r\n`],
    ['ping-bad-length', `${PREFACE}${EMPTY_SETTINGS}\x00\x00\x03\x06\x00\x00\x00\x00\x00abc`],
  )
  .map(([kind, text]) => ({
    category: `raw-h2/${kind}`,
    transport: 'raw' as const,
    method: '',
    path: '',
    headers: {},
    body: new Uint8Array(0),
    raw: new Uint8Array(Buffer.from(text, 'latin1')),
  }));

/** Every generated request, weighted towards the RPC bodies. */
export const wireCase: fc.Arbitrary<WireCase> = fc.oneof(
  { weight: 14, arbitrary: connectProto },
  { weight: 14, arbitrary: connectJson },
  { weight: 10, arbitrary: grpcLike(false) },
  { weight: 7, arbitrary: grpcLike(true) },
  { weight: 5, arbitrary: wrongContentType },
  { weight: 6, arbitrary: methodAndPath },
  { weight: 2, arbitrary: oversized },
  { weight: 4, arbitrary: oddHeaders },
  { weight: 3, arbitrary: otherRpcs },
  { weight: 2, arbitrary: rawH1 },
  { weight: 1, arbitrary: rawH2 },
);

/** A short description of a case for failure messages (bodies as hex, cut). */
export function describeCase(c: WireCase): string {
  const hex = (b: Uint8Array): string =>
    Buffer.from(b.subarray(0, 64)).toString('hex') + (b.length > 64 ? `…(${b.length} bytes)` : '');
  if (c.raw !== undefined)
    return `${c.category} raw=${JSON.stringify(Buffer.from(c.raw.subarray(0, 200)).toString('latin1'))}`;
  const headers = Object.fromEntries(
    Object.entries(c.headers).map(([k, v]) => [k, v.length > 60 ? `${v.slice(0, 60)}…(${v.length})` : v]),
  );
  return `${c.category} ${c.transport} ${c.method} ${c.path.slice(0, 120)} ${JSON.stringify(headers)} body=${hex(c.body)}`;
}
