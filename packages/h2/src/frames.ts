/** HTTP/2 frame types (RFC 9113 §6). */
export const FrameType = {
  DATA: 0x0,
  HEADERS: 0x1,
  PRIORITY: 0x2,
  RST_STREAM: 0x3,
  SETTINGS: 0x4,
  PUSH_PROMISE: 0x5,
  PING: 0x6,
  GOAWAY: 0x7,
  WINDOW_UPDATE: 0x8,
  CONTINUATION: 0x9,
} as const;

/** Frame flags (RFC 9113 §6); the same bit means different things on different frame types. */
export const Flag = {
  END_STREAM: 0x1,
  ACK: 0x1,
  END_HEADERS: 0x4,
  PADDED: 0x8,
  PRIORITY: 0x20,
} as const;

/** HTTP/2 error codes (RFC 9113 §7), sent in RST_STREAM and GOAWAY. */
export const ErrorCode = {
  NO_ERROR: 0x0,
  PROTOCOL_ERROR: 0x1,
  INTERNAL_ERROR: 0x2,
  FLOW_CONTROL_ERROR: 0x3,
  SETTINGS_TIMEOUT: 0x4,
  STREAM_CLOSED: 0x5,
  FRAME_SIZE_ERROR: 0x6,
  REFUSED_STREAM: 0x7,
  CANCEL: 0x8,
  COMPRESSION_ERROR: 0x9,
  CONNECT_ERROR: 0xa,
  ENHANCE_YOUR_CALM: 0xb,
  INADEQUATE_SECURITY: 0xc,
  HTTP_1_1_REQUIRED: 0xd,
} as const;

/** SETTINGS identifiers (RFC 9113 §6.5.2). */
export const Setting = {
  HEADER_TABLE_SIZE: 0x1,
  ENABLE_PUSH: 0x2,
  MAX_CONCURRENT_STREAMS: 0x3,
  INITIAL_WINDOW_SIZE: 0x4,
  MAX_FRAME_SIZE: 0x5,
  MAX_HEADER_LIST_SIZE: 0x6,
} as const;

/** The client connection preface (RFC 9113 §3.4). */
export const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
/** The frame size every endpoint must accept, and the largest this server accepts. */
export const DEFAULT_MAX_FRAME_SIZE = 16_384;
/** The flow-control window every stream and connection starts with (RFC 9113 §6.9.2). */
export const DEFAULT_WINDOW = 65_535;
/** Largest flow-control window (2^31 - 1). */
export const MAX_WINDOW = 0x7fff_ffff;
export const FRAME_HEADER_LENGTH = 9;

/**
 * The bytes a connection is about to write, framed in place: one growing buffer per connection, copied out
 * once per flush, so writing a frame allocates nothing (the old per-frame 9-byte buffers were young garbage
 * on every request).
 */
export class FrameWriter {
  // 4 KiB to start: an idle connection holds no more (thousands of them may be open); a busy one grows it once.
  private buf = Buffer.allocUnsafe(4 * 1024);
  private length = 0;

  get size(): number {
    return this.length;
  }

  private room(n: number): void {
    if (this.length + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.length + n) size *= 2;
    const bigger = Buffer.allocUnsafe(size);
    this.buf.copy(bigger, 0, 0, this.length);
    this.buf = bigger;
  }

  /** A frame header followed by `payload` (or by `payloadLength` bytes the caller writes next). */
  frame(
    type: number,
    flags: number,
    stream: number,
    payload?: Uint8Array,
    payloadStart = 0,
    payloadEnd = payload?.length ?? 0,
  ): void {
    const length = payloadEnd - payloadStart;
    this.room(FRAME_HEADER_LENGTH + length);
    const b = this.buf;
    const at = this.length;
    b[at] = (length >>> 16) & 0xff;
    b[at + 1] = (length >>> 8) & 0xff;
    b[at + 2] = length & 0xff;
    b[at + 3] = type;
    b[at + 4] = flags;
    b.writeUInt32BE(stream >>> 0, at + 5);
    this.length = at + FRAME_HEADER_LENGTH;
    if (payload !== undefined && length > 0) {
      // Copied without a subarray view: nothing allocated per frame.
      if (Buffer.isBuffer(payload)) payload.copy(b, this.length, payloadStart, payloadEnd);
      else b.set(payload.subarray(payloadStart, payloadEnd), this.length);
      this.length += length;
    }
  }

  /** A frame whose payload is one or two 32-bit words (RST_STREAM, WINDOW_UPDATE, GOAWAY). */
  frameWords(type: number, flags: number, stream: number, first: number, second?: number): void {
    const length = second === undefined ? 4 : 8;
    this.room(FRAME_HEADER_LENGTH + length);
    this.frame(type, flags, stream);
    // frame() wrote a zero length: patch its low byte, then append the words.
    this.buf[this.length - 7] = length;
    this.buf.writeUInt32BE(first >>> 0, this.length);
    if (second !== undefined) this.buf.writeUInt32BE(second >>> 0, this.length + 4);
    this.length += length;
  }

  /** The framed bytes, copied out (small writes come from node's buffer pool), and the writer emptied. */
  take(): Buffer {
    const out = Buffer.allocUnsafe(this.length);
    this.buf.copy(out, 0, 0, this.length);
    this.length = 0;
    if (this.buf.length > 256 * 1024) this.buf = Buffer.allocUnsafe(16 * 1024); // after a big answer, shrink back
    return out;
  }
}
