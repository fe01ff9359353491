import { readdirSync } from 'node:fs';
import { metrics as otelMetrics, ValueType, type HrTime, type Meter } from '@opentelemetry/api';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { HostMetrics } from '@opentelemetry/host-metrics';
import { RuntimeNodeInstrumentation } from '@opentelemetry/instrumentation-runtime-node';
import { emptyResource, resourceFromAttributes } from '@opentelemetry/resources';
import {
  AggregationTemporality,
  DataPointType,
  MeterProvider,
  type CollectionResult,
  type HistogramMetricData,
  type MetricProducer,
} from '@opentelemetry/sdk-metrics';
import {
  LATENCY_BUCKETS_S,
  ServingMetricNames,
  createServingMetrics,
  listenSidePort,
  type HostPort,
  type LatencyHistogram,
  type ProbeAnswer,
  type ServingMetrics,
  type SidePort,
} from '@idgen/serving';

/** Metric names the app defines beside the serving layer's ({@link ServingMetricNames}: requests, latency, refusals, node gauges). */
export const ServerMetrics = {
  /**
   * Observable gauge: file descriptors the process holds open (`/proc/self/fd`; OpenTelemetry's semantic
   * convention name). Neither `@opentelemetry/host-metrics` nor `instrumentation-runtime-node` exports it.
   */
  openFileDescriptors: 'process.open_file_descriptor.count',
} as const;

/** Resource attributes on every series (`target_info` in Prometheus), OpenTelemetry's semantic conventions. */
export const ServerResourceAttributes = {
  serviceName: 'service.name',
  serviceVersion: 'service.version',
  serviceInstanceId: 'service.instance.id',
} as const;

/** `service.name` of the generator node. */
export const SERVICE_NAME = 'idgen-server';

/** Options of {@link createServerMetrics}. */
export interface ServerMetricsOptions {
  /** `service.version`: the server package's version. */
  readonly serviceVersion: string;
  /** `service.instance.id`: the node id (as registered in etcd). */
  readonly instanceId: string;
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
  /** Stops the /metrics listener and the provider. */
  close(): Promise<void>;
}

/**
 * Creates the OpenTelemetry SDK meter provider with a Prometheus exporter (apps own the SDK: STYLE.md),
 * and installs it as the global provider so packages that use the API's global meter report here too.
 */
export function createServerMetrics(options: ServerMetricsOptions): ServerMetricsHandle {
  // The producer reads the serving layer's histograms at collection time (the instruments are made below, on the provider's meter).
  const exporter = new PrometheusExporter({
    preventServerStart: true,
    metricProducers: [new LatencyProducer(() => serving.latencies())],
  });
  const provider = new MeterProvider({
    readers: [exporter],
    resource: resourceFromAttributes({
      [ServerResourceAttributes.serviceName]: SERVICE_NAME,
      [ServerResourceAttributes.serviceVersion]: options.serviceVersion,
      [ServerResourceAttributes.serviceInstanceId]: options.instanceId,
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
    async listen(listen, probe) {
      sidePort = await listenSidePort(listen, {
        metrics: (req, res) => exporter.getMetricsRequestHandler(req, res),
        ...(probe === undefined ? {} : { probe }),
      });
      return sidePort.address;
    },
    async close() {
      await sidePort?.close();
      sidePort = undefined;
      stopRuntime();
      await provider.shutdown().catch(() => undefined);
    },
  };
}

/**
 * Runtime metrics from OpenTelemetry's maintained Node instrumentation, not hand-rolled (issue 16):
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
