import type { Socket } from 'node:net';
import { StreamTable } from '@idgen/http2-stream-table';
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

/** Limits and windows of a server connection; every default is what `idgen-server` runs with. */
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
  /**
   * Streams the peer may reset (RST_STREAM on a stream still open) per second before the connection is ended
   * with ENHANCE_YOUR_CALM: opening and resetting streams in a loop ("rapid reset", CVE-2023-44487) costs the
   * server work per stream and the peer almost nothing. Default 1,000.
   */
  readonly maxResetsPerSecond?: number;
  /** Called for a connection-level protocol error (the peer's fault, worth a debug line). */
  readonly onError?: (e: Error) => void;
}

/** Header fields as name → value (names lowercase; repeated fields joined with ", ", cookies with "; "). */
export type H2Headers = Record<string, string>;
/** Response header fields: a record, or a header block already HPACK-encoded with {@link encodeHeaders}. */
export type H2ResponseHeaders = Readonly<Record<string, string | number>> | Buffer;

/** A protocol error that ends the connection: GOAWAY with `code`. */
export class H2ConnectionError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
    this.name = 'H2ConnectionError';
  }
}

const EMPTY = Buffer.alloc(0);
/** Request header fields that are only meaningful hop by hop (RFC 9113 §8.2.2): their presence is malformed. */
const CONNECTION_SPECIFIC = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade']);
/** A header block arriving in pieces (HEADERS + CONTINUATION) larger than this ends the connection. */
const MAX_HEADER_BLOCK_BYTES = 64 * 1024;

