// The public surface of @idgen/serving. The transport's parts (the h2c/HTTP/1.1 sniffer, the connect-es bridge over
// @idgen/h2, the NextIds fast path, the deadline queue) stay internal.
export { createServingPort } from './serving-port.js';
export type { ServingLogger, ServingMetricsHooks, ServingPort, ServingPortOptions } from './serving-port.js';
export { createIdgenNode } from './node.js';
export type { IdgenNode, IdgenNodeOptions } from './node.js';
export { boot } from './boot.js';
export type { BootDeps, BootLogger, BootReport } from './boot.js';
export { FENCE_REASON_HEADER, createHealthService, createIdGeneratorService, nodeState } from './service.js';
export type { LeaseView, NodeBuild, ServiceDeps, ServingGuard } from './service.js';
// Readiness as a caller of the node sees it (the reasons on the wire and their text); how the node judges it stays inside.
export { READINESS_REASONS, describeReadiness } from './readiness.js';
export type { Phase, Readiness, ReadinessReason } from './readiness.js';
export { TLS_FLAGS, TlsMaterialError, loadTlsMaterial, tlsFilesFromFlags } from './tls.js';
export type { CertificateExpiry, CertificateRole, TlsFiles, TlsFlagValues } from './tls.js';
export { DESCRIPTOR_HEADROOM, connectionCap, openFilesLimit } from './transport/listener.js';
export { HEALTHZ_PATH, READYZ_PATH } from './transport/dispatcher.js';
export type { Http2Server, ProbeAnswer } from './transport/contracts.js';
export {
  LATENCY_BUCKETS_S,
  LatencyHistogram,
  ServingAttributes,
  ServingMetricNames,
  createServingMetrics,
} from './metrics.js';
export type { NodeGaugeReading, ServingMetrics } from './metrics.js';
export { formatHostPort, parseHostPort } from './host-port.js';
export { listenSidePort } from './side-port.js';
export { SERVING_LIMITS, resolveServingLimits } from './limits.js';
export type { ServingLimit, ServingLimits } from './limits.js';
export type { SidePort, SidePortRoutes } from './side-port.js';
export type { HostPort } from './host-port.js';
// The node:http2 fallback's GC work-around, for any node:http2 server (bench:server's like-for-like baseline uses it).
export { installStreamTable } from './transport/stream-table.js';
