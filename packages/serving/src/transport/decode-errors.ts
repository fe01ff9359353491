import { createAsyncIterable, readAllBytes, type UniversalServerResponse } from '@connectrpc/connect/protocol';

/**
 * connect-es 2.1 reports a request body that is not valid protobuf as INTERNAL ("parse binary: …"), for all
 * three protocols, while malformed JSON gets INVALID_ARGUMENT. A body the caller got wrong is the caller's
 * error (docs/design.md §6: INVALID_ARGUMENT for bad requests), and INTERNAL would send operators chasing a server
 * bug, so the serving port rewrites exactly that error, on the way out, to INVALID_ARGUMENT. Only the
 * request side is affected: connect-es words the response side "serialize binary".
 *
 * The same for a compressed body that ends early (found by fuzzing, apps/server/test/fuzz-wire.spec.ts): connect-node
 * maps zlib's "unexpected end of file" (Z_BUF_ERROR) to INTERNAL "decompression failed", while a corrupt one
 * (Z_DATA_ERROR) gets INVALID_ARGUMENT with the same message. The size limit has its own message and code
 * (RESOURCE_EXHAUSTED); what is left under that message is the caller's body (or zlib out of memory on a
 * body capped at --max-body-bytes, which is not a case worth an INTERNAL).
 */
const PARSE_BINARY = 'parse binary:';
const DECOMPRESSION_FAILED = 'decompression failed';
const GRPC_INTERNAL = '13';
const GRPC_INVALID_ARGUMENT = '3';
/** gRPC-Web marks its trailer frame with this flag bit (0x01 would mean compressed: left alone). */
const GRPC_WEB_TRAILER_FLAG = 0x80;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function isCallerDecodeMessage(message: string | null | undefined): boolean {
  if (message === null || message === undefined) return false;
  let text = message;
  try {
    text = decodeURIComponent(message);
  } catch {
    // not percent-encoded
  }
  return text.startsWith(PARSE_BINARY) || text === DECOMPRESSION_FAILED;
}

/** Rewrites INTERNAL "parse binary" and "decompression failed" into INVALID_ARGUMENT for Connect, gRPC and gRPC-Web responses. */
export async function reclassifyDecodeError(
  res: UniversalServerResponse,
  requestContentType: string | null,
): Promise<UniversalServerResponse> {
  // gRPC: the status travels in HTTP trailers, already set when the handler resolves on a parse error.
  const trailer = res.trailer;
  if (
    trailer !== undefined &&
    trailer.get('grpc-status') === GRPC_INTERNAL &&
    isCallerDecodeMessage(trailer.get('grpc-message'))
  ) {
    trailer.set('grpc-status', GRPC_INVALID_ARGUMENT);
    return res;
  }
  // Connect unary: an error is HTTP 500 with a small JSON body {"code":"internal","message":…}.
  if (res.status === 500 && res.body !== undefined) {
    const bytes = await readAllBytes(res.body, 64 * 1024);
    let json: unknown;
    try {
      json = JSON.parse(decoder.decode(bytes));
    } catch {
      json = undefined;
    }
    const error = json as { code?: unknown; message?: unknown } | undefined;
    if (error?.code === 'internal' && typeof error.message === 'string' && isCallerDecodeMessage(error.message)) {
      const body = encoder.encode(JSON.stringify({ code: 'invalid_argument', message: error.message }));
      const header = new Headers(res.header);
      header.delete('content-length');
      return { ...res, status: 400, header, body: createAsyncIterable([body]) };
    }
    return { ...res, body: createAsyncIterable([bytes]) };
  }
  // gRPC-Web: the status travels in a trailer frame at the end of the body.
  if (requestContentType?.startsWith('application/grpc-web') === true && res.body !== undefined) {
    return { ...res, body: rewriteGrpcWebTrailer(res.body) };
  }
  return res;
}

async function* rewriteGrpcWebTrailer(body: AsyncIterable<Uint8Array>): AsyncIterable<Uint8Array> {
  for await (const chunk of body) {
    if (chunk.length >= 5 && chunk[0] === GRPC_WEB_TRAILER_FLAG) {
      const text = decoder.decode(chunk.subarray(5));
      const status = /^grpc-status:\s*(\d+)\s*$/im.exec(text)?.[1];
      const message = /^grpc-message:\s*(.*?)\s*$/im.exec(text)?.[1];
      if (status === GRPC_INTERNAL && isCallerDecodeMessage(message)) {
        const fixed = encoder.encode(
          text.replace(/^(grpc-status:[ \t]*)13\b/im, (_m, head: string) => head + GRPC_INVALID_ARGUMENT),
        );
        const frame = new Uint8Array(5 + fixed.length);
        frame[0] = GRPC_WEB_TRAILER_FLAG;
        new DataView(frame.buffer).setUint32(1, fixed.length);
        frame.set(fixed, 5);
        yield frame;
        continue;
      }
    }
    yield chunk;
  }
}
