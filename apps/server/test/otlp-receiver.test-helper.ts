// An OTLP/HTTP metrics receiver for the tests (Prometheus 2.42 has none: docs/toolchain.md): a node:http server on
// loopback that decodes each POST with OpenTelemetry's own proto files (test/otlp-proto, from
// open-telemetry/opentelemetry-proto v1.11.0-16-gac2c4b5, Apache-2.0) through protobufjs, and answers
// an empty ExportMetricsServiceResponse as a collector does.
import { createServer, type IncomingHttpHeaders } from 'node:http';
import { join } from 'node:path';
import { Root } from 'protobufjs';

const PROTO_DIR = join(__dirname, 'otlp-proto');

/** An OTLP AnyValue as decoded (`toObject` with longs as strings). */
export interface AnyValue {
  readonly stringValue?: string;
  readonly intValue?: string;
  readonly boolValue?: boolean;
  readonly doubleValue?: number;
}

/** One decoded metric: its name, unit, kind (`sum`, `gauge`, `histogram`, …) and data points' attributes. */
export interface ReceivedMetric {
  readonly name: string;
  readonly unit: string;
  readonly kind: string;
  readonly monotonic: boolean;
  readonly points: readonly { readonly attributes: Readonly<Record<string, AnyValue>>; readonly value: number }[];
}

/** One decoded export request. */
export interface ReceivedExport {
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
  readonly resource: Readonly<Record<string, AnyValue>>;
  readonly scopes: readonly string[];
  readonly metrics: readonly ReceivedMetric[];
}

/** A running receiver. */
export interface OtlpReceiver {
  /** `http://127.0.0.1:PORT` */
  readonly url: string;
  readonly received: readonly ReceivedExport[];
  close(): Promise<void>;
}

type KeyValue = { key: string; value?: AnyValue };
type DataPoint = { attributes?: KeyValue[]; asDouble?: number; asInt?: string; count?: string };
type Metric = {
  name: string;
  unit?: string;
  sum?: { dataPoints?: DataPoint[]; isMonotonic?: boolean };
  gauge?: { dataPoints?: DataPoint[] };
  histogram?: { dataPoints?: DataPoint[] };
  exponentialHistogram?: { dataPoints?: DataPoint[] };
  summary?: { dataPoints?: DataPoint[] };
};
type Request = {
  resourceMetrics?: {
    resource?: { attributes?: KeyValue[] };
    scopeMetrics?: { scope?: { name?: string }; metrics?: Metric[] }[];
  }[];
};

const attributesOf = (kvs: readonly KeyValue[] | undefined): Record<string, AnyValue> =>
  Object.fromEntries((kvs ?? []).map((kv) => [kv.key, kv.value ?? {}]));

function metricOf(m: Metric): ReceivedMetric {
  const kinds = ['sum', 'gauge', 'histogram', 'exponentialHistogram', 'summary'] as const;
  const kind = kinds.find((k) => m[k] !== undefined) ?? 'unknown';
  const points = (kind === 'unknown' ? [] : (m[kind]?.dataPoints ?? [])).map((p) => ({
    attributes: attributesOf(p.attributes),
    value: Number(p.asDouble ?? p.asInt ?? p.count ?? NaN),
  }));
  return { name: m.name, unit: m.unit ?? '', kind, monotonic: m.sum?.isMonotonic === true, points };
}

/** Starts a receiver on a free loopback port. */
export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const root = new Root();
  root.resolvePath = (_origin, target) => join(PROTO_DIR, target);
  root.loadSync('opentelemetry/proto/collector/metrics/v1/metrics_service.proto', { keepCase: false });
  const requestType = root.lookupType('opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest');
  const responseType = root.lookupType('opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceResponse');
  const received: ReceivedExport[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      try {
        const decoded = requestType.toObject(requestType.decode(Buffer.concat(chunks)), { longs: String }) as Request;
        for (const rm of decoded.resourceMetrics ?? []) {
          received.push({
            path: req.url ?? '',
            headers: req.headers,
            resource: attributesOf(rm.resource?.attributes),
            scopes: (rm.scopeMetrics ?? []).map((s) => s.scope?.name ?? ''),
            metrics: (rm.scopeMetrics ?? []).flatMap((s) => (s.metrics ?? []).map(metricOf)),
          });
        }
        const body = responseType.encode(responseType.create({})).finish();
        res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end(Buffer.from(body));
      } catch (e) {
        res.writeHead(400, { 'content-type': 'text/plain' }).end(String(e));
      }
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** An attribute's value as text (string, int or bool). */
export function text(v: AnyValue | undefined): string | undefined {
  if (v === undefined) return undefined;
  return v.stringValue ?? v.intValue ?? (v.boolValue === undefined ? undefined : String(v.boolValue));
}
