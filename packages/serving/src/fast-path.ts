import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { constants as h2, type ServerHttp2Stream } from 'node:http2';
import { fromBinary, fromJsonString } from '@bufbuild/protobuf';
import { Code, ConnectError } from '@connectrpc/connect';
import { codeToHttpStatus, errorToJsonBytes } from '@connectrpc/connect/protocol-connect';
import { encodeHeaders, ErrorCode, parseContentLength, type H2Stream } from '@idgen/h2';
import { NextIdsRequestSchema } from '@idgen/proto';
import type { WireBlock } from './service.js';

/** The RPC path the fast path answers. */
export const NEXT_IDS_PATH = '/idgen.v1.IdGenerator/NextIds';

/** Options of {@link createNextIdsFastPath}. */
export interface FastPathOptions {
  /**
   * NextIds without the protocol (service.ts `createNextIds`): blocks now, or later (a promise) when they need
   * a millisecond still to come; throws (or rejects with) a ConnectError. `owner`: the connection, for fairness.
   */
  readonly nextIds: (
    count: number,
    owner?: object,
    abandoned?: () => boolean,
  ) => readonly WireBlock[] | Promise<readonly WireBlock[]>;
  readonly maxBodyBytes: number;
  /** Records one call for metrics: its code (`ok`, `invalid_argument`, …) and start (hrtime ns). */
  readonly record?: (code: Code | undefined, startNs: bigint, ids: number) => void;
}

/** Answers requests for {@link path} before connect-es; each returns false for a request it leaves to connect-es. */
export interface NextIdsFastPath {
  readonly path: string;
  /** An HTTP/1.1 request (node:http). */
  http1(req: IncomingMessage, res: ServerResponse): boolean;
  /** An HTTP/2 stream, on node:http2's core API (not its compat request/response objects). */
  http2(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): boolean;
  /** An HTTP/2 stream of @idgen/h2 (`--http2-server idgen`). Sets the stream's `ondata` and `onend`, not `onclose`. */
  h2(stream: H2Stream): boolean;
}

type Protocol = 'connect-json' | 'connect-proto' | 'grpc';

/**
 * NextIds for the common requests, answered straight on node:http/http2 instead of through connect-es.
 *
 * Why: on this stack connect-es spends most of a small call on per-request machinery (abort controllers and
 * their DOMExceptions, async iterables, promise chains), not on minting; measured on 2 cores, a NextIds(1)
 * through it ran at ~15% of a bare node:http2 handler. The budget is ≥ 60%. The wire formats here
 * are small and fixed (docs/design.md §6), so they are written by hand and checked against the generated clients by
 * the integration suites (apps/server/test/cluster.spec.ts), which talk to this path over all three protocols.
 *
 * HTTP/2 requests are answered on node:http2's core stream API: its compat layer (an Http2ServerRequest and
 * Http2ServerResponse with their streams and listeners per request) cost about a third of a NextIds(1), and
 * `bench:server`'s bare ceiling answers on the core API too.
 *
 * Taken only for: POST, Connect unary with `application/json` or `application/proto` and no compression, or
 * gRPC (`application/grpc[+proto]`) over HTTP/2 with no compression. Everything else (gRPC-Web, compressed
 * bodies, GET, other methods) returns `false` and goes to connect-es, so behaviour there is unchanged.
 */
