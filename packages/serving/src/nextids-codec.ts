import type { IncomingHttpHeaders } from 'node:http';
import { fromBinary, fromJsonString } from '@bufbuild/protobuf';
import { Code, ConnectError } from '@connectrpc/connect';
import { codeToHttpStatus, errorToJsonBytes } from '@connectrpc/connect/protocol-connect';
import { NextIdsRequestSchema } from '@idgen/proto';
import type { WireBlock } from './service.js';

/**
 * NextIds on the wire, one codec per protocol the fast path takes (fast-path.ts): pure functions from bytes to a
 * count and from blocks or an error to an answer, written by hand because the formats are small and fixed
 * (docs/design.md §6) and checked against the generated clients by the integration suites. Each codec is one
 * object for the life of the process: choosing one allocates nothing.
 */
export interface NextIdsCodec {
  readonly protocol: 'connect-json' | 'connect-proto' | 'grpc';
  /** The content type of a success answer. */
  readonly contentType: 'application/json' | 'application/proto' | 'application/grpc+proto';
  /** gRPC: the status travels in trailers (`grpc-status`), not in the HTTP status. */
  readonly grpc: boolean;
  /** NextIdsRequest.count from a request body; throws the ConnectError to answer for a body the caller got wrong. */
  decodeCount(body: Buffer): number;
  /** A success answer's body: text for JSON (written without a copy), bytes otherwise (gRPC: one framed message). */
  encodeBlocks(blocks: readonly WireBlock[]): string | Buffer;
  /** An error answer: its HTTP status, header fields and body (gRPC: trailers-only, no body). */
  encodeError(error: ConnectError): ErrorAnswer;
}

/** How an error is answered: the same status, fields and body on every transport. */
export interface ErrorAnswer {
  readonly status: number;
  readonly headers: Record<string, string | number>;
  readonly body: Buffer | undefined;
}

/** Connect unary, `application/json`. */
export const CONNECT_JSON: NextIdsCodec = {
  protocol: 'connect-json',
  contentType: 'application/json',
  grpc: false,
  decodeCount(body) {
    try {
      // protobuf-es's JSON reader with its defaults: a key the message does not have is refused (the proto3 JSON
      // mapping's default), so `{"cnt":3}` is INVALID_ARGUMENT naming the key, not NextIds(0). connect-es is told
      // the same (transport/dispatcher.ts `jsonOptions`), so both paths answer alike.
      return fromJsonString(NextIdsRequestSchema, body.toString('utf8')).count;
    } catch (e) {
      throw ConnectError.from(e, Code.InvalidArgument);
    }
  },
  encodeBlocks: jsonResponse,
  encodeError: connectErrorAnswer,
};

/** Connect unary, `application/proto`. */
export const CONNECT_PROTO: NextIdsCodec = {
  protocol: 'connect-proto',
  contentType: 'application/proto',
  grpc: false,
  decodeCount: binaryCount,
  encodeBlocks: (blocks) => binaryResponse(blocks, 0),
  encodeError: connectErrorAnswer,
};

/** gRPC (`application/grpc[+proto]`), one length-prefixed message each way. */
export const GRPC: NextIdsCodec = {
  protocol: 'grpc',
  contentType: 'application/grpc+proto',
  grpc: true,
  decodeCount(body) {
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
    return binaryCount(body.subarray(5));
  },
  encodeBlocks(blocks) {
    const bytes = binaryResponse(blocks, 5);
    bytes.writeUInt32BE(bytes.length - 5, 1);
    return bytes;
  },
  encodeError: (error) => ({ status: 200, headers: grpcErrorFields(error), body: undefined }),
};

/**
 * The codec for a request's headers, undefined for one the fast path leaves to connect-es: Connect unary with
 * `application/json` or `application/proto` and no compression, or gRPC with no compression over HTTP/2 only.
 * (gRPC-Web, compressed bodies and anything else go to connect-es.)
 */
export function codecFor(
  headers: IncomingHttpHeaders | Readonly<Record<string, string>>,
  http2: boolean,
): NextIdsCodec | undefined {
  const type = headers['content-type'];
  if (type === undefined) return undefined;
  if (type === 'application/grpc' || type === 'application/grpc+proto') {
    const encoding = headers['grpc-encoding'];
    return http2 && (encoding === undefined || encoding === 'identity') ? GRPC : undefined;
  }
  const encoding = headers['content-encoding'];
  if (encoding !== undefined && encoding !== 'identity') return undefined;
  if (type === 'application/proto') return CONNECT_PROTO;
  if (type === 'application/json' || /^application\/json;\s*charset=utf-8$/i.test(type)) return CONNECT_JSON;
  return undefined;
}

/** connect-es's words: the size when the request declared it, none when the limit was hit while reading. */
export function tooLarge(size: number | undefined, max: number): ConnectError {
  const what = size === undefined ? 'message size' : `message size ${size}`;
  return new ConnectError(`${what} is larger than configured readMaxBytes ${max}`, Code.ResourceExhausted);
}

/** How many IDs `blocks` hold. */
export function idsIn(blocks: readonly WireBlock[]): number {
  let ids = 0;
  for (const b of blocks) ids += b.count;
  return ids;
}

/** NextIdsRequest.count in protobuf binary; a body the caller got wrong is INVALID_ARGUMENT (as in decode-errors.ts). */
function binaryCount(message: Uint8Array): number {
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

/** A Connect unary error: its HTTP status, header fields and JSON body. */
function connectErrorAnswer(error: ConnectError): ErrorAnswer {
  const body = Buffer.from(errorToJsonBytes(error, {}));
  return {
    status: codeToHttpStatus(error.code),
    headers: { ...errorMetadata(error), 'content-type': 'application/json', 'content-length': body.length },
    body,
  };
}
