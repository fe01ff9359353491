import {
  constants as h2,
  createServer,
  type Http2Server as NodeHttp2Server,
  type Http2ServerRequest,
  type Http2ServerResponse,
  type Http2Session,
  type IncomingHttpHeaders,
  type ServerHttp2Session,
  type ServerHttp2Stream,
} from 'node:http2';
import type { Socket } from 'node:net';
import type { ConnectError } from '@connectrpc/connect';
import type { NextIdsCodec } from '../nextids-codec.js';
import { collectNodeBody, readNodeFastBody } from './body-readers.js';
import type { FastPath, Responder, Route, ServingServerOptions } from './contracts.js';
import { DeadlineQueue } from './deadline-queue.js';
import type { Dispatcher } from './dispatcher.js';
import { countNodeRequest, serveNodeConnect, writeNotFound, writeProbe } from './node-connect.js';
import { installStreamTable } from './stream-table.js';
import { HTTP2_SETTINGS, TRANSPORT_DEFAULTS, type TransportSettings } from './transport-settings.js';

// The node:http2 fallback (`http2Server: 'node'`), all of it in this file: the server and its settings, the compat
// requests, the fast path on the core stream API with its deadline queue, the stream table work-around, and the
// PING probes of silent sessions. Deleting the fallback is deleting this file and the option.

const kDeadlineTicket = Symbol('idgen.deadlineTicket');
type TicketedStream = ServerHttp2Stream & { [kDeadlineTicket]?: number };
/** The route of a stream left to the compat layer, decided once in the 'stream' listener and read by `handle`. */
const kRoute = Symbol('idgen.route');
type RoutedStream = ServerHttp2Stream & { [kRoute]?: Route };

/** The 'stream' listener node:http2 installs for its compat API ('request' events). */
type StreamListener = (
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  flags: number,
  rawHeaders: string[],
) => void;

/** At its deadline, a compat request's stream is cancelled; the session lives on. */
function cancelCompat(req: Http2ServerRequest): void {
  req.stream.close(h2.NGHTTP2_CANCEL);
}

const noop = (): void => undefined;

/** `this` is the stream whose body ended: the gRPC status of a success travels in trailers. */
function sendGrpcOk(this: ServerHttp2Stream): void {
  this.sendTrailers({ 'grpc-status': '0' });
}

/**
 * The fast path's answers on node:http2's core stream API: gRPC errors as trailers-only (the status in the headers
 * of an empty stream), Connect as its JSON error. `dropBody`: the request body is not read to its end, so the
 * stream is closed (RST_STREAM NO_ERROR, RFC 9113 §8.1) once the answer is out.
 */
export const NODE_HTTP2_RESPONDER: Responder<ServerHttp2Stream> = {
  gone: (stream) => stream.closed || stream.destroyed,
  ok(stream: ServerHttp2Stream, codec: NextIdsCodec, body: string | Buffer): void {
    if (codec.grpc) {
      stream.respond({ [h2.HTTP2_HEADER_STATUS]: 200, 'content-type': codec.contentType }, { waitForTrailers: true });
      stream.on('wantTrailers', sendGrpcOk);
      stream.end(body);
      return;
    }
    stream.respond({
      [h2.HTTP2_HEADER_STATUS]: 200,
      'content-type': codec.contentType,
      'content-length': typeof body === 'string' ? Buffer.byteLength(body) : body.length,
    });
    stream.end(body);
  },
  error(stream: ServerHttp2Stream, codec: NextIdsCodec, error: ConnectError, dropBody: boolean): void {
    if (stream.closed || stream.destroyed) return;
    if (stream.headersSent) {
      stream.close(h2.NGHTTP2_INTERNAL_ERROR);
      return;
    }
    const cut = dropBody ? () => stream.close(h2.NGHTTP2_NO_ERROR) : undefined;
    const answer = codec.encodeError(error);
    if (answer.body === undefined) {
      stream.respond({ ...answer.headers, [h2.HTTP2_HEADER_STATUS]: answer.status }, { endStream: true });
      cut?.();
      return;
    }
    stream.respond({ ...answer.headers, [h2.HTTP2_HEADER_STATUS]: answer.status });
    stream.end(answer.body, cut);
  },
};