export function createNextIdsFastPath(options: FastPathOptions): NextIdsFastPath {
  const max = options.maxBodyBytes;
  const record = options.record;
  /**
   * Mints for a request body and calls `answer` with the blocks or the error to answer (a body the caller got
   * wrong, or a fence): at once when the current millisecond can serve it, else from the mint scheduler's timer.
   */
  const mint = (
    protocol: Protocol,
    body: Buffer,
    owner: object,
    abandoned: () => boolean,
    answer: (r: readonly WireBlock[] | ConnectError) => void,
  ): void => {
    let minted: readonly WireBlock[] | Promise<readonly WireBlock[]>;
    try {
      minted = options.nextIds(parseCount(protocol, body), owner, abandoned);
    } catch (e) {
      answer(ConnectError.from(e));
      return;
    }
    if (minted instanceof Promise) minted.then(answer, (e: unknown) => answer(ConnectError.from(e)));
    else answer(minted);
  };

  const http1 = (req: IncomingMessage, res: ServerResponse): boolean => {
    if (req.method !== 'POST') return false;
    const protocol = protocolOf(req.headers, false);
    if (protocol === undefined) return false;
    const start = process.hrtime.bigint();
    const length = req.headers['content-length'];
    const declared = length === undefined ? 0 : parseContentLength(length);
    if (declared < 0) {
      // Not 1*DIGIT (RFC 9110 §8.6): the request's framing cannot be trusted, so 400 and the connection closed.
      dropRestHttp1(req, res);
      res.writeHead(400, { 'content-length': 0 });
      res.end();
      return true;
    }
    if (declared > max) {
      dropRestHttp1(req, res);
      failHttp1(res, protocol, tooLarge(declared, max), start, record);
      return true;
    }
    const body = new BodyReader(max);
    req.on('data', (chunk: Buffer) => {
      if (body.over || body.add(chunk)) return;
      dropRestHttp1(req, res);
      failHttp1(res, protocol, tooLarge(undefined, max), start, record);
    });
    req.on('end', () => {
      if (body.over) return;
      mint(
        protocol,
        body.bytes(),
        req.socket,
        () => res.destroyed,
        (blocks) => answerHttp1(res, protocol, blocks, start),
      );
    });
    return true;
  };

  const answerHttp1 = (
    res: ServerResponse,
    protocol: Protocol,
    blocks: readonly WireBlock[] | ConnectError,
    start: bigint,
  ): void => {
    if (res.destroyed) return; // the caller went away while the IDs waited for their millisecond
    if (blocks instanceof ConnectError) {
      failHttp1(res, protocol, blocks, start, record);
      return;
    }
    if (protocol === 'connect-json') {
      const text = jsonResponse(blocks);
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
      res.end(text);
    } else {
      const bytes = binaryResponse(blocks, 0);
      res.writeHead(200, { 'content-type': 'application/proto', 'content-length': bytes.length });
      res.end(bytes);
    }
    record?.(undefined, start, idsIn(blocks));
  };

  const http2 = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders): boolean => {
    if (headers[':method'] !== 'POST') return false;
    const protocol = protocolOf(headers, true);
    if (protocol === undefined) return false;
    const start = process.hrtime.bigint();
    const length = headers['content-length'];
    const declared = length === undefined ? 0 : parseContentLength(length);
    if (declared < 0) {
      stream.close(h2.NGHTTP2_PROTOCOL_ERROR); // malformed (RFC 9110 §8.6, RFC 9113 §8.1.1); nghttp2 refuses it first
      return true;
    }
    if (declared > max) {
      failHttp2(stream, protocol, tooLarge(declared, max), start, record, true);
      return true;
    }
    const body = new BodyReader(max);
    stream.on('data', (chunk: Buffer) => {
      if (body.over || body.add(chunk)) return;
      failHttp2(stream, protocol, tooLarge(undefined, max), start, record, true);
    });
    stream.on('end', () => {
      if (body.over) return;
      mint(
        protocol,
        body.bytes(),
        stream.session ?? stream,
        () => stream.closed || stream.destroyed,
        (blocks) => answerHttp2(stream, protocol, blocks, start),
      );
    });
    return true;
  };

  const answerHttp2 = (
    stream: ServerHttp2Stream,
    protocol: Protocol,
    blocks: readonly WireBlock[] | ConnectError,
    start: bigint,
  ): void => {
    // The caller reset the stream while we minted: nothing to answer, and nothing was handed out.
    if (stream.closed || stream.destroyed) return;
    if (blocks instanceof ConnectError) {
      failHttp2(stream, protocol, blocks, start, record, false);
      return;
    }
    if (protocol === 'grpc') {
      const bytes = binaryResponse(blocks, 5);
      bytes.writeUInt32BE(bytes.length - 5, 1);
      stream.respond(
        { [h2.HTTP2_HEADER_STATUS]: 200, 'content-type': 'application/grpc+proto' },
        { waitForTrailers: true },
      );
      stream.on('wantTrailers', sendGrpcOk);
      stream.end(bytes);
    } else if (protocol === 'connect-proto') {
      const bytes = binaryResponse(blocks, 0);
      stream.respond({
        [h2.HTTP2_HEADER_STATUS]: 200,
        'content-type': 'application/proto',
        'content-length': bytes.length,
      });
      stream.end(bytes);
    } else {
      const text = jsonResponse(blocks);
      stream.respond({
        [h2.HTTP2_HEADER_STATUS]: 200,
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(text),
      });
      stream.end(text);
    }
    record?.(undefined, start, idsIn(blocks));
  };

  const h2Stream = (stream: H2Stream): boolean => {
    if (stream.method !== 'POST') return false;
    const headers = stream.headers;
    const protocol = protocolOf(headers, true);
    if (protocol === undefined) return false;
    const start = process.hrtime.bigint();
    const length = headers['content-length'];
    const declared = length === undefined ? 0 : parseContentLength(length);
    if (declared < 0) {
      stream.reset(ErrorCode.PROTOCOL_ERROR); // malformed (RFC 9110 §8.6); @idgen/h2 already refuses it first
      return true;
    }
    if (declared > max) {
      failH2(stream, protocol, tooLarge(declared, max), start, record);
      return true;
    }
    const body = new BodyReader(max);
    stream.ondata = (chunk: Buffer): void => {
      if (body.over || body.add(chunk)) return;
      failH2(stream, protocol, tooLarge(undefined, max), start, record);
    };
    stream.onend = (): void => {
      if (body.over) return;
      mint(
        protocol,
        body.bytes(),
        stream.connectionKey,
        () => stream.isClosed,
        (blocks) => answerH2(stream, protocol, blocks, start),
      );
    };
    return true;
  };

  const answerH2 = (
    stream: H2Stream,
    protocol: Protocol,
    blocks: readonly WireBlock[] | ConnectError,
    start: bigint,
  ): void => {
    if (stream.isClosed) return; // reset (or its deadline answered) while the IDs waited for their millisecond
    if (blocks instanceof ConnectError) {
      failH2(stream, protocol, blocks, start, record);
      return;
    }
    if (protocol === 'grpc') {
      const bytes = binaryResponse(blocks, 5);
      bytes.writeUInt32BE(bytes.length - 5, 1);
      stream.respond(200, GRPC_OK_HEADERS);
      stream.end(bytes, GRPC_OK_TRAILERS);
    } else if (protocol === 'connect-proto') {
      const bytes = binaryResponse(blocks, 0);
      stream.respond(200, connectHeaders('application/proto', bytes.length));
      stream.end(bytes);
    } else {
      const bytes = Buffer.from(jsonResponse(blocks));
      stream.respond(200, connectHeaders('application/json', bytes.length));
      stream.end(bytes);
    }
    record?.(undefined, start, idsIn(blocks));
  };

  return { path: NEXT_IDS_PATH, http1, http2, h2: h2Stream };
}

