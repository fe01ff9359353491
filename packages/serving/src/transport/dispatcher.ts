import type { IncomingHttpHeaders } from 'node:http';
import { Code, ConnectError, createConnectRouter } from '@connectrpc/connect';
import { compressionBrotli, compressionGzip } from '@connectrpc/connect-node';
import type { NextIdsCodec } from '../nextids-codec.js';
import type { FastPath, ProbeAnswer, Route, ServingServerOptions } from './contracts.js';
import { TRANSPORT_DEFAULTS, type TransportSettings } from './transport-settings.js';

/** Paths served as plain HTTP next to the RPCs (docs/design.md §6). */
export const HEALTHZ_PATH = '/healthz';
export const READYZ_PATH = '/readyz';

/** A request's path without its query. Not split('?'): no array per request on the hot path. */
export function pathOf(url: string | undefined): string {
  if (url === undefined) return '';
  const query = url.indexOf('?');
  return query === -1 ? url : url.slice(0, query);
}

/** Is `path` one of the probes' ({@link HEALTHZ_PATH}, {@link READYZ_PATH})? */
export function isProbePath(path: string): boolean {
  return path === HEALTHZ_PATH || path === READYZ_PATH;
}

/**
 * A gRPC or gRPC-Web call whose answer connect-es failed to write still gets a gRPC status (trailers-only),
 * not a bare HTTP 500 that gRPC clients can only read as UNKNOWN. The one such failure known (found by
 * fuzzing, apps/server/test/fuzz-wire.spec.ts): connect-es throws a URIError encoding grpc-message when the message
 * quotes the caller's `+json` body and V8 cut that quote inside a surrogate pair; the caller's body was not
 * a valid message: INVALID_ARGUMENT (docs/design.md §6). Any other failure here is ours: INTERNAL.
 */
export function grpcFailureHeaders(contentType: string, reason: unknown): Record<string, string> {
  const callersBody = reason instanceof URIError;
  return {
    'content-type': contentType,
    'grpc-status': callersBody ? '3' : '13',
    'grpc-message': encodeURIComponent(callersBody ? 'the request message could not be parsed' : 'internal error'),
  };
}

/** A probe answer: plain JSON, never cached. */
function probeAnswer(status: number, body: Record<string, unknown>, extra: Record<string, string> = {}): ProbeAnswer {
  const text = JSON.stringify(body) + '\n';
  return {
    status,
    headers: {
      ...extra,
      'content-type': 'application/json',
      'cache-control': 'no-store',
      'content-length': Buffer.byteLength(text),
    },
    body: text,
  };
}

const NOT_FOUND: Route = { kind: 'not-found' };

/**
 * The transport's lifecycle: serving, then closing (new connections refused, HTTP/1.1 answers say
 * `connection: close`, HTTP/2 connections told to go away), then stopped (the sweep ended, open calls aborted).
 */
type DispatcherState = 'serving' | 'closing' | 'stopped';

/**
 * What every front end (@idgen/h2, HTTP/1.1, node:http2) shares, independent of the transport: where each request
 * goes ({@link Dispatcher.route}: decided here once, for all three), the probes and readiness, the count of
 * requests in flight (reported by the front ends through {@link Dispatcher.requestStarted} and
 * {@link Dispatcher.requestDone}) and the drain at shutdown, the deadline sweep, and the connect-es calls still
 * open (aborted at the end of a shutdown). As connect-es's router (`paths.get`) and connect-node's
 * node-universal-handler.ts are to its adapter: the front ends only move bytes.
 */
export class Dispatcher {
  private requests = 0;
  private state: DispatcherState = 'serving';
  /** The connect-es route of each path a service has, built once (no allocation per request). */
  private readonly connectRoutes: Map<string, Route>;
  private readonly fast: FastPath | undefined;
  /** The fast path's route for each codec it chose, built on first use (a codec is one object per process). */
  private readonly fastRoutes = new Map<NextIdsCodec, Route>();
  /** Aborts of the connect-es calls open on @idgen/h2 streams, for the end of a shutdown. */
  private readonly calls = new Set<(reason: ConnectError) => void>();
  private readonly expirers: ((now: number) => void)[] = [];
  private readonly sweep: ReturnType<typeof setInterval>;
  private drained: (() => void) | undefined;

