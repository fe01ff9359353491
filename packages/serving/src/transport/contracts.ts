import type { IncomingHttpHeaders } from 'node:http';
import type { ConnectError, ConnectRouter, Interceptor } from '@connectrpc/connect';
import type { UniversalHandler } from '@connectrpc/connect/protocol';
import type { H2RefusalReason } from '@idgen/h2';
import type { HostPort } from '../host-port.js';
import type { NextIdsCodec } from '../nextids-codec.js';
import type { WireBlock } from '../service.js';
import type { TlsServing } from '../tls.js';

// The serving transport's contracts, in a leaf (as connect-es keeps its in protocol/universal.ts): every room of
// the transport (transport/*.ts) and the fast path (fast-path.ts) import these types from here, and this file
// imports no room, so no two rooms import each other through it.

/**
 * How a transport writes the fast path's answer (fast-path.ts): implemented once by each front end
 * (front-http1.ts, front-idgen-h2.ts, front-node-http2.ts) as one object for the life of the process, the request's
 * stream or response passed in as `target`, so answering through it allocates nothing per request.
 */
export interface Responder<T> {
  /** The caller went away (reset, disconnected, or its deadline answered): nothing is answered. */
  gone(target: T): boolean;
  /** 200 with the codec's content type and `body` (gRPC: `grpc-status: 0` in trailers). */
  ok(target: T, codec: NextIdsCodec, body: string | Buffer): void;
  /**
   * An error answer as the codec encodes it (an answer already begun is cut instead). `dropBody`: the request
   * body is not read to its end, and the transport stops reading it once the answer is out.
   */
  error(target: T, codec: NextIdsCodec, error: ConnectError, dropBody: boolean): void;
}

/**
 * A request answered before connect-es (fast-path.ts), independent of the transport: the dispatcher asks it for
 * the codec of a request on its path (undefined: the request goes to connect-es); the front end reads the body up
 * to `maxBodyBytes` (body-readers.ts) and hands it to `mint`; the answer is written through the front end's
 * {@link Responder}.
 */
export interface FastPath {
  /** The one path it answers. */
  readonly path: string;
  /** The largest request body it takes; a larger one is refused with {@link FastPath.refuse}. */
  readonly maxBodyBytes: number;
  /** The codec for a request it takes (by method and headers), undefined for one it leaves to connect-es. */
  codecFor(
    method: string | undefined,
    headers: IncomingHttpHeaders | Readonly<Record<string, string>>,
    http2: boolean,
  ): NextIdsCodec | undefined;
  /**
   * Mints for a complete request body (`owner`: the connection, for fairness; `abandoned`: has the caller gone?)
   * and calls `answer` with the blocks or the error, at once or when their millisecond comes. `answer` should call
   * {@link FastPath.answer}; it is the caller's closure so that it shares the reader's scope (no allocation more).
   */
  mint(
    codec: NextIdsCodec,
    body: Buffer,
    owner: object,
    abandoned: () => boolean,
    answer: (result: readonly WireBlock[] | ConnectError) => void,
  ): void;
  /** Writes the one answer through `responder` (nothing when the caller went away), counted. `start`: hrtime. */
  answer<T>(
    responder: Responder<T>,
    target: T,
    codec: NextIdsCodec,
    result: readonly WireBlock[] | ConnectError,
    start: bigint,
  ): void;
  /** Answers an error (a body over the limit) through `responder`, counted; `dropBody`: the body is not read to its end. */
  refuse<T>(
    responder: Responder<T>,
    target: T,
    codec: NextIdsCodec,
    error: ConnectError,
    start: bigint,
    dropBody: boolean,
  ): void;
}

/** A probe's answer (`/healthz`, `/readyz`): status, headers and a JSON body. */
export interface ProbeAnswer {
  readonly status: number;
  readonly headers: Record<string, string | number>;
  readonly body: string;
}

/**
 * Where a request goes, decided once by `Dispatcher.route` for every front end: a probe (answered as given), the
 * fast path with the codec it chose, connect-es with its handler for the path, or no such path (404). The front
 * ends only read the body the route needs and write its answer.
 */
export type Route =
  | { readonly kind: 'probe'; readonly answer: ProbeAnswer }
  | { readonly kind: 'fast'; readonly fast: FastPath; readonly codec: NextIdsCodec }
  | { readonly kind: 'connect'; readonly handler: UniversalHandler }
  | { readonly kind: 'not-found' };

/**
 * Which HTTP/2 implementation serves h2c connections: `idgen` (@idgen/h2, framed by hand on node:net, the
 * default) or `node` (node:http2). See @idgen/h2's README for why there are two.
 */
export type Http2Server = 'idgen' | 'node';

/** Options of `createServingServer` (transport/server.ts). */
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
  /** A connection with no traffic for this long is closed. Default SERVING_LIMITS' (30 s), what the serving port passes. */
  readonly idleTimeoutMs?: number;
  /** An HTTP/2 connection without its preface and SETTINGS after this long is closed. Default 4 s (@idgen/h2). */
  readonly prefaceTimeoutMs?: number;
  /** A connection whose peer takes none of its output for this long is cut. Default `STALLED_WRITER_MS`. */
  readonly stalledWriteTimeoutMs?: number;
  /**
   * An HTTP/2 connection that has sent nothing for this long is sent a PING; one that has still sent nothing
   * (not even the PING's ACK) this much later is destroyed. Default 2 s. node:http2 only (front-node-http2.ts).
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
   * Most requests in flight across the port on @idgen/h2 (streams being served, or answered and held by the
   * client's flow control). Past it, a stream on a connection with more than
   * `TRANSPORT_DEFAULTS.fairShareStreams` of its own is refused (REFUSED_STREAM, reason `stream-budget`,
   * counted toward the connection's refused-stream flood).
   * Default 2,048, far above what a node serving at its ceiling has in flight. Under the zero-window flood (300
   * connections × 128 NextIds(4096) held unread, cut connections opened again) the node peaked at 541 MB without a
   * budget, 402 MB with 8,192 and 327 MB with 2,048.
   */
  readonly maxStreamsInFlight?: number;
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

/** The serving port's transport (`createServingServer`, transport/server.ts). */
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