// Response header blocks of the fast path on @idgen/h2, HPACK-encoded once (not per request).
const GRPC_OK_HEADERS = encodeHeaders([
  [':status', '200'],
  ['content-type', 'application/grpc+proto'],
]);
const GRPC_OK_TRAILERS = encodeHeaders([['grpc-status', '0']]);
const connectBlocks = new Map<string, Buffer>();
/** The block for a Connect answer of `length` bytes; NextIds answers come in few lengths, so they are kept. */
function connectHeaders(type: string, length: number): Buffer {
  const key = type + length;
  const kept = connectBlocks.get(key);
  if (kept !== undefined) return kept;
  const block = encodeHeaders([
    [':status', '200'],
    ['content-type', type],
    ['content-length', String(length)],
  ]);
  if (connectBlocks.size < 256) connectBlocks.set(key, block);
  return block;
}

/** `this` is the stream whose body ended: the gRPC status of a success travels in trailers. */
function sendGrpcOk(this: ServerHttp2Stream): void {
  this.sendTrailers({ 'grpc-status': '0' });
}

function idsIn(blocks: readonly WireBlock[]): number {
  let ids = 0;
  for (const b of blocks) ids += b.count;
  return ids;
}

/** A request body collected up to a size limit; one chunk (the usual case) is used as is, not copied. */
class BodyReader {
  size = 0;
  over = false;
  private readonly chunks: Buffer[] = [];
  constructor(private readonly max: number) {}
  /** Adds a chunk; false (and `over`) once the body is larger than the limit. */
  add(chunk: Buffer): boolean {
    this.size += chunk.length;
    if (this.size > this.max) {
      this.over = true;
      return false;
    }
    this.chunks.push(chunk);
    return true;
  }
  bytes(): Buffer {
    return this.chunks.length === 1 ? (this.chunks[0] as Buffer) : Buffer.concat(this.chunks, this.size);
  }
}

