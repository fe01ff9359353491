/**
 * A header block arriving in pieces: a HEADERS frame without END_HEADERS, then CONTINUATION frames (RFC 9113
 * §6.10). The fragments are copied into one buffer as they arrive (not a Buffer kept per frame), and counted and
 * sized as they arrive: a peer cannot make the server hold more than `maxBytes`, nor walk more than
 * `maxContinuations` frames, zero-length ones included, before it is cut.
 */
export class HeaderBlockCollector {
  /** The stream whose block is being collected; 0 when none is. */
  stream = 0;
  /** END_STREAM of the block's HEADERS frame. */
  endStream = false;
  private bytes: Buffer = Buffer.alloc(0);
  private length = 0;
  private continuations = 0;

  constructor(
    private readonly maxBytes: number,
    private readonly maxContinuations: number,
  ) {}

  /** A HEADERS frame without END_HEADERS: its fragment `buf[start, end)` starts a block on `stream`. */
  start(stream: number, endStream: boolean, buf: Buffer, start: number, end: number): void {
    const length = end - start;
    this.stream = stream;
    this.endStream = endStream;
    this.continuations = 0;
    this.length = length;
    this.bytes = Buffer.allocUnsafe(Math.min(this.maxBytes, Math.max(4096, length * 2)));
    buf.copy(this.bytes, 0, start, end);
  }

  /**
   * A CONTINUATION's fragment. Returns what is wrong, if anything: `too-many` frames or `too-large` a block
   * (the caller ends the connection), else undefined.
   */
  add(buf: Buffer, start: number, end: number): 'too-many' | 'too-large' | undefined {
    if (++this.continuations > this.maxContinuations) return 'too-many';
    const total = this.length + (end - start);
    if (total > this.maxBytes) return 'too-large';
    if (total > this.bytes.length) {
      const bigger = Buffer.allocUnsafe(Math.min(this.maxBytes, Math.max(total, this.bytes.length * 2)));
      this.bytes.copy(bigger, 0, 0, this.length);
      this.bytes = bigger;
    }
    buf.copy(this.bytes, this.length, start, end);
    this.length = total;
    return undefined;
  }

  /** The whole block (`[0, length)` of the returned buffer); the collector is empty again. */
  take(): { block: Buffer; length: number } {
    const taken = { block: this.bytes, length: this.length };
    this.clear();
    return taken;
  }

  clear(): void {
    this.stream = 0;
    this.bytes = Buffer.alloc(0);
    this.length = 0;
  }
}
