import { DEFAULT_WINDOW } from './frames.js';

/**
 * Frames per second, per connection, past which a peer is flooding rather than talking: the connection ends
 * with GOAWAY ENHANCE_YOUR_CALM (RFC 9113 §10.5: "an endpoint MAY treat activity that is suspicious as a
 * connection error of type ENHANCE_YOUR_CALM"). Each counts frames that cost the server work and the peer
 * nothing; none of them is reached by a client that uses the protocol for requests.
 */
export interface H2FloodLimits {
  /** PING frames (each one answered). Default 1,000. */
  readonly pings: number;
  /** SETTINGS frames, ACKs included (each one acknowledged, its entries applied). Default 100. */
  readonly settings: number;
  /** DATA frames with no payload and no END_STREAM (nothing to do but count them). Default 1,000. */
  readonly emptyFrames: number;
  /**
   * WINDOW_UPDATE frames beyond one for each DATA frame we sent and each stream opened in the same second
   * (a client that returns window per DATA frame, as some load generators do, never reaches it). Default 1,000.
   */
  readonly windowUpdates: number;
  /** Frames of unknown type, and PRIORITY frames (both ignored, RFC 9113 §4.1, §5.3.2). Default 1,000. */
  readonly ignoredFrames: number;
  /**
   * Stream errors the peer made us send (RST_STREAM for a malformed request, a bad window update, DATA on a
   * closed stream, …; and 431 answers to header lists over the limits): "MadeYouReset" makes the server start and
   * abandon requests at the peer's pace. Default 200.
   */
  readonly streamErrors: number;
  /** Streams refused (REFUSED_STREAM) for being over SETTINGS_MAX_CONCURRENT_STREAMS. Default 100. */
  readonly refusedStreams: number;
  /**
   * Open streams the peer resets (RST_STREAM on a stream whose request was being served): "rapid reset",
   * CVE-2023-44487. Default 1,000 (`maxResetsPerSecond`, when given, wins).
   */
  readonly peerResets: number;
}

/** The defaults of {@link H2FloodLimits}. */
export const DEFAULT_FLOOD_LIMITS: H2FloodLimits = Object.freeze({
  pings: 1_000,
  settings: 100,
  emptyFrames: 1_000,
  windowUpdates: 1_000,
  ignoredFrames: 1_000,
  streamErrors: 200,
  refusedStreams: 100,
  peerResets: 1_000,
});

/**
 * Every default of `H2ConnectionOptions` (connection.ts) in one table (RFC 9113 §6.5.2 names the four SETTINGS): what a
 * connection uses for an option left out, and what a server that wants the same bounds on another HTTP/2
 * implementation reads (@idgen/serving gives node:http2 the SETTINGS from here).
 */
export const H2_DEFAULTS = Object.freeze({
  /** SETTINGS_MAX_CONCURRENT_STREAMS. */
  maxConcurrentStreams: 128,
  /** SETTINGS_MAX_HEADER_LIST_SIZE, in RFC 7541 §4.1 octets. */
  maxHeaderListSize: 16 * 1024,
  /** Header fields in one request, pseudo-headers included (no SETTINGS for it; more is answered 431). */
  maxHeaderPairs: 64,
  /** SETTINGS_INITIAL_WINDOW_SIZE: each request stream's receive window, RFC 9113's initial 65,535. */
  initialWindowSize: DEFAULT_WINDOW,
  /** The connection's receive window. */
  connectionWindowSize: 1024 * 1024,
  /** Output waiting in the socket above which reading stops until it drains. */
  maxOutputBytes: 1024 * 1024,
  /** CONTINUATION frames one header block may take. */
  maxContinuationFrames: 16,
  /** Entries one SETTINGS frame may carry (RFC 9113 defines 7). */
  maxSettingsEntries: 32,
  /** From the socket to the client's first SETTINGS frame. */
  prefaceTimeoutMs: 4_000,
  /** Without a request before GOAWAY NO_ERROR. */
  idleTimeoutMs: 30_000,
  /** Paused for a peer that does not read, before the connection is cut. */
  stalledWriteTimeoutMs: 10_000,
  floodLimits: DEFAULT_FLOOD_LIMITS,
});

/**
 * Why the connection refused something, as reported to `onRefusal` (a metric label: a closed set).
 * Connection-ending: the floods of {@link H2FloodLimits}, a header block in too many CONTINUATIONs or too large,
 * a SETTINGS frame with too many entries, and the three lifetimes. Per stream: a header list over the limits
 * (answered 431), a stream over the concurrency limit (REFUSED_STREAM), and one `admitStream` turned away (the
 * same).
 */
export type H2RefusalReason =
  | 'ping-flood'
  | 'settings-flood'
  | 'empty-frame-flood'
  | 'window-update-flood'
  | 'ignored-frame-flood'
  | 'stream-error-flood'
  | 'refused-stream-flood'
  | 'rapid-reset'
  | 'continuation-flood'
  | 'header-block-too-large'
  | 'settings-entries'
  | 'preface-timeout'
  | 'idle-timeout'
  | 'stalled-writer'
  | 'header-list-too-large'
  | 'stream-limit'
  | 'stream-budget';

/**
 * Counts of one second of frames, compared with the limits as frames arrive. Plain numeric fields: counting a
 * frame is an increment and a compare, no allocation. The second is rolled once per socket read, not per frame.
 */
export class FrameCounts {
  pings = 0;
  settings = 0;
  emptyFrames = 0;
  windowUpdates = 0;
  ignoredFrames = 0;
  streamErrors = 0;
  refusedStreams = 0;
  peerResets = 0;
  /** Credits for WINDOW_UPDATE: DATA frames we sent and streams opened this second. */
  windowCredit = 0;
  private since = 0;

  /** Starts a new second when the last one is over. */
  roll(now: number): void {
    if (now - this.since < 1_000) return;
    this.since = now;
    this.pings = this.settings = this.emptyFrames = this.windowUpdates = this.ignoredFrames = 0;
    this.streamErrors = this.refusedStreams = this.peerResets = this.windowCredit = 0;
  }
}