function protocolOf(
  headers: IncomingHttpHeaders | Readonly<Record<string, string>>,
  http2: boolean,
): Protocol | undefined {
  const type = headers['content-type'];
  if (type === undefined) return undefined;
  if (type === 'application/grpc' || type === 'application/grpc+proto') {
    const encoding = headers['grpc-encoding'];
    return http2 && (encoding === undefined || encoding === 'identity') ? 'grpc' : undefined;
  }
  const encoding = headers['content-encoding'];
  if (encoding !== undefined && encoding !== 'identity') return undefined;
  if (type === 'application/proto') return 'connect-proto';
  if (type === 'application/json' || /^application\/json;\s*charset=utf-8$/i.test(type)) return 'connect-json';
  return undefined;
}

/** connect-es's words: the size when the request declared it, none when the limit was hit while reading. */
function tooLarge(size: number | undefined, max: number): ConnectError {
  const what = size === undefined ? 'message size' : `message size ${size}`;
  return new ConnectError(`${what} is larger than configured readMaxBytes ${max}`, Code.ResourceExhausted);
}

/**
 * Stops reading a body we will not use: the connection ends after the answer. Call before the answer is
 * written: the answer must say `connection: close`, or a keep-alive client sends its next request into the
 * socket we are about to cut and loses it (RFC 9112 §9.6).
 */
function dropRestHttp1(req: IncomingMessage, res: ServerResponse): void {
  if (!res.headersSent) res.setHeader('connection', 'close');
  const cut = (): void => {
    req.socket.destroy();
  };
  if (res.writableFinished) cut();
  else res.once('finish', cut);
}

/** Decodes NextIdsRequest.count; a body the caller got wrong is INVALID_ARGUMENT (as in decode-errors.ts). */
function parseCount(protocol: Protocol, body: Buffer): number {
  if (protocol === 'connect-json') {
    try {
      return fromJsonString(NextIdsRequestSchema, body.toString('utf8'), { ignoreUnknownFields: true }).count;
    } catch (e) {
      throw ConnectError.from(e, Code.InvalidArgument);
    }
  }
  let message = body;
  if (protocol === 'grpc') {
    // One length-prefixed message: flags (0: not compressed), 4-byte big-endian length, the bytes.
    if (body.length < 5) throw new ConnectError('protocol error: missing the request message', Code.InvalidArgument);
    if ((body[0] ?? 0) & 1)
      throw new ConnectError('protocol error: compressed message without grpc-encoding', Code.Internal);
    const length = body.readUInt32BE(1);
    if (body.length !== 5 + length) {
      throw new ConnectError(
        `protocol error: expected one message of ${length} bytes, got ${body.length - 5}`,
        Code.InvalidArgument,
      );
    }
    message = body.subarray(5);
  }
  const quick = countOf(message);
  if (quick !== undefined) return quick;
  try {
    return fromBinary(NextIdsRequestSchema, message).count;
  } catch (e) {
    throw new ConnectError(`parse binary: ${e instanceof Error ? e.message : String(e)}`, Code.InvalidArgument);
  }
}

/**
 * NextIdsRequest.count read straight from the bytes of the request every client sends: nothing (count 0) or
 * the one field `count` (tag 0x08) as a varint of at most 5 bytes (uint32). Anything else (unknown fields,
 * the field repeated, a longer varint, truncated bytes) returns undefined and goes to the generated decoder,
 * which also words the errors. Why: fromBinary built a reflection object and two Maps per request, a fifth
 * of what a NextIds allocated.
 */
export function countOf(message: Uint8Array): number | undefined {
  if (message.length === 0) return 0;
  if (message[0] !== 0x08 || message.length > 6) return undefined;
  let value = 0;
  for (let i = 1; i < message.length; i++) {
    const byte = message[i] ?? 0;
    value += (byte & 0x7f) * 2 ** (7 * (i - 1));
    if ((byte & 0x80) === 0) return i === message.length - 1 && value <= 0xffff_ffff ? value : undefined;
  }
  return undefined;
}

/** `{"blocks":[{"first":"<decimal>","count":n},…]}`: fixed64 is a decimal string in JSON. */
function jsonResponse(blocks: readonly WireBlock[]): string {
  let text = '{"blocks":[';
  for (let i = 0; i < blocks.length; i++) {
    const b = blocks[i] as WireBlock;
    text += `${i === 0 ? '' : ','}{"first":"${b.first.toString()}","count":${b.count}}`;
  }
  return text + ']}';
}

/**
 * NextIdsResponse in protobuf binary, after `offset` spare bytes (the gRPC frame header): per block, field 1
 * (tag 0x0a) holding an IdBlock of `first` (tag 0x09, fixed64 little-endian) and `count` (tag 0x10, varint).
 */