/**
 * One request stream. The handler given to {@link H2Connection} sets the `on*` callbacks it needs (they are
 * plain properties, not events: no listener arrays per request) and answers with `respond`, `write`, `end`
 * or `reset`. Callbacks run synchronously while the connection reads, so answers written from them leave in
 * the same socket write as other answers to the same read.
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
   * The stream is closed: `code` 0 when it completed, else the RST_STREAM code (sent, received, or CANCEL when
   * the connection went). The stream is passed too, so one function can serve every stream (no closure each).
   */
  onclose: ((code: number, stream: H2Stream) => void) | undefined = undefined;
  /** Everything written so far has left for the socket (after flow control held some of it back). */
  ondrain: (() => void) | undefined = undefined;
  /** Free for the handler's own bookkeeping (a deadline ticket, say). */
  context: unknown = undefined;

  /** @internal */ remoteClosed = false;
  /** @internal */ localClosed = false;
  /** @internal */ closed = false;
  /** @internal */ headersSent = false;
  /** @internal */ sendWindow: number;
  /** @internal */ recvWindow: number;
  /** @internal */ recvUnacked = 0;
  /** @internal */ received = 0;
  /** @internal */ readonly declaredLength: number;
  /** @internal */ pending: Buffer[] = [];
  /** @internal */ pendingBytes = 0;
  /** @internal */ pendingEnd = false;
  /** @internal */ pendingTrailers: Buffer | undefined = undefined;

  constructor(
    readonly id: number,
    private readonly connection: H2Connection,
    pseudo: { method: string; path: string; authority: string; scheme: string },
    headers: H2Headers,
    sendWindow: number,
    recvWindow: number,
  ) {
    this.method = pseudo.method;
    this.path = pseudo.path;
    this.authority = pseudo.authority;
    this.scheme = pseudo.scheme;
    this.headers = headers;
    this.sendWindow = sendWindow;
    this.recvWindow = recvWindow;
    const length = headers['content-length'];
    this.declaredLength = length === undefined ? -1 : Number(length);
  }

  /** True once the stream is closed (answered and done, or reset): writing then does nothing. */
  get isClosed(): boolean {
    return this.closed;
  }

  /** True once the response headers are out (or queued to go out). */
  get isResponded(): boolean {
    return this.headersSent;
  }

  /** True once the whole request body has arrived. */
  get isRequestComplete(): boolean {
    return this.remoteClosed;
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
    this.connection.sendData(this, data ?? EMPTY, true, trailers === undefined ? undefined : this.connection.encodeFields(trailers));
  }

  /** Resets the stream (RST_STREAM `code`, default CANCEL) and closes it. */
  reset(code: number = ErrorCode.CANCEL): void {
    this.connection.resetStream(this, code, true);
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
 * the dynamic table (responses are encoded without indexing); stream states and their errors; flow control
 * both ways; PING, GOAWAY, RST_STREAM, PRIORITY (ignored), CONTINUATION, padding; request validation
 * (pseudo-headers, connection-specific fields, content-length); limits on streams, header size and count, and
 * buffered output. What it leaves out: TLS and ALPN, server push, priorities, the CONNECT method, trailers
 * sent by the client (accepted, not passed on), an HTTP/1.1 Upgrade.
 */
export class H2Connection {
  private readonly maxConcurrent: number;
  private readonly maxHeaderListSize: number;
  private readonly maxHeaderPairs: number;
  private readonly initialWindow: number;
  private readonly connectionWindow: number;
  private readonly maxOutput: number;
  private readonly onError: ((e: Error) => void) | undefined;

  private readonly streams = new StreamTable<number, H2Stream>(16);
  private readonly decoder = new HpackDecoder(4096);
  private readonly writer = new FrameWriter();
  private input: Buffer = EMPTY;
  private prefaceAt = 0;
  private settingsSeen = false;
  private lastStreamId = 0;
  /** A header block waiting for CONTINUATION frames. */
  private block: { stream: number; endStream: boolean; parts: Buffer[]; size: number } | undefined;
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
  private readonly maxResets: number;
  private resetsInWindow = 0;
  private resetWindowStart = 0;
  private reading = true;
  private goingAway = false;
  private dead = false;
  private readonly closeListeners: (() => void)[] = [];

  constructor(
    private readonly socket: Socket,
    private readonly onStream: (stream: H2Stream) => void,
    options: H2ConnectionOptions = {},
  ) {
    this.maxConcurrent = options.maxConcurrentStreams ?? 128;
    this.maxHeaderListSize = options.maxHeaderListSize ?? 16 * 1024;
    this.maxHeaderPairs = options.maxHeaderPairs ?? 64;
    this.initialWindow = options.initialWindowSize ?? DEFAULT_WINDOW;
    this.connectionWindow = options.connectionWindowSize ?? 1024 * 1024;
    this.maxOutput = options.maxOutputBytes ?? 1024 * 1024;
    this.maxResets = options.maxResetsPerSecond ?? 1_000;
    this.onError = options.onError;

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
      if (!this.reading && !this.dead) {
        this.reading = true;
        socket.resume();
      }
    });
    socket.once('close', () => this.closed());
  }

  /** Open streams. */
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
    if (this.goingAway || this.dead) return;
    this.goingAway = true;
    this.writer.frameWords(FrameType.GOAWAY, 0, 0, this.lastStreamId, ErrorCode.NO_ERROR);
    this.flush();
    this.endIfIdle();
  }

  /** Cuts the connection now; open streams close with CANCEL. */
  destroy(): void {
    this.socket.destroy();
    this.closed();
  }

  // ---- reading ----

  private read(chunk: Buffer): void {
    if (this.dead) return;
    const input = this.input.length === 0 ? chunk : Buffer.concat([this.input, chunk]);
    let at = 0;
    this.inRead = true;
    try {
      if (this.prefaceAt < PREFACE.length) {
        const n = Math.min(PREFACE.length - this.prefaceAt, input.length);
        if (input.compare(PREFACE, this.prefaceAt, this.prefaceAt + n, 0, n) !== 0) {
          throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'bad connection preface');
        }
        this.prefaceAt += n;
        at = n;
      }
      while (input.length - at >= FRAME_HEADER_LENGTH) {
        const length = input.readUIntBE(at, 3);
        if (length > DEFAULT_MAX_FRAME_SIZE) throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, `frame of ${length} bytes`);
        if (input.length - at - FRAME_HEADER_LENGTH < length) break;
        const type = input[at + 3] ?? 0;
        const flags = input[at + 4] ?? 0;
        const stream = input.readUInt32BE(at + 5) & 0x7fff_ffff;
        const start = at + FRAME_HEADER_LENGTH;
        at = start + length;
        this.frame(type, flags, stream, input, start, at);
        if (this.dead) return;
      }
    } catch (e) {
      this.fail(e);
      return;
    } finally {
      this.inRead = false;
    }
    // Keep a partial frame; copy it if small so the whole chunk is not held.
    this.input = at === input.length ? EMPTY : at > 0 && input.length - at < 4096 ? Buffer.from(input.subarray(at)) : input.subarray(at);
    this.flush();
  }

  private frame(type: number, flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (!this.settingsSeen) {
      if (type !== FrameType.SETTINGS || (flags & Flag.ACK) !== 0) {
        throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'the first frame must be SETTINGS');
      }
      this.settingsSeen = true;
    }
    if (this.block !== undefined && (type !== FrameType.CONTINUATION || id !== this.block.stream)) {
      throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'expected CONTINUATION');
    }
    switch (type) {
      case FrameType.DATA:
        return this.onData(flags, id, buf, start, end);
      case FrameType.HEADERS:
        return this.onHeaders(flags, id, buf, start, end);
      case FrameType.PRIORITY:
        if (id === 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'PRIORITY on stream 0');
        if (end - start !== 5) this.streamError(id, ErrorCode.FRAME_SIZE_ERROR);
        return;
      case FrameType.RST_STREAM:
        return this.onReset(id, buf, start, end);
      case FrameType.SETTINGS:
        return this.onSettings(flags, id, buf, start, end);
      case FrameType.PUSH_PROMISE:
        throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'PUSH_PROMISE from a client');
      case FrameType.PING:
        if (id !== 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'PING on a stream');
        if (end - start !== 8) throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'PING of the wrong size');
        if ((flags & Flag.ACK) === 0) this.writer.frame(FrameType.PING, Flag.ACK, 0, buf, start, end);
        return;
      case FrameType.GOAWAY:
        if (id !== 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'GOAWAY on a stream');
        if (end - start < 8) throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'GOAWAY too short');
        // The peer opens no more streams; those open finish, then the connection ends.
        this.goingAway = true;
        this.endIfIdle();
        return;
      case FrameType.WINDOW_UPDATE:
        return this.onWindowUpdate(id, buf, start, end);
      case FrameType.CONTINUATION:
        return this.onContinuation(flags, id, buf, start, end);
      default:
        return; // unknown frame types are ignored (RFC 9113 §4.1)
    }
  }

  private onData(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (id === 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'DATA on stream 0');
    const length = end - start;
    // The whole frame counts against the windows, padding included (RFC 9113 §6.9.1).
    this.connRecvWindow -= length;
    if (this.connRecvWindow < 0) throw new H2ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, 'DATA past the connection window');
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
      if (length === 0 || pad >= length) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'padding longer than the frame');
      dataStart = start + 1;
      dataEnd = end - pad;
    }
    const stream = this.streams.get(id);
    if (stream === undefined) {
      if (id > this.lastStreamId) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'DATA on an idle stream');
      return; // a stream we closed or reset: its DATA may still be in flight
    }
    if (stream.remoteClosed) {
      this.resetStream(stream, ErrorCode.STREAM_CLOSED, true);
      return;
    }
    stream.recvWindow -= length;
    if (stream.recvWindow < 0) {
      this.resetStream(stream, ErrorCode.FLOW_CONTROL_ERROR, true);
      return;
    }
    const endStream = (flags & Flag.END_STREAM) !== 0;
    stream.received += dataEnd - dataStart;
    if (stream.declaredLength >= 0 && (stream.received > stream.declaredLength || (endStream && stream.received !== stream.declaredLength))) {
      this.resetStream(stream, ErrorCode.PROTOCOL_ERROR, true); // content-length does not match the body (RFC 9113 §8.1.1)
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
    if (endStream && !stream.closed) this.remoteEnd(stream);
  }

  private remoteEnd(stream: H2Stream): void {
    stream.remoteClosed = true;
    if (stream.localClosed) this.closeStream(stream, ErrorCode.NO_ERROR);
    else stream.onend?.();
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
      const part = Buffer.from(buf.subarray(blockStart, blockEnd));
      this.block = { stream: id, endStream, parts: [part], size: part.length };
      return;
    }
    this.headerBlock(id, endStream, buf, blockStart, blockEnd);
  }

  private onContinuation(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    const block = this.block;
    if (block === undefined || block.stream !== id) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'CONTINUATION without HEADERS');
    block.size += end - start;
    if (block.size > MAX_HEADER_BLOCK_BYTES) throw new H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, 'header block too large');
    block.parts.push(Buffer.from(buf.subarray(start, end)));
    if ((flags & Flag.END_HEADERS) === 0) return;
    this.block = undefined;
    const whole = Buffer.concat(block.parts, block.size);
    this.headerBlock(id, block.endStream, whole, 0, whole.length);
  }

  /** A complete header block: a new request, or trailers of an open one. */
  private headerBlock(id: number, endStream: boolean, buf: Buffer, start: number, end: number): void {
    const fields: string[] = []; // new per block: cheaper than emptying one (V8 frees its storage on length = 0)
    let listSize: number;
    try {
      listSize = this.decoder.decode(buf, start, end, fields);
    } catch (e) {
      if (e instanceof HpackError) throw new H2ConnectionError(ErrorCode.COMPRESSION_ERROR, `header compression: ${e.message}`);
      throw e;
    }
    const existing = this.streams.get(id);
    if (existing !== undefined) {
      // Trailers: they must end the stream and carry no pseudo-header. Their fields are not passed on.
      if (existing.remoteClosed) this.resetStream(existing, ErrorCode.STREAM_CLOSED, true);
      else if (!endStream || hasPseudo(fields)) this.resetStream(existing, ErrorCode.PROTOCOL_ERROR, true);
      else if (existing.declaredLength >= 0 && existing.received !== existing.declaredLength) this.resetStream(existing, ErrorCode.PROTOCOL_ERROR, true);
      else this.remoteEnd(existing);
      return;
    }
    if (id <= this.lastStreamId) {
      this.writer.frameWords(FrameType.RST_STREAM, 0, id, ErrorCode.STREAM_CLOSED);
      return;
    }
    this.lastStreamId = id;
    if (this.goingAway || this.streams.size >= this.maxConcurrent) {
      this.writer.frameWords(FrameType.RST_STREAM, 0, id, ErrorCode.REFUSED_STREAM);
      return;
    }
    const pseudo = { method: '', path: '', authority: '', scheme: '' };
    const headers: H2Headers = {};
    const malformed = parseRequestFields(fields, pseudo, headers);
    if (malformed !== undefined) {
      this.writer.frameWords(FrameType.RST_STREAM, 0, id, ErrorCode.PROTOCOL_ERROR);
      this.onError?.(new Error(`malformed request on stream ${id}: ${malformed}`));
      return;
    }
    const stream = new H2Stream(id, this, pseudo, headers, this.peerInitialWindow, this.initialWindow);
    this.streams.set(id, stream);
    if (listSize > this.maxHeaderListSize || fields.length / 2 > this.maxHeaderPairs) {
      // Too many or too large header fields: a clear answer, and the stream ends here.
      this.respond(stream, 431, { 'content-length': 0 }, true);
      if (endStream && !stream.closed) this.remoteEnd(stream);
      return;
    }
    if (stream.declaredLength !== -1 && !(stream.declaredLength >= 0 && Number.isSafeInteger(stream.declaredLength))) {
      this.resetStream(stream, ErrorCode.PROTOCOL_ERROR, true);
      return;
    }
    this.onStream(stream);
    if (endStream && !stream.closed) {
      if (stream.declaredLength > 0) this.resetStream(stream, ErrorCode.PROTOCOL_ERROR, true);
      else this.remoteEnd(stream);
    }
  }

  private onReset(id: number, buf: Buffer, start: number, end: number): void {
    if (id === 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'RST_STREAM on stream 0');
    if (end - start !== 4) throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'RST_STREAM of the wrong size');
    if (id > this.lastStreamId) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'RST_STREAM on an idle stream');
    const stream = this.streams.get(id);
    if (stream === undefined) return;
    const now = Date.now();
    if (now - this.resetWindowStart >= 1_000) {
      this.resetWindowStart = now;
      this.resetsInWindow = 0;
    }
    if (++this.resetsInWindow > this.maxResets) throw new H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, 'too many streams reset by the peer');
    this.resetStream(stream, buf.readUInt32BE(start), false);
  }

  private onSettings(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (id !== 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'SETTINGS on a stream');
    if ((flags & Flag.ACK) !== 0) {
      if (end !== start) throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'SETTINGS ACK with a payload');
      return;
    }
    if ((end - start) % 6 !== 0) throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'SETTINGS of the wrong size');
    for (let at = start; at < end; at += 6) {
      const setting = buf.readUInt16BE(at);
      const value = buf.readUInt32BE(at + 2);
      if (setting === Setting.ENABLE_PUSH && value > 1) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'ENABLE_PUSH above 1');
      if (setting === Setting.INITIAL_WINDOW_SIZE) {
        if (value > MAX_WINDOW) throw new H2ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, 'INITIAL_WINDOW_SIZE above 2^31-1');
        const delta = value - this.peerInitialWindow;
        this.peerInitialWindow = value;
        this.streams.forEach((stream) => {
          stream.sendWindow += delta;
          if (stream.sendWindow > MAX_WINDOW) throw new H2ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, 'stream window above 2^31-1');
        });
        if (delta > 0) this.streams.forEach((stream) => this.pump(stream));
      } else if (setting === Setting.MAX_FRAME_SIZE) {
        if (value < DEFAULT_MAX_FRAME_SIZE || value > 0xff_ffff) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'MAX_FRAME_SIZE out of range');
        this.peerMaxFrame = value;
      }
      // HEADER_TABLE_SIZE: we never index responses (and say so in our first block); the rest is advisory.
    }
    this.writer.frame(FrameType.SETTINGS, Flag.ACK, 0);
  }

  private onWindowUpdate(id: number, buf: Buffer, start: number, end: number): void {
    if (end - start !== 4) throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'WINDOW_UPDATE of the wrong size');
    const increment = buf.readUInt32BE(start) & 0x7fff_ffff;
    if (id === 0) {
      if (increment === 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'WINDOW_UPDATE of 0');
      this.connSendWindow += increment;
      if (this.connSendWindow > MAX_WINDOW) throw new H2ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, 'connection window above 2^31-1');
      const blocked = this.blocked;
      this.blocked = [];
      for (const stream of blocked) this.pump(stream);
      return;
    }
    const stream = this.streams.get(id);
    if (stream === undefined) {
      if (id > this.lastStreamId) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, 'WINDOW_UPDATE on an idle stream');
      return;
    }
    if (increment === 0) {
      this.resetStream(stream, ErrorCode.PROTOCOL_ERROR, true);
      return;
    }
    stream.sendWindow += increment;
    if (stream.sendWindow > MAX_WINDOW) {
      this.resetStream(stream, ErrorCode.FLOW_CONTROL_ERROR, true);
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
    if (stream.closed || stream.headersSent) return;
    stream.headersSent = true;
    this.headerFrames(stream.id, this.encodeFields(headers, Buffer.isBuffer(headers) ? undefined : status), endStream);
    if (endStream) this.localEnd(stream);
    this.queueFlush();
  }

  /** @internal Queues data (and the end of the response, with trailers or not) and sends what the windows allow. */
  sendData(stream: H2Stream, data: Uint8Array, end: boolean, trailers: Buffer | undefined): void {
    if (stream.closed || stream.pendingEnd) return;
    if (!stream.headersSent) throw new Error('respond() before writing a body');
    if (data.length > 0) {
      const bytes = Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.length);
      stream.pending.push(bytes);
      stream.pendingBytes += bytes.length;
    }
    if (end) {
      stream.pendingEnd = true;
      stream.pendingTrailers = trailers;
    }
    this.pump(stream);
    this.queueFlush();
  }

  /** Sends as much of a stream's queued data as both windows and the peer's frame size allow. */
  private pump(stream: H2Stream): void {
    if (stream.closed) return;
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
      const endHere = last && stream.pendingEnd && stream.pendingTrailers === undefined;
      this.writer.frame(FrameType.DATA, endHere ? Flag.END_STREAM : 0, stream.id, head, 0, n);
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
    if (stream.pendingEnd && !stream.localClosed) {
      if (stream.pendingTrailers !== undefined) this.headerFrames(stream.id, stream.pendingTrailers, true);
      else this.writer.frame(FrameType.DATA, Flag.END_STREAM, stream.id);
      this.localEnd(stream);
      return;
    }
    if (hadPending) {
      this.queueFlush();
      stream.ondrain?.();
    }
  }

  /** Our side of the stream is done: closed if the request is too, else the rest of its body is refused. */
  private localEnd(stream: H2Stream): void {
    stream.localClosed = true;
    if (stream.remoteClosed) {
      this.closeStream(stream, ErrorCode.NO_ERROR);
      return;
    }
    // Answered before the request ended: tell the peer to stop sending (RFC 9113 §8.1).
    this.writer.frameWords(FrameType.RST_STREAM, 0, stream.id, ErrorCode.NO_ERROR);
    this.closeStream(stream, ErrorCode.NO_ERROR);
  }

  /** @internal Resets a stream; `send` says whether the RST_STREAM is ours to send (not the peer's). */
  resetStream(stream: H2Stream, code: number, send: boolean): void {
    if (stream.closed) return;
    if (send) {
      this.writer.frameWords(FrameType.RST_STREAM, 0, stream.id, code);
      this.queueFlush();
    }
    this.closeStream(stream, code === ErrorCode.NO_ERROR && !send ? ErrorCode.CANCEL : code);
  }

  private streamError(id: number, code: number): void {
    const stream = this.streams.get(id);
    if (stream !== undefined) this.resetStream(stream, code, true);
    else this.writer.frameWords(FrameType.RST_STREAM, 0, id, code);
  }

  private closeStream(stream: H2Stream, code: number): void {
    stream.closed = true;
    stream.pending = [];
    stream.pendingBytes = 0;
    this.streams.delete(stream.id);
    const blockedAt = this.blocked.indexOf(stream);
    if (blockedAt !== -1) this.blocked.splice(blockedAt, 1);
    const onclose = stream.onclose;
    stream.ondata = stream.onend = stream.onclose = stream.ondrain = undefined;
    onclose?.(code, stream);
    this.endIfIdle();
  }

  private endIfIdle(): void {
    if (this.goingAway && this.streams.size === 0 && !this.dead) {
      this.flush();
      this.socket.end();
      this.closed(); // nothing more is read or written
    }
  }

  private queueFlush(): void {
    if (this.flushQueued || this.dead || this.inRead) return;
    this.flushQueued = true;
    process.nextTick(() => this.flush());
  }

  private flush(): void {
    this.flushQueued = false;
    if (this.writer.size === 0 || this.dead || this.socket.destroyed) return;
    this.socket.write(this.writer.take());
    if (this.reading && this.socket.writableLength > this.maxOutput) {
      // The peer is not reading what we send: stop reading what it sends until it does.
      this.reading = false;
      this.socket.pause();
    }
  }

  /** A connection error: GOAWAY with its code, then the socket is ended (RFC 9113 §5.4.1). */
  private fail(e: unknown): void {
    const code = e instanceof H2ConnectionError ? e.code : ErrorCode.INTERNAL_ERROR;
    this.onError?.(e instanceof Error ? e : new Error(String(e)));
    if (!this.dead && !this.socket.destroyed) {
      this.writer.frameWords(FrameType.GOAWAY, 0, 0, this.lastStreamId, code);
      this.flush();
      this.socket.end();
      // A peer that does not close its side is cut after a short grace.
      setTimeout(() => this.socket.destroy(), 1_000).unref();
    }
    this.closed();
  }

  /** Everything ends: streams still open close with CANCEL, close listeners run once. */
  private closed(): void {
    if (this.dead) return;
    this.dead = true;
    this.input = EMPTY;
    this.streams.forEach((stream) => this.closeStream(stream, ErrorCode.CANCEL));
    for (const listener of this.closeListeners.splice(0)) listener();
  }
}

