import type { Socket } from 'node:net';
import { Code, ConnectError } from '@connectrpc/connect';
import type { UniversalHandler } from '@connectrpc/connect/protocol';
import { encodeHeaders, ErrorCode, H2Connection, type H2Stream } from '@idgen/h2';
import type { NextIdsCodec } from '../nextids-codec.js';
import { collectH2Body, readH2FastBody } from './body-readers.js';
import type { Responder, ServingServerOptions } from './contracts.js';
import { DeadlineQueue } from './deadline-queue.js';
import { reclassifyDecodeError } from './decode-errors.js';
import { grpcFailureHeaders, type Dispatcher } from './dispatcher.js';
import {
  connectErrorFromResetCode,
  universalRequestFromH2Stream,
  universalResponseToH2Stream,
} from './h2-universal.js';
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
 * h2c and TLS `h2` connections on @idgen/h2 (the default HTTP/2 server): a stream is a probe, a fast-path call,
 * or a call for connect-es's handlers. Every counted stream carries its deadline ticket as its `context`.
 */
export class IdgenH2Front {
  private readonly connections = new Set<H2Connection>();
  private readonly deadlines = new DeadlineQueue<H2Stream>();
  private readonly connectionOptions: ConstructorParameters<typeof H2Connection>[2];
  /** A connect-es call's body may run this far past the body limit (a frame's worth) before its stream is reset. */
  private readonly bodyLimit: number;

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
    this.bodyLimit = settings.maxBodyBytes + TRANSPORT_DEFAULTS.bodySlackBytes;
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
    const route = this.dispatcher.route(stream.method, stream.path, stream.headers, true);
    if (route.kind === 'probe') {
      const head = stream.method === 'HEAD';
      stream.respond(route.answer.status, route.answer.headers, head);
      if (!head) stream.end(Buffer.from(route.answer.body));
      return;
    }
    this.dispatcher.requestStarted();
    stream.context = this.deadlines.add(stream, performance.now() + this.settings.requestTimeoutMs);
    stream.onclose = this.onClose;
    if (route.kind === 'fast') readH2FastBody(route.fast, route.codec, H2_RESPONDER, stream);
    else if (route.kind === 'connect') collectH2Body(stream, this.bodyLimit, route.handler, this.callWithBody);
    else stream.respond(404, { 'content-length': 0 }, true);
  };

  /**
   * A connect-es call whose body is complete (body-readers.ts `collectH2Body`): the call is made, its body replayed
   * into connect-es's request as it would have arrived.
   */
  private readonly callWithBody = (
    stream: H2Stream,
    universal: UniversalHandler,
    body: readonly Buffer[] | undefined,
  ): void => {
    const { request, abort } = universalRequestFromH2Stream(stream, this.settings.maxBodyBytes);
    if (body !== undefined) for (const chunk of body) stream.ondata?.(chunk);
    stream.onend?.();
    this.callConnect(stream, universal, request, abort);
  };

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
