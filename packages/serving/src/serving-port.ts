import type { Code, Interceptor } from '@connectrpc/connect';
import type { MintScheduler } from '@idgen/clock-guard';
import { Health, IdGenerator, NodeState } from '@idgen/proto';
import { createNextIdsFastPath } from './fast-path.js';
import type { HostPort } from './host-port.js';
import { resolveServingLimits, type ServingLimits } from './limits.js';
import type { Readiness } from './readiness.js';
import {
  createHealthService,
  createIdGeneratorService,
  createNextIds,
  nodeState,
  type ServiceDeps,
} from './service.js';
import { createTlsServing, reloadTlsOnChange, type CertificateExpiry, type TlsFiles } from './tls.js';
import type { Http2Server, ProbeAnswer } from './transport/contracts.js';
import { connectionCap } from './transport/listener.js';
import { createServingServer } from './transport/server.js';

/** Where the serving port logs (pino's `logger.info(fields, msg)` fits). */
export interface ServingLogger {
  debug(fields: Record<string, unknown>, msg: string): void;
  info(fields: Record<string, unknown>, msg: string): void;
  warn(fields: Record<string, unknown>, msg: string): void;
  error(fields: Record<string, unknown>, msg: string): void;
}

/** What the serving port reports for metrics (the app's instruments; every hook optional). */
export interface ServingMetricsHooks {
  /** Connect interceptors (e.g. one that counts RPCs and their latency). */
  readonly interceptors?: Interceptor[];
  /** One NextIds answered outside connect-es (the fast path): `code` undefined means ok; `startNs` is hrtime. */
  readonly recordNextIds?: (code: Code | undefined, startNs: bigint, ids: number) => void;
  /** A request cancelled at its deadline. */
  readonly countTimeout?: () => void;
  /** A client refused by the port, by reason (HTTP/2 floods and limits, lifetimes, the connection cap, TLS). */
  readonly countRefusal?: (reason: string) => void;
}

/** Options of {@link createServingPort}: the node's view for the handlers, and the port's limits. */
export interface ServingPortOptions
  extends Omit<ServiceDeps, 'readiness' | 'onUnexpected' | 'mints' | 'maxCount'>, Partial<ServingLimits> {
  /** Why the node may or may not mint now: `/readyz`, Health/Check and GetStatus fields 19-23 all read it. */
  readonly readiness: () => Readiness;
  /** The node's one mint scheduler; default one of the port's own over `guard`. */
  readonly mints?: MintScheduler;
  /** h2c on @idgen/h2 (`idgen`, the default) or node:http2 (`node`, the fallback). */
  readonly http2Server?: Http2Server;
  /**
   * TLS on the port (HTTP/2 and HTTP/1.1 by ALPN; mTLS with `clientCaFile`), read now (a bad file throws a
   * TlsMaterialError) and reloaded on SIGHUP and when a file changes. Absent: plaintext h2c and HTTP/1.1.
   */
  readonly tls?: TlsFiles;
  readonly metrics?: ServingMetricsHooks;
  /** Where the port logs (TLS reloads, the connection cap, errors worth a line); default nowhere. */
  readonly logger?: ServingLogger;
}

/** The IdGenerator service, Health and the probes on one port. */
export interface ServingPort {
  /** Binds `listen`; resolves with the bound address (port 0 becomes the real port). */
  listen(listen: HostPort): Promise<HostPort>;
  /**
   * This port's answer to a probe (`/healthz`, `/readyz`; `undefined` for other paths), for the metrics listener
   * to answer the same: kubelet probes reach it when the serving port requires client certificates (mTLS).
   */
  probe(method: string | undefined, path: string): ProbeAnswer | undefined;
  /** Requests being handled now. */
  inFlight(): number;
  /**
   * Stops taking connections, asks clients to go away, waits up to `timeoutMs` for in-flight requests and closes
   * the rest; stops the TLS reload. Resolves with the number of requests still in flight when it gave up.
   */
  close(timeoutMs: number): Promise<number>;
  /**
   * When the port's certificates expire (the serving certificate, and the client CA with mTLS), as the port loaded
   * them and reloads them (on SIGHUP and file change; a bad new file keeps the previous ones, as the port does).
   * Empty without TLS. Cheap: for a gauge read at each collection.
   */
  certificates(): readonly CertificateExpiry[];
  /** The connection cap in force: `maxConnections`, or lower to leave descriptors for what is not a client. */
  readonly connectionCap: {
    readonly maxConnections: number;
    readonly openFilesLimit: number | undefined;
    readonly lowered: boolean;
  };
}

/**
 * The serving port of a generator node (docs/design.md §6): Connect, gRPC and gRPC-Web over HTTP/1.1 and HTTP/2
 * (h2c or TLS) on one port, NextIds on its fast path, `grpc.health.v1.Health/Check`, `/healthz` and `/readyz`,
 * deadlines and connection limits. It mints through `guard` and nothing else: leasing and the clock check are
 * the caller's, read through `lease`, `phase` and `readiness`.
 */
