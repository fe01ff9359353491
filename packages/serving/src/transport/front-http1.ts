import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { ConnectError } from '@connectrpc/connect';
import type { NextIdsCodec } from '../nextids-codec.js';
import { readNodeFastBody } from './body-readers.js';
import type { FastPath, Responder, ServingServerOptions } from './contracts.js';
import type { Dispatcher } from './dispatcher.js';
import { countNodeRequest, serveNodeConnect, writeNotFound, writeProbe } from './node-connect.js';
import { HTTP1_SETTINGS, type TransportSettings } from './transport-settings.js';

/**
 * Most HTTP/1.1 requests one connection may have answered in one turn of the event loop (pipelined in what one
 * read brought). A client sending requests by the megabyte without reading the answers had node:http parse and
 * answer ~1,800 of them per 64 KB read on each of its connections, the loop late by seconds for everyone else;
 * no real client pipelines this deep (browsers and undici do not pipeline at all by default). One
 * over: the connection is destroyed (counted as `http1-pipelining`).
 */
export const MAX_PIPELINED_PER_TURN = 64;
const kTurn = Symbol('idgen.turn');
const kPipelined = Symbol('idgen.pipelined');
type CountedSocket = Socket & { [kTurn]?: number; [kPipelined]?: number };

const CRLFCRLF = Buffer.from('\r\n\r\n', 'latin1');
/** How many requests' header ends (`\r\n\r\n`) `chunk` holds, counting up to `limit`. */
export function headerEnds(chunk: Buffer, limit: number): number {
  let n = 0;
  for (let at = chunk.indexOf(CRLFCRLF); at >= 0 && n < limit; at = chunk.indexOf(CRLFCRLF, at + 4)) n++;
  return n;
}

/** At its deadline, an HTTP/1.1 request's connection goes (its body may be what never came). */
function cancelHttp1(req: IncomingMessage): void {
  req.socket.destroy();
}

/**
 * Stops reading a body we will not use: the connection ends after the answer. Call before the answer is
 * written: the answer must say `connection: close`, or a keep-alive client sends its next request into the
 * socket we are about to cut and loses it (RFC 9112 §9.6).
 */
export function dropRestHttp1(req: IncomingMessage, res: ServerResponse): void {
  if (!res.headersSent) res.setHeader('connection', 'close');
  const cut = (): void => {
    req.socket.destroy();
  };
  if (res.writableFinished) cut();
  else res.once('finish', cut);
}

/** The fast path's answers on node:http (Connect only: gRPC needs HTTP/2). */
export const HTTP1_RESPONDER: Responder<ServerResponse> = {
  gone: (res) => res.destroyed,
  ok(res: ServerResponse, codec: NextIdsCodec, body: string | Buffer): void {
    const length = typeof body === 'string' ? Buffer.byteLength(body) : body.length;
    res.writeHead(200, { 'content-type': codec.contentType, 'content-length': length });
    res.end(body);
  },
  error(res: ServerResponse, codec: NextIdsCodec, error: ConnectError, dropBody: boolean): void {
    if (dropBody) dropRestHttp1(res.req, res);
    if (res.headersSent) {
      res.end();
      return;
    }
    const answer = codec.encodeError(error);
    res.writeHead(answer.status, answer.headers);
    res.end(answer.body);
  },
};

/** The fast path's request on node:http: its body read, the IDs answered through {@link HTTP1_RESPONDER}. */
function readFastHttp1(fast: FastPath, codec: NextIdsCodec, req: IncomingMessage, res: ServerResponse): void {
  readNodeFastBody(fast, codec, HTTP1_RESPONDER, res, { headers: req.headers, body: req, owner: req.socket }, () => {
    // Not 1*DIGIT: the request's framing cannot be trusted, so 400 and the connection closed.
    dropRestHttp1(req, res);
    res.writeHead(400, { 'content-length': 0 });
    res.end();
  });
}

/** HTTP/1.1 on node:http (Connect JSON from curl and browsers, gRPC-Web), plaintext or TLS `http/1.1`. */
export class Http1Front {
  private readonly server: Server;
  // The event loop's turn, for MAX_PIPELINED_PER_TURN: bumped by an immediate scheduled by the first HTTP/1.1
  // request of a turn.
  private turn = 0;
  private turnScheduled = false;

