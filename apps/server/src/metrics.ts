import { readdirSync } from 'node:fs';
import { DiagLogLevel, diag, metrics as otelMetrics, ValueType, type HrTime, type Meter } from '@opentelemetry/api';
import { OTLPMetricExporter } from '@opentelemetry/exporter-metrics-otlp-proto';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { HostMetrics } from '@opentelemetry/host-metrics';
import { RuntimeNodeInstrumentation } from '@opentelemetry/instrumentation-runtime-node';
import { emptyResource, resourceFromAttributes } from '@opentelemetry/resources';
import {
  AggregationTemporality,
  DataPointType,
  MeterProvider,
  PeriodicExportingMetricReader,
  type CollectionResult,
  type IMetricReader,
  type HistogramMetricData,
  type MetricProducer,
} from '@opentelemetry/sdk-metrics';
import {
  LATENCY_BUCKETS_S,
  ServingMetricNames,
  type CertificateExpiry,
  createServingMetrics,
  listenSidePort,
  type HostPort,
  type LatencyHistogram,
  type ProbeAnswer,
  type ServingMetrics,
  type SidePort,
} from '@idgen/serving';
import { DEFAULT_SERVICE_NAME, readTelemetryEnv, type TelemetrySettings } from './telemetry-env.js';

/** Metric names the app defines beside the serving layer's ({@link ServingMetricNames}: requests, latency, refusals, node gauges). */
export const ServerMetrics = {
  /**
   * Observable gauge: file descriptors the process holds open (`/proc/self/fd`; OpenTelemetry's semantic
   * convention name). Neither `@opentelemetry/host-metrics` nor `instrumentation-runtime-node` exports it.
   */
  openFileDescriptors: 'process.open_file_descriptor.count',
  /**
   * Observable gauge: the serving certificate's and the client CA's `notAfter`, in seconds since the epoch, by
   * `idgen.certificate` (`serving`, `client-ca`); only with TLS on the serving port. An alert compares it with
   * `time()` (IdgenCertificateExpiresSoon).
   */
  certificateNotAfter: 'idgen.tls.certificate.not_after',
} as const;

/** The attribute naming which certificate a {@link ServerMetrics.certificateNotAfter} reading is of. */
export const CERTIFICATE_ATTRIBUTE = 'idgen.certificate';

/** Resource attributes on every series (`target_info` in Prometheus), OpenTelemetry's semantic conventions. */
export const ServerResourceAttributes = {
  serviceName: 'service.name',
  serviceVersion: 'service.version',
  serviceInstanceId: 'service.instance.id',
  /** The node's region code (`idgen_region` on `target_info`). */
  region: 'idgen.region',
  /** The source commit the node runs (`idgen_commit` on `target_info`; absent when unknown). */
  commit: 'idgen.commit',
} as const;

/** `service.name` of the generator node unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` says otherwise. */
export const SERVICE_NAME = DEFAULT_SERVICE_NAME;

/** What a final OTLP export at shutdown may take before the node exits without it (the collector may be gone). */
const OTLP_SHUTDOWN_MS = 3_000;

/** Options of {@link createServerMetrics}. */
export interface ServerMetricsOptions {
  /** `service.version`: the server package's version. */
  readonly serviceVersion: string;
  /** `service.instance.id`: the node id (as registered in etcd). */
  readonly instanceId: string;
  /** `idgen.region`: the node's region code. */
  readonly region?: number;
  /** `idgen.commit`: the source commit (build-info.ts); left out when empty. */
  readonly commit?: string;
  /** OpenTelemetry's environment (telemetry-env.ts); default: Prometheus only, `service.name` idgen-server. */
  readonly telemetry?: TelemetrySettings;
  /** Where the OpenTelemetry SDK's own errors go (a failed OTLP export); default: nowhere. */
  readonly onSdkError?: (message: string) => void;
  /**
   * Runtime metrics from OpenTelemetry's Node instrumentation (event-loop delay, GC pauses by kind, heap,
   * RSS, CPU, descriptors); default true. Collected off the request path: a GC observer, a 10 ms event-loop
   * delay sampler and reads at scrape time.
   */
  readonly runtime?: boolean;
}

function hrTimeOf(ms: number): HrTime {
  const seconds = Math.floor(ms / 1000);
  return [seconds, Math.round((ms - seconds * 1000) * 1e6)];
}