export function createServingPort(options: ServingPortOptions): ServingPort {
  const { logger = SILENT, metrics = {}, readiness } = options;
  // The limits (SERVING_LIMITS): given ones checked, the rest at their defaults; a bad one throws here.
  const limits = resolveServingLimits(options);
  const deps: ServiceDeps = {
    guard: options.guard,
    ...(options.mints === undefined ? {} : { mints: options.mints }),
    lease: options.lease,
    phase: options.phase,
    region: options.region,
    maxCount: limits.maxCount,
    timeSourceMode: options.timeSourceMode,
    advertise: options.advertise,
    ...(options.statusDetails === undefined ? {} : { statusDetails: options.statusDetails }),
    ...(options.build === undefined ? {} : { build: options.build }),
    readiness,
    onUnexpected: (e: unknown) => logger.error({ err: e }, 'unexpected error from the guard'),
  };
  const recordNextIds = metrics.recordNextIds;
  const fastPath = createNextIdsFastPath({
    nextIds: createNextIds(deps),
    maxBodyBytes: limits.maxBodyBytes,
    ...(recordNextIds === undefined ? {} : { record: recordNextIds }),
  });
  // TLS on the serving port (checked at start), reloaded on SIGHUP and on file change.
  const tls = options.tls === undefined ? undefined : createTlsServing(options.tls);
  let stopReload = (): void => undefined;
  if (tls !== undefined && options.tls !== undefined) {
    stopReload = reloadTlsOnChange(tls, options.tls, childOf(logger, 'tls'));
    logger.info(
      { mtls: tls.requestCert, notAfter: tls.notAfter().toISOString() },
      'tls: serving HTTP/2 and HTTP/1.1 over TLS (ALPN)',
    );
  }
  const cap = connectionCap(limits.maxConnections);
  logger.info(
    {
      maxConnections: cap.maxConnections,
      configured: limits.maxConnections,
      openFilesLimit: cap.openFilesLimit,
      lowered: cap.lowered,
    },
    cap.lowered ? 'connection cap: lowered to leave descriptors for etcd and chronyc' : 'connection cap',
  );
  // The probe asks ready() for its status code and then readyDetail() for its body, back to back: the body
  // reuses the judgement the status code came from, so the two never disagree.
  let probed: Readiness | undefined;
  const server = createServingServer({
    maxConnections: cap.maxConnections,
    prefaceTimeoutMs: limits.prefaceTimeoutMs,
    idleTimeoutMs: limits.idleTimeoutMs,
    stalledWriteTimeoutMs: limits.stalledWriteTimeoutMs,
    maxStreamsInFlight: limits.maxStreamsInFlight,
    fastPath,
    routes: (router) => {
      router.service(IdGenerator, createIdGeneratorService(deps));
      router.service(Health, createHealthService(readiness));
    },
    interceptors: metrics.interceptors ?? [],
    ready: () => {
      probed = readiness();
      return probed.ready;
    },
    readyDetail: () => {
      const r = probed ?? readiness();
      probed = undefined;
      return { ...r, state: NodeState[nodeState(options.phase(), r.ready)]?.toLowerCase() };
    },
    maxBodyBytes: limits.maxBodyBytes,
    ...(options.http2Server === undefined ? {} : { http2Server: options.http2Server }),
    requestTimeoutMs: limits.requestTimeoutMs,
    onRequestTimeout: () => metrics.countTimeout?.(),
    onConnectionError: (e) => logger.debug({ err: e }, 'connection error'),
    onStreamTableUnavailable: (why) =>
      logger.warn({ why }, 'HTTP/2 stream table work-around not applied: expect longer GC pauses'),
    onHandlerError: (e) => logger.warn({ err: e }, 'writing a response failed'),
    onRefusal: (reason) => metrics.countRefusal?.(reason),
    ...(tls === undefined ? {} : { tls, onTlsError: (e: Error) => logger.debug({ err: e }, 'tls handshake failed') }),
  });
  return {
    listen: (listen) => server.listen(listen),
    probe: (method, path) => server.probe(method, path),
    inFlight: () => server.inFlight(),
    async close(timeoutMs) {
      stopReload();
      return server.close(timeoutMs);
    },
    certificates: () => tls?.certificates() ?? [],
    connectionCap: cap,
  };
}

const ignore = (): void => undefined;
const SILENT: ServingLogger = { debug: ignore, info: ignore, warn: ignore, error: ignore };

/** `logger.child({ component })` when the logger has one (pino does), else the logger itself. */
function childOf(logger: ServingLogger, component: string): ServingLogger {
  const child = (logger as { child?: (bindings: Record<string, unknown>) => ServingLogger }).child;
  return typeof child === 'function' ? child.call(logger, { component }) : logger;
}
