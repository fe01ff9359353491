import { readFileSync } from 'node:fs';
import { createServer as createHttp1Server, type IncomingMessage, type ServerResponse } from 'node:http';
import {
  constants as h2,
  createServer as createHttp2Server,
  type Http2ServerRequest,
  type Http2ServerResponse,
  type Http2Session,
  type IncomingHttpHeaders,
  type ServerHttp2Session,
  type ServerHttp2Stream,
} from 'node:http2';
import { createServer as createNetServer, type Socket } from 'node:net';
import { createServer as createTlsServer, type TLSSocket } from 'node:tls';
import { Code, ConnectError, createConnectRouter, type ConnectRouter, type Interceptor } from '@connectrpc/connect';
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from '@connectrpc/connect-node';
import type { UniversalHandler } from '@connectrpc/connect/protocol';
import { ErrorCode, H2Connection, type H2RefusalReason, type H2Stream } from '@idgen/h2';
import { installStreamTable } from './stream-table.js';
import type { HostPort } from './host-port.js';
import type { TlsServing } from './tls.js';
import { DeadlineQueue } from './deadline-queue.js';
import { reclassifyDecodeError } from './decode-errors.js';
import {
  connectErrorFromResetCode,
  universalRequestFromH2Stream,
  universalResponseToH2Stream,
} from './h2-universal.js';

type NodeServerRequest = IncomingMessage | Http2ServerRequest;
type NodeServerResponse = ServerResponse | Http2ServerResponse;

/** A request answered before connect-es (fast-path.ts); each method returns false to pass the request on. */
export interface FastPath {
  /** The one path it answers. */
  readonly path: string;
  http1(req: IncomingMessage, res: ServerResponse): boolean;
  /** On node:http2's core API: the stream and its request headers. */
  http2(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): boolean;
  /** On @idgen/h2: sets the stream's `ondata` and `onend` (its `onclose` is the server's). */
  h2(stream: H2Stream): boolean;
}

/**
 * Which HTTP/2 implementation serves h2c connections: `idgen` (@idgen/h2, framed by hand on node:net, the
 * default) or `node` (node:http2). See @idgen/h2's README for why there are two.
 */
export type Http2Server = 'idgen' | 'node';

const kDeadlineTicket = Symbol('idgen.deadlineTicket');
type TicketedStream = ServerHttp2Stream & { [kDeadlineTicket]?: number };

/** A request's path without its query. Not split('?'): no array per request on the hot path. */
function pathOf(url: string | undefined): string {
  if (url === undefined) return '';
  const query = url.indexOf('?');
  return query === -1 ? url : url.slice(0, query);
}

/** The 'stream' listener node:http2 installs for its compat API ('request' events). */
type StreamListener = (
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  flags: number,
  rawHeaders: string[],
) => void;

/** Options of {@link createServingServer}. */
export interface ServingServerOptions {
  /** Registers the Connect services. */
  readonly routes: (router: ConnectRouter) => void;
  readonly interceptors?: Interceptor[];
  /** Answers requests for its path before connect-es when it can (fast-path.ts). */
  readonly fastPath?: FastPath;
  /** May the node mint now? `/readyz` 200 when true, 503 when false (docs/design.md §6). Called per probe: keep cheap. */
  readonly ready: () => boolean;
  /** Extra JSON for the `/readyz` body (state, reason). */
  readonly readyDetail?: () => Record<string, unknown>;
  /** Largest request body, in bytes (decompressed). */
  readonly maxBodyBytes: number;
  /** A request still open this long after it arrived is cancelled: nothing a caller sends may stall the node. */
  readonly requestTimeoutMs: number;
  /** A connection with no traffic for this long is closed. Default 60 s (the serving port passes SERVING_LIMITS' 30 s). */
  readonly idleTimeoutMs?: number;
  /** An HTTP/2 connection without its preface and SETTINGS after this long is closed. Default 4 s (@idgen/h2). */
  readonly prefaceTimeoutMs?: number;
  /** A connection whose peer takes none of its output for this long is cut. Default {@link STALLED_WRITER_MS}. */
  readonly stalledWriteTimeoutMs?: number;
  /**
   * An HTTP/2 connection that has sent nothing for this long is sent a PING; one that has still sent nothing
   * (not even the PING's ACK) this much later is destroyed. Default 2 s. See {@link createServingServer}.
   */
  readonly http2ProbeMs?: number;
  /** The HTTP/2 implementation for h2c connections. Default `idgen`. */
  readonly http2Server?: Http2Server;
  /** Called when a request is cancelled at its deadline (for a metric). */
  readonly onRequestTimeout?: () => void;
  /** Called when writing a response failed for a reason other than the caller going away. */
  readonly onHandlerError?: (e: unknown) => void;
  /** Called for connection-level errors worth a debug line (a client's garbage is not an error of ours). */
  readonly onConnectionError?: (e: Error) => void;
  /**
   * Most connections open at once (HTTP/1.1 and HTTP/2, sniffing included); one more is closed as it arrives
   * (`net.Server.maxConnections`). Default 4,096: an idle HTTP/2 connection costs ~12 KB, so the cap bounds what a
   * client that opens connections in a loop can hold.
   */
  readonly maxConnections?: number;
  /**
   * Called for each refusal: what @idgen/h2 refused on a connection (a flood cut, a lifetime over, a stream
   * refused or answered 431; see its README) and `connection-limit` for a connection over `maxConnections`.
   * For a counter by reason.
   */
  readonly onRefusal?: (
    reason: H2RefusalReason | 'connection-limit' | 'tls-client-refused' | 'http1-pipelining',
  ) => void;
  /**
   * Called (once) when node:http2's internals are not what the stream table (stream-table.ts) works around: the node then
   * serves as node:http2 built it, with more garbage-collection pauses. Worth a warning in the log.
   */
  readonly onStreamTableUnavailable?: (why: string) => void;
  /**
   * TLS on the serving port: every connection is TLS, HTTP/2 or HTTP/1.1 chosen by ALPN (`h2`, `http/1.1`),
   * HTTP/2 served by the same implementation as h2c. With mTLS, a client whose certificate is not allowed is
   * disconnected after the handshake (counted as `tls-client-refused`). Absent: plaintext, sniffed.
   */
  readonly tls?: TlsServing;
  /** Called when a TLS handshake fails (a debug line; a scanner's garbage is not an error of ours). */
  readonly onTlsError?: (e: Error) => void;
}

