import { SERVING_LIMITS } from '../limits.js';
import { HTTP2_SETTINGS, TRANSPORT_DEFAULTS, resolveTransportSettings } from './transport-settings.js';

describe('the transport settings: one declaration, derived from SERVING_LIMITS', () => {
  it("defaults every limit SERVING_LIMITS has to SERVING_LIMITS' default, what the serving port passes", () => {
    expect(TRANSPORT_DEFAULTS).toMatchObject({
      idleTimeoutMs: SERVING_LIMITS.idleTimeoutMs.default,
      prefaceTimeoutMs: SERVING_LIMITS.prefaceTimeoutMs.default,
      stalledWriteTimeoutMs: SERVING_LIMITS.stalledWriteTimeoutMs.default,
      maxConnections: SERVING_LIMITS.maxConnections.default,
      maxStreamsInFlight: SERVING_LIMITS.maxStreamsInFlight.default,
    });
    // The value really used: the serving port always passes SERVING_LIMITS' 30 s (not the 60 s http.ts once said).
    expect(TRANSPORT_DEFAULTS.idleTimeoutMs).toBe(30_000);
  });

  it('fills what is not given and keeps what is; the sweeps follow the deadline and the probe interval', () => {
    expect(resolveTransportSettings({ requestTimeoutMs: 5000, maxBodyBytes: 1024 })).toEqual({
      requestTimeoutMs: 5000,
      maxBodyBytes: 1024,
      idleTimeoutMs: 30_000,
      prefaceTimeoutMs: 4000,
      stalledWriteTimeoutMs: 10_000,
      maxConnections: 4096,
      maxStreamsInFlight: 2048,
      http2ProbeMs: 2000,
      deadlineSweepMs: 250,
      connectionSweepMs: 1000,
    });
    expect(
      resolveTransportSettings({
        requestTimeoutMs: 50,
        maxBodyBytes: 1024,
        idleTimeoutMs: 1000,
        prefaceTimeoutMs: 200,
        stalledWriteTimeoutMs: 1500,
        maxConnections: 3,
        maxStreamsInFlight: 200,
        http2ProbeMs: 300,
      }),
    ).toEqual({
      requestTimeoutMs: 50,
      maxBodyBytes: 1024,
      idleTimeoutMs: 1000,
      prefaceTimeoutMs: 200,
      stalledWriteTimeoutMs: 1500,
      maxConnections: 3,
      maxStreamsInFlight: 200,
      http2ProbeMs: 300,
      deadlineSweepMs: 10,
      connectionSweepMs: 300,
    });
  });

  it("bounds HTTP/2 for both implementations the same, at @idgen/h2's defaults: 128 streams, 16 KiB in 64 header fields, 65,535-byte windows", () => {
    expect(HTTP2_SETTINGS).toEqual({
      maxConcurrentStreams: 128,
      maxHeaderListSize: 16 * 1024,
      maxHeaderPairs: 64,
      initialWindowSize: 65_535,
    });
  });
});
