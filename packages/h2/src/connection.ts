import type { Socket } from 'node:net';
import { StreamTable } from './stream-table.js';
import {
  DEFAULT_MAX_FRAME_SIZE,
  DEFAULT_WINDOW,
  ErrorCode,
  Flag,
  FRAME_HEADER_LENGTH,
  FrameType,
  FrameWriter,
  MAX_WINDOW,
  PREFACE,
  Setting,
} from './frames.js';
import { encodeHeaders, encodeTableSizeUpdate, HpackDecoder, HpackError } from './hpack.js';

import { ClosedHow, ClosedStreams } from './closed-streams.js';
import { areValidTrailers, emptyRequestParts, parseRequestFields } from './field-rules.js';
import { HeaderBlockCollector } from './header-block.js';
import { FrameCounts, H2_DEFAULTS, type H2FloodLimits, type H2RefusalReason } from './limits.js';

/** Limits, windows and lifetimes of a server connection; every default is what `idgen-server` runs with. */
export interface H2ConnectionOptions {
  /** SETTINGS_MAX_CONCURRENT_STREAMS: streams past it are refused (RST_STREAM REFUSED_STREAM). Default 128. */
  readonly maxConcurrentStreams?: number;
  /** SETTINGS_MAX_HEADER_LIST_SIZE (RFC 7541 §4.1 octets): a larger request is answered 431. Default 16 KiB. */
  readonly maxHeaderListSize?: number;
  /** Most header fields in one request (pseudo-headers included); more is answered 431. Default 64. */
  readonly maxHeaderPairs?: number;
  /** SETTINGS_INITIAL_WINDOW_SIZE: each request stream's receive window. Default 65,535. */
  readonly initialWindowSize?: number;
  /** The connection's receive window. Default 1 MiB. */
  readonly connectionWindowSize?: number;
  /**
   * Output waiting in the socket above which the connection stops reading until it drains: a peer that sends
   * PINGs, SETTINGS or requests but does not read the answers cannot make this process buffer without bound.
   * Default 1 MiB.
   */
  readonly maxOutputBytes?: number;
  /** Shorthand for `floodLimits.peerResets` (rapid reset, CVE-2023-44487). Default 1,000. */
  readonly maxResetsPerSecond?: number;
  /** Frames per second past which the connection ends with ENHANCE_YOUR_CALM; each defaults as documented. */
  readonly floodLimits?: Partial<H2FloodLimits>;
  /** CONTINUATION frames one header block may take (counted as they arrive, empty ones too). Default 16. */
  readonly maxContinuationFrames?: number;
  /** Entries one SETTINGS frame may carry (RFC 9113 defines 7; a frame of 2,730 is a flood). Default 32. */
  readonly maxSettingsEntries?: number;
  /** Time from the socket to the client's first SETTINGS frame (after the preface). Default 4 s. */
  readonly prefaceTimeoutMs?: number;
  /**
   * Time without a request (no HEADERS or DATA received, no stream being served) after which the connection is
   * closed with GOAWAY NO_ERROR. Default 30 s.
   */
  readonly idleTimeoutMs?: number;
  /** Time the connection may stay paused because the peer does not read its output, before it is cut. Default 10 s. */
  readonly stalledWriteTimeoutMs?: number;
  /** Called for each refusal (a flood cut, a lifetime over, a stream refused or answered 431), for a metric. */
  readonly onRefusal?: (reason: H2RefusalReason) => void;
  /**
   * Asked before a new stream under the concurrency limit is served, with the streams this connection has open:
   * false refuses it as one over the limit is (REFUSED_STREAM, counted toward the refused-stream flood; reason
   * `stream-budget`). For a budget across connections (the serving port's streams in flight).
   */
  readonly admitStream?: (open: number) => boolean;
  /** Called for a connection-level protocol error (the peer's fault, worth a debug line). */
  readonly onError?: (e: Error) => void;
}

/** Header fields as name → value (names lowercase; repeated fields joined with ", ", cookies with "; "). */
export type H2Headers = Record<string, string>;
/** Response header fields: a record, or a header block already HPACK-encoded with {@link encodeHeaders}. */
export type H2ResponseHeaders = Readonly<Record<string, string | number>> | Buffer;

/**
 * A stream's state (RFC 9113 §5.1) as this server sees it. Idle streams have no object, and the reserved states
 * belong to server push, which this server never does.
 */
export type H2StreamState = 'open' | 'half-closed (local)' | 'half-closed (remote)' | 'closed';

/**
 * A stream's state as the connection keeps it: {@link H2StreamState}, with "closed" told apart by whether the
 * client's END_STREAM had come (`isRequestComplete`), so that no flag beside the state can disagree with it
 * (docs/style.md, "Stateful code"). The handler's part is over in "half-closed (local)" and both closed states.
 */
type StreamLifecycle = 'open' | 'half-closed (local)' | 'half-closed (remote)' | 'closed' | 'closed (request complete)';

/**
 * How far the handler has got with its response, in the order RFC 9113 §8.1 sends it: nothing yet, the headers
 * (sent or queued), the end (queued behind flow control, with trailers or not). One field, not a flag per step.
 */
type ResponseProgress = 'not-started' | 'headers-sent' | 'end-queued';

/** Either closed state: the stream has left the table. */
function isClosedState(state: StreamLifecycle): boolean {
  return state === 'closed' || state === 'closed (request complete)';
}

/** A protocol error that ends the connection: GOAWAY with `code`; `reason` when it is one of the limits. */
export class H2ConnectionError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly reason?: H2RefusalReason,
  ) {
    super(message);
    this.name = 'H2ConnectionError';
  }
}

const EMPTY = Buffer.alloc(0);
/** A header block arriving in pieces (HEADERS + CONTINUATION) larger than this ends the connection. */
const MAX_HEADER_BLOCK_BYTES = 64 * 1024;
/** How often the shared sweep looks at every connection's idle and stalled times. */
const SWEEP_MS = 250;

/**
 * One request stream. The handler given to {@link H2Connection} sets the `on*` callbacks it needs (they are
 * plain properties, not events: no listener arrays per request) and answers with `respond`, `write`, `end`
 * or `reset`. Callbacks run synchronously while the connection reads, so answers written from them leave in
 * the same socket write as other answers to the same read.
 *
 * The handler's part ends at `onclose`: when the stream closes, or when its response is complete while the
 * request is still arriving. The connection then reads the rest of the request itself, checks it and drops it
 * (the stream stays "half-closed (local)" until the client ends it), so a request that turns malformed after
 * its answer is still reported (RFC 9113 §8.1.1).
 */
