import type { Socket } from 'node:net';
import { Code, ConnectError } from '@connectrpc/connect';
import type { UniversalHandler } from '@connectrpc/connect/protocol';
import { encodeHeaders, ErrorCode, H2Connection, type H2Stream } from '@idgen/h2';
import { DeadlineQueue } from './deadline-queue.js';
import { reclassifyDecodeError } from './decode-errors.js';
import { grpcFailureHeaders, isProbePath, pathOf, type Dispatcher } from './dispatcher.js';
import {
  connectErrorFromResetCode,
  universalRequestFromH2Stream,
  universalResponseToH2Stream,
} from './h2-universal.js';
import { BodyReader, declaredLength } from './fast-path.js';
import type { FastPath, ServingServerOptions } from './http.js';
import { tooLarge, type NextIdsCodec } from './nextids-codec.js';
import type { Responder } from './responder.js';
import { HTTP2_SETTINGS, TRANSPORT_DEFAULTS, type TransportSettings } from './transport-settings.js';

// Response header blocks of the fast path on @idgen/h2, HPACK-encoded once (not per request).
const GRPC_OK_HEADERS = encodeHeaders([
  [':status', '200'],
  ['content-type', 'application/grpc+proto'],
]);
const GRPC_OK_TRAILERS = encodeHeaders([['grpc-status', '0']]);
const connectBlocks = new Map<string, Buffer>();
/** The block for a Connect answer of `length` bytes; NextIds answers come in few lengths, so they are kept. */
function connectHeaders(type: string, length: number): Buffer {
  const key = type + length;
  const kept = connectBlocks.get(key);
  if (kept !== undefined) return kept;
  const block = encodeHeaders([
    [':status', '200'],
    ['content-type', type],
    ['content-length', String(length)],
  ]);
  if (connectBlocks.size < 256) connectBlocks.set(key, block);
  return block;
}

/**
 * The fast path's answers on @idgen/h2. A body not read to its end needs nothing more (`dropBody`): the connection
 * reads and drops the rest of a request answered before it ended (at most what is left of its stream window, then
 * RST_STREAM NO_ERROR, RFC 9113 §8.1), and the stream's `onclose` comes with the answer.
 */
export const H2_RESPONDER: Responder<H2Stream> = {
  gone: (stream) => stream.isClosed,
  ok(stream: H2Stream, codec: NextIdsCodec, body: string | Buffer): void {
    if (codec.grpc) {
      stream.respond(200, GRPC_OK_HEADERS);
      stream.end(body as Buffer, GRPC_OK_TRAILERS);
      return;
    }
    const bytes = typeof body === 'string' ? Buffer.from(body) : body;
    stream.respond(200, connectHeaders(codec.contentType, bytes.length));
    stream.end(bytes);
  },
  error(stream: H2Stream, codec: NextIdsCodec, error: ConnectError): void {
    if (stream.isClosed) return;
    if (stream.isResponded) {
      stream.reset(ErrorCode.INTERNAL_ERROR);
      return;
    }
    const answer = codec.encodeError(error);
    if (answer.body === undefined) {
      stream.respond(answer.status, answer.headers, true);
      return;
    }
    stream.respond(answer.status, answer.headers);
    stream.end(answer.body);
  },
};

/**
 * The fast path's reader on @idgen/h2: sets the stream's `ondata` and `onend` (its `onclose` is the front's).
 * Exported for micro-benchmarks, which drive it with a stand-in stream.
 */
export function takeFastH2(fast: FastPath, stream: H2Stream): boolean {
  const codec = fast.codecFor(stream.method, stream.headers, true);
  if (codec === undefined) return false;
  const start = process.hrtime.bigint();
  const declared = declaredLength(stream.headers);
  const max = fast.maxBodyBytes;
  if (declared < 0) {
    stream.reset(ErrorCode.PROTOCOL_ERROR); // malformed (RFC 9110 §8.6); @idgen/h2 already refuses it first
    return true;
  }
  if (declared > max) {
    fast.refuse(H2_RESPONDER, stream, codec, tooLarge(declared, max), start, true);
    return true;
  }
  const body = new BodyReader(max);
  stream.ondata = (chunk: Buffer): void => {
    if (body.over || body.add(chunk)) return;
    fast.refuse(H2_RESPONDER, stream, codec, tooLarge(undefined, fast.maxBodyBytes), start, true);
  };
  stream.onend = (): void => {
    if (body.over) return;
    fast.mint(
      codec,
      body.bytes(),
      stream.connectionKey,
      () => stream.isClosed,
      (result) => fast.answer(H2_RESPONDER, stream, codec, result, start),
    );
  };
  return true;
}

/**
 * h2c and TLS `h2` connections on @idgen/h2 (the default HTTP/2 server): a stream is a probe, a fast-path call,
 * or a call for connect-es's handlers. Every counted stream carries its deadline ticket as its `context`.
 */
export class IdgenH2Front {
  private readonly connections = new Set<H2Connection>();
  private readonly deadlines = new DeadlineQueue<H2Stream>();
  private readonly connectionOptions: ConstructorParameters<typeof H2Connection>[2];