/** The fast path's reader on node:http2's core stream API (not its compat request/response objects). */
function readFastHttp2(
  fast: FastPath,
  codec: NextIdsCodec,
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
): void {
  const request = { headers, body: stream, owner: stream.session ?? stream };
  // A malformed content-length (RFC 9113 §8.1.1) is a PROTOCOL_ERROR reset; nghttp2 refuses it first.
  readNodeFastBody(fast, codec, NODE_HTTP2_RESPONDER, stream, request, () => stream.close(h2.NGHTTP2_PROTOCOL_ERROR));
}

/** What is known of a session's reads, for the probe: bytes read when last seen, since when, when PINGed. */
interface SessionProbe {
  bytesRead: number;
  since: number;
  pingedAt: number | undefined;
}

/** h2c and TLS `h2` connections on node:http2 (`http2Server: 'node'`). */
export class NodeHttp2Front {
  private readonly server: NodeHttp2Server;
  private readonly sessions = new Set<Http2Session>();
  private readonly probes = new Map<Http2Session, SessionProbe>();
  // Fast-path streams still open, with their deadlines (performance.now() ms), oldest first; each stream carries
  // its ticket under `kDeadlineTicket`.
  private readonly deadlines = new DeadlineQueue<ServerHttp2Stream>();
  private readonly probeSweep: ReturnType<typeof setInterval>;
  private streamTableWarned = false;

  constructor(
    private readonly dispatcher: Dispatcher,
    private readonly options: ServingServerOptions,
    private readonly settings: TransportSettings,
  ) {
    this.server = createServer(
      {
        settings: {
          maxConcurrentStreams: HTTP2_SETTINGS.maxConcurrentStreams,
          maxHeaderListSize: HTTP2_SETTINGS.maxHeaderListSize,
          initialWindowSize: HTTP2_SETTINGS.initialWindowSize,
          enablePush: false,
        },
        maxSessionMemory: 16,
        maxHeaderListPairs: HTTP2_SETTINGS.maxHeaderPairs,
        peerMaxConcurrentStreams: HTTP2_SETTINGS.maxConcurrentStreams,
      },
      this.handle,
    );
    this.routeStreamsFirst();
    this.server.on('session', (session: ServerHttp2Session) => this.onSession(session));
    this.server.on('sessionError', (e) => options.onConnectionError?.(e));
    dispatcher.onDeadlineSweep((now) => this.deadlines.expire(now, this.cancelLate));
    this.probeSweep = setInterval(() => this.sweepProbes(Date.now()), settings.connectionSweepMs);
    this.probeSweep.unref();
  }

  /** Serves an HTTP/2 connection: the session reads the bytes unshifted onto `socket` itself, on the next tick. */
  serve(socket: Socket): void {
    this.server.emit('connection', socket);
  }

  /** GOAWAY on every session (a shutdown begins). */
  close(): void {
    for (const s of this.sessions) s.close();
  }

  /** Every session gone, the probe sweep stopped (a shutdown's end). */
  destroy(): void {
    for (const s of this.sessions) s.destroy();
    clearInterval(this.probeSweep);
  }

  private onSession(session: ServerHttp2Session): void {
    const table = installStreamTable(session);
    if (!table.installed && !this.streamTableWarned) {
      this.streamTableWarned = true;
      this.options.onStreamTableUnavailable?.(table.why);
    }
    this.sessions.add(session);
    this.probes.set(session, { bytesRead: -1, since: Date.now(), pingedAt: undefined });
    session.once('close', () => {
      this.sessions.delete(session);
      this.probes.delete(session);
    });
    session.on('error', (e) => this.options.onConnectionError?.(e));
    if (this.dispatcher.closing) session.close();
  }