export class H2Stream {
  readonly method: string;
  /** `:path`, query included. */
  readonly path: string;
  readonly authority: string;
  readonly scheme: string;
  /** The request's regular header fields. */
  readonly headers: H2Headers;
  /** A body chunk (a view of the connection's input: copy it to keep it past the callback's return if needed). */
  ondata: ((chunk: Buffer) => void) | undefined = undefined;
  /** The request is complete (END_STREAM). */
  onend: (() => void) | undefined = undefined;
  /**
   * The stream is done for the handler: `code` 0 when it completed (the response was sent in full), else the
   * RST_STREAM code (sent, received, or CANCEL when the connection went). The stream is passed too, so one
   * function can serve every stream (no closure each).
   */
  onclose: ((code: number, stream: H2Stream) => void) | undefined = undefined;
  /** Everything written so far has left for the socket (after flow control held some of it back). */
  ondrain: (() => void) | undefined = undefined;
  /** Free for the handler's own bookkeeping (a deadline ticket, say). */
  context: unknown = undefined;

  /** @internal RFC 9113 §5.1, "closed" split by whether the request was complete; changed by the connection only. */
  state: StreamLifecycle;
  /** @internal */ response: ResponseProgress = 'not-started';
  /** @internal */ sendWindow: number;
  /** @internal */ recvWindow: number;
  /** @internal */ recvUnacked = 0;
  /** @internal */ received = 0;
  /** @internal */ readonly declaredLength: number;
  /** @internal */ pending: Buffer[] = [];
  /** @internal */ pendingBytes = 0;
  /** @internal */ pendingTrailers: Buffer | undefined = undefined;

  constructor(
    readonly id: number,
    private readonly connection: H2Connection,
    pseudo: { method: string; path: string; authority: string; scheme: string },
    headers: H2Headers,
    declaredLength: number,
    state: 'open' | 'half-closed (remote)',
    sendWindow: number,
    recvWindow: number,
  ) {
    this.method = pseudo.method;
    this.path = pseudo.path;
    this.authority = pseudo.authority;
    this.scheme = pseudo.scheme;
    this.headers = headers;
    this.declaredLength = declaredLength;
    this.state = state;
    this.sendWindow = sendWindow;
    this.recvWindow = recvWindow;
  }

  /** The stream's state (RFC 9113 §5.1). */
  get streamState(): H2StreamState {
    return this.state === 'closed (request complete)' ? 'closed' : this.state;
  }

  /**
   * @internal The handler's part is over (`onclose` called or being called): answers are ignored from now on. Our
   * END_STREAM or a reset got it there, so it is the states after those: half-closed (local) and closed.
   */
  get done(): boolean {
    return this.state !== 'open' && this.state !== 'half-closed (remote)';
  }

  /** The connection the stream came on, as an opaque key (to share work fairly between connections). */
  get connectionKey(): object {
    return this.connection;
  }

  /** True once the handler's part is over (answered in full, or reset): writing then does nothing. */
  get isClosed(): boolean {
    return this.done;
  }

  /** True once the response headers are out (or queued to go out). */
  get isResponded(): boolean {
    return this.response !== 'not-started';
  }

  /** True once the whole request body has arrived. */
  get isRequestComplete(): boolean {
    return this.state === 'half-closed (remote)' || this.state === 'closed (request complete)';
  }

  /** Sends the response headers: `:status` and `headers`, or a ready block (which must carry `:status`). */
  respond(status: number, headers: H2ResponseHeaders, endStream = false): void {
    this.connection.respond(this, status, headers, endStream);
  }

  /** Queues body bytes (sent as flow control allows). */
  write(data: Uint8Array): void {
    this.connection.sendData(this, data, false, undefined);
  }

  /** Ends the response: optional last bytes, then trailers (a record, or a block from {@link encodeHeaders}) or END_STREAM. */
  end(data?: Uint8Array, trailers?: H2ResponseHeaders): void {
    this.connection.sendData(
      this,
      data ?? EMPTY,
      true,
      trailers === undefined ? undefined : this.connection.encodeFields(trailers),
    );
  }

  /** Resets the stream (RST_STREAM `code`, default CANCEL) and closes it. */
  reset(code: number = ErrorCode.CANCEL): void {
    this.connection.resetStream(this, code, ClosedHow.resetByUs);
  }
}

/**
 * A connection's life, in the order it goes through it (RFC 9113 §3.4, §6.8); one field, not a flag per step
 * (docs/style.md, "Stateful code"):
 * - `awaiting-preface`: the client's 24 octets of preface are not all in yet (`prefaceAt` counts them);
 * - `awaiting-settings`: they are, the SETTINGS frame that completes the client's preface is not (anything else
 *   first is a PROTOCOL_ERROR);
 * - `open`: requests are served;
 * - `going-away`: GOAWAY sent (`close()`) or received: new streams are refused, those open finish;
 * - `closing`: going away and no stream left to serve: the draining ones are reset and the socket ended (a step
 *   inside `endIfIdle`, so that the resets it makes do not start it again);
 * - `closed`: final: nothing more is read or written, the streams left closed with CANCEL, close listeners ran.
 *
 * Either preface state can also go straight to `going-away` (`close()`, which then ends at once: no stream yet) or
 * `closed` (a connection error, the preface timeout, `destroy()`, the socket's close).
 */
type ConnectionPhase = 'awaiting-preface' | 'awaiting-settings' | 'open' | 'going-away' | 'closing' | 'closed';

/** Connections whose idle and stalled times one shared timer checks (a timer per connection would cost more). */
const watched = new Set<H2Connection>();
let sweepTimer: NodeJS.Timeout | undefined;

function watch(connection: H2Connection): void {
  watched.add(connection);
  if (sweepTimer === undefined) {
    sweepTimer = setInterval(() => {
      const now = Date.now();
      for (const c of watched) c.sweep(now);
    }, SWEEP_MS);
    sweepTimer.unref();
  }
}

function unwatch(connection: H2Connection): void {
  watched.delete(connection);
  if (watched.size === 0 && sweepTimer !== undefined) {
    clearInterval(sweepTimer);
    sweepTimer = undefined;
  }
}

/**
 * An HTTP/2 server connection over cleartext TCP (h2c with prior knowledge), framed by hand on a `node:net`
 * socket, for the one reason this package exists: on Node 20, `node:http2` turns every request header value
 * outside HPACK's static table into an external V8 string in old space, and the Mark-Compacts that free
 * them (20-100 ms each, most of it clearing the external string table) were idgen-server's p99. Here header
 * values referenced from the dynamic table are the same JS strings every time, and nothing a request
 * allocates outlives a scavenge.
 *
 * What it implements (RFC 9113, RFC 7541): the preface and SETTINGS exchange; HPACK decoding with Huffman and
 * the dynamic table (responses are encoded without indexing); the stream states of RFC 9113 §5.1 and their
 * errors, closed streams included; flow control both ways; PING, GOAWAY, RST_STREAM, PRIORITY (ignored),
 * CONTINUATION, padding; request validation (pseudo-headers, connection-specific fields, content-length);
 * limits on streams, header size and count, buffered output, frame floods (see {@link H2FloodLimits}) and
 * lifetimes. What it leaves out: TLS and ALPN, server push, priorities, the CONNECT method, trailers sent by the
 * client (accepted, not passed on), an HTTP/1.1 Upgrade.
 */
