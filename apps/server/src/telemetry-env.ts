/**
 * OpenTelemetry's environment variables (the SDK configuration spec), as the generator node honours them: the
 * service name and resource attributes, which metrics exporters run, and where OTLP goes. Parsed with the flags,
 * before any I/O (docs/design.md §5 boot step 1): a bad value is a configuration error (exit 2), and a variable
 * the node does not honour is named once in the log at start, never dropped silently (an operator who set
 * it would otherwise believe it applied).
 */

/** The metrics exporters `OTEL_METRICS_EXPORTER` may list (comma-separated; `none` alone turns both off). */
export type MetricsExporterName = 'prometheus' | 'otlp';

/** Where and how often the OTLP exporter sends (http/protobuf: `@opentelemetry/exporter-metrics-otlp-proto`). */
export interface OtlpMetricsSettings {
  /** The full URL metrics are POSTed to (`…/v1/metrics`). */
  readonly url: string;
  /** `OTEL_METRIC_EXPORT_INTERVAL`, default 60,000 ms. */
  readonly intervalMs: number;
  /** `OTEL_METRIC_EXPORT_TIMEOUT`, default 30,000 ms (at most the interval). */
  readonly timeoutMs: number;
}

/** The telemetry settings of one node. */
export interface TelemetrySettings {
  /** `OTEL_SERVICE_NAME`, else `service.name` of `OTEL_RESOURCE_ATTRIBUTES`, else `idgen-server`. */
  readonly serviceName: string;
  /** `OTEL_RESOURCE_ATTRIBUTES`, decoded (the node's own service.instance.id, service.version and idgen.region win). */
  readonly resourceAttributes: Readonly<Record<string, string>>;
  /** Prometheus text on `/metrics` (the default). */
  readonly prometheus: boolean;
  /** OTLP export, when `OTEL_METRICS_EXPORTER` lists `otlp`. */
  readonly otlp: OtlpMetricsSettings | undefined;
  /** `OTEL_*` variables set in the environment that this node does not act on: each is logged once at start. */
  readonly ignored: readonly string[];
}

/** A bad value of an `OTEL_*` variable: one line naming it (exit 2). */
export class TelemetryConfigError extends Error {
  override readonly name = 'TelemetryConfigError';
}

/** `service.name` when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` names the service. */
export const DEFAULT_SERVICE_NAME = 'idgen-server';

/**
 * Variables read here, plus those `@opentelemetry/exporter-metrics-otlp-proto` reads itself when OTLP is on
 * (headers, timeout, compression, certificates, temporality). Every other `OTEL_*` is reported as ignored.
 */
const READ_HERE = [
  'OTEL_SERVICE_NAME',
  'OTEL_RESOURCE_ATTRIBUTES',
  'OTEL_METRICS_EXPORTER',
  'OTEL_METRIC_EXPORT_INTERVAL',
  'OTEL_METRIC_EXPORT_TIMEOUT',
  'OTEL_EXPORTER_OTLP_ENDPOINT',
  'OTEL_EXPORTER_OTLP_METRICS_ENDPOINT',
  'OTEL_EXPORTER_OTLP_PROTOCOL',
  'OTEL_EXPORTER_OTLP_METRICS_PROTOCOL',
] as const;
const READ_BY_THE_EXPORTER = ['HEADERS', 'TIMEOUT', 'COMPRESSION', 'CERTIFICATE', 'CLIENT_KEY', 'CLIENT_CERTIFICATE']
  .flatMap((s) => [`OTEL_EXPORTER_OTLP_${s}`, `OTEL_EXPORTER_OTLP_METRICS_${s}`])
  .concat(['OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE']);
/** Signals the node has nothing of: `none` for them is what the node does anyway, so it is not "ignored". */
const NOTHING_TO_EXPORT = ['OTEL_TRACES_EXPORTER', 'OTEL_LOGS_EXPORTER'];
/** The only OTLP protocol with an exporter installed (the JSON and gRPC ones are not dependencies of the app). */
const PROTOCOL = 'http/protobuf';