function hasPseudo(fields: readonly string[]): boolean {
  for (let i = 0; i < fields.length; i += 2) if (fields[i]?.charCodeAt(0) === 0x3a) return true;
  return false;
}

/**
 * Splits a request's decoded fields into pseudo-headers and regular headers, and says what is malformed about
 * them, if anything (RFC 9113 §8.3.1, §8.2): unknown, repeated or late pseudo-headers, a missing `:method`,
 * `:scheme` or `:path`, uppercase names, connection-specific fields, a `te` other than "trailers".
 */
function parseRequestFields(
  fields: readonly string[],
  pseudo: { method: string; path: string; authority: string; scheme: string },
  headers: H2Headers,
): string | undefined {
  let regular = false;
  let seen = 0;
  for (let i = 0; i < fields.length; i += 2) {
    const name = fields[i] ?? '';
    const value = fields[i + 1] ?? '';
    if (name.charCodeAt(0) === 0x3a) {
      if (regular) return `pseudo-header ${name} after regular fields`;
      const bit = name === ':method' ? 1 : name === ':path' ? 2 : name === ':scheme' ? 4 : name === ':authority' ? 8 : 0;
      if (bit === 0) return `unknown pseudo-header ${name}`;
      if ((seen & bit) !== 0) return `repeated ${name}`;
      seen |= bit;
      if (bit === 1) pseudo.method = value;
      else if (bit === 2) pseudo.path = value;
      else if (bit === 4) pseudo.scheme = value;
      else pseudo.authority = value;
      continue;
    }
    regular = true;
    if (name !== name.toLowerCase()) return `uppercase field name ${name}`;
    if (CONNECTION_SPECIFIC.has(name)) return `connection-specific field ${name}`;
    if (name === 'te' && value !== 'trailers') return 'te other than trailers';
    const prior = headers[name];
    if (prior === undefined) headers[name] = value;
    else headers[name] = prior + (name === 'cookie' ? '; ' : ', ') + value;
  }
  if ((seen & 1) === 0) return 'no :method';
  if (pseudo.method === 'CONNECT') return 'CONNECT is not supported';
  if ((seen & 6) !== 6 || pseudo.path === '') return 'no :scheme or :path';
  if (pseudo.authority === '' && headers.host !== undefined) pseudo.authority = headers.host;
  return undefined;
}
