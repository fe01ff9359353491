/**
 * How a stream reached the closed state (RFC 9113 §5.1), which decides what a late frame on it means:
 * - `resetByUs`: we sent RST_STREAM. Frames the peer sent before it saw ours may still arrive: ignored.
 * - `resetByPeer`: the peer sent RST_STREAM. Anything but PRIORITY after that is its error: STREAM_CLOSED.
 * - `ended`: both sides sent END_STREAM. DATA or HEADERS after the peer's END_STREAM is a connection error
 *   of type STREAM_CLOSED; WINDOW_UPDATE and RST_STREAM may cross our END_STREAM and are ignored.
 */
export const ClosedHow = {
  unknown: 0,
  resetByUs: 1,
  resetByPeer: 2,
  ended: 3,
} as const;
export type ClosedHow = (typeof ClosedHow)[keyof typeof ClosedHow];

/** Closed streams remembered per connection: the last this many client stream ids. */
const SLOTS = 256;

/**
 * The most recently closed streams of one connection and how each closed, in two typed arrays indexed by
 * stream id (direct-mapped: client ids are odd and rise, so the newest `SLOTS` ids each have their own slot).
 * Nothing is allocated per stream. An id whose slot was taken by a newer stream is `unknown`: the RFC lets
 * an endpoint limit how long it tells closed streams apart (§5.1, "closed").
 */
export class ClosedStreams {
  private readonly ids = new Int32Array(SLOTS);
  private readonly how = new Uint8Array(SLOTS);

  remember(id: number, how: ClosedHow): void {
    const slot = (id >>> 1) & (SLOTS - 1);
    this.ids[slot] = id;
    this.how[slot] = how;
  }

  lookup(id: number): ClosedHow {
    const slot = (id >>> 1) & (SLOTS - 1);
    return this.ids[slot] === id ? ((this.how[slot] ?? 0) as ClosedHow) : ClosedHow.unknown;
  }
}
