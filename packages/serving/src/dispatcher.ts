import { Code, ConnectError, createConnectRouter } from '@connectrpc/connect';
import { compressionBrotli, compressionGzip } from '@connectrpc/connect-node';
import type { UniversalHandler } from '@connectrpc/connect/protocol';
import type { ServingServerOptions } from './http.js';
import { TRANSPORT_DEFAULTS, type TransportSettings } from './transport-settings.js';

/** Paths served as plain HTTP next to the RPCs (docs/design.md §6). */
export const HEALTHZ_PATH = '/healthz';
export const READYZ_PATH = '/readyz';

/** A probe's answer (`/healthz`, `/readyz`): status, headers and a JSON body. */
export interface ProbeAnswer {
  readonly status: number;
  readonly headers: Record<string, string | number>;
  readonly body: string;
}

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

/**
 * What every front end (@idgen/h2, HTTP/1.1, node:http2) shares, independent of the transport: the connect-es
 * handlers by path, the probes and readiness, the count of requests in flight and the drain at shutdown, the
 * deadline sweep, and the connect-es calls still open (aborted at the end of a shutdown). As connect-node's
 * node-universal-handler.ts is to its adapter: the front ends only move bytes.
 */
export class Dispatcher {
  /** Requests being handled now. */
  inFlight = 0;
  /** Set by close(): new connections are refused, HTTP/1.1 answers say `connection: close`. */
  closing = false;
  private readonly handlers: Map<string, UniversalHandler>;
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
      // No maxTimeoutMs: connect-es would refuse a longer deadline (INVALID_ARGUMENT; a 30 s gRPC default is
      // common). The deadline sweep caps every request at requestTimeoutMs instead.
      // No shutdownSignal either: connect-es adds a listener to it for every call, and one signal holding tens of
      // thousands of listeners made each removal cost ~270 µs with calls held open. Each call already has a
      // signal of its own (its request's); close() aborts the calls still open (`calls`, sockets destroyed).
      acceptCompression: [compressionGzip, compressionBrotli],
    });
    options.routes(router);
    this.handlers = new Map(router.handlers.map((h) => [h.requestPath, h]));
    // Requests still open at their deadline are looked for by a sweep, not a timer each: a timer per request
    // measurably cost the fast path, and a deadline needs no better than the sweep's resolution.
    this.sweep = setInterval(() => {
      const now = performance.now();
      for (const expire of this.expirers) expire(now);
    }, settings.deadlineSweepMs);
    this.sweep.unref();
  }

  /** connect-es's handler for `path`, undefined for a path no service has. */
  handler(path: string): UniversalHandler | undefined {
    return this.handlers.get(path);
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

  /** One request fewer in flight; the last one of a shutdown ends its wait. */
  requestDone(): void {
    this.inFlight--;
    if (this.inFlight === 0) this.drained?.();
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

  /** Waits until no request is in flight, or `timeoutMs`. */
  async drain(timeoutMs: number): Promise<void> {
    if (this.inFlight === 0) return;
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
    const shuttingDown = new ConnectError('the server is shutting down', Code.Unavailable);
    for (const abort of this.calls) abort(shuttingDown);
    this.calls.clear();
    clearInterval(this.sweep);
  }
}
