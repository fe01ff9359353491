import type { IncomingHttpHeaders } from 'node:http';
import { ErrorCode, parseContentLength, type H2Stream } from '@idgen/h2';
import { tooLarge, type NextIdsCodec } from '../nextids-codec.js';
import type { FastPath, Responder } from './contracts.js';

// The fast path's request bodies, read the way each HTTP stack delivers them: @idgen/h2's stream callbacks
// (readH2FastBody) and node's two stacks' 'data' and 'end' events (readNodeFastBody). Each checks the declared
// length, reads up to the limit (refusing past it), and hands the whole body to the fast path's `mint` once it
// ended; the answer goes back through the front end's Responder.

/** A request body collected up to a size limit; one chunk (the usual case) is used as is, not copied. */
export class BodyReader {
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

/** The request's declared body length: 0 when not declared, negative when not 1*DIGIT (RFC 9110 §8.6). */
export function declaredLength(headers: IncomingHttpHeaders | Readonly<Record<string, string>>): number {
  const length = headers['content-length'];
  return length === undefined ? 0 : parseContentLength(length);
}

/**
 * The fast path's reader on @idgen/h2: sets the stream's `ondata` and `onend` (its `onclose` is the front end's),
 * and answers through `responder`. A content-length that is not 1*DIGIT is a PROTOCOL_ERROR reset (RFC 9110 §8.6;
 * @idgen/h2 already refuses it first).
 */
export function readH2FastBody(
  fast: FastPath,
  codec: NextIdsCodec,
  responder: Responder<H2Stream>,
  stream: H2Stream,
): void {
  const start = process.hrtime.bigint();
  const declared = declaredLength(stream.headers);
  const max = fast.maxBodyBytes;
  if (declared < 0) {
    stream.reset(ErrorCode.PROTOCOL_ERROR);
    return;
  }
  if (declared > max) {
    fast.refuse(responder, stream, codec, tooLarge(declared, max), start, true);
    return;
  }
  const body = new BodyReader(max);
  stream.ondata = (chunk: Buffer): void => {
    if (body.over || body.add(chunk)) return;
    fast.refuse(responder, stream, codec, tooLarge(undefined, max), start, true);
  };
  stream.onend = (): void => {
    if (body.over) return;
    fast.mint(
      codec,
      body.bytes(),
      stream.connectionKey,
      () => stream.isClosed,
      (result) => fast.answer(responder, stream, codec, result, start),
    );
  };
}

/** Where a fast-path body arrives on node's HTTP stacks: node:http's request, node:http2's stream. */
export interface NodeBodySource {
  on(event: 'data', listener: (chunk: Buffer) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
}

/**
 * The fast path's reader on node's two HTTP stacks (front-http1.ts, front-node-http2.ts): the declared length
 * checked, the body read up to the limit (refused past it), the IDs minted once it ends and answered through
 * `responder`. What differs between the two is passed in: the responder, the owner minting is shared by (the
 * socket, the session), and the answer to a content-length that is not 1*DIGIT (RFC 9110 §8.6), whose framing
 * cannot be trusted (HTTP/1.1: 400 and the connection closed; HTTP/2: a PROTOCOL_ERROR reset).
 */
export function readNodeFastBody<T>(
  fast: FastPath,
  codec: NextIdsCodec,
  responder: Responder<T>,
  target: T,
  request: { readonly headers: IncomingHttpHeaders; readonly body: NodeBodySource; readonly owner: object },
  malformedLength: () => void,
): void {
  const start = process.hrtime.bigint();
  const declared = declaredLength(request.headers);
  const max = fast.maxBodyBytes;
  if (declared < 0) {
    malformedLength();
    return;
  }
  if (declared > max) {
    fast.refuse(responder, target, codec, tooLarge(declared, max), start, true);
    return;
  }
  const body = new BodyReader(max);
  request.body.on('data', (chunk: Buffer) => {
    if (body.over || body.add(chunk)) return;
    fast.refuse(responder, target, codec, tooLarge(undefined, max), start, true);
  });
  request.body.on('end', () => {
    if (body.over) return;
    fast.mint(
      codec,
      body.bytes(),
      request.owner,
      () => responder.gone(target),
      (result) => fast.answer(responder, target, codec, result, start),
    );
  });
}

/**
 * A connect-es call's body on @idgen/h2, collected until it ends, then handed to `complete`. Every method served
 * takes one request message (unary or server-streaming), so connect-es gets the call once its body is complete
 * (up to `limit` bytes, the body limit plus a frame's worth as the body queue of h2-universal.ts allows; past it
 * ENHANCE_YOUR_CALM). A call held open without a body then costs its stream until the request deadline, not
 * connect-es's machinery: 38,400 held GetStatus calls (300 connections × 128) took 1.6 GB inside connect-es and
 * starved the event loop. `arg` is passed on to `complete` (a handler: no closure per request).
 */
export function collectH2Body<A>(
  stream: H2Stream,
  limit: number,
  arg: A,
  complete: (stream: H2Stream, arg: A, body: readonly Buffer[] | undefined) => void,
): void {
  let body: Buffer[] | undefined;
  let bodyBytes = 0;
  stream.ondata = (chunk) => {
    bodyBytes += chunk.length;
    if (bodyBytes > limit) {
      stream.reset(ErrorCode.ENHANCE_YOUR_CALM);
      return;
    }
    (body ??= []).push(Buffer.from(chunk)); // the chunk is a view of the connection's input
  };
  stream.onend = () => {
    const chunks = body;
    body = undefined;
    complete(stream, arg, chunks);
  };
}

/**
 * The same on node:http2's compat request (front-node-http2.ts): the body collected up to `limit` bytes (past it
 * `tooLarge` is called, once per chunk over), then handed to `complete` when it ends. The 38,400 held GetStatus
 * calls took 1.55 GB on node:http2 before.
 */
export function collectNodeBody(
  body: NodeBodySource,
  limit: number,
  tooLarge: () => void,
  complete: (chunks: Buffer[]) => void,
): void {
  const chunks: Buffer[] = [];
  let bodyBytes = 0;
  body.on('data', (chunk: Buffer) => {
    bodyBytes += chunk.length;
    if (bodyBytes > limit) tooLarge();
    else chunks.push(chunk);
  });
  body.on('end', () => complete(chunks));
}
