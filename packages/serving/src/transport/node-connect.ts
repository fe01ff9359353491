import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2';
import { Code, ConnectError } from '@connectrpc/connect';
import { universalRequestFromNodeRequest, universalResponseToNodeResponse } from '@connectrpc/connect-node';
import type { UniversalHandler } from '@connectrpc/connect/protocol';
import type { ProbeAnswer } from './contracts.js';
import { reclassifyDecodeError } from './decode-errors.js';
import { grpcFailureHeaders } from './dispatcher.js';

/** A request of node:http, or of node:http2's compat API. */
export type NodeServerRequest = IncomingMessage | Http2ServerRequest;
export type NodeServerResponse = ServerResponse | Http2ServerResponse;

/**
 * `writeHead` on either response type. Both take `(status, headers)`; @types/node 24's overloads of the two do not
 * unify into a callable union, so the HTTP/1.1 one's signature stands for both (no runtime branch).
 */
export function writeHead(res: NodeServerResponse, status: number, headers?: Record<string, string | number>): void {
  (res as ServerResponse).writeHead(status, headers);
}

/**
 * `connection: close` for an HTTP/1.1 request answered without reading its body, if it has one: node:http then
 * closes the connection after the answer instead of reading the body to its end, which a caller can make endless
 * (a chunked body to /healthz read 6.2 GB in 5 s). HTTP/2 needs nothing: the stream window bounds it.
 */
export function closeIfBody(req: NodeServerRequest): Record<string, string> {
  if (req.httpVersionMajor !== 1) return {};
  const length = req.headers['content-length'];
  const hasBody = req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
  return hasBody ? { connection: 'close' } : {};
}

/** Writes a probe's answer on a node:http or node:http2 compat response. */
export function writeProbe(req: NodeServerRequest, res: NodeServerResponse, answer: ProbeAnswer): void {
  writeHead(res, answer.status, { ...answer.headers, ...closeIfBody(req) });
  res.end(answer.body);
}

/** A 404 for a path no service has. */
export function writeNotFound(req: NodeServerRequest, res: NodeServerResponse): void {
  writeHead(res, 404, { 'content-length': 0, ...closeIfBody(req) });
  res.end();
}

/** A request body already read, as the async iterable connect-es reads. */
async function* bodyOf(chunks: readonly Buffer[]): AsyncIterable<Uint8Array> {
  for (const chunk of chunks) yield chunk;
}

/**
 * Hands a node:http (or node:http2 compat) request to connect-es, as connect-node's adapter does, and writes its
 * answer; `body`: the HTTP/2 request body already read (front-node-http2.ts), undefined to let connect-es read it.
 */
export function serveNodeConnect(
  handler: UniversalHandler,
  req: NodeServerRequest,
  res: NodeServerResponse,
  body: Buffer[] | undefined,
  onHandlerError: ((e: unknown) => void) | undefined,
): void {
  const contentType = req.headers['content-type'] ?? null;
  const universal = universalRequestFromNodeRequest(req, res, undefined, undefined);
  handler(body === undefined ? universal : { ...universal, body: bodyOf(body) })
    .then((uRes) => reclassifyDecodeError(uRes, contentType))
    .then((uRes) => {
      // HTTP/1.1 answered before the whole body was read (a size limit hit on a gRPC-Web frame header, found
      // by fuzzing): close the connection after this answer and say so (RFC 9112 §9.6). Kept open, the unread
      // rest stalls it, and a keep-alive client's next request waits behind it and gets a 400 at the header
      // deadline. (HTTP/2 needs nothing: the stream is cancelled at the request deadline, the session lives on.)
      if (!req.complete && req.httpVersionMajor !== 2 && !res.headersSent) res.setHeader('connection', 'close');
      return universalResponseToNodeResponse(uRes, res);
    })
    .catch((reason: unknown) => {
      // The caller went away (or the request was cancelled at its deadline): nothing to answer.
      if (ConnectError.from(reason).code === Code.Aborted) return;
      onHandlerError?.(reason);
      if (!res.headersSent) {
        if (contentType?.startsWith('application/grpc') === true)
          writeHead(res, 200, grpcFailureHeaders(contentType, reason));
        else writeHead(res, 500);
      }
      res.end();
    });
}

/**
 * Counts a node:http or node:http2 compat request in flight until its response finishes or closes, and calls
 * `cancel` (counted as a timeout) when it is still open at the request deadline: one timer per request, as before;
 * `cancel` is a module-level function, so no closure more per request.
 */
export function countNodeRequest<R extends NodeServerRequest>(
  req: R,
  res: NodeServerResponse,
  timeoutMs: number,
  dispatcher: { requestStarted(): void; requestDone(): void },
  onTimeout: (() => void) | undefined,
  cancel: (req: R) => void,
): void {
  dispatcher.requestStarted();
  let finished = false;
  const timer = setTimeout(() => {
    if (finished) return;
    onTimeout?.();
    // The request (or its body) did not complete in time: drop it rather than hold the stream.
    cancel(req);
  }, timeoutMs);
  timer.unref();
  const done = (): void => {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    dispatcher.requestDone();
  };
  res.once('finish', done);
  res.once('close', done);
}