/**
 * The request-duration histogram, handed to the exporter as a MetricProducer (OpenTelemetry's interface for
 * metrics aggregated outside the SDK) rather than recorded through an SDK Histogram: the SDK sorts, JSON-
 * encodes and looks up the attributes on every `record`, measured at ~10% of the server's CPU at 80,000
 * NextIds/s. Here a request costs a map lookup and a few additions; /metrics prints the same series
 * (name, unit, buckets, labels, cumulative) as the SDK did.
 */
class LatencyProducer implements MetricProducer {
  private readonly startTime = hrTimeOf(Date.now());
  constructor(private readonly histograms: () => readonly LatencyHistogram[]) {}

  collect(): Promise<CollectionResult> {
    const endTime = hrTimeOf(Date.now());
    const metric: HistogramMetricData = {
      descriptor: {
        name: ServingMetricNames.duration,
        description: 'Time the generator node spent handling an RPC, by method and status code.',
        unit: 's',
        valueType: ValueType.DOUBLE,
      },
      aggregationTemporality: AggregationTemporality.CUMULATIVE,
      dataPointType: DataPointType.HISTOGRAM,
      dataPoints: this.histograms().map((h) => ({
        attributes: h.attributes,
        startTime: this.startTime,
        endTime,
        value: {
          buckets: { boundaries: [...LATENCY_BUCKETS_S], counts: [...h.counts] },
          sum: h.sum,
          count: h.count,
          min: h.min,
          max: h.max,
        },
      })),
    };
    return Promise.resolve({
      resourceMetrics: {
        resource: emptyResource(),
        scopeMetrics: [{ scope: { name: '@idgen/server' }, metrics: [metric] }],
      },
      errors: [],
    });
  }
}

/** The metrics side of the server: a meter for the packages, the serving layer's instruments, and /metrics. */
export interface ServerMetricsHandle extends Omit<ServingMetrics, 'latencies'> {
  /** Meter to hand to a package (its own scope name). */
  meter(scope: string): Meter;
  /**
   * Serves Prometheus text at `/metrics` on `listen`, and with `probe` the serving port's `/healthz` and `/readyz`
   * answers too (kubelet probes reach them here when the serving port requires client certificates); resolves
   * with the bound address.
   */
  listen(
    listen: HostPort,
    probe?: (method: string | undefined, path: string) => ProbeAnswer | undefined,
  ): Promise<string>;
  /**
   * Exports {@link ServerMetrics.certificateNotAfter} from `certificates`, read at each collection: the serving
   * port's `certificates()`, what it loaded and reloads (a node without TLS has no such gauge).
   */
  observeCertificates(certificates: () => readonly CertificateExpiry[]): void;
  /** Stops the /metrics listener and the provider. */
  close(): Promise<void>;
}

/**
 * Creates the OpenTelemetry SDK meter provider with a Prometheus exporter (apps own the SDK: docs/style.md "Layers"),
 * and installs it as the global provider so packages that use the API's global meter report here too.
 */