export class H2Connection {
  private readonly maxConcurrent: number;
  private readonly maxHeaderListSize: number;
  private readonly maxHeaderPairs: number;
  private readonly initialWindow: number;
  private readonly connectionWindow: number;
  private readonly maxOutput: number;
  private readonly limits: H2FloodLimits;
  private readonly maxSettingsEntries: number;
  private readonly idleTimeoutMs: number;
  private readonly stalledWriteTimeoutMs: number;
  private readonly onError: ((e: Error) => void) | undefined;
  private readonly onRefusal: ((reason: H2RefusalReason) => void) | undefined;
  private readonly admitStream: ((open: number) => boolean) | undefined;

  private readonly streams = new StreamTable<number, H2Stream>(16);
  /** Streams in the table whose handler is done (answered in full, the request still arriving). */
  private draining = 0;
  private readonly closedStreams = new ClosedStreams();
  private readonly counts = new FrameCounts();
  private readonly decoder = new HpackDecoder(4096);
  private readonly writer = new FrameWriter();
  /** Up to 8 bytes of a frame header, waiting for the rest. */
  private input: Buffer = EMPTY;
  /** A frame whose header is in and whose payload is not, sized to the whole frame; `frameFill` bytes so far. */
  private frameBuf: Buffer = EMPTY;
  private frameFill = 0;
  private phase: ConnectionPhase = 'awaiting-preface';
  /** Octets of the client's preface checked so far (all of it once past `awaiting-preface`). */
  private prefaceAt = 0;
  private prefaceTimer: NodeJS.Timeout | undefined;
  private lastStreamId = 0;
  /** A header block waiting for CONTINUATION frames. */
  private readonly block: HeaderBlockCollector;
  private connSendWindow = DEFAULT_WINDOW;
  private connRecvWindow = DEFAULT_WINDOW;
  private connRecvUnacked = 0;
  private peerInitialWindow = DEFAULT_WINDOW;
  private peerMaxFrame = DEFAULT_MAX_FRAME_SIZE;
  /** Streams holding data back for want of connection window, in the order they blocked. */
  private blocked: H2Stream[] = [];
  /** Our first header block starts with a dynamic table size update to 0: we never index, so peers' table limits never matter. */
  private tableSizeSent = false;
  private flushQueued = false;
  /** True while a read is being processed: answers written meanwhile leave in the flush at its end. */
  private inRead = false;
  /** Date.now() of the read being processed (read once per read, not per frame). */
  private readAt = 0;
  /** Last time a request arrived, a request's body arrived, or the last stream closed. */
  private activeAt: number;
  /**
   * When reading was paused for unread output; 0 while reading. Apart from the phase: a connection may be paused
   * whether it is open or going away.
   */
  private pausedAt = 0;
  private readonly closeListeners: (() => void)[] = [];