/** Reads OpenTelemetry's variables from `env`; throws {@link TelemetryConfigError} on a bad value. */
export function readTelemetryEnv(env: Readonly<Record<string, string | undefined>>): TelemetrySettings {
  const get = (name: string): string | undefined => {
    const v = env[name]?.trim();
    return v === undefined || v === '' ? undefined : v;
  };
  const attributes = parseResourceAttributes(get('OTEL_RESOURCE_ATTRIBUTES'));
  const serviceName = get('OTEL_SERVICE_NAME') ?? attributes['service.name'] ?? DEFAULT_SERVICE_NAME;
  const exporters = parseExporters(get('OTEL_METRICS_EXPORTER'));
  const otlp = exporters.has('otlp') ? otlpSettings(get) : undefined;
  const honoured = new Set<string>([...READ_HERE, ...(otlp === undefined ? [] : READ_BY_THE_EXPORTER)]);
  const ignored = Object.keys(env)
    .filter((k) => k.startsWith('OTEL_') && env[k] !== undefined && env[k] !== '' && !honoured.has(k))
    .filter((k) => !(NOTHING_TO_EXPORT.includes(k) && get(k) === 'none'))
    .sort();
  return { serviceName, resourceAttributes: attributes, prometheus: exporters.has('prometheus'), otlp, ignored };
}

/**
 * `key1=value1,key2=value2` (W3C Baggage octets, values percent-encoded). The spec says to discard a malformed
 * value whole; the node refuses it instead, like any bad setting, so a typo cannot drop a deployment's labels.
 */
function parseResourceAttributes(raw: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (raw === undefined) return out;
  for (const pair of raw.split(',')) {
    if (pair.trim() === '') continue;
    const eq = pair.indexOf('=');
    const key = pair.slice(0, eq).trim();
    let value: string;
    try {
      value = decodeURIComponent(pair.slice(eq + 1).trim());
    } catch {
      value = '\u0000';
    }
    if (eq <= 0 || key === '' || !/^[\x21-\x7e]+$/.test(key) || value.includes('\u0000'))
      throw new TelemetryConfigError(
        `OTEL_RESOURCE_ATTRIBUTES: "${pair.trim()}" is not key=value (keys printable ASCII, values percent-encoded)`,
      );
    out[key] = value;
  }
  return out;
}

function parseExporters(raw: string | undefined): Set<MetricsExporterName> {
  const names = (raw ?? 'prometheus')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if (names.length === 1 && names[0] === 'none') return new Set();
  const out = new Set<MetricsExporterName>();
  for (const n of names) {
    if (n !== 'prometheus' && n !== 'otlp')
      throw new TelemetryConfigError(
        `OTEL_METRICS_EXPORTER: "${n}" is not one idgen-server has (prometheus, otlp, both comma-separated, or none)`,
      );
    out.add(n);
  }
  return out;
}

function otlpSettings(get: (name: string) => string | undefined): OtlpMetricsSettings {
  const protocol = get('OTEL_EXPORTER_OTLP_METRICS_PROTOCOL') ?? get('OTEL_EXPORTER_OTLP_PROTOCOL') ?? PROTOCOL;
  if (protocol !== PROTOCOL)
    throw new TelemetryConfigError(
      `OTEL_EXPORTER_OTLP_PROTOCOL: "${protocol}" is not supported by idgen-server (${PROTOCOL} only)`,
    );
  // The signal's own endpoint is used as given; the general one gets the signal's path (the exporter spec).
  const specific = get('OTEL_EXPORTER_OTLP_METRICS_ENDPOINT');
  const base = get('OTEL_EXPORTER_OTLP_ENDPOINT') ?? 'http://localhost:4318';
  const url = specific ?? `${base.replace(/\/+$/, '')}/v1/metrics`;
  const from = specific === undefined ? 'OTEL_EXPORTER_OTLP_ENDPOINT' : 'OTEL_EXPORTER_OTLP_METRICS_ENDPOINT';
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new TelemetryConfigError(`${from}: "${specific ?? base}" is not a URL (http://host:4318)`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')
    throw new TelemetryConfigError(`${from}: "${specific ?? base}" must be http:// or https://`);
  const intervalMs = positiveMs(get, 'OTEL_METRIC_EXPORT_INTERVAL', 60_000);
  const timeoutMs = Math.min(positiveMs(get, 'OTEL_METRIC_EXPORT_TIMEOUT', 30_000), intervalMs);
  return { url: parsed.href, intervalMs, timeoutMs };
}

function positiveMs(get: (name: string) => string | undefined, name: string, fallback: number): number {
  const raw = get(name);
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n < 1 || n > 3_600_000)
    throw new TelemetryConfigError(`${name}: "${raw}" is not milliseconds from 1 to 3600000`);
  return n;
}