  constructor(
    private readonly dispatcher: Dispatcher,
    private readonly options: ServingServerOptions,
    private readonly settings: TransportSettings,
  ) {
    this.connectionOptions = {
      ...HTTP2_SETTINGS,
      prefaceTimeoutMs: settings.prefaceTimeoutMs,
      idleTimeoutMs: settings.idleTimeoutMs,
      stalledWriteTimeoutMs: settings.stalledWriteTimeoutMs,
      onError: (e) => options.onConnectionError?.(e),
      onRefusal: options.onRefusal,
      // Past the port's budget of streams in flight, only a connection with few of its own gets another.
      admitStream: (open) =>
        this.dispatcher.inFlight < settings.maxStreamsInFlight || open < TRANSPORT_DEFAULTS.fairShareStreams,
    };
    dispatcher.onDeadlineSweep((now) => this.deadlines.expire(now, this.cancelLate));
  }

  /** Serves an HTTP/2 connection whose preface is (or will be) the next bytes read. */
  serve(socket: Socket): void {
    const connection = new H2Connection(socket, this.onStream, this.connectionOptions);
    this.connections.add(connection);
    connection.onClose(() => this.connections.delete(connection));
    if (this.dispatcher.closing) connection.close();
    socket.resume();
  }

  /** GOAWAY on every connection (a shutdown begins). */
  close(): void {
    for (const c of this.connections) c.close();
  }

  /** Every connection gone (a shutdown's end). */
  destroy(): void {
    for (const c of this.connections) c.destroy();
  }

  /** Every counted stream's close: out of the deadline queue (its ticket is its `context`), one fewer in flight. */
  private readonly onClose = (_code: number, stream: H2Stream): void => {
    if (this.deadlines.remove(stream.context as number, stream)) this.dispatcher.requestDone();
  };

  private readonly cancelLate = (stream: H2Stream): void => {
    this.dispatcher.requestLate();
    stream.reset(ErrorCode.CANCEL);
  };

  private readonly onStream = (stream: H2Stream): void => {
    const path = pathOf(stream.path);
    if (isProbePath(path)) {
      const answer = this.dispatcher.probe(stream.method, path);
      const head = stream.method === 'HEAD';
      stream.respond(answer.status, answer.headers, head);
      if (!head) stream.end(Buffer.from(answer.body));
      return;
    }
    this.dispatcher.inFlight++;
    stream.context = this.deadlines.add(stream, performance.now() + this.settings.requestTimeoutMs);
    stream.onclose = this.onClose;
    const fast = this.options.fastPath;
    if (fast !== undefined && path === fast.path && takeFastH2(fast, stream)) return;
    const universal = this.dispatcher.handler(path);
    if (universal === undefined) {
      stream.respond(404, { 'content-length': 0 }, true);
      return;
    }
    this.collectBody(stream, universal);
  };

  /**
   * Every method served takes one request message (unary or server-streaming): connect-es gets the call once its
   * body is complete, collected here until then (up to the body limit plus a frame's worth, as the body queue of
   * h2-universal.ts allows). A call held open without a body then costs its stream until the request deadline,
   * not connect-es's machinery: 38,400 held GetStatus calls (300 connections × 128) took 1.6 GB inside connect-es
   * and starved the event loop.
   */
  private collectBody(stream: H2Stream, universal: UniversalHandler): void {
    const max = this.settings.maxBodyBytes;
    let body: Buffer[] | undefined;
    let bodyBytes = 0;
    stream.ondata = (chunk) => {
      bodyBytes += chunk.length;
      if (bodyBytes > max + TRANSPORT_DEFAULTS.bodySlackBytes) {
        stream.reset(ErrorCode.ENHANCE_YOUR_CALM);
        return;
      }
      (body ??= []).push(Buffer.from(chunk)); // the chunk is a view of the connection's input
    };
    stream.onend = () => {
      const { request, abort } = universalRequestFromH2Stream(stream, max);
      if (body !== undefined) for (const chunk of body) stream.ondata?.(chunk);
      body = undefined;
      stream.onend?.();
      this.callConnect(stream, universal, request, abort);
    };
  }

  /** Hands a complete request to connect-es and writes its answer; a reset (or the connection going) aborts it. */
  private callConnect(
    stream: H2Stream,
    universal: UniversalHandler,
    request: ReturnType<typeof universalRequestFromH2Stream>['request'],
    abort: (reason: ConnectError) => void,
  ): void {
    const contentType = stream.headers['content-type'] ?? null;
    this.dispatcher.trackCall(abort);
    stream.onclose = (code) => {
      this.dispatcher.untrackCall(abort);
      this.onClose(code, stream);
      if (code !== ErrorCode.NO_ERROR) abort(connectErrorFromResetCode(code));
    };
    universal(request)
      .then((uRes) => reclassifyDecodeError(uRes, contentType))
      .then((uRes) => universalResponseToH2Stream(uRes, stream))
      .catch((reason: unknown) => {
        if (ConnectError.from(reason).code === Code.Aborted || stream.isClosed) return;
        this.options.onHandlerError?.(reason);
        if (stream.isResponded) stream.reset(ErrorCode.INTERNAL_ERROR);
        else if (contentType?.startsWith('application/grpc') === true)
          stream.respond(200, grpcFailureHeaders(contentType, reason), true);
        else stream.respond(500, { 'content-length': 0 }, true);
      });
  }
}
