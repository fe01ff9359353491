import { readdirSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { metrics as otelMetrics, ValueType, type Attributes, type HrTime, type Meter } from '@opentelemetry/api';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { HostMetrics } from '@opentelemetry/host-metrics';
import { RuntimeNodeInstrumentation } from '@opentelemetry/instrumentation-runtime-node';
import { emptyResource, resourceFromAttributes } from '@opentelemetry/resources';
import { LeaseAttributes, LeaseMetrics } from '@idgen/lease';
import { IdGenerator } from '@idgen/proto';
import {
  AggregationTemporality,
  DataPointType,
  MeterProvider,
  type CollectionResult,
  type HistogramMetricData,
  type MetricProducer,
} from '@opentelemetry/sdk-metrics';
import { Code, ConnectError, type Interceptor } from '@connectrpc/connect';
import { formatHostPort, type HostPort } from './config.js';

/** Metric names the server itself defines (the packages define theirs). */
export const ServerMetrics = {
  /** Counter: RPCs handled, by method and code. */
  requests: 'idgen.server.requests',
  /** Histogram (seconds): handler latency, by method and code. */
  duration: 'idgen.server.request.duration',
  /** Counter: requests cancelled by the server's per-request deadline. */
  timeouts: 'idgen.server.request.timeouts',
  /** Counter: IDs handed out by NextIds. */
  idsServed: 'idgen.server.ids.served',
  /** Counter: what the serving port refused a client (an HTTP/2 flood, a lifetime, a stream, a connection), by reason. */
  h2Refusals: 'idgen.h2.refusals',
  /**
   * Observable gauge: file descriptors the process holds open (`/proc/self/fd`; OpenTelemetry's semantic
   * convention name). Neither `@opentelemetry/host-metrics` nor `instrumentation-runtime-node` exports it.
   */
  openFileDescriptors: 'process.open_file_descriptor.count',
  /** Observable gauge: 1 while the node may mint (`/readyz` 200), else 0; attribute `region`. */
  nodeReady: 'idgen.node.ready',
  /** Observable gauge: 1 for the node's current readiness reason (readiness.ts), 0 for every other; `region`, `reason`. */
  nodeReadiness: 'idgen.node.readiness',
  /** Observable gauge: 1 while the node holds a worker slot, else 0; attribute `region`. */
  slotHeld: 'idgen.node.slot_held',
  /** Observable gauge: worker slots this node may claim in its region (`--workers`); attribute `region`. */
  regionSlots: 'idgen.region.slots',
} as const;

/** What the node gauges read at each scrape (never on the request path). */
export interface NodeGaugeReading {
  readonly region: number;
  readonly ready: boolean;
  readonly reason: string;
  readonly slotHeld: boolean;
  readonly slots: number;
}

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

/** Attribute keys (low cardinality: method names and status codes only). */
export const ServerAttributes = {
  method: 'rpc.method',
  service: 'rpc.service',
  code: 'rpc.response.status_code',
  /** Why a client was refused (a closed set: @idgen/h2's H2RefusalReason and `connection-limit`). */
  reason: 'reason',
  /** The node's home region code (`--region`): lets rules sum the node's series by region. */
  region: 'region',
} as const;

/** Latency buckets in seconds: minting takes microseconds, the p99 target is 2 ms (docs/design.md §3). */
const LATENCY_BUCKETS_S = [0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5];

/** One latency histogram (one method and code): explicit buckets kept in plain numbers. */
class LatencyHistogram {
  readonly counts = new Array<number>(LATENCY_BUCKETS_S.length + 1).fill(0);
  sum = 0;
  count = 0;
  min = Number.POSITIVE_INFINITY;
  max = Number.NEGATIVE_INFINITY;
  constructor(readonly attributes: Attributes) {}

  record(seconds: number): void {
    // OpenTelemetry's explicit buckets: bucket i holds (boundary[i-1], boundary[i]]; the last, above all.
    let i = 0;
    while (i < LATENCY_BUCKETS_S.length && seconds > (LATENCY_BUCKETS_S[i] ?? 0)) i++;
    this.counts[i] = (this.counts[i] ?? 0) + 1;
    this.sum += seconds;
    this.count++;
    if (seconds < this.min) this.min = seconds;
    if (seconds > this.max) this.max = seconds;
  }
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
  private readonly histograms: LatencyHistogram[] = [];
  private readonly startTime = hrTimeOf(Date.now());

  /** A new histogram for one method and code (the caller keeps one per set of attributes). */
  add(attributes: Attributes): LatencyHistogram {
    const h = new LatencyHistogram(attributes);
    this.histograms.push(h);
    return h;
  }

  collect(): Promise<CollectionResult> {
    const endTime = hrTimeOf(Date.now());
    const metric: HistogramMetricData = {
      descriptor: {
        name: ServerMetrics.duration,
        description: 'Time the generator node spent handling an RPC, by method and status code.',
        unit: 's',
        valueType: ValueType.DOUBLE,
      },
      aggregationTemporality: AggregationTemporality.CUMULATIVE,
      dataPointType: DataPointType.HISTOGRAM,
      dataPoints: this.histograms.map((h) => ({
        attributes: h.attributes,
        startTime: this.startTime,
        endTime,
        value: {
          buckets: { boundaries: LATENCY_BUCKETS_S, counts: [...h.counts] },
          sum: h.sum,
          count: h.count,
          min: h.min,
          max: h.max,
        },
      })),
    };
    return Promise.resolve({
      resourceMetrics: { resource: emptyResource(), scopeMetrics: [{ scope: { name: '@idgen/server' }, metrics: [metric] }] },
      errors: [],
    });
  }
}

/** The metrics side of the server: a meter for the packages, an interceptor for RPCs, and /metrics. */
export interface ServerMetricsHandle {
  /** Meter to hand to a package (its own scope name). */
  meter(scope: string): Meter;
  /** Records each RPC's count and latency by method and code. */
  readonly interceptor: Interceptor;
  /** Counts a request the server cancelled at its deadline. */
  countTimeout(): void;
  /** Counts one refusal of the serving port by its reason (ServingServerOptions.onRefusal). */
  countRefusal(reason: string): void;
  /** Records one RPC answered outside connect-es (fast-path.ts): `code` undefined means ok. */
  recordRpc(service: string, method: string, code: Code | undefined, startNs: bigint, ids: number): void;
  /**
   * Registers the node gauges ({@link ServerMetrics.nodeReady}, `nodeReadiness`, `slotHeld`, `regionSlots`);
   * `read` is called once per scrape. `reasons` lists every readiness reason, each reported 0 or 1.
   */
  observeNode(reasons: readonly string[], read: () => NodeGaugeReading): void;
  /** Serves Prometheus text at `/metrics` on `listen`; resolves with the bound address. */
  listen(listen: HostPort): Promise<string>;
  /** Stops the /metrics listener and the provider. */
  close(): Promise<void>;
}

function codeName(code: Code): string {
  // Code[code] is the enum's name, e.g. "Unavailable"; the wire spells it snake_case.
  return (Code[code] ?? 'unknown').replace(/([a-z])([A-Z])/g, '$1_$2').toLowerCase();
}

/**
 * Creates the OpenTelemetry SDK meter provider with a Prometheus exporter (apps own the SDK: STYLE.md),
 * and installs it as the global provider so packages that use the API's global meter report here too.
 */
export function createServerMetrics(options: ServerMetricsOptions): ServerMetricsHandle {
  const latencies = new LatencyProducer();
  const exporter = new PrometheusExporter({ preventServerStart: true, metricProducers: [latencies] });
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
  declareCountersAtZero(provider);
  // Request and ID counts are kept in plain numbers and read at collection time, and latencies in the
  // producer above: recording through the SDK sorts and hashes the attributes on every call, which measured
  // ~11% of a NextIds(1) under load for the counter, ~10% at 80,000 req/s for the histogram.
  const calls = new Map<string, { readonly attributes: Attributes; count: number; readonly latency: LatencyHistogram }>();
  let idsServedTotal = 0;
  meter
    .createObservableCounter(ServerMetrics.requests, {
      description: 'RPCs handled by the generator node, by method and status code.',
      unit: '{request}',
    })
    .addCallback((result) => {
      for (const c of calls.values()) result.observe(c.count, c.attributes);
    });
  meter
    .createObservableCounter(ServerMetrics.idsServed, { description: 'IDs handed out by NextIds.', unit: '{id}' })
    .addCallback((result) => result.observe(idsServedTotal));
  const timeouts = meter.createCounter(ServerMetrics.timeouts, {
    description: 'Requests the generator node cancelled at its per-request deadline.',
    unit: '{request}',
  });

  const refusals = meter.createCounter(ServerMetrics.h2Refusals, {
    description:
      'Clients the serving port refused: HTTP/2 floods and limits cut, lifetimes over (preface, idle, stalled writer), streams refused, ' +
      'HTTP/1.1 pipelining past its bound, connections over the cap, TLS clients whose certificate is not allowed.',
    unit: '{refusal}',
  });
  // At 0 from the start (no reason yet), so rate() has a baseline before the first refusal or timeout.
  refusals.add(0);
  timeouts.add(0);

  const series = (key: string, service: string, method: string, code: string) => {
    const attributes = { [ServerAttributes.service]: service, [ServerAttributes.method]: method, [ServerAttributes.code]: code };
    const c = { attributes, count: 0, latency: latencies.add(attributes) };
    calls.set(key, c);
    return c;
  };
  // The successful calls of the API at 0 from the start (a rate() baseline); other codes appear when they happen.
  for (const method of [IdGenerator.method.nextIds.name, IdGenerator.method.getStatus.name]) {
    series(`${IdGenerator.typeName}/${method}/ok`, IdGenerator.typeName, method, 'ok');
  }
  const record = (service: string, method: string, code: string, startNs: bigint): void => {
    const key = `${service}/${method}/${code}`;
    const c = calls.get(key) ?? series(key, service, method, code);
    c.count++;
    c.latency.record(Number(process.hrtime.bigint() - startNs) / 1e9);
  };

  const interceptor: Interceptor = (next) => async (req) => {
    const start = process.hrtime.bigint();
    const service = req.service.typeName;
    const method = req.method.name;
    try {
      const res = await next(req);
      record(service, method, 'ok', start);
      if (!res.stream && method === 'NextIds') {
        const message = res.message as { blocks?: { count: number }[] };
        let n = 0;
        for (const b of message.blocks ?? []) n += b.count;
        idsServedTotal += n;
      }
      return res;
    } catch (e) {
      record(service, method, codeName(ConnectError.from(e).code), start);
      throw e;
    }
  };

  let server: Server | undefined;
  return {
    meter: (scope) => provider.getMeter(scope),
    interceptor,
    countTimeout: () => timeouts.add(1),
    countRefusal: (reason) => refusals.add(1, { [ServerAttributes.reason]: reason }),
    observeNode(reasons, read) {
      const ready = meter.createObservableGauge(ServerMetrics.nodeReady, {
        description: 'Whether the node may mint now (/readyz 200): 1 or 0.',
        unit: '1',
      });
      const readiness = meter.createObservableGauge(ServerMetrics.nodeReadiness, {
        description: "The node's readiness reason: 1 for the current one, 0 for every other.",
        unit: '1',
      });
      const held = meter.createObservableGauge(ServerMetrics.slotHeld, {
        description: 'Whether the node holds a worker slot: 1 or 0.',
        unit: '1',
      });
      const slots = meter.createObservableGauge(ServerMetrics.regionSlots, {
        description: 'Worker slots this node may claim in its region (--workers).',
        unit: '{slot}',
      });
      meter.addBatchObservableCallback(
        (result) => {
          const r = read();
          const region = { [ServerAttributes.region]: String(r.region) };
          result.observe(ready, r.ready ? 1 : 0, region);
          for (const reason of reasons) result.observe(readiness, reason === r.reason ? 1 : 0, { ...region, [ServerAttributes.reason]: reason });
          result.observe(held, r.slotHeld ? 1 : 0, region);
          result.observe(slots, r.slots, region);
        },
        [ready, readiness, held, slots],
      );
    },
    recordRpc(service, method, code, startNs, ids) {
      record(service, method, code === undefined ? 'ok' : codeName(code), startNs);
      idsServedTotal += ids;
    },
    listen(listen) {
      return new Promise((resolve, reject) => {
        const s = createServer((req, res) => {
          if (req.method === 'GET' && (req.url === '/metrics' || req.url?.startsWith('/metrics?'))) {
            exporter.getMetricsRequestHandler(req, res);
            return;
          }
          res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: try /metrics\n');
        });
        s.requestTimeout = 10_000;
        s.headersTimeout = 5_000;
        s.once('error', reject);
        s.listen(listen.port, listen.host, () => {
          s.off('error', reject);
          server = s;
          const address = s.address();
          resolve(typeof address === 'object' && address !== null ? formatHostPort({ host: address.address, port: address.port }) : formatHostPort(listen));
        });
      });
    },
    async close() {
      const s = server;
      server = undefined;
      if (s !== undefined) {
        s.closeAllConnections();
        await new Promise<void>((resolve) => s.close(() => resolve()));
      }
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
  new HostMetrics({ meterProvider: provider, name: '@opentelemetry/host-metrics', metricGroups: ['process.cpu', 'process.memory'] }).start();
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

/**
 * The packages' event counters that appear only on their first event, declared here at 0 (issue 16: every
 * counter exists from the start, so `rate()` and `increase()` have a baseline and an alert on the first
 * failure fires). Same name, unit and description in the same scope: the SDK hands back the package's own
 * instrument, so the package's later `add` goes to the same series.
 */
function declareCountersAtZero(provider: MeterProvider): void {
  const lease = provider.getMeter('@idgen/lease');
  const churn = lease.createCounter(LeaseMetrics.churn, {
    description: 'Worker-slot lease churn: slots acquired, lost (fenced) and released.',
    unit: '{event}',
  });
  for (const event of [LeaseAttributes.acquired, LeaseAttributes.lost, LeaseAttributes.released]) churn.add(0, { [LeaseAttributes.event]: event });
  lease
    .createCounter(LeaseMetrics.keepAliveFailures, {
      description: 'Keep-alives (or their last-ms refresh) that failed or timed out.',
      unit: '{failure}',
    })
    .add(0);
}