  constructor(
    private readonly options: ServingServerOptions,
    settings: TransportSettings,
  ) {
    // connectNodeAdapter's router, plus one correction on the way out (decode-errors.ts, in the front ends): a body
    // that is not protobuf is the caller's INVALID_ARGUMENT, not our INTERNAL.
    const router = createConnectRouter({
      interceptors: options.interceptors ?? [],
      readMaxBytes: options.maxBodyBytes,
      writeMaxBytes: TRANSPORT_DEFAULTS.writeMaxBytes,
      // protobuf-es's JSON reader refuses a key the message does not have (the proto3 JSON mapping's default);
      // connect-es ignores it unless told. Refused here as on the fast path (nextids-codec.ts): `{"cnt":3}` is
      // INVALID_ARGUMENT naming the key, not a NextIds(0) answered "count must be from 1".
      jsonOptions: { ignoreUnknownFields: false },
      // No maxTimeoutMs: connect-es would refuse a longer deadline (INVALID_ARGUMENT; a 30 s gRPC default is
      // common). The deadline sweep caps every request at requestTimeoutMs instead.
      // No shutdownSignal either: connect-es adds a listener to it for every call, and one signal holding tens of
      // thousands of listeners made each removal cost ~270 µs with calls held open. Each call already has a
      // signal of its own (its request's); close() aborts the calls still open (`calls`, sockets destroyed).
      acceptCompression: [compressionGzip, compressionBrotli],
    });
    options.routes(router);
    this.connectRoutes = new Map(router.handlers.map((h) => [h.requestPath, { kind: 'connect', handler: h }]));
    this.fast = options.fastPath;
    // Requests still open at their deadline are looked for by a sweep, not a timer each: a timer per request
    // measurably cost the fast path, and a deadline needs no better than the sweep's resolution.
    this.sweep = setInterval(() => {
      const now = performance.now();
      for (const expire of this.expirers) expire(now);
    }, settings.deadlineSweepMs);
    this.sweep.unref();
  }

  /**
   * Where a request goes, for every front end: a probe path answered now, the fast path when it takes the request
   * (its path, and a codec for the method and headers), connect-es's handler for a path a service has, else
   * not found. Only a probe's answer is built per request; the other routes are kept objects.
   */
  route(
    method: string | undefined,
    url: string | undefined,
    headers: IncomingHttpHeaders | Readonly<Record<string, string>>,
    http2: boolean,
  ): Route {
    const path = pathOf(url);
    if (isProbePath(path)) return { kind: 'probe', answer: this.probe(method, path) };
    const fast = this.fast;
    if (fast !== undefined && path === fast.path) {
      const codec = fast.codecFor(method, headers, http2);
      if (codec !== undefined) return this.fastRoutes.get(codec) ?? this.fastRoute(fast, codec);
    }
    return this.connectRoutes.get(path) ?? NOT_FOUND;
  }

  /** Requests being handled now. */
  get inFlight(): number {
    return this.requests;
  }

  /** Has a shutdown begun? New connections are refused, HTTP/1.1 answers say `connection: close`. */
  get closing(): boolean {
    return this.state !== 'serving';
  }

  /** Calls `expire` with the time (performance.now() ms) on every deadline sweep. */
  onDeadlineSweep(expire: (now: number) => void): void {
    this.expirers.push(expire);
  }

  /** The answer to a `/healthz` or `/readyz` request (docs/design.md §6). */
  probe(method: string | undefined, path: string): ProbeAnswer {
    if (method !== 'GET' && method !== 'HEAD')
      return probeAnswer(405, { error: 'method not allowed' }, { allow: 'GET, HEAD' });
    if (path === HEALTHZ_PATH) return probeAnswer(200, { status: 'alive' });
    const ready = this.options.ready();
    return probeAnswer(ready ? 200 : 503, { ready, ...(this.options.readyDetail?.() ?? {}) });
  }

  /** One request more in flight (a front end took a request that is not a probe). */
  requestStarted(): void {
    this.requests++;
  }

  /** One request fewer in flight; the last one of a shutdown ends its wait. */
  requestDone(): void {
    this.requests--;
    if (this.requests === 0) this.drained?.();
  }

  /** A request still open at its deadline: counted out and counted as a timeout (its front end cancels it). */
  requestLate(): void {
    this.requestDone();
    this.options.onRequestTimeout?.();
  }

  trackCall(abort: (reason: ConnectError) => void): void {
    this.calls.add(abort);
  }

  untrackCall(abort: (reason: ConnectError) => void): void {
    this.calls.delete(abort);
  }

  /** A shutdown begins: from now on {@link closing} is true. */
  beginClose(): void {
    if (this.state === 'serving') this.state = 'closing';
  }

  /** Waits until no request is in flight, or `timeoutMs`. */
  async drain(timeoutMs: number): Promise<void> {
    if (this.requests === 0) return;
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, timeoutMs);
      t.unref();
      this.drained = () => {
        clearTimeout(t);
        resolve();
      };
    });
  }

  /** Aborts every connect-es call still open (UNAVAILABLE) and stops the deadline sweep. */
  stop(): void {
    this.state = 'stopped';
    const shuttingDown = new ConnectError('the server is shutting down', Code.Unavailable);
    for (const abort of this.calls) abort(shuttingDown);
    this.calls.clear();
    clearInterval(this.sweep);
  }

  private fastRoute(fast: FastPath, codec: NextIdsCodec): Route {
    const route: Route = { kind: 'fast', fast, codec };
    this.fastRoutes.set(codec, route);
    return route;
  }
}
