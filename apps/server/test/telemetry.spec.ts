// OpenTelemetry's conventions: a real node takes its service name and resource attributes from
// OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES, exports the same idgen series over OTLP/HTTP (protobuf) beside or
// instead of Prometheus, names every OTEL_* variable it does not honour once, and refuses a bad value (exit 2).
import { parseConfig } from '../src/config.js';
import { readTelemetryEnv } from '../src/telemetry-env.js';
import { cleanupAll } from '@idgen/testing';
import { startOtlpReceiver, text, type OtlpReceiver, type ReceivedExport } from './otlp-receiver.test-helper.js';
import { idClient, startServer, waitFor, type ServerNode } from './support.test-helper.js';

jest.setTimeout(60_000);
afterAll(() => cleanupAll());

const NODE_ID = 'otel-node-r2';

/** Prometheus family names of the idgen series on a scrape. */
function promFamilies(scrape: string): Set<string> {
  return new Set([...scrape.matchAll(/^# TYPE (idgen_\S+) /gm)].map((m) => m[1] ?? '').filter((n) => n !== ''));
}

/** The Prometheus name of an OTLP metric (the exporter's rule: `.` to `_`, `_total` on a monotonic sum). */
function promName(m: { name: string; kind: string; monotonic: boolean }): string {
  return m.name.replace(/[^a-zA-Z0-9_:]/g, '_') + (m.kind === 'sum' && m.monotonic ? '_total' : '');
}

/** The latest export that carries a NextIds count of at least `n`. */
function exportWithNextIds(receiver: OtlpReceiver, n: number): ReceivedExport | undefined {
  return [...receiver.received]
    .reverse()
    .find((e) =>
      e.metrics.some(
        (m) =>
          m.name === 'idgen.server.requests' &&
          m.points.some((p) => text(p.attributes['rpc.method']) === 'NextIds' && p.value >= n),
      ),
    );
}

describe('OTEL_* on a live node', () => {
  let receiver: OtlpReceiver;
  let node: ServerNode;

  beforeAll(async () => {
    receiver = await startOtlpReceiver();
  });
  afterAll(async () => {
    await node?.stop();
    await receiver?.close();
  });

  it('exports over OTLP/HTTP and on /metrics with the service name and resource attributes from the environment', async () => {
    node = await startServer(['--region', '2', '--node-id', NODE_ID, '--time-source', 'none'], {
      OTEL_SERVICE_NAME: 'idgen-r2',
      OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment.name=staging,k8s.pod.name=idgen%2C2-a,service.name=overridden',
      OTEL_METRICS_EXPORTER: 'prometheus,otlp',
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_METRIC_EXPORT_INTERVAL: '250',
      OTEL_TRACES_EXPORTER: 'zipkin',
      OTEL_BSP_SCHEDULE_DELAY: '500',
      OTEL_LOGS_EXPORTER: 'none',
    });
    await node.ready();
    const ids = idClient(node.baseUrl, 'grpc-h2');
    for (let i = 0; i < 5; i++) await ids.nextIds({ count: 10 });
    await waitFor('an OTLP export with 5 NextIds calls', () => exportWithNextIds(receiver, 5) !== undefined, 20_000);
    const exported = exportWithNextIds(receiver, 5);
    if (exported === undefined) throw new Error('no export');

    expect(exported.path).toBe('/v1/metrics');
    expect(exported.headers['content-type']).toBe('application/x-protobuf');
    expect(text(exported.resource['service.name'])).toBe('idgen-r2');
    expect(text(exported.resource['service.instance.id'])).toBe(NODE_ID);
    expect(text(exported.resource['idgen.region'])).toBe('2');
    expect(text(exported.resource['deployment.environment.name'])).toBe('staging');
    expect(text(exported.resource['k8s.pod.name'])).toBe('idgen,2-a');
    expect(exported.scopes).toContain('@idgen/server');

    // The same idgen series as /metrics: every idgen family of the scrape arrives over OTLP, and nothing else.
    const scrape = await (await fetch(node.metricsUrl ?? '', { signal: AbortSignal.timeout(5_000) })).text();
    const otlpIdgen = new Set(exported.metrics.filter((m) => m.name.startsWith('idgen.')).map(promName));
    expect([...otlpIdgen].sort()).toEqual([...promFamilies(scrape)].sort());
    expect(otlpIdgen.size).toBeGreaterThan(10);
    const duration = exported.metrics.find((m) => m.name === 'idgen.server.request.duration');
    expect([duration?.kind, duration?.unit]).toEqual(['histogram', 's']);

    const targetInfo = scrape.split('\n').find((l) => l.startsWith('target_info{')) ?? '';
    expect(targetInfo).toContain('service_name="idgen-r2"');
    expect(targetInfo).toContain(`service_instance_id="${NODE_ID}"`);
    expect(targetInfo).toContain('idgen_region="2"');
    expect(targetInfo).toContain('deployment_environment_name="staging"');

    // Each variable it does not act on: one line, once, naming it; OTEL_LOGS_EXPORTER=none is what it does anyway.
    const logs = node.logs();
    const ignored = logs.filter((l) => /is not honoured by idgen-server: ignored$/.test(l.msg ?? ''));
    expect(ignored.map((l) => [l['variable'], l.level])).toEqual([
      ['OTEL_BSP_SCHEDULE_DELAY', 'warn'],
      ['OTEL_TRACES_EXPORTER', 'warn'],
    ]);
    expect(logs.find((l) => l.msg === 'metrics exporting over OTLP')?.['otlp']).toBe(`${receiver.url}/v1/metrics`);
    expect((await node.stop()).code).toBe(0);
  });

  it('with OTEL_METRICS_EXPORTER=otlp sends to the signal endpoint as given, and /metrics is gone (the probes stay)', async () => {
    const before = receiver.received.length;
    node = await startServer(['--node-id', 'otel-only', '--time-source', 'none'], {
      OTEL_METRICS_EXPORTER: 'otlp',
      OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: `${receiver.url}/collector/metrics`,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      OTEL_METRIC_EXPORT_INTERVAL: '250',
    });
    await node.ready();
    await waitFor('an OTLP export on the given path', () =>
      receiver.received.slice(before).some((e) => e.path === '/collector/metrics'),
    );
    const got = receiver.received.slice(before).find((e) => e.path === '/collector/metrics');
    expect(text(got?.resource['service.name'])).toBe('idgen-server');
    expect(text(got?.resource['service.instance.id'])).toBe('otel-only');
    const side = new URL(node.metricsUrl ?? '');
    expect((await fetch(side, { signal: AbortSignal.timeout(5_000) })).status).toBe(404);
    expect((await fetch(new URL('/readyz', side), { signal: AbortSignal.timeout(5_000) })).status).toBe(200);
    // No warning but the two development-only ones this start asked for (standalone, no time source).
    const warnings = node.logs().filter((l) => l.level !== 'info');
    expect(warnings.map((l) => [l.level, /development/i.test(l.msg ?? '')])).toEqual([
      ['warn', true],
      ['warn', true],
    ]);
    expect((await node.stop()).code).toBe(0);
  });
});

describe('OTEL_* when the configuration is read', () => {
  const base = ['--standalone', '--time-source', 'none'];
  const refusal = (env: Record<string, string>): string => {
    const outcome = parseConfig(base, env);
    return outcome.kind === 'exit' ? `${outcome.code} ${outcome.stderr.trim()}` : 'started';
  };

  it('defaults to Prometheus only, service.name idgen-server, nothing ignored', () => {
    expect(readTelemetryEnv({})).toEqual({
      serviceName: 'idgen-server',
      resourceAttributes: {},
      prometheus: true,
      otlp: undefined,
      ignored: [],
    });
    expect(readTelemetryEnv({ OTEL_METRICS_EXPORTER: 'none' })).toMatchObject({ prometheus: false, otlp: undefined });
    expect(readTelemetryEnv({ OTEL_METRICS_EXPORTER: 'otlp' }).otlp).toEqual({
      url: 'http://localhost:4318/v1/metrics',
      intervalMs: 60_000,
      timeoutMs: 30_000,
    });
    // The exporter's own variables count as honoured only when OTLP is on.
    expect(readTelemetryEnv({ OTEL_EXPORTER_OTLP_HEADERS: 'a=b' }).ignored).toEqual(['OTEL_EXPORTER_OTLP_HEADERS']);
    expect(readTelemetryEnv({ OTEL_METRICS_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_HEADERS: 'a=b' }).ignored).toEqual([]);
  });

  it('refuses a bad value with exit 2 and one line naming the variable', () => {
    expect(refusal({ OTEL_METRICS_EXPORTER: 'prometheus,console' })).toMatch(
      /^2 idgen-server: OTEL_METRICS_EXPORTER: "console"/,
    );
    expect(refusal({ OTEL_METRICS_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })).toMatch(
      /^2 idgen-server: OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" is not supported by idgen-server \(http\/protobuf only\)/,
    );
    expect(refusal({ OTEL_METRICS_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' })).toMatch(
      /^2 idgen-server: OTEL_EXPORTER_OTLP_ENDPOINT: "collector:4318" must be http/,
    );
    expect(refusal({ OTEL_RESOURCE_ATTRIBUTES: 'team' })).toMatch(/^2 idgen-server: OTEL_RESOURCE_ATTRIBUTES: "team"/);
    expect(refusal({ OTEL_METRICS_EXPORTER: 'otlp', OTEL_METRIC_EXPORT_INTERVAL: '10s' })).toMatch(
      /^2 idgen-server: OTEL_METRIC_EXPORT_INTERVAL: "10s"/,
    );
    expect(refusal({ OTEL_SERVICE_NAME: 'idgen-r2' })).toBe('started');
  });
});