function binaryResponse(blocks: readonly WireBlock[], offset: number): Buffer {
  let size = offset;
  for (const b of blocks) size += 2 + 10 + varintLength(b.count);
  const out = Buffer.allocUnsafe(size);
  out.fill(0, 0, offset);
  let at = offset;
  for (const b of blocks) {
    out[at++] = 0x0a;
    out[at++] = 10 + varintLength(b.count); // < 128: one length byte
    out[at++] = 0x09;
    out.writeBigUInt64LE(b.first, at);
    at += 8;
    out[at++] = 0x10;
    let v = b.count;
    while (v >= 0x80) {
      out[at++] = (v & 0x7f) | 0x80;
      v >>>= 7;
    }
    out[at++] = v;
  }
  return out;
}

function varintLength(v: number): number {
  let n = 1;
  while (v >= 0x80) {
    v >>>= 7;
    n++;
  }
  return n;
}

type Recorder = FastPathOptions['record'];

function errorMetadata(error: ConnectError): { [key: string]: string } {
  const metadata: { [key: string]: string } = {};
  error.metadata.forEach((value, key) => {
    metadata[key] = value;
  });
  return metadata;
}

/** A gRPC error as the header fields of a trailers-only answer (the status in the headers of an empty stream). */
function grpcErrorFields(error: ConnectError): Record<string, string> {
  return {
    ...errorMetadata(error),
    'content-type': 'application/grpc+proto',
    'grpc-status': String(error.code),
    'grpc-message': encodeURIComponent(error.rawMessage),
  };
}

/** A Connect unary error: its HTTP status, header fields and JSON body, the same on every transport. */
function connectErrorAnswer(error: ConnectError): {
  status: number;
  headers: Record<string, string | number>;
  body: Buffer;
} {
  const body = Buffer.from(errorToJsonBytes(error, {}));
  return {
    status: codeToHttpStatus(error.code),
    headers: { ...errorMetadata(error), 'content-type': 'application/json', 'content-length': body.length },
    body,
  };
}

function failHttp1(
  res: ServerResponse,
  protocol: Protocol,
  error: ConnectError,
  start: bigint,
  record: Recorder,
): void {
  record?.(error.code, start, 0);
  if (res.headersSent) {
    res.end();
    return;
  }
  const answer = connectErrorAnswer(error);
  res.writeHead(answer.status, answer.headers);
  res.end(answer.body);
}

/**
 * Answers an error on an HTTP/2 stream: gRPC as trailers-only (the status in the headers of an empty stream),
 * Connect as its JSON error. `dropBody`: the request body is not read to its end, so the stream is closed
 * (RST_STREAM NO_ERROR, RFC 9113 §8.1) once the answer is out.
 */
function failHttp2(
  stream: ServerHttp2Stream,
  protocol: Protocol,
  error: ConnectError,
  start: bigint,
  record: Recorder,
  dropBody: boolean,
): void {
  record?.(error.code, start, 0);
  if (stream.closed || stream.destroyed) return;
  if (stream.headersSent) {
    stream.close(h2.NGHTTP2_INTERNAL_ERROR);
    return;
  }
  const cut = dropBody ? () => stream.close(h2.NGHTTP2_NO_ERROR) : undefined;
  if (protocol === 'grpc') {
    stream.respond({ ...grpcErrorFields(error), [h2.HTTP2_HEADER_STATUS]: 200 }, { endStream: true });
    cut?.();
    return;
  }
  const answer = connectErrorAnswer(error);
  stream.respond({ ...answer.headers, [h2.HTTP2_HEADER_STATUS]: answer.status });
  stream.end(answer.body, cut);
}

/**
 * {@link failHttp2} on an @idgen/h2 stream. A body not read to its end needs nothing more: the connection reads
 * and drops the rest of a request answered before it ended (at most what is left of its stream window, then
 * RST_STREAM NO_ERROR, RFC 9113 §8.1), and the stream's `onclose` comes with the answer.
 */
function failH2(stream: H2Stream, protocol: Protocol, error: ConnectError, start: bigint, record: Recorder): void {
  record?.(error.code, start, 0);
  if (stream.isClosed) return;
  if (stream.isResponded) {
    stream.reset(ErrorCode.INTERNAL_ERROR);
    return;
  }
  if (protocol === 'grpc') {
    stream.respond(200, grpcErrorFields(error), true);
    return;
  }
  const answer = connectErrorAnswer(error);
  stream.respond(answer.status, answer.headers);
  stream.end(answer.body);
}