/** The serving port: HTTP/1.1 (node:http) and h2c (@idgen/h2, or node:http2), Connect + gRPC + gRPC-Web + probes. */
/** A probe's answer (`/healthz`, `/readyz`): status, headers and a JSON body. */
export interface ProbeAnswer {
  readonly status: number;
  readonly headers: Record<string, string | number>;
  readonly body: string;
}

export interface ServingServer {
  /** Binds `listen`; resolves with the bound address (port 0 becomes the real port). */
  listen(listen: HostPort): Promise<HostPort>;
  /**
   * The answer this port gives `method path` for a probe path (`/healthz`, `/readyz`), `undefined` for any other
   * path: for another listener (the metrics port) to answer probes the same way.
   */
  probe(method: string | undefined, path: string): ProbeAnswer | undefined;
  /** Requests being handled now. */
  inFlight(): number;
  /**
   * Stops accepting connections, asks HTTP/2 clients to go away (GOAWAY) and HTTP/1.1 clients to close,
   * waits up to `timeoutMs` for in-flight requests, then closes whatever is left. Resolves with the number
   * of requests that were still in flight when it gave up.
   */
  close(timeoutMs: number): Promise<number>;
}

/**
 * A gRPC or gRPC-Web call whose answer connect-es failed to write still gets a gRPC status (trailers-only),
 * not a bare HTTP 500 that gRPC clients can only read as UNKNOWN. The one such failure known (found by
 * fuzzing, apps/server/test/fuzz-wire.spec.ts): connect-es throws a URIError encoding grpc-message when the message
 * quotes the caller's `+json` body and V8 cut that quote inside a surrogate pair; the caller's body was not
 * a valid message: INVALID_ARGUMENT (docs/design.md §6). Any other failure here is ours: INTERNAL.
 */
function grpcFailureHeaders(contentType: string, reason: unknown): Record<string, string> {
  const callersBody = reason instanceof URIError;
  return {
    'content-type': contentType,
    'grpc-status': callersBody ? '3' : '13',
    'grpc-message': encodeURIComponent(callersBody ? 'the request message could not be parsed' : 'internal error'),
  };
}

/**
 * `writeHead` on either response type. Both take `(status, headers)`; @types/node 24's overloads of the two do not
 * unify into a callable union, so the HTTP/1.1 one's signature stands for both (no runtime branch).
 */
function writeHead(res: NodeServerResponse, status: number, headers?: Record<string, string | number>): void {
  (res as ServerResponse).writeHead(status, headers);
}

/**
 * `connection: close` for an HTTP/1.1 request answered without reading its body, if it has one: node:http then
 * closes the connection after the answer instead of reading the body to its end, which a caller can make endless
 * (a chunked body to /healthz read 6.2 GB in 5 s). HTTP/2 needs nothing: the stream window bounds it.
 */
function closeIfBody(req: NodeServerRequest): Record<string, string> {
  if (req.httpVersionMajor !== 1) return {};
  const length = req.headers['content-length'];
  const hasBody = req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
  return hasBody ? { connection: 'close' } : {};
}