  constructor(
    private readonly socket: Socket,
    private readonly onStream: (stream: H2Stream) => void,
    options: H2ConnectionOptions = {},
  ) {
    // Every option left out at its default (limits.ts `H2_DEFAULTS`, the one table of them).
    this.maxConcurrent = options.maxConcurrentStreams ?? H2_DEFAULTS.maxConcurrentStreams;
    this.maxHeaderListSize = options.maxHeaderListSize ?? H2_DEFAULTS.maxHeaderListSize;
    this.maxHeaderPairs = options.maxHeaderPairs ?? H2_DEFAULTS.maxHeaderPairs;
    this.initialWindow = options.initialWindowSize ?? H2_DEFAULTS.initialWindowSize;
    this.connectionWindow = options.connectionWindowSize ?? H2_DEFAULTS.connectionWindowSize;
    this.maxOutput = options.maxOutputBytes ?? H2_DEFAULTS.maxOutputBytes;
    this.limits = {
      ...H2_DEFAULTS.floodLimits,
      ...options.floodLimits,
      ...(options.maxResetsPerSecond === undefined ? {} : { peerResets: options.maxResetsPerSecond }),
    };
    this.block = new HeaderBlockCollector(
      MAX_HEADER_BLOCK_BYTES,
      options.maxContinuationFrames ?? H2_DEFAULTS.maxContinuationFrames,
    );
    this.maxSettingsEntries = options.maxSettingsEntries ?? H2_DEFAULTS.maxSettingsEntries;
    this.idleTimeoutMs = options.idleTimeoutMs ?? H2_DEFAULTS.idleTimeoutMs;
    this.stalledWriteTimeoutMs = options.stalledWriteTimeoutMs ?? H2_DEFAULTS.stalledWriteTimeoutMs;
    this.onError = options.onError;
    this.onRefusal = options.onRefusal;
    this.admitStream = options.admitStream;
    this.activeAt = Date.now();

    // Our SETTINGS, then the connection window raised from its default.
    const settings = Buffer.alloc(4 * 6);
    const put = (i: number, id: number, value: number): void => {
      settings.writeUInt16BE(id, i * 6);
      settings.writeUInt32BE(value, i * 6 + 2);
    };
    put(0, Setting.MAX_CONCURRENT_STREAMS, this.maxConcurrent);
    put(1, Setting.INITIAL_WINDOW_SIZE, this.initialWindow);
    put(2, Setting.MAX_HEADER_LIST_SIZE, this.maxHeaderListSize);
    put(3, Setting.ENABLE_PUSH, 0);
    this.writer.frame(FrameType.SETTINGS, 0, 0, settings);
    if (this.connectionWindow > DEFAULT_WINDOW) {
      this.writer.frameWords(FrameType.WINDOW_UPDATE, 0, 0, this.connectionWindow - DEFAULT_WINDOW);
      this.connRecvWindow = this.connectionWindow;
    }
    this.flush();

    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.read(chunk));
    socket.on('drain', () => {
      if (this.pausedAt !== 0 && this.phase !== 'closed') {
        this.pausedAt = 0;
        socket.resume();
      }
    });
    socket.once('close', () => this.closed());
    // A peer that connects and never says it speaks HTTP/2 (preface and SETTINGS) holds a socket for nothing.
    this.prefaceTimer = setTimeout(() => {
      if (this.phase === 'awaiting-preface' || this.phase === 'awaiting-settings') {
        this.fail(
          new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'no preface and SETTINGS in time', 'preface-timeout'),
        );
        this.socket.destroy();
      }
    }, options.prefaceTimeoutMs ?? H2_DEFAULTS.prefaceTimeoutMs);
    this.prefaceTimer.unref();
    watch(this);
  }

  /** Streams in the table: open or half-closed (RFC 9113 §5.1), the ones counted against the concurrency limit. */
  get streamCount(): number {
    return this.streams.size;
  }

  /** Called once when the connection is gone. */
  onClose(listener: () => void): void {
    this.closeListeners.push(listener);
  }

  /**
   * Graceful close: GOAWAY (NO_ERROR) with the last stream this connection will process; open streams finish,
   * then the socket is ended.
   */
  close(): void {
    if (this.phase === 'going-away' || this.phase === 'closing' || this.phase === 'closed') return;
    this.goAway();
    this.endIfIdle();
  }

  /** Cuts the connection now; open streams close with CANCEL. */
  destroy(): void {
    this.socket.destroy();
    this.closed();
  }

  /** @internal The shared sweep: ends a connection idle too long, cuts one whose peer stopped reading. */
  sweep(now: number): void {
    if (this.phase === 'closed') return;
    if (this.pausedAt !== 0 && now - this.pausedAt >= this.stalledWriteTimeoutMs) {
      this.refused('stalled-writer');
      this.onError?.(new H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, 'the peer stopped reading', 'stalled-writer'));
      this.destroy();
      return;
    }
    if (
      this.streams.size === this.draining &&
      now - this.activeAt >= this.idleTimeoutMs &&
      (this.phase === 'open' || this.phase === 'going-away')
    ) {
      this.refused('idle-timeout');
      this.goAway();
      this.socket.end();
      setTimeout(() => this.socket.destroy(), 1_000).unref();
      this.closed();
    }
  }

  private refused(reason: H2RefusalReason): void {
    this.onRefusal?.(reason);
  }

  // ---- reading ----

  private read(chunk: Buffer): void {
    if (this.phase === 'closed') return;
    this.inRead = true;
    this.readAt = Date.now();
    this.counts.roll(this.readAt);
    let data = chunk;
    if (this.frameFill !== 0) {
      // A frame arriving in pieces is filled in place and parsed once whole: a peer that sends a 16 KiB frame a byte
      // at a time costs a copy of each byte, not a copy of everything so far on every read.
      const room = this.frameBuf.length - this.frameFill;
      const n = Math.min(room, data.length);
      data.copy(this.frameBuf, this.frameFill, 0, n);
      this.frameFill += n;
      if (n < room) {
        this.inRead = false;
        return;
      }
      const whole = this.frameBuf;
      this.frameBuf = EMPTY;
      this.frameFill = 0;
      if (!this.parse(whole)) return;
      data = data.subarray(n);
    }
    if (data.length === 0 || this.parse(this.input.length === 0 ? data : Buffer.concat([this.input, data])))
      this.flush();
  }

  /** Parses the frames in `input`, keeps a partial one for the next read; false when the connection ended. */
  private parse(input: Buffer): boolean {
    let at = 0;
    this.inRead = true;
    try {
      if (this.phase === 'awaiting-preface') at = this.readPreface(input);
      while (input.length - at >= FRAME_HEADER_LENGTH) {
        const length = input.readUIntBE(at, 3);
        if (length > DEFAULT_MAX_FRAME_SIZE)
          throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, `frame of ${length} bytes`);
        if (input.length - at - FRAME_HEADER_LENGTH < length) {
          // The rest of this frame comes in later reads: into a buffer of its size.
          this.frameBuf = Buffer.allocUnsafe(FRAME_HEADER_LENGTH + length);
          this.frameFill = input.copy(this.frameBuf, 0, at);
          at = input.length;
          break;
        }
        const type = input[at + 3] ?? 0;
        const flags = input[at + 4] ?? 0;
        const stream = input.readUInt32BE(at + 5) & 0x7fff_ffff;
        const start = at + FRAME_HEADER_LENGTH;
        at = start + length;
        this.frame(type, flags, stream, input, start, at);
        if (this.phase === 'closed') return false;
      }
    } catch (e) {
      this.fail(e);
      return false;
    } finally {
      this.inRead = false;
    }
    // At most 8 bytes of a frame header left: kept (copied, so the chunk they came in is not).
    this.input = at === input.length ? EMPTY : Buffer.from(input.subarray(at));
    return true;
  }

  /** `awaiting-preface` → `awaiting-settings` once all of the preface is in: the octets of it `input` starts with. */
  private readPreface(input: Buffer): number {
    const n = Math.min(PREFACE.length - this.prefaceAt, input.length);
    if (input.compare(PREFACE, this.prefaceAt, this.prefaceAt + n, 0, n) !== 0) {
      throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'bad connection preface');
    }
    this.prefaceAt += n;
    if (this.prefaceAt === PREFACE.length) this.phase = 'awaiting-settings';
    return n;
  }

  /** `awaiting-settings` → `open` on the client's first frame, which must be SETTINGS (RFC 9113 §3.4). */
  private firstFrame(type: number, flags: number): void {
    if (type !== FrameType.SETTINGS || (flags & Flag.ACK) !== 0) {
      throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'the first frame must be SETTINGS');
    }
    this.phase = 'open';
    clearTimeout(this.prefaceTimer);
  }

  private frame(type: number, flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (this.phase === 'awaiting-settings') this.firstFrame(type, flags);
    if (this.block.stream !== 0 && (type !== FrameType.CONTINUATION || id !== this.block.stream)) {
      throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'expected CONTINUATION');
    }
    switch (type) {
      case FrameType.DATA:
        return this.onData(flags, id, buf, start, end);
      case FrameType.HEADERS:
        return this.onHeaders(flags, id, buf, start, end);
      case FrameType.PRIORITY:
        return this.onPriority(id, buf, start, end);
      case FrameType.RST_STREAM:
        return this.onReset(id, buf, start, end);
      case FrameType.SETTINGS:
        return this.onSettings(flags, id, buf, start, end);
      case FrameType.PUSH_PROMISE:
        throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'PUSH_PROMISE from a client');
      case FrameType.PING:
        if (id !== 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'PING on a stream');
        if (end - start !== 8) throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'PING of the wrong size');
        if (++this.counts.pings > this.limits.pings)
          throw new H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, 'PING flood', 'ping-flood');
        if ((flags & Flag.ACK) === 0) this.writer.frame(FrameType.PING, Flag.ACK, 0, buf, start, end);
        return;
      case FrameType.GOAWAY:
        if (id !== 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'GOAWAY on a stream');
        if (end - start < 8) throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'GOAWAY too short');
        // The peer opens no more streams; those open finish, then the connection ends.
        if (this.phase === 'open') this.phase = 'going-away';
        this.endIfIdle();
        return;
      case FrameType.WINDOW_UPDATE:
        return this.onWindowUpdate(id, buf, start, end);
      case FrameType.CONTINUATION:
        return this.onContinuation(flags, id, buf, start, end);
      default:
        // Unknown frame types are ignored (RFC 9113 §4.1), up to a rate.
        this.countIgnored();
        return;
    }
  }

  private countIgnored(): void {
    if (++this.counts.ignoredFrames > this.limits.ignoredFrames) {
      throw new H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, 'flood of ignored frames', 'ignored-frame-flood');
    }
  }

  /** A stream error the peer caused: RST_STREAM `code` on a stream that has no object (closed or never opened). */
  private streamErrorOnClosed(id: number, code: number): void {
    this.countStreamError();
    this.writer.frameWords(FrameType.RST_STREAM, 0, id, code);
  }

  /** A stream error the peer caused, on a stream in the table. */
  private streamError(stream: H2Stream, code: number): void {
    this.countStreamError();
    this.resetStream(stream, code, ClosedHow.resetByUs);
  }

  private countStreamError(): void {
    if (++this.counts.streamErrors > this.limits.streamErrors) {
      throw new H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, 'too many stream errors', 'stream-error-flood');
    }
  }

  /**
   * A frame on a stream with no object: idle (above the last stream opened) or closed. For a closed one, what
   * the frame means depends on how it closed (RFC 9113 §5.1).
   */
  private onAbsentStream(id: number, type: number): void {
    if (this.isIdle(id)) {
      // Only HEADERS and PRIORITY may come on an idle stream (RFC 9113 §5.1): never answered with RST_STREAM (§6.4).
      throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, `frame of type ${type} on an idle stream`);
    }
    const how = this.closedStreams.lookup(id);
    if (how === ClosedHow.resetByUs) return; // may have crossed our RST_STREAM
    if (type === FrameType.RST_STREAM) {
      // Never answered with RST_STREAM (RFC 9113 §5.4.2); from now on the peer has closed the stream itself.
      if (how !== ClosedHow.unknown) this.closedStreams.remember(id, ClosedHow.resetByPeer);
      return;
    }
    if (how === ClosedHow.resetByPeer) {
      // The peer closed it itself: anything but PRIORITY afterwards is its error.
      this.streamErrorOnClosed(id, ErrorCode.STREAM_CLOSED);
      return;
    }
    if (how === ClosedHow.ended) {
      if (type === FrameType.WINDOW_UPDATE) return; // may have crossed our END_STREAM
      throw new H2ConnectionError(ErrorCode.STREAM_CLOSED, `frame of type ${type} on a stream the client ended`);
    }
    // Closed long ago (or never opened, below a newer stream).
    if (type === FrameType.HEADERS)
      throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, `HEADERS on stream ${id}, below the last one opened`);
    if (type === FrameType.DATA) this.streamErrorOnClosed(id, ErrorCode.STREAM_CLOSED);
  }

  private onData(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (id === 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'DATA on stream 0');
    const length = end - start;
    // The whole frame counts against the windows, padding included (RFC 9113 §6.9.1), whatever its stream.
    this.connRecvWindow -= length;
    if (this.connRecvWindow < 0)
      throw new H2ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, 'DATA past the connection window');
    this.connRecvUnacked += length;
    if (this.connRecvUnacked >= this.connectionWindow >>> 1) {
      this.writer.frameWords(FrameType.WINDOW_UPDATE, 0, 0, this.connRecvUnacked);
      this.connRecvWindow += this.connRecvUnacked;
      this.connRecvUnacked = 0;
    }
    let dataStart = start;
    let dataEnd = end;
    if ((flags & Flag.PADDED) !== 0) {
      const pad = buf[start] ?? 0;
      if (length === 0 || pad >= length)
        throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'padding longer than the frame');
      dataStart = start + 1;
      dataEnd = end - pad;
    }
    const endStream = (flags & Flag.END_STREAM) !== 0;
    if (dataEnd === dataStart && !endStream && ++this.counts.emptyFrames > this.limits.emptyFrames) {
      throw new H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, 'flood of empty DATA frames', 'empty-frame-flood');
    }
    const stream = this.streams.get(id);
    if (stream === undefined) {
      this.onAbsentStream(id, FrameType.DATA);
      return;
    }
    if (stream.state === 'half-closed (remote)') {
      this.streamError(stream, ErrorCode.STREAM_CLOSED);
      return;
    }
    this.activeAt = this.readAt;
    stream.recvWindow -= length;
    if (stream.recvWindow < 0) {
      this.streamError(stream, ErrorCode.FLOW_CONTROL_ERROR);
      return;
    }
    stream.received += dataEnd - dataStart;
    if (
      stream.declaredLength >= 0 &&
      (stream.received > stream.declaredLength || (endStream && stream.received !== stream.declaredLength))
    ) {
      this.streamError(stream, ErrorCode.PROTOCOL_ERROR); // content-length does not match the body (RFC 9113 §8.1.1)
      return;
    }
    if (stream.done) {
      // Answered already: the body is dropped and its window not handed back, so the client sends at most one
      // window of it; at the end of that window the stream is reset with NO_ERROR (RFC 9113 §8.1).
      if (endStream) this.remoteEnd(stream);
      else if (stream.recvWindow <= 0) this.resetStream(stream, ErrorCode.NO_ERROR, ClosedHow.resetByUs);
      return;
    }
    if (!endStream) {
      stream.recvUnacked += length;
      if (stream.recvUnacked >= this.initialWindow >>> 1) {
        this.writer.frameWords(FrameType.WINDOW_UPDATE, 0, id, stream.recvUnacked);
        stream.recvWindow += stream.recvUnacked;
        stream.recvUnacked = 0;
      }
    }
    if (dataEnd > dataStart) stream.ondata?.(buf.subarray(dataStart, dataEnd));
    if (endStream && !isClosedState(stream.state)) this.remoteEnd(stream);
  }

  /** The client's END_STREAM: open → half-closed (remote), half-closed (local) → closed. */
  private remoteEnd(stream: H2Stream): void {
    if (stream.state === 'half-closed (local)') {
      this.closeStream(stream, ErrorCode.NO_ERROR, ClosedHow.ended);
      return;
    }
    stream.state = 'half-closed (remote)';
    stream.onend?.();
  }

  private onHeaders(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (id === 0 || (id & 1) === 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, `HEADERS on stream ${id}`);
    let blockStart = start;
    let blockEnd = end;
    if ((flags & Flag.PADDED) !== 0) {
      const pad = end > start ? (buf[start] ?? 0) : 0;
      blockStart++;
      blockEnd -= pad;
    }
    if ((flags & Flag.PRIORITY) !== 0) {
      if (blockStart + 5 <= blockEnd && (buf.readUInt32BE(blockStart) & 0x7fff_ffff) === id) {
        throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'stream depends on itself');
      }
      blockStart += 5;
    }
    if (blockStart > blockEnd) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'padding longer than the frame');
    const endStream = (flags & Flag.END_STREAM) !== 0;
    if ((flags & Flag.END_HEADERS) === 0) {
      this.block.start(id, endStream, buf, blockStart, blockEnd); // the rest comes in CONTINUATION frames
      return;
    }
    this.headerBlock(id, endStream, buf, blockStart, blockEnd);
  }

  private onContinuation(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (this.block.stream === 0 || this.block.stream !== id)
      throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'CONTINUATION without HEADERS');
    const wrong = this.block.add(buf, start, end);
    if (wrong === 'too-many') {
      throw new H2ConnectionError(
        ErrorCode.ENHANCE_YOUR_CALM,
        'header block in too many CONTINUATION frames',
        'continuation-flood',
      );
    }
    if (wrong === 'too-large')
      throw new H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, 'header block too large', 'header-block-too-large');
    if ((flags & Flag.END_HEADERS) === 0) return;
    const endStream = this.block.endStream;
    const { block, length } = this.block.take();
    this.headerBlock(id, endStream, block, 0, length);
  }

  /** A complete header block: a new request, or trailers of an open one. */
  private headerBlock(id: number, endStream: boolean, buf: Buffer, start: number, end: number): void {
    const fields: string[] = []; // new per block: cheaper than emptying one (V8 frees its storage on length = 0)
    let listSize: number;
    try {
      // Decoded in full (the table is connection state) but kept only up to the limits.
      listSize = this.decoder.decode(buf, start, end, fields, this.maxHeaderListSize, this.maxHeaderPairs + 1);
    } catch (e) {
      if (e instanceof HpackError)
        throw new H2ConnectionError(ErrorCode.COMPRESSION_ERROR, `header compression: ${e.message}`);
      throw e;
    }
    const existing = this.streams.get(id);
    if (existing !== undefined) {
      // Trailers: they must end the stream, carry no pseudo-header (RFC 9113 §8.1) and follow the field rules
      // (§8.2.1). Their fields are not passed on.
      this.activeAt = this.readAt;
      if (existing.state === 'half-closed (remote)') this.streamError(existing, ErrorCode.STREAM_CLOSED);
      else if (!endStream || !areValidTrailers(fields)) this.streamError(existing, ErrorCode.PROTOCOL_ERROR);
      else if (existing.declaredLength >= 0 && existing.received !== existing.declaredLength)
        this.streamError(existing, ErrorCode.PROTOCOL_ERROR);
      else this.remoteEnd(existing);
      return;
    }
    if (id <= this.lastStreamId) {
      this.onAbsentStream(id, FrameType.HEADERS);
      return;
    }
    this.lastStreamId = id;
    this.activeAt = this.readAt;
    if (this.phase !== 'open') {
      this.refuse(id); // going away
      return;
    }
    const overBudget = this.streams.size < this.maxConcurrent && this.admitStream?.(this.streams.size) === false;
    if (this.streams.size >= this.maxConcurrent || overBudget) {
      this.refused(overBudget ? 'stream-budget' : 'stream-limit');
      if (++this.counts.refusedStreams > this.limits.refusedStreams) {
        throw new H2ConnectionError(
          ErrorCode.ENHANCE_YOUR_CALM,
          'too many streams over the limit',
          'refused-stream-flood',
        );
      }
      this.refuse(id);
      return;
    }
    const parts = emptyRequestParts();
    const tooLarge =
      this.decoder.truncated || fields.length / 2 > this.maxHeaderPairs || listSize > this.maxHeaderListSize;
    // Malformed (RFC 9113 §8.1.1, §8.2.1): only this stream is reset (or answered 400), before any handler sees it.
    const malformed = tooLarge ? undefined : parseRequestFields(fields, endStream, parts, this.decoder.fieldsClean);
    if (malformed !== undefined) {
      this.onError?.(new Error(`malformed request on stream ${id}: ${malformed}`));
      if (!parts.badRequest) {
        this.streamErrorOnClosed(id, ErrorCode.PROTOCOL_ERROR);
        this.closedStreams.remember(id, ClosedHow.resetByUs);
        return;
      }
    }
    this.counts.windowCredit++;
    const stream = new H2Stream(
      id,
      this,
      parts,
      parts.headers,
      parts.declaredLength,
      endStream ? 'half-closed (remote)' : 'open',
      this.peerInitialWindow,
      this.initialWindow,
    );
    this.streams.set(id, stream);
    if (tooLarge || malformed !== undefined) {
      // Too many or too large header fields (431), or a value with whitespace around it (400, field-rules.ts): a
      // clear answer, and the stream ends here. Counted with the stream errors: a peer that keeps sending them (an
      // HPACK bomb a block) is cut like one that makes us reset streams.
      if (tooLarge) this.refused('header-list-too-large');
      this.countStreamError();
      this.respond(stream, tooLarge ? 431 : 400, { 'content-length': 0 }, true);
      return;
    }
    this.onStream(stream);
    // END_STREAM on the HEADERS frame: the stream was half-closed (remote) from the start; the handler hears it
    // now that it has set its callbacks.
    if (endStream && !stream.done) stream.onend?.();
  }

  /** REFUSED_STREAM: not processed at all, so safe to retry (RFC 9113 §8.7). */
  private refuse(id: number): void {
    this.writer.frameWords(FrameType.RST_STREAM, 0, id, ErrorCode.REFUSED_STREAM);
    this.closedStreams.remember(id, ClosedHow.resetByUs);
  }

  private onPriority(id: number, buf: Buffer, start: number, end: number): void {
    if (id === 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'PRIORITY on stream 0');
    this.countIgnored();
    // A wrong length is a stream error FRAME_SIZE_ERROR (RFC 9113 §6.3), a stream depending on itself one of
    // PROTOCOL_ERROR (RFC 7540 §5.3.1). The dependency itself is ignored: RFC 9113 §5.3.2 deprecates priority
    // signalling, but PRIORITY frames are still parsed and checked (§6.3).
    const code =
      end - start !== 5
        ? ErrorCode.FRAME_SIZE_ERROR
        : (buf.readUInt32BE(start) & 0x7fff_ffff) === id
          ? ErrorCode.PROTOCOL_ERROR
          : ErrorCode.NO_ERROR;
    if (code === ErrorCode.NO_ERROR) return;
    const stream = this.streams.get(id);
    if (stream !== undefined) {
      this.streamError(stream, code);
      return;
    }
    if (this.isIdle(id)) {
      // PRIORITY may come on an idle stream (RFC 9113 §5.1), but RST_STREAM must never be sent on one (§6.4, §5.1:
      // it would close a stream the peer has not opened). A stream error there can only be escalated to a
      // connection error, which §5.4.1 allows for any stream error: GOAWAY with the same code, as nghttp2 does for
      // both errors whatever the stream (and Go's x/net/http2 for a wrong length).
      throw new H2ConnectionError(
        code,
        code === ErrorCode.FRAME_SIZE_ERROR
          ? 'PRIORITY of the wrong size on an idle stream'
          : 'an idle stream depending on itself',
      );
    }
    this.streamErrorOnClosed(id, code); // closed: RST_STREAM is still allowed there (RFC 9113 §5.1)
  }

  /**
   * True for a stream in the "idle" state (RFC 9113 §5.1): a client stream above the last one opened, or any
   * even (server-initiated) stream, since this server never pushes and so never opens or reserves one.
   */
  private isIdle(id: number): boolean {
    return id > this.lastStreamId || (id & 1) === 0;
  }

  private onReset(id: number, buf: Buffer, start: number, end: number): void {
    if (id === 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'RST_STREAM on stream 0');
    if (end - start !== 4) throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'RST_STREAM of the wrong size');
    const stream = this.streams.get(id);
    if (stream === undefined) {
      this.onAbsentStream(id, FrameType.RST_STREAM);
      return;
    }
    // Resetting a request being served costs us its work: counted ("rapid reset"). One already answered costs nothing.
    if (!stream.done && ++this.counts.peerResets > this.limits.peerResets) {
      throw new H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, 'too many streams reset by the peer', 'rapid-reset');
    }
    this.resetStream(stream, buf.readUInt32BE(start), ClosedHow.resetByPeer);
  }

  private onSettings(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (id !== 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'SETTINGS on a stream');
    if (++this.counts.settings > this.limits.settings)
      throw new H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, 'SETTINGS flood', 'settings-flood');
    if ((flags & Flag.ACK) !== 0) {
      if (end !== start) throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'SETTINGS ACK with a payload');
      return;
    }
    if ((end - start) % 6 !== 0) throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'SETTINGS of the wrong size');
    if ((end - start) / 6 > this.maxSettingsEntries) {
      throw new H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, 'SETTINGS with too many entries', 'settings-entries');
    }
    let initialWindow = -1;
    for (let at = start; at < end; at += 6) {
      const setting = buf.readUInt16BE(at);
      const value = buf.readUInt32BE(at + 2);
      if (setting === Setting.ENABLE_PUSH && value > 1)
        throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'ENABLE_PUSH above 1');
      if (setting === Setting.INITIAL_WINDOW_SIZE) {
        if (value > MAX_WINDOW)
          throw new H2ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, 'INITIAL_WINDOW_SIZE above 2^31-1');
        initialWindow = value; // the last one in the frame counts: applied once, below
      } else if (setting === Setting.MAX_FRAME_SIZE) {
        if (value < DEFAULT_MAX_FRAME_SIZE || value > 0xff_ffff)
          throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'MAX_FRAME_SIZE out of range');
        this.peerMaxFrame = value;
      }
      // HEADER_TABLE_SIZE: we never index responses (and say so in our first block); the rest is advisory.
    }
    // The ACK goes first: a peer may only count on the new window once it has seen it acknowledged, and a strict
    // client (Python's h2) treats DATA beyond its old window, arriving before the ACK, as a flow-control error.
    this.writer.frame(FrameType.SETTINGS, Flag.ACK, 0);
    if (initialWindow < 0) return;
    const delta = initialWindow - this.peerInitialWindow;
    this.peerInitialWindow = initialWindow;
    if (delta === 0) return;
    this.streams.forEach((stream) => {
      stream.sendWindow += delta;
      if (stream.sendWindow > MAX_WINDOW)
        throw new H2ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, 'stream window above 2^31-1');
    });
    if (delta > 0) this.streams.forEach((stream) => this.pump(stream));
  }

  private onWindowUpdate(id: number, buf: Buffer, start: number, end: number): void {
    if (end - start !== 4) throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'WINDOW_UPDATE of the wrong size');
    if (++this.counts.windowUpdates > this.limits.windowUpdates + this.counts.windowCredit) {
      throw new H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, 'WINDOW_UPDATE flood', 'window-update-flood');
    }
    const increment = buf.readUInt32BE(start) & 0x7fff_ffff;
    if (id === 0) {
      if (increment === 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'WINDOW_UPDATE of 0');
      this.connSendWindow += increment;
      if (this.connSendWindow > MAX_WINDOW)
        throw new H2ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, 'connection window above 2^31-1');
      const blocked = this.blocked;
      this.blocked = [];
      for (const stream of blocked) this.pump(stream);
      return;
    }
    const stream = this.streams.get(id);
    if (stream === undefined) {
      this.onAbsentStream(id, FrameType.WINDOW_UPDATE);
      return;
    }
    if (increment === 0) {
      this.streamError(stream, ErrorCode.PROTOCOL_ERROR);
      return;
    }
    stream.sendWindow += increment;
    if (stream.sendWindow > MAX_WINDOW) {
      this.streamError(stream, ErrorCode.FLOW_CONTROL_ERROR);
      return;
    }
    this.pump(stream);
  }

  // ---- writing ----

  /** @internal A header block for a response: the record encoded, or the ready block as is. */
  encodeFields(headers: H2ResponseHeaders, status?: number): Buffer {
    if (Buffer.isBuffer(headers)) return headers;
    const fields: [string, string][] = [];
    if (status !== undefined) fields.push([':status', String(status)]);
    for (const name of Object.keys(headers)) fields.push([name.toLowerCase(), String(headers[name])]);
    return encodeHeaders(fields);
  }

  /** Writes a header block on `stream` (HEADERS, then CONTINUATIONs past the peer's frame size). */
  private headerFrames(stream: number, block: Buffer, endStream: boolean): void {
    let first = block;
    if (!this.tableSizeSent) {
      this.tableSizeSent = true;
      first = Buffer.concat([encodeTableSizeUpdate(0), block]);
    }
    const max = this.peerMaxFrame;
    const endFlag = endStream ? Flag.END_STREAM : 0;
    if (first.length <= max) {
      this.writer.frame(FrameType.HEADERS, endFlag | Flag.END_HEADERS, stream, first);
      return;
    }
    this.writer.frame(FrameType.HEADERS, endFlag, stream, first, 0, max);
    for (let at = max; at < first.length; at += max) {
      const to = Math.min(first.length, at + max);
      this.writer.frame(FrameType.CONTINUATION, to === first.length ? Flag.END_HEADERS : 0, stream, first, at, to);
    }
  }

  /** @internal */
  respond(stream: H2Stream, status: number, headers: H2ResponseHeaders, endStream: boolean): void {
    if (stream.done || stream.response !== 'not-started') return;
    stream.response = 'headers-sent';
    this.headerFrames(stream.id, this.encodeFields(headers, Buffer.isBuffer(headers) ? undefined : status), endStream);
    if (endStream) this.localEnd(stream);
    this.queueFlush();
  }

  /** @internal Queues data (and the end of the response, with trailers or not) and sends what the windows allow. */
  sendData(stream: H2Stream, data: Uint8Array, end: boolean, trailers: Buffer | undefined): void {
    if (stream.done || stream.response === 'end-queued') return;
    if (stream.response === 'not-started') throw new Error('respond() before writing a body');
    if (data.length > 0) {
      const bytes = Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.length);
      stream.pending.push(bytes);
      stream.pendingBytes += bytes.length;
    }
    if (end) {
      stream.response = 'end-queued';
      stream.pendingTrailers = trailers;
    }
    this.pump(stream);
    this.queueFlush();
  }

  /** Sends as much of a stream's queued data as both windows and the peer's frame size allow. */
  private pump(stream: H2Stream): void {
    if (stream.done) return;
    const hadPending = stream.pendingBytes > 0;
    while (stream.pendingBytes > 0) {
      const allowed = Math.min(stream.sendWindow, this.connSendWindow, this.peerMaxFrame);
      if (allowed <= 0) {
        if (this.connSendWindow <= 0 && !this.blocked.includes(stream)) this.blocked.push(stream);
        return;
      }
      const head = stream.pending[0];
      if (head === undefined) break; // pendingBytes > 0 implies a buffer: not reached
      const n = Math.min(allowed, head.length);
      const last = n === head.length && stream.pending.length === 1;
      const endHere = last && stream.response === 'end-queued' && stream.pendingTrailers === undefined;
      this.writer.frame(FrameType.DATA, endHere ? Flag.END_STREAM : 0, stream.id, head, 0, n);
      this.counts.windowCredit++;
      stream.sendWindow -= n;
      this.connSendWindow -= n;
      stream.pendingBytes -= n;
      if (n === head.length) stream.pending.shift();
      else stream.pending[0] = head.subarray(n);
      if (endHere) {
        this.localEnd(stream);
        return;
      }
    }
    if (stream.response === 'end-queued') {
      if (stream.pendingTrailers !== undefined) {
        this.headerFrames(stream.id, stream.pendingTrailers, true);
      } else {
        // An END_STREAM-only DATA frame waits for the stream's window to open, as nghttp2's does: a client that
        // set its window to 0 has not asked for the end of the response yet, and the stream stays counted.
        if (stream.sendWindow <= 0) return;
        this.writer.frame(FrameType.DATA, Flag.END_STREAM, stream.id);
      }
      this.localEnd(stream);
      return;
    }
    if (hadPending) {
      this.queueFlush();
      stream.ondrain?.();
    }
  }

  /**
   * Our END_STREAM is out: the stream closes if the client's came already; otherwise it is half-closed (local),
   * the handler's part is over, and the connection reads the rest of the request itself (see {@link H2Stream}).
   */
  private localEnd(stream: H2Stream): void {
    if (stream.state === 'half-closed (remote)') {
      this.closeStream(stream, ErrorCode.NO_ERROR, ClosedHow.ended);
      return;
    }
    stream.state = 'half-closed (local)';
    this.draining++;
    this.finish(stream, ErrorCode.NO_ERROR);
    // Nothing more of the body will be taken than what its window already allows.
    if (stream.recvWindow <= 0) this.resetStream(stream, ErrorCode.NO_ERROR, ClosedHow.resetByUs);
    else this.endIfIdle();
  }

  /** @internal Resets a stream: RST_STREAM `code` sent by us (`resetByUs`) or received (`resetByPeer`). */
  resetStream(stream: H2Stream, code: number, how: ClosedHow): void {
    if (isClosedState(stream.state)) return;
    if (how === ClosedHow.resetByUs) {
      this.writer.frameWords(FrameType.RST_STREAM, 0, stream.id, code);
      this.queueFlush();
    }
    this.closeStream(
      stream,
      code === ErrorCode.NO_ERROR && how === ClosedHow.resetByPeer ? ErrorCode.CANCEL : code,
      how,
    );
  }

  /**
   * The handler's part ends: `onclose`, and the callbacks let go. Called once, by the move that ended that part (to
   * half-closed (local), or to closed from a state in which the handler was still serving), after the move.
   */
  private finish(stream: H2Stream, code: number): void {
    stream.pending = [];
    stream.pendingBytes = 0;
    const blockedAt = this.blocked.indexOf(stream);
    if (blockedAt !== -1) this.blocked.splice(blockedAt, 1);
    const onclose = stream.onclose;
    stream.ondata = stream.onend = stream.onclose = stream.ondrain = undefined;
    onclose?.(code, stream);
  }

  /**
   * Any state but closed → closed. The request was complete if the client's END_STREAM had come (half-closed
   * (remote)) or is what closes it (`ended` from half-closed (local)); a stream draining its request body
   * (half-closed (local)) had its `onclose` already.
   */
  private closeStream(stream: H2Stream, code: number, how: ClosedHow): void {
    const from = stream.state;
    if (from === 'half-closed (local)') this.draining--;
    stream.state = from === 'half-closed (remote)' || how === ClosedHow.ended ? 'closed (request complete)' : 'closed';
    this.streams.delete(stream.id);
    this.closedStreams.remember(stream.id, how);
    if (from !== 'half-closed (local)') this.finish(stream, code);
    if (this.streams.size === 0) this.activeAt = this.inRead ? this.readAt : Date.now();
    this.endIfIdle();
  }

  /**
   * `open` (or a preface state) → `going-away`: GOAWAY NO_ERROR with the last stream this connection will process.
   * The caller moves on to `closing` or `closed` when nothing is left to serve.
   */
  private goAway(): void {
    this.phase = 'going-away';
    this.writer.frameWords(FrameType.GOAWAY, 0, 0, this.lastStreamId, ErrorCode.NO_ERROR);
    this.flush();
  }

  /**
   * `going-away` → `closing` → `closed` when no stream is left to serve: streams only draining a request body are
   * reset (NO_ERROR), then the end.
   */
  private endIfIdle(): void {
    if (this.phase !== 'going-away' || this.streams.size !== this.draining) return;
    this.phase = 'closing';
    this.streams.forEach((stream) => this.resetStream(stream, ErrorCode.NO_ERROR, ClosedHow.resetByUs));
    this.flush();
    this.socket.end();
    this.closed(); // nothing more is read or written
  }

  private queueFlush(): void {
    if (this.flushQueued || this.phase === 'closed' || this.inRead) return;
    this.flushQueued = true;
    process.nextTick(() => this.flush());
  }

  private flush(): void {
    this.flushQueued = false;
    if (this.writer.size === 0 || this.phase === 'closed' || this.socket.destroyed) return;
    this.socket.write(this.writer.take());
    if (this.pausedAt === 0 && this.socket.writableLength > this.maxOutput) {
      // The peer is not reading what we send: stop reading what it sends until it does (and cut it if it never does).
      this.pausedAt = Date.now();
      this.socket.pause();
    }
  }

  /** A connection error: GOAWAY with its code, then the socket is ended (RFC 9113 §5.4.1). */
  private fail(e: unknown): void {
    const code = e instanceof H2ConnectionError ? e.code : ErrorCode.INTERNAL_ERROR;
    if (e instanceof H2ConnectionError && e.reason !== undefined) this.refused(e.reason);
    this.onError?.(e instanceof Error ? e : new Error(String(e)));
    if (this.phase !== 'closed' && !this.socket.destroyed) {
      this.writer.frameWords(FrameType.GOAWAY, 0, 0, this.lastStreamId, code);
      this.flush();
      this.socket.end();
      // A peer that does not close its side is cut after a short grace.
      setTimeout(() => this.socket.destroy(), 1_000).unref();
    }
    this.closed();
  }

  /** Any phase → `closed` (final): streams still open close with CANCEL, close listeners run once. */
  private closed(): void {
    if (this.phase === 'closed') return;
    this.phase = 'closed';
    this.input = EMPTY;
    this.frameBuf = EMPTY;
    this.frameFill = 0;
    this.block.clear();
    clearTimeout(this.prefaceTimer);
    unwatch(this);
    this.streams.forEach((stream) => this.closeStream(stream, ErrorCode.CANCEL, ClosedHow.resetByUs));
    for (const listener of this.closeListeners.splice(0)) listener();
  }
}
