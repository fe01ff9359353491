import type { IncomingMessage, ServerResponse } from 'node:http';
import { constants as h2, type Http2ServerRequest, type Http2ServerResponse } from 'node:http2';
import { fromBinary, fromJsonString } from '@bufbuild/protobuf';
import { Code, ConnectError } from '@connectrpc/connect';
import { codeToHttpStatus, errorToJsonBytes } from '@connectrpc/connect/protocol-connect';
import { NextIdsRequestSchema } from '@idgen/proto';
import type { WireBlock } from './service.js';

type NodeRequest = IncomingMessage | Http2ServerRequest;
type NodeResponse = ServerResponse | Http2ServerResponse;

/** The RPC path the fast path answers. */
export const NEXT_IDS_PATH = '/idgen.v1.IdGenerator/NextIds';

/** Options of {@link createNextIdsFastPath}. */
export interface FastPathOptions {
  /** NextIds without the protocol (service.ts `createNextIds`): blocks, or throws a ConnectError. */
  readonly nextIds: (count: number) => readonly WireBlock[];
  readonly maxBodyBytes: number;
  /** Records one call for metrics: its code (`ok`, `invalid_argument`, …) and start (hrtime ns). */
  readonly record?: (code: Code | undefined, startNs: bigint, ids: number) => void;
}

type Protocol = 'connect-json' | 'connect-proto' | 'grpc';

/**
 * NextIds for the common requests, answered straight on node:http/http2 instead of through connect-es.
 *
 * Why: on this stack connect-es spends most of a small call on per-request machinery (abort controllers and
 * their DOMExceptions, async iterables, promise chains), not on minting; measured on 2 cores, a NextIds(1)
 * through it ran at ~15% of a bare node:http2 handler. The budget is ≥ 60%. The wire formats here
 * are small and fixed (DESIGN §6), so they are written by hand and checked against the generated clients by
 * the integration suites (test/cluster.spec.ts), which talk to this path over all three protocols.
 *
 * Taken only for: POST, Connect unary with `application/json` or `application/proto` and no compression, or
 * gRPC (`application/grpc[+proto]`) over HTTP/2 with no compression. Everything else (gRPC-Web, compressed
 * bodies, GET, other methods) returns `false` and goes to connect-es, so behaviour there is unchanged.
 */
export function createNextIdsFastPath(options: FastPathOptions): (req: NodeRequest, res: NodeResponse) => boolean {
  const max = options.maxBodyBytes;
  return (req, res) => {
    if (req.method !== 'POST') return false;
    const protocol = protocolOf(req);
    if (protocol === undefined) return false;
    const start = process.hrtime.bigint();
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > max) {
      dropRest(req, res);
      fail(res, protocol, tooLarge(declared, max), start, options);
      return true;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    req.on('data', (chunk: Buffer) => {
      if (over) return;
      size += chunk.length;
      if (size > max) {
        over = true;
        dropRest(req, res);
        fail(res, protocol, tooLarge(size, max), start, options);
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (over) return;
      const body = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size);
      let blocks: readonly WireBlock[];
      try {
        blocks = options.nextIds(parseCount(protocol, body));
      } catch (e) {
        fail(res, protocol, ConnectError.from(e), start, options);
        return;
      }
      let ids = 0;
      for (const b of blocks) ids += b.count;
      if (protocol === 'connect-json') {
        const text = jsonResponse(blocks);
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
        res.end(text);
      } else if (protocol === 'connect-proto') {
        const bytes = binaryResponse(blocks, 0);
        res.writeHead(200, { 'content-type': 'application/proto', 'content-length': bytes.length });
        res.end(bytes);
      } else {
        const bytes = binaryResponse(blocks, 5);
        bytes.writeUInt32BE(bytes.length - 5, 1);
        res.writeHead(200, { 'content-type': 'application/grpc+proto' });
        (res as Http2ServerResponse).addTrailers({ 'grpc-status': '0' });
        res.end(bytes);
      }
      options.record?.(undefined, start, ids);
    });
    return true;
  };
}

function protocolOf(req: NodeRequest): Protocol | undefined {
  const type = req.headers['content-type'];
  if (type === undefined) return undefined;
  if (type === 'application/grpc' || type === 'application/grpc+proto') {
    const encoding = req.headers['grpc-encoding'];
    return req.httpVersionMajor === 2 && (encoding === undefined || encoding === 'identity') ? 'grpc' : undefined;
  }
  const encoding = req.headers['content-encoding'];
  if (encoding !== undefined && encoding !== 'identity') return undefined;
  if (type === 'application/proto') return 'connect-proto';
  if (type === 'application/json' || /^application\/json;\s*charset=utf-8$/i.test(type)) return 'connect-json';
  return undefined;
}

function tooLarge(size: number, max: number): ConnectError {
  return new ConnectError(`message size ${size} is larger than configured readMaxBytes ${max}`, Code.ResourceExhausted);
}

/**
 * Stops reading a body we will not use: the connection (HTTP/1.1) or stream (HTTP/2) ends after the answer.
 * Call before the answer is written: on HTTP/1.1 the answer must say `connection: close`, or a keep-alive
 * client sends its next request into the socket we are about to cut and loses it (RFC 9112 §9.6).
 */
function dropRest(req: NodeRequest, res: NodeResponse): void {
  if (req.httpVersionMajor !== 2 && !res.headersSent) res.setHeader('connection', 'close');
  const cut = (): void => {
    if (req.httpVersionMajor === 2) (req as Http2ServerRequest).stream.close(h2.NGHTTP2_NO_ERROR);
    else req.socket.destroy();
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
    if ((body[0] ?? 0) & 1) throw new ConnectError('protocol error: compressed message without grpc-encoding', Code.Internal);
    const length = body.readUInt32BE(1);
    if (body.length !== 5 + length) {
      throw new ConnectError(`protocol error: expected one message of ${length} bytes, got ${body.length - 5}`, Code.InvalidArgument);
    }
    message = body.subarray(5);
  }
  try {
    return fromBinary(NextIdsRequestSchema, message).count;
  } catch (e) {
    throw new ConnectError(`parse binary: ${e instanceof Error ? e.message : String(e)}`, Code.InvalidArgument);
  }
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

function fail(res: NodeResponse, protocol: Protocol, error: ConnectError, start: bigint, options: FastPathOptions): void {
  options.record?.(error.code, start, 0);
  if (res.headersSent) {
    res.end();
    return;
  }
  const metadata: Record<string, string> = {};
  error.metadata.forEach((value, key) => {
    metadata[key] = value;
  });
  if (protocol === 'grpc') {
    // Trailers-only response: the status travels in the headers of an empty stream.
    res.writeHead(200, {
      ...metadata,
      'content-type': 'application/grpc+proto',
      'grpc-status': String(error.code),
      'grpc-message': encodeURIComponent(error.rawMessage),
    });
    res.end();
    return;
  }
  const body = Buffer.from(errorToJsonBytes(error, {}));
  res.writeHead(codeToHttpStatus(error.code), { ...metadata, 'content-type': 'application/json', 'content-length': body.length });
  res.end(body);
}