  constructor(
    private readonly dispatcher: Dispatcher,
    private readonly options: ServingServerOptions,
    private readonly settings: TransportSettings,
  ) {
    this.server = createServer(
      {
        maxHeaderSize: HTTP1_SETTINGS.maxHeaderSize,
        requestTimeout: settings.requestTimeoutMs,
        headersTimeout: Math.min(HTTP1_SETTINGS.headersTimeoutMs, settings.requestTimeoutMs),
        keepAliveTimeout: HTTP1_SETTINGS.keepAliveTimeoutMs,
        // How often node:http enforces the two timeouts above (default 30 s).
        connectionsCheckingInterval: Math.min(HTTP1_SETTINGS.connectionsCheckingIntervalMs, settings.requestTimeoutMs),
      },
      this.handle,
    );
    // Connection bookkeeping of node:http (headersTimeout, requestTimeout) starts on 'listening'; this server
    // never listens itself (the listener hands it sockets), so start it by hand.
    this.server.emit('listening');
    this.server.on('clientError', (e, socket) => {
      options.onConnectionError?.(e);
      // Answers still unread ahead of it: the client is not reading (a slowloris), a 400 would only wait behind them.
      if (socket.writable && socket.writableLength === 0)
        socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n');
      else socket.destroy();
    });
  }

  /**
   * False (and the socket destroyed, counted as `http1-pipelining`) for a read of an HTTP/1.1 connection holding
   * more requests than {@link MAX_PIPELINED_PER_TURN}: node:http parses a whole read at once, a request and a
   * response object for each of the ~1,800 pipelined requests 64 KB hold, before admitHttp1 sees the 65th; under
   * a flood that garbage took the RSS past 500 MB on Node 24 (test/abuse-serving.spec.ts). Refused unparsed.
   */
  admitRead(socket: Socket, chunk: Buffer): boolean {
    if (headerEnds(chunk, MAX_PIPELINED_PER_TURN + 1) <= MAX_PIPELINED_PER_TURN) return true;
    this.options.onRefusal?.('http1-pipelining');
    socket.destroy();
    return false;
  }

  /**
   * Hands an HTTP/1.1 connection to node:http with every read checked by {@link admitRead} first: its reads reach
   * node:http as 'data' events (node:http's parser does not consume the handle in C++, which it does only for a
   * handle not yet marked consumed) through the socket's `push`, checked on the way.
   */
  serve(socket: Socket): void {
    const handle = (socket as unknown as { _handle?: { _consumed?: boolean } | null })._handle;
    if (handle !== undefined && handle !== null) handle._consumed = true;
    const push = socket.push.bind(socket);
    socket.push = (chunk: unknown, encoding?: BufferEncoding): boolean =>
      Buffer.isBuffer(chunk) && !this.admitRead(socket, chunk) ? false : push(chunk, encoding);
    this.server.emit('connection', socket);
  }

  /** Closes the connections waiting for a request (a shutdown begins). */
  closeIdle(): void {
    this.server.closeIdleConnections();
  }

  /** Stops node:http's connection bookkeeping (a shutdown's end; the sockets are the listener's to destroy). */
  close(): void {
    this.server.close(() => undefined);
  }

  /** False (and the socket destroyed) for an HTTP/1.1 request over the pipelining bound, or on a socket already gone. */
  private admitHttp1(socket: CountedSocket): boolean {
    if (socket.destroyed) return false;
    if (!this.turnScheduled) {
      this.turnScheduled = true;
      setImmediate(this.nextTurn);
    }
    if (socket[kTurn] !== this.turn) {
      socket[kTurn] = this.turn;
      socket[kPipelined] = 1;
      return true;
    }
    const n = (socket[kPipelined] ?? 0) + 1;
    socket[kPipelined] = n;
    if (n <= MAX_PIPELINED_PER_TURN) return true;
    this.options.onRefusal?.('http1-pipelining');
    socket.destroy();
    return false;
  }

  private readonly nextTurn = (): void => {
    this.turn++;
    this.turnScheduled = false;
  };

  private readonly handle = (req: IncomingMessage, res: ServerResponse): void => {
    if (!this.admitHttp1(req.socket as CountedSocket)) return;
    const route = this.dispatcher.route(req.method, req.url, req.headers, false);
    if (route.kind === 'probe') {
      writeProbe(req, res, route.answer);
      return;
    }
    if (this.dispatcher.closing) res.setHeader('connection', 'close');
    countNodeRequest(
      req,
      res,
      this.settings.requestTimeoutMs,
      this.dispatcher,
      this.options.onRequestTimeout,
      cancelHttp1,
    );
    if (route.kind === 'fast') readFastHttp1(route.fast, route.codec, req, res);
    else if (route.kind === 'connect')
      serveNodeConnect(route.handler, req, res, undefined, this.options.onHandlerError);
    else writeNotFound(req, res);
  };
}