  /**
   * A connection error (bad SETTINGS length, bad header compression, DATA on an idle stream: found by fuzzing,
   * apps/server/test/fuzz-wire.spec.ts) makes nghttp2 send GOAWAY and stop reading the socket, and node:http2 says
   * nothing (no 'error', 'goaway' or 'frameError' on the session, no state to read): the socket would be held until
   * the idle timeout even after the peer left, since a socket that is not read never sees the close. So every
   * sweep, a session that has read no byte for `http2ProbeMs` gets a PING (RFC 9113 §6.7: a live peer must ACK it,
   * and node's clients do so by themselves); one that has still read nothing `http2ProbeMs` after the PING is
   * destroyed. A live idle connection costs one PING per idle spell; a dead one lives about 2 × http2ProbeMs.
   */
  private sweepProbes(now: number): void {
    const probeMs = this.settings.http2ProbeMs;
    for (const [session, probe] of this.probes) {
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
  }

  /**
   * Every HTTP/2 stream is routed (Dispatcher.route) before node:http2's compat layer builds a request and response
   * for it, so the fast path answers on the core stream API (fast-path.ts: why). That layer is the one 'stream'
   * listener the server installed for `handle`: it is taken off and called only for the streams the fast path
   * leaves, with their route kept on the stream, so `handle` serves them without deciding again.
   */
  private routeStreamsFirst(): void {
    const compat = this.server.listeners('stream') as StreamListener[];
    const serveCompat = compat[0];
    if (compat.length !== 1 || serveCompat === undefined) {
      throw new Error(
        `node:http2 changed: expected its compat layer as the one 'stream' listener, found ${compat.length}`,
      );
    }
    this.server.removeListener('stream', serveCompat);
    const { onFastStreamClose, onFastStreamError } = this;
    this.server.on(
      'stream',
      (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, flags: number, rawHeaders: string[]) => {
        // Pseudo-headers: one value each.
        const method = headers[h2.HTTP2_HEADER_METHOD] as string | undefined;
        const route = this.dispatcher.route(method, headers[h2.HTTP2_HEADER_PATH] as string | undefined, headers, true);
        if (route.kind !== 'fast') {
          (stream as RoutedStream)[kRoute] = route;
          serveCompat(stream, headers, flags, rawHeaders);
          return;
        }
        // Listeners first: the fast path may answer (and the stream close) before it returns.
        stream.on('error', onFastStreamError);
        stream.on('close', onFastStreamClose);
        this.dispatcher.requestStarted();
        (stream as TicketedStream)[kDeadlineTicket] = this.deadlines.add(
          stream,
          performance.now() + this.settings.requestTimeoutMs,
        );
        readFastHttp2(route.fast, route.codec, stream, headers);
      },
    );
  }

  /** A fast-path stream's close (`this` is the stream): out of the deadline queue, one fewer in flight. */
  private readonly onFastStreamClose = ((front: NodeHttp2Front) =>
    function onFastStreamClose(this: ServerHttp2Stream): void {
      const ticket = (this as TicketedStream)[kDeadlineTicket];
      if (ticket !== undefined && front.deadlines.remove(ticket, this)) front.dispatcher.requestDone();
    })(this);

  /** A caller that resets its stream (or goes away) mid-request: the stream closes; nothing else to do. */
  private readonly onFastStreamError = (e: Error): void => {
    this.options.onConnectionError?.(e);
  };

  /** The late cancel: a fast-path stream still open at its deadline. */
  private readonly cancelLate = (stream: ServerHttp2Stream): void => {
    this.dispatcher.requestLate();
    stream.close(h2.NGHTTP2_CANCEL);
  };

  /** A compat request (every HTTP/2 request the fast path left), on the route its stream was given. */
  private readonly handle = (req: Http2ServerRequest, res: Http2ServerResponse): void => {
    const route = (req.stream as RoutedStream)[kRoute] ?? this.dispatcher.route(req.method, req.url, req.headers, true);
    if (route.kind === 'probe') {
      writeProbe(req, res, route.answer);
      return;
    }
    countNodeRequest(
      req,
      res,
      this.settings.requestTimeoutMs,
      this.dispatcher,
      this.options.onRequestTimeout,
      cancelCompat,
    );
    if (route.kind !== 'connect') {
      writeNotFound(req, res);
      return;
    }
    // As on @idgen/h2 (front-idgen-h2.ts): connect-es gets an HTTP/2 call once its body is complete (body-readers.ts).
    const stream = req.stream;
    collectNodeBody(
      req,
      this.settings.maxBodyBytes + TRANSPORT_DEFAULTS.bodySlackBytes,
      () => stream.close(h2.NGHTTP2_ENHANCE_YOUR_CALM),
      (body) => {
        if (!stream.closed && !stream.destroyed)
          serveNodeConnect(route.handler, req, res, body, this.options.onHandlerError);
      },
    );
  };
}