/**
 * A socket with output waiting that the peer has not taken a byte of for this long is destroyed: a client that
 * sends requests and never reads the answers (an HTTP/1.1 slowloris) must not hold a connection and its buffers. The
 * same bound as @idgen/h2's stalled writer.
 */
export const STALLED_WRITER_MS = 10_000;

/**
 * Most HTTP/1.1 requests one connection may have answered in one turn of the event loop (pipelined in what one
 * read brought). A client sending requests by the megabyte without reading the answers had node:http parse and
 * answer ~1,800 of them per 64 KB read on each of its connections, the loop late by seconds for everyone else;
 * no real client pipelines this deep (browsers and undici do not pipeline at all by default). One
 * over: the connection is destroyed (counted as `http1-pipelining`).
 */
export const MAX_PIPELINED_PER_TURN = 64;
const kTurn = Symbol('idgen.turn');

/** How many requests' header ends (`\r\n\r\n`) `chunk` holds, counting up to `limit`. */
export function headerEnds(chunk: Buffer, limit: number): number {
  let n = 0;
  for (let at = chunk.indexOf(CRLFCRLF); at >= 0 && n < limit; at = chunk.indexOf(CRLFCRLF, at + 4)) n++;
  return n;
}
const CRLFCRLF = Buffer.from('\r\n\r\n', 'latin1');
const kPipelined = Symbol('idgen.pipelined');
type CountedSocket = Socket & { [kTurn]?: number; [kPipelined]?: number };

/** Descriptors kept spare below the open-files limit, for what is not a client: etcd, chronyc's pipes, the log. */
export const DESCRIPTOR_HEADROOM = 128;

/** The soft open-files limit of this process (Linux: /proc/self/limits), undefined where it cannot be read. */
export function openFilesLimit(limitsText?: string): number | undefined {
  let text = limitsText;
  if (text === undefined) {
    try {
      text = readFileSync('/proc/self/limits', 'latin1');
    } catch {
      return undefined;
    }
  }
  const soft = /^Max open files\s+(\S+)/m.exec(text)?.[1];
  return soft === undefined || !/^\d+$/.test(soft) ? undefined : Number(soft);
}

/**
 * The connection cap the serving port can keep: `configured`, lowered to the open-files limit less
 * {@link DESCRIPTOR_HEADROOM} (at least 1), so clients holding connections cannot take the descriptors etcd and
 * chronyc need (1,004 idle connections at `ulimit -n 1024` made `spawn chronyc` fail with EMFILE, and
 * the node fenced itself on its time source).
 */
export function connectionCap(
  configured: number,
  limit = openFilesLimit(),
): { maxConnections: number; openFilesLimit: number | undefined; lowered: boolean } {
  const room = limit === undefined ? configured : Math.max(1, limit - DESCRIPTOR_HEADROOM);
  return { maxConnections: Math.min(configured, room), openFilesLimit: limit, lowered: room < configured };
}

/** A request body already read, as the async iterable connect-es reads. */
async function* bodyOf(chunks: readonly Buffer[]): AsyncIterable<Uint8Array> {
  for (const chunk of chunks) yield chunk;
}

/** Paths served as plain HTTP next to the RPCs (docs/design.md §6). */
export const HEALTHZ_PATH = '/healthz';
export const READYZ_PATH = '/readyz';

/**
 * Creates the serving server. HTTP/2 settings are bounded so one client cannot hold much memory, on either
 * implementation: at most 128 concurrent streams per connection, 16 KiB of headers, 64 KiB stream windows.
 */