export function createServerMetrics(options: ServerMetricsOptions): ServerMetricsHandle {
  const telemetry = options.telemetry ?? readTelemetryEnv({});
  // The producer reads the serving layer's histograms at collection time (the instruments are made below, on the
  // provider's meter); every reader gets it, so OTLP carries the same series as /metrics.
  const latency = new LatencyProducer(() => serving.latencies());
  const exporter = telemetry.prometheus
    ? new PrometheusExporter({ preventServerStart: true, metricProducers: [latency] })
    : undefined;
  const readers: IMetricReader[] = exporter === undefined ? [] : [exporter];
  if (telemetry.otlp !== undefined) {
    const { url, intervalMs, timeoutMs } = telemetry.otlp;
    // Headers, compression and certificates: the exporter reads OTEL_EXPORTER_OTLP_* itself.
    readers.push(
      new PeriodicExportingMetricReader({
        exporter: new OTLPMetricExporter({ url, timeoutMillis: timeoutMs }),
        exportIntervalMillis: intervalMs,
        exportTimeoutMillis: timeoutMs,
        metricProducers: [latency],
      }),
    );
  }
  if (options.onSdkError !== undefined) {
    const report = options.onSdkError;
    // The SDK reports a failed export through diag (silent by default): the operator's log must show it.
    diag.setLogger(
      {
        error: (m, ...a) => report([m, ...a.map(String)].join(' ')),
        warn: (m, ...a) => report([m, ...a.map(String)].join(' ')),
        info: () => undefined,
        debug: () => undefined,
        verbose: () => undefined,
      },
      { logLevel: DiagLogLevel.ERROR, suppressOverrideMessage: true },
    );
  }
  const provider = new MeterProvider({
    readers,
    // OTEL_RESOURCE_ATTRIBUTES first; the node's own identity over it (service.instance.id is the node id).
    resource: resourceFromAttributes({
      ...telemetry.resourceAttributes,
      [ServerResourceAttributes.serviceName]: telemetry.serviceName,
      [ServerResourceAttributes.serviceVersion]: options.serviceVersion,
      [ServerResourceAttributes.serviceInstanceId]: options.instanceId,
      ...(options.region === undefined ? {} : { [ServerResourceAttributes.region]: options.region }),
      ...(options.commit === undefined || options.commit === ''
        ? {}
        : { [ServerResourceAttributes.commit]: options.commit }),
    }),
  });
  otelMetrics.setGlobalMeterProvider(provider);
  const meter = provider.getMeter('@idgen/server');
  const stopRuntime = options.runtime === false ? () => undefined : startRuntimeMetrics(provider, meter);
  const serving = createServingMetrics(meter);

  let sidePort: SidePort | undefined;
  const { latencies: _latencies, ...instruments } = serving;
  return {
    ...instruments,
    meter: (scope) => provider.getMeter(scope),
    observeCertificates: (certificates) => observeCertificates(meter, certificates),
    async listen(listen, probe) {
      sidePort = await listenSidePort(listen, {
        // OTEL_METRICS_EXPORTER without prometheus: no /metrics (404), the probes stay.
        ...(exporter === undefined ? {} : { metrics: (req, res) => exporter.getMetricsRequestHandler(req, res) }),
        ...(probe === undefined ? {} : { probe }),
      });
      return sidePort.address;
    },
    async close() {
      await sidePort?.close();
      sidePort = undefined;
      stopRuntime();
      // A last OTLP export is best effort: bounded, so SIGTERM ends even with the collector gone.
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        provider.shutdown().catch(() => undefined),
        new Promise<void>((r) => (timer = setTimeout(r, OTLP_SHUTDOWN_MS))),
      ]);
      clearTimeout(timer);
    },
  };
}

/** The certificate-expiry gauge: read at collection time, off the request path. */
function observeCertificates(meter: Meter, certificates: () => readonly CertificateExpiry[]): void {
  meter
    .createObservableGauge(ServerMetrics.certificateNotAfter, {
      description: "When the serving port's certificate and client CA expire (notAfter), in seconds since the epoch.",
      unit: 's',
    })
    .addCallback((result) => {
      for (const c of certificates()) result.observe(c.notAfterSeconds, { [CERTIFICATE_ATTRIBUTE]: c.certificate });
    });
}

/**
 * Runtime metrics from OpenTelemetry's maintained Node instrumentation, not hand-rolled (its
 * names follow OpenTelemetry's semantic conventions, which a hand-rolled copy would drift from):
 * `instrumentation-runtime-node` (event-loop delay percentiles, utilization and time; GC duration by kind;
 * heap spaces; active handles) and `host-metrics`' process groups (CPU time and utilization, RSS); plus the
 * open-descriptor count neither has. Returns a function that stops them.
 */
function startRuntimeMetrics(provider: MeterProvider, meter: Meter): () => void {
  const runtime = new RuntimeNodeInstrumentation({ enabled: false });
  runtime.setMeterProvider(provider);
  runtime.enable();
  new HostMetrics({
    meterProvider: provider,
    name: '@opentelemetry/host-metrics',
    metricGroups: ['process.cpu', 'process.memory'],
  }).start();
  meter
    .createObservableGauge(ServerMetrics.openFileDescriptors, {
      description: 'File descriptors the process holds open (sockets, files, pipes).',
      unit: '{file_descriptor}',
    })
    .addCallback((result) => {
      try {
        // One of the listed entries is the descriptor readdirSync itself opened for the listing.
        result.observe(readdirSync('/proc/self/fd').length - 1);
      } catch {
        // Not Linux (no /proc): no value rather than a wrong one.
      }
    });
  return () => runtime.disable();
}
