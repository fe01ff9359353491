import type { IncomingHttpHeaders } from 'node:http';
import type { Socket } from 'node:net';
import type { ConnectError, ConnectRouter, Interceptor } from '@connectrpc/connect';
import type { H2RefusalReason } from '@idgen/h2';
import { Dispatcher, isProbePath, type ProbeAnswer } from './dispatcher.js';
import { Http1Front } from './front-http1.js';
import { IdgenH2Front } from './front-idgen-h2.js';
import { NodeHttp2Front } from './front-node-http2.js';
import type { HostPort } from './host-port.js';
import { Listener } from './listener.js';
import { SERVING_LIMITS } from './limits.js';
import type { NextIdsCodec } from './nextids-codec.js';
import type { Responder } from './responder.js';
import type { WireBlock } from './service.js';
import type { TlsServing } from './tls.js';
import { resolveTransportSettings } from './transport-settings.js';

// The serving port's transport, in rooms (as connect-node splits its adapter from its universal handler):
// dispatcher.ts (routes, probes, readiness, deadlines, in-flight count), front-idgen-h2.ts (@idgen/h2),
// front-http1.ts (node:http), front-node-http2.ts (the node:http2 fallback, deletable with its option),
// listener.ts (the socket: sniffing, TLS, the connection cap, the stalled-writer sweep) and
// transport-settings.ts (every setting and default). This file puts them together.

export { DESCRIPTOR_HEADROOM, connectionCap, openFilesLimit } from './listener.js';
export { HEALTHZ_PATH, READYZ_PATH, type ProbeAnswer } from './dispatcher.js';
export { MAX_PIPELINED_PER_TURN, headerEnds } from './front-http1.js';

/**
 * A request answered before connect-es (fast-path.ts), independent of the transport: each front end asks it for the
 * codec of a request on its path (undefined: the request goes to connect-es), reads the body up to
 * `maxBodyBytes`, and hands it to `mint`; the answer is written through the transport's {@link Responder}.
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

/**
 * Which HTTP/2 implementation serves h2c connections: `idgen` (@idgen/h2, framed by hand on node:net, the
 * default) or `node` (node:http2). See @idgen/h2's README for why there are two.
 */
export type Http2Server = 'idgen' | 'node';

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
  /** A connection with no traffic for this long is closed. Default SERVING_LIMITS' (30 s), what the serving port passes. */
  readonly idleTimeoutMs?: number;
  /** An HTTP/2 connection without its preface and SETTINGS after this long is closed. Default 4 s (@idgen/h2). */
  readonly prefaceTimeoutMs?: number;
  /** A connection whose peer takes none of its output for this long is cut. Default {@link STALLED_WRITER_MS}. */
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
   * {@link TRANSPORT_DEFAULTS}.fairShareStreams of its own is refused (REFUSED_STREAM, reason `stream-budget`,
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

/** The serving port's transport ({@link createServingServer}). */
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
 * A socket with output waiting that the peer has not taken a byte of for this long is destroyed: a client that
 * sends requests and never reads the answers (an HTTP/1.1 slowloris) must not hold a connection and its buffers. The
 * same bound as @idgen/h2's stalled writer (SERVING_LIMITS' default).
 */
export const STALLED_WRITER_MS = SERVING_LIMITS.stalledWriteTimeoutMs.default;

/**
 * The serving server: a {@link Dispatcher} shared by three front ends and a {@link Listener}. Closing runs in
 * the order the parts depend on: refuse, ask to go away, drain (bounded), abort what is left, destroy.
 */
class TransportServer implements ServingServer {
  private readonly dispatcher: Dispatcher;
  private readonly idgenH2: IdgenH2Front | undefined;
  private readonly nodeH2: NodeHttp2Front | undefined;
  private readonly http1: Http1Front;
  private readonly listener: Listener;

  constructor(options: ServingServerOptions) {
    const settings = resolveTransportSettings(options);
    this.dispatcher = new Dispatcher(options, settings);
    this.http1 = new Http1Front(this.dispatcher, options, settings);
    let h2: (socket: Socket) => void;
    if ((options.http2Server ?? 'idgen') === 'idgen') {
      const front = new IdgenH2Front(this.dispatcher, options, settings);
      this.idgenH2 = front;
      h2 = (socket) => front.serve(socket);
    } else {
      const front = new NodeHttp2Front(this.dispatcher, options, settings);
      this.nodeH2 = front;
      h2 = (socket) => front.serve(socket);
    }
    this.listener = new Listener(this.dispatcher, options, settings, { h2, http1: this.http1 });
  }

  probe(method: string | undefined, path: string): ProbeAnswer | undefined {
    return isProbePath(path) ? this.dispatcher.probe(method, path) : undefined;
  }

  listen(listen: HostPort): Promise<HostPort> {
    return this.listener.listen(listen);
  }

  inFlight(): number {
    return this.dispatcher.inFlight;
  }

  async close(timeoutMs: number): Promise<number> {
    this.dispatcher.closing = true;
    const closed = this.listener.close();
    this.nodeH2?.close();
    this.idgenH2?.close();
    this.http1.closeIdle();
    await this.dispatcher.drain(timeoutMs);
    const left = this.dispatcher.inFlight;
    this.dispatcher.stop();
    this.nodeH2?.destroy();
    this.idgenH2?.destroy();
    this.listener.destroy();
    this.http1.close();
    await closed;
    return left;
  }
}

/**
 * Creates the serving server: HTTP/1.1 (node:http) and h2c or TLS HTTP/2 (@idgen/h2, or node:http2) on one port,
 * Connect + gRPC + gRPC-Web + probes. HTTP/2 settings are bounded so one client cannot hold much memory, on either
 * implementation (transport-settings.ts `HTTP2_SETTINGS`).
 */
export function createServingServer(options: ServingServerOptions): ServingServer {
  return new TransportServer(options);
}