export function createServingServer(options: ServingServerOptions): ServingServer {
  /** Aborts of the connect-es calls open on @idgen/h2 streams, for close(). */
  const connectCalls = new Set<(reason: ConnectError) => void>();
  // connectNodeAdapter, plus one correction on the way out (decode-errors.ts): a body that is not protobuf
  // is the caller's INVALID_ARGUMENT, not our INTERNAL.
  const router = createConnectRouter({
    interceptors: options.interceptors ?? [],
    readMaxBytes: options.maxBodyBytes,
    writeMaxBytes: 4 * 1024 * 1024,
    // No maxTimeoutMs: connect-es would refuse a longer deadline (INVALID_ARGUMENT; a 30 s gRPC default is
    // common). The server's own request timer below caps every request at requestTimeoutMs instead.
    // No shutdownSignal either: connect-es adds a listener to it for every call, and one signal holding tens of
    // thousands of listeners made each removal cost ~270 µs with calls held open. Each call already has a
    // signal of its own (its request's); close() aborts the calls still open (`connectCalls`, sockets destroyed).
    acceptCompression: [compressionGzip, compressionBrotli],
  });
  options.routes(router);
  const handlers = new Map<string, UniversalHandler>(router.handlers.map((h) => [h.requestPath, h]));
  const connect = (req: NodeServerRequest, res: NodeServerResponse, path: string): void => {
    const handler = handlers.get(path);
    if (handler === undefined) {
      writeHead(res, 404, { 'content-length': 0, ...closeIfBody(req) });
      res.end();
      return;
    }
    if (req.httpVersionMajor === 2) {
      // As on @idgen/h2 (onH2Stream): connect-es gets an HTTP/2 call once its body is complete, collected here until
      // then, so calls held open without a body cost node:http2's stream until the request deadline, not connect-es's
      // machinery (38,400 held GetStatus calls took 1.55 GB on node:http2 before).
      const body: Buffer[] = [];
      let bodyBytes = 0;
      const stream = (req as Http2ServerRequest).stream;
      req.on('data', (chunk: Buffer) => {
        bodyBytes += chunk.length;
        if (bodyBytes > options.maxBodyBytes + 64 * 1024) stream.close(h2.NGHTTP2_ENHANCE_YOUR_CALM);
        else body.push(chunk);
      });
      req.once('end', () => {
        if (!stream.closed && !stream.destroyed) serveConnect(handler, req, res, body);
      });
      return;
    }
    serveConnect(handler, req, res, undefined);
  };
  /** Hands a request to connect-es; `body`: the HTTP/2 request body already read (see `connect`). */
  const serveConnect = (
    handler: UniversalHandler,
    req: NodeServerRequest,
    res: NodeServerResponse,
    body: Buffer[] | undefined,
  ): void => {
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
        options.onHandlerError?.(reason);
        if (!res.headersSent) {
          if (contentType?.startsWith('application/grpc') === true)
            writeHead(res, 200, grpcFailureHeaders(contentType, reason));
          else writeHead(res, 500);
        }
        res.end();
      });
  };

  const fast = options.fastPath;
  let inFlight = 0;
  let closing = false;
  let drained: (() => void) | undefined;
  const sockets = new Set<Socket>();
  const sessions = new Set<Http2Session>();
  // Fast-path streams still open, with their deadlines (performance.now() ms), oldest first. A sweep cancels
  // the late ones: a timer per request measurably cost the fast path, and a deadline needs no better than
  // the sweep's resolution. Each stream carries its ticket in the queue under `kDeadlineTicket`.
  const fastDeadlines = new DeadlineQueue<ServerHttp2Stream>();
  const requestDone = (): void => {
    inFlight--;
    if (inFlight === 0) drained?.();
  };
  function onFastStreamClose(this: ServerHttp2Stream): void {
    const ticket = (this as TicketedStream)[kDeadlineTicket];
    if (ticket !== undefined && fastDeadlines.remove(ticket, this)) requestDone();
  }
  function onFastStreamError(this: ServerHttp2Stream, e: Error): void {
    // A caller that resets its stream (or goes away) mid-request: the stream closes; nothing else to do.
    options.onConnectionError?.(e);
  }
  // The same for every request on @idgen/h2 (the default h2c server): fast path or not, its ticket is its `context`.
  const h2Deadlines = new DeadlineQueue<H2Stream>();
  /** What a request still open at its deadline gets: counted out, counted as a timeout, its stream cancelled. */
  const late =
    <S>(cancel: (stream: S) => void) =>
    (stream: S): void => {
      requestDone();
      options.onRequestTimeout?.();
      cancel(stream);
    };
  const cancelLate = late((stream: ServerHttp2Stream) => stream.close(h2.NGHTTP2_CANCEL));
  const cancelLateH2 = late((stream: H2Stream) => stream.reset(ErrorCode.CANCEL));
  const deadlineSweep = setInterval(
    () => {
      const now = performance.now();
      fastDeadlines.expire(now, cancelLate);
      h2Deadlines.expire(now, cancelLateH2);
    },
    Math.max(10, Math.min(250, Math.floor(options.requestTimeoutMs / 10))),
  );
  deadlineSweep.unref();

  /** The answer to a `/healthz` or `/readyz` request (docs/design.md §6): plain JSON, never cached. */
  const probe = (method: string | undefined, path: string): ProbeAnswer => {
    const answer = (status: number, body: Record<string, unknown>, extra: Record<string, string> = {}) => {
      const text = JSON.stringify(body) + '\n';
      return {
        status,
        headers: {
          ...extra,
          'content-type': 'application/json',
          'cache-control': 'no-store',
          'content-length': Buffer.byteLength(text),
        },
        body: text,
      };
    };
    if (method !== 'GET' && method !== 'HEAD')
      return answer(405, { error: 'method not allowed' }, { allow: 'GET, HEAD' });
    if (path === HEALTHZ_PATH) return answer(200, { status: 'alive' });
    const ready = options.ready();
    return answer(ready ? 200 : 503, { ready, ...(options.readyDetail?.() ?? {}) });
  };

  // The event loop's turn, for MAX_PIPELINED_PER_TURN: bumped by an immediate scheduled by the first HTTP/1.1
  // request of a turn.
  let turn = 0;
  let turnScheduled = false;
  const nextTurn = (): void => {
    turn++;
    turnScheduled = false;
  };
  /** False (and the socket destroyed) for an HTTP/1.1 request over the pipelining bound, or on a socket already gone. */
  const admitHttp1 = (socket: CountedSocket): boolean => {
    if (socket.destroyed) return false;
    if (!turnScheduled) {
      turnScheduled = true;
      setImmediate(nextTurn);
    }
    if (socket[kTurn] !== turn) {
      socket[kTurn] = turn;
      socket[kPipelined] = 1;
      return true;
    }
    const n = (socket[kPipelined] ?? 0) + 1;
    socket[kPipelined] = n;
    if (n <= MAX_PIPELINED_PER_TURN) return true;
    options.onRefusal?.('http1-pipelining');
    socket.destroy();
    return false;
  };

  /**
   * False (and the socket destroyed, counted as `http1-pipelining`) for a read of an HTTP/1.1 connection holding
   * more requests than {@link MAX_PIPELINED_PER_TURN}: node:http parses a whole read at once, a request and a
   * response object for each of the ~1,800 pipelined requests 64 KB hold, before admitHttp1 sees the 65th; under
   * a flood that garbage took the RSS past 500 MB on Node 24 (test/abuse-serving.spec.ts). Refused unparsed.
   */
  const admitRead = (socket: Socket, chunk: Buffer): boolean => {
    if (headerEnds(chunk, MAX_PIPELINED_PER_TURN + 1) <= MAX_PIPELINED_PER_TURN) return true;
    options.onRefusal?.('http1-pipelining');
    socket.destroy();
    return false;
  };
  /**
   * Hands an HTTP/1.1 connection to node:http with every read checked by {@link admitRead} first: its reads reach
   * node:http as 'data' events (node:http's parser does not consume the handle in C++, which it does only for a
   * handle not yet marked consumed) through the socket's `push`, checked on the way.
   */
  const serveHttp1 = (socket: Socket): void => {
    const handle = (socket as unknown as { _handle?: { _consumed?: boolean } | null })._handle;
    if (handle !== undefined && handle !== null) handle._consumed = true;
    const push = socket.push.bind(socket);
    socket.push = (chunk: unknown, encoding?: BufferEncoding): boolean =>
      Buffer.isBuffer(chunk) && !admitRead(socket, chunk) ? false : push(chunk, encoding);
    h1server.emit('connection', socket);
  };

  const handler = (req: NodeServerRequest, res: NodeServerResponse): void => {
    if (req.httpVersionMajor === 1 && !admitHttp1(req.socket as CountedSocket)) return;
    const path = pathOf(req.url);
    if (path === HEALTHZ_PATH || path === READYZ_PATH) {
      const answer = probe(req.method, path);
      writeHead(res, answer.status, { ...answer.headers, ...closeIfBody(req) });
      res.end(answer.body);
      return;
    }
    if (closing && req.httpVersionMajor === 1) res.setHeader('connection', 'close');

    inFlight++;
    let finished = false;
    const timer = setTimeout(() => {
      if (finished) return;
      options.onRequestTimeout?.();
      // The request (or its body) did not complete in time: drop it rather than hold the stream.
      if (req.httpVersionMajor === 2) (req as Http2ServerRequest).stream.close(h2.NGHTTP2_CANCEL);
      else req.socket.destroy();
    }, options.requestTimeoutMs);
    timer.unref();
    const done = (): void => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      requestDone();
    };
    res.once('finish', done);
    res.once('close', done);
    // HTTP/2 requests the fast path takes never get here: it sees them first, as streams (below).
    if (
      fast === undefined ||
      path !== fast.path ||
      req.httpVersionMajor === 2 ||
      !fast.http1(req as IncomingMessage, res as ServerResponse)
    ) {
      connect(req, res, path);
    }
  };

  // HTTP/2 with prior knowledge (h2c: gRPC, Connect over h2) and HTTP/1.1 (Connect JSON from curl and
  // browsers, gRPC-Web) share one port. Node 20's http2 server takes `allowHTTP1` only with TLS, so a plain
  // net server sniffs each connection's first bytes: the HTTP/2 preface starts with "PRI", which no
  // HTTP/1.1 request does (RFC 9113 §3.4), and hands the socket to the matching server.
  const h2server = createHttp2Server(
    {
      settings: {
        maxConcurrentStreams: 128,
        maxHeaderListSize: 16 * 1024,
        initialWindowSize: 64 * 1024,
        enablePush: false,
      },
      maxSessionMemory: 16,
      maxHeaderListPairs: 64,
      peerMaxConcurrentStreams: 128,
    },
    handler,
  );
  // The fast path sees HTTP/2 streams before node:http2's compat layer builds a request and response for them
  // (fast-path.ts: why). That layer is the one 'stream' listener the server installed for `handler`: it is
  // taken off and called only for the streams the fast path leaves, so everything else is served as before.
  if (fast !== undefined) {
    const compat = h2server.listeners('stream') as StreamListener[];
    const serveCompat = compat[0];
    if (compat.length !== 1 || serveCompat === undefined) {
      throw new Error(
        `node:http2 changed: expected its compat layer as the one 'stream' listener, found ${compat.length}`,
      );
    }
    h2server.removeListener('stream', serveCompat);
    h2server.on(
      'stream',
      (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, flags: number, rawHeaders: string[]) => {
        const path = pathOf(headers[h2.HTTP2_HEADER_PATH] as string | undefined); // a pseudo-header: one value
        if (path !== fast.path) {
          serveCompat(stream, headers, flags, rawHeaders);
          return;
        }
        // Listeners first: the fast path may answer (and the stream close) before it returns.
        stream.on('error', onFastStreamError);
        stream.on('close', onFastStreamClose);
        if (!fast.http2(stream, headers)) {
          stream.off('error', onFastStreamError);
          stream.off('close', onFastStreamClose);
          serveCompat(stream, headers, flags, rawHeaders);
          return;
        }
        inFlight++;
        (stream as TicketedStream)[kDeadlineTicket] = fastDeadlines.add(
          stream,
          performance.now() + options.requestTimeoutMs,
        );
      },
    );
  }
  const h1server = createHttp1Server(
    {
      maxHeaderSize: 16 * 1024,
      requestTimeout: options.requestTimeoutMs,
      headersTimeout: Math.min(10_000, options.requestTimeoutMs),
      keepAliveTimeout: 5_000,
      // How often node:http enforces the two timeouts above (default 30 s).
      connectionsCheckingInterval: Math.min(1_000, options.requestTimeoutMs),
    },
    handler,
  );
  // Connection bookkeeping of node:http (headersTimeout, requestTimeout) starts on 'listening'; this server
  // never listens itself (the sniffer hands it sockets), so start it by hand.
  h1server.emit('listening');
  h1server.on('clientError', (e, socket) => {
    options.onConnectionError?.(e);
    // Answers still unread ahead of it: the client is not reading (a slowloris), a 400 would only wait behind them.
    if (socket.writable && socket.writableLength === 0)
      socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n');
    else socket.destroy();
  });

  // h2c on @idgen/h2 (the default): a stream is a probe, a fast-path call, or a call for connect-es's handlers.
  const useIdgenH2 = (options.http2Server ?? 'idgen') === 'idgen';
  const h2Connections = new Set<H2Connection>();
  /** Every counted @idgen/h2 stream's close: out of the deadline queue (its ticket is its `context`), one fewer in flight. */
  const onH2Close = (_code: number, stream: H2Stream): void => {
    if (h2Deadlines.remove(stream.context as number, stream)) requestDone();
  };
  const onH2Stream = (stream: H2Stream): void => {
    const path = pathOf(stream.path);
    if (path === HEALTHZ_PATH || path === READYZ_PATH) {
      const answer = probe(stream.method, path);
      const head = stream.method === 'HEAD';
      stream.respond(answer.status, answer.headers, head);
      if (!head) stream.end(Buffer.from(answer.body));
      return;
    }
    inFlight++;
    stream.context = h2Deadlines.add(stream, performance.now() + options.requestTimeoutMs);
    stream.onclose = onH2Close;
    if (fast !== undefined && path === fast.path && fast.h2(stream)) return;
    const universal = handlers.get(path);
    if (universal === undefined) {
      stream.respond(404, { 'content-length': 0 }, true);
      return;
    }
    const contentType = stream.headers['content-type'] ?? null;
    // Every method served takes one request message (unary or server-streaming): connect-es gets the call once its
    // body is complete, collected here until then (up to the body limit plus a frame's worth, as the body queue of
    // h2-universal.ts allows). A call held open without a body then costs its stream until the request deadline,
    // not connect-es's machinery: 38,400 held GetStatus calls (300 connections × 128) took 1.6 GB inside connect-es
    // and starved the event loop.
    let body: Buffer[] | undefined;
    let bodyBytes = 0;
    stream.ondata = (chunk) => {
      bodyBytes += chunk.length;
      if (bodyBytes > options.maxBodyBytes + 64 * 1024) {
        stream.reset(ErrorCode.ENHANCE_YOUR_CALM);
        return;
      }
      (body ??= []).push(Buffer.from(chunk)); // the chunk is a view of the connection's input
    };
    stream.onend = () => {
      const { request, abort } = universalRequestFromH2Stream(stream, options.maxBodyBytes);
      if (body !== undefined) for (const chunk of body) stream.ondata?.(chunk);
      body = undefined;
      stream.onend?.();
      connectCalls.add(abort);
      // A reset (or the connection going) aborts connect-es's call.
      stream.onclose = (code) => {
        connectCalls.delete(abort);
        onH2Close(code, stream);
        if (code !== ErrorCode.NO_ERROR) abort(connectErrorFromResetCode(code));
      };
      universal(request)
        .then((uRes) => reclassifyDecodeError(uRes, contentType))
        .then((uRes) => universalResponseToH2Stream(uRes, stream))
        .catch((reason: unknown) => {
          if (ConnectError.from(reason).code === Code.Aborted || stream.isClosed) return;
          options.onHandlerError?.(reason);
          if (stream.isResponded) stream.reset(ErrorCode.INTERNAL_ERROR);
          else if (contentType?.startsWith('application/grpc') === true)
            stream.respond(200, grpcFailureHeaders(contentType, reason), true);
          else stream.respond(500, { 'content-length': 0 }, true);
        });
    };
  };
  const serveIdgenH2 = (socket: Socket): void => {
    const connection = new H2Connection(socket, onH2Stream, {
      maxConcurrentStreams: 128,
      maxHeaderListSize: 16 * 1024,
      maxHeaderPairs: 64,
      initialWindowSize: 64 * 1024,
      ...(options.prefaceTimeoutMs === undefined ? {} : { prefaceTimeoutMs: options.prefaceTimeoutMs }),
      ...(options.idleTimeoutMs === undefined ? {} : { idleTimeoutMs: options.idleTimeoutMs }),
      ...(options.stalledWriteTimeoutMs === undefined ? {} : { stalledWriteTimeoutMs: options.stalledWriteTimeoutMs }),
      onError: (e) => options.onConnectionError?.(e),
      onRefusal: options.onRefusal,
    });
    h2Connections.add(connection);
    connection.onClose(() => h2Connections.delete(connection));
    if (closing) connection.close();
    socket.resume();
  };

  /**
   * TLS connections: node:tls's server does the handshake (within the request deadline) and client
   * verification on sockets the listener hands it; then HTTP/2 or HTTP/1.1 as ALPN chose.
   */
  const tlsServer =
    options.tls === undefined
      ? undefined
      : createTlsServer({
          ...options.tls.contextOptions(),
          ALPNProtocols: ['h2', 'http/1.1'],
          requestCert: options.tls.requestCert,
          rejectUnauthorized: options.tls.requestCert,
          handshakeTimeout: options.requestTimeoutMs,
        });
  if (tlsServer !== undefined && options.tls !== undefined) {
    const tls = options.tls;
    tls.onReload(() => tlsServer.setSecureContext(tls.contextOptions()));
    tlsServer.on('tlsClientError', (e, socket) => {
      options.onTlsError?.(e);
      socket.destroy();
    });
    tlsServer.on('secureConnection', (secure: TLSSocket) => {
      if (!tls.allowed(secure)) {
        options.onRefusal?.('tls-client-refused');
        secure.destroy();
        return;
      }
      secure.on('error', (e) => options.onConnectionError?.(e));
      if (secure.alpnProtocol === 'h2') {
        if (useIdgenH2) serveIdgenH2(secure);
        else h2server.emit('connection', secure);
      } else {
        serveHttp1(secure);
      }
    });
  }

  const idleMs = options.idleTimeoutMs ?? 60_000;
  const stalledMs = options.stalledWriteTimeoutMs ?? STALLED_WRITER_MS;
  const server = createNetServer((socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => {
      sockets.delete(socket);
      writers.delete(socket);
    });
    socket.on('error', (e) => options.onConnectionError?.(e));
    // No traffic for idleMs: close (an idle or half-open connection must not be held forever).
    socket.setTimeout(idleMs, () => socket.destroy());
    if (closing) {
      socket.destroy();
      return;
    }
    if (tlsServer !== undefined) {
      tlsServer.emit('connection', socket);
      return;
    }
    let head: Buffer = Buffer.alloc(0);
    // A connection must say which protocol it speaks within the request deadline.
    const sniffDeadline = setTimeout(() => socket.destroy(), options.requestTimeoutMs);
    sniffDeadline.unref();
    socket.once('close', () => clearTimeout(sniffDeadline));
    const sniff = (chunk: Buffer): void => {
      head = head.length === 0 ? chunk : Buffer.concat([head, chunk]);
      if (head.length < 3) return;
      clearTimeout(sniffDeadline);
      socket.off('data', sniff);
      socket.pause();
      if (head.toString('latin1', 0, 3) !== 'PRI' && !admitRead(socket, head)) return;
      socket.unshift(head);
      if (head.toString('latin1', 0, 3) === 'PRI') {
        // The http2 session reads the unshifted bytes itself on the next tick: do not resume here.
        if (useIdgenH2) serveIdgenH2(socket);
        else h2server.emit('connection', socket);
      } else {
        serveHttp1(socket);
        socket.resume();
      }
    };
    socket.on('data', sniff);
  });
  server.maxConnections = options.maxConnections ?? 4_096;
  server.on('drop', () => options.onRefusal?.('connection-limit'));
  // A connection error (bad SETTINGS length, bad header compression, DATA on an idle stream: found by fuzzing,
  // apps/server/test/fuzz-wire.spec.ts) makes nghttp2 send GOAWAY and stop reading the socket, and node:http2 says nothing
  // (no 'error', 'goaway' or 'frameError' on the session, no state to read): the socket would be held until the
  // 60 s idle timeout even after the peer left, since a socket that is not read never sees the close. So every
  // second, a session that has read no byte for `probeMs` gets a PING (RFC 9113 §6.7: a live peer must ACK it,
  // and node's clients do so by themselves); one that has still read nothing `probeMs` after the PING is
  // destroyed. A live idle connection costs one PING per idle spell; a dead one lives about 2 × probeMs.
  const probeMs = options.http2ProbeMs ?? 2_000;
  const probes = new Map<Http2Session, { bytesRead: number; since: number; pingedAt: number | undefined }>();
  const noop = (): void => undefined;
  // Sockets with output waiting: how much of it the peer had taken (flushed to the kernel) and since when.
  const writers = new Map<Socket, { flushed: number; since: number }>();
  const sweep = setInterval(
    () => {
      const now = Date.now();
      for (const socket of sockets) {
        const waiting = socket.writableLength;
        if (waiting === 0) {
          writers.delete(socket);
          continue;
        }
        const flushed = (socket.bytesWritten ?? 0) - waiting;
        const seen = writers.get(socket);
        if (seen === undefined || seen.flushed !== flushed) {
          writers.set(socket, { flushed, since: now });
        } else if (now - seen.since >= stalledMs) {
          writers.delete(socket);
          options.onRefusal?.('stalled-writer');
          socket.destroy();
        }
      }
      for (const [session, probe] of probes) {
        if (session.destroyed) continue;
        const bytesRead = session.socket?.bytesRead ?? 0;
        if (bytesRead !== probe.bytesRead) {
          probe.bytesRead = bytesRead;
          probe.since = now;
          probe.pingedAt = undefined;
        } else if (probe.pingedAt === undefined) {
          if (now - probe.since < probeMs) continue;
          probe.pingedAt = now;
          try {
            session.ping(noop);
          } catch {
            probe.pingedAt = now - probeMs; // cannot even ping (closing): destroy on the next sweep
          }
        } else if (now - probe.pingedAt >= probeMs) {
          session.destroy();
        }
      }
    },
    Math.min(1_000, probeMs),
  );
  sweep.unref();
  let streamTableWarned = false;
  h2server.on('session', (session: ServerHttp2Session) => {
    const table = installStreamTable(session);
    if (!table.installed && !streamTableWarned) {
      streamTableWarned = true;
      options.onStreamTableUnavailable?.(table.why);
    }
    sessions.add(session);
    probes.set(session, { bytesRead: -1, since: Date.now(), pingedAt: undefined });
    session.once('close', () => {
      sessions.delete(session);
      probes.delete(session);
    });
    session.on('error', (e) => options.onConnectionError?.(e));
    if (closing) session.close();
  });
  h2server.on('sessionError', (e) => options.onConnectionError?.(e));

  return {
    probe: (method, path) => (path === HEALTHZ_PATH || path === READYZ_PATH ? probe(method, path) : undefined),
    listen(listen) {
      return new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(listen.port, listen.host, () => {
          server.off('error', reject);
          const a = server.address();
          resolve(typeof a === 'object' && a !== null ? { host: a.address, port: a.port } : listen);
        });
      });
    },
    inFlight: () => inFlight,
    async close(timeoutMs) {
      closing = true;
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const s of sessions) s.close();
      for (const c of h2Connections) c.close();
      h1server.closeIdleConnections();
      if (inFlight > 0) {
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, timeoutMs);
          t.unref();
          drained = () => {
            clearTimeout(t);
            resolve();
          };
        });
      }
      const left = inFlight;
      const shuttingDown = new ConnectError('the server is shutting down', Code.Unavailable);
      for (const abort of connectCalls) abort(shuttingDown);
      connectCalls.clear();
      for (const s of sessions) s.destroy();
      for (const c of h2Connections) c.destroy();
      for (const s of sockets) s.destroy();
      h1server.close(() => undefined);
      clearInterval(sweep);
      clearInterval(deadlineSweep);
      await closed;
      return left;
    },
  };
}
