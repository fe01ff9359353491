import { H2_DEFAULTS } from '@idgen/h2';
import { SERVING_LIMITS } from '../limits.js';

/**
 * The HTTP/2 settings of the serving port, the one declaration both HTTP/2 implementations read (@idgen/h2 in
 * front-idgen-h2.ts, node:http2 in front-node-http2.ts): @idgen/h2's defaults (its `H2_DEFAULTS`, where the values
 * live), bounded so one client cannot hold much memory: at most 128 concurrent streams per connection, 16 KiB of
 * headers in at most 64 fields, RFC 9113's 65,535-byte stream windows.
 */
export const HTTP2_SETTINGS = {
  maxConcurrentStreams: H2_DEFAULTS.maxConcurrentStreams,
  maxHeaderListSize: H2_DEFAULTS.maxHeaderListSize,
  maxHeaderPairs: H2_DEFAULTS.maxHeaderPairs,
  initialWindowSize: H2_DEFAULTS.initialWindowSize,
} as const;

/** What HTTP/1.1 (node:http) is held to: header size, keep-alive, and the largest check interval of its timeouts. */
export const HTTP1_SETTINGS = {
  maxHeaderSize: 16 * 1024,
  keepAliveTimeoutMs: 5_000,
  /** The longest node:http may wait for a request's headers (capped by the request deadline). */
  headersTimeoutMs: 10_000,
  /** How often node:http enforces its two timeouts at most (its default is 30 s; capped by the request deadline). */
  connectionsCheckingIntervalMs: 1_000,
} as const;

/**
 * Every default of the transport when {@link ServingServerOptions} leaves a value out. The limits an operator sets
 * come from {@link SERVING_LIMITS} (the serving port always passes them, resolved): their defaults here are the
 * same values, so a server built directly behaves as the serving port does.
 */
export const TRANSPORT_DEFAULTS = {
  /**
   * A connection with no traffic for this long is closed. The serving port passes SERVING_LIMITS' 30 s; before
   * this declaration a direct caller of createServingServer got 60 s on the socket (and @idgen/h2's own 30 s).
   */
  idleTimeoutMs: SERVING_LIMITS.idleTimeoutMs.default,
  prefaceTimeoutMs: SERVING_LIMITS.prefaceTimeoutMs.default,
  stalledWriteTimeoutMs: SERVING_LIMITS.stalledWriteTimeoutMs.default,
  maxConnections: SERVING_LIMITS.maxConnections.default,
  maxStreamsInFlight: SERVING_LIMITS.maxStreamsInFlight.default,
  /**
   * Past `maxStreamsInFlight`, a connection may still open this many streams of its own: a caller with a few calls
   * out is served while the connections holding the port's streams are refused.
   */
  fairShareStreams: 8,
  /** node:http2 only: how long a silent session goes before its PING, and then before it is destroyed. */
  http2ProbeMs: 2_000,
  /** The largest response message connect-es writes. */
  writeMaxBytes: 4 * 1024 * 1024,
  /** What of an HTTP/2 request body may wait for connect-es past `maxBodyBytes` (a frame's worth) before a reset. */
  bodySlackBytes: 64 * 1024,
} as const;

/** The transport's options with every default filled in ({@link resolveTransportSettings}). */
export interface TransportSettings {
  readonly requestTimeoutMs: number;
  readonly maxBodyBytes: number;
  readonly idleTimeoutMs: number;
  readonly prefaceTimeoutMs: number;
  readonly stalledWriteTimeoutMs: number;
  readonly maxConnections: number;
  readonly maxStreamsInFlight: number;
  readonly http2ProbeMs: number;
  /** How often requests past their deadline are looked for: a tenth of the deadline, from 10 to 250 ms. */
  readonly deadlineSweepMs: number;
  /** How often the stalled-writer (and node:http2 probe) sweep runs: once a second, or every probe interval if shorter. */
  readonly connectionSweepMs: number;
}

/** The settings for `given`, each value left out at {@link TRANSPORT_DEFAULTS}. */
export function resolveTransportSettings(given: {
  readonly requestTimeoutMs: number;
  readonly maxBodyBytes: number;
  readonly idleTimeoutMs?: number | undefined;
  readonly prefaceTimeoutMs?: number | undefined;
  readonly stalledWriteTimeoutMs?: number | undefined;
  readonly maxConnections?: number | undefined;
  readonly maxStreamsInFlight?: number | undefined;
  readonly http2ProbeMs?: number | undefined;
}): TransportSettings {
  const http2ProbeMs = given.http2ProbeMs ?? TRANSPORT_DEFAULTS.http2ProbeMs;
  return {
    requestTimeoutMs: given.requestTimeoutMs,
    maxBodyBytes: given.maxBodyBytes,
    idleTimeoutMs: given.idleTimeoutMs ?? TRANSPORT_DEFAULTS.idleTimeoutMs,
    prefaceTimeoutMs: given.prefaceTimeoutMs ?? TRANSPORT_DEFAULTS.prefaceTimeoutMs,
    stalledWriteTimeoutMs: given.stalledWriteTimeoutMs ?? TRANSPORT_DEFAULTS.stalledWriteTimeoutMs,
    maxConnections: given.maxConnections ?? TRANSPORT_DEFAULTS.maxConnections,
    maxStreamsInFlight: given.maxStreamsInFlight ?? TRANSPORT_DEFAULTS.maxStreamsInFlight,
    http2ProbeMs,
    deadlineSweepMs: Math.max(10, Math.min(250, Math.floor(given.requestTimeoutMs / 10))),
    connectionSweepMs: Math.min(1_000, http2ProbeMs),
  };
}
