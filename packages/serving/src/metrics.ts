import { Code, ConnectError, type Interceptor } from '@connectrpc/connect';
import type { Attributes, Meter } from '@opentelemetry/api';
import { IdGenerator } from '@idgen/proto';
import type { ServingMetricsHooks } from './serving-port.js';

/** Metric names the serving layer defines (the other packages define theirs). */
export const ServingMetricNames = {
  /** Counter: RPCs handled, by method and code. */
  requests: 'idgen.server.requests',
  /** Histogram (seconds): handler latency, by method and code ({@link ServingMetrics.latencies}). */
  duration: 'idgen.server.request.duration',
  /** Counter: requests cancelled by the server's per-request deadline. */
  timeouts: 'idgen.server.request.timeouts',
  /** Counter: IDs handed out by NextIds. */
  idsServed: 'idgen.server.ids.served',
  /** Counter: what the serving port refused a client (an HTTP/2 flood, a lifetime, a stream, a connection), by reason. */
  h2Refusals: 'idgen.h2.refusals',
  /** Observable gauge: 1 while the node may mint (`/readyz` 200), else 0; attribute `region`. */
  nodeReady: 'idgen.node.ready',
  /** Observable gauge: 1 for the node's current readiness reason (readiness.ts), 0 for every other; `region`, `reason`. */
  nodeReadiness: 'idgen.node.readiness',
  /** Observable gauge: 1 while the node holds a worker slot, else 0; attribute `region`. */
  slotHeld: 'idgen.node.slot_held',
  /** Observable gauge: worker slots this node may claim in its region (`--workers`); attribute `region`. */
  regionSlots: 'idgen.region.slots',
} as const;

/** Attribute keys (low cardinality: method names and status codes only). */
export const ServingAttributes = {
  method: 'rpc.method',
  service: 'rpc.service',
  code: 'rpc.response.status_code',
  /** Why a client was refused (a closed set: @idgen/h2's H2RefusalReason and `connection-limit`). */
  reason: 'reason',
  /** The node's home region code (`--region`): lets rules sum the node's series by region. */
  region: 'region',
} as const;

/** Latency buckets in seconds: minting takes microseconds, the p99 target is 2 ms (docs/design.md §3). */
export const LATENCY_BUCKETS_S: readonly number[] = [
  0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5,
];

/** One latency histogram (one method and code): explicit buckets ({@link LATENCY_BUCKETS_S}) kept in plain numbers. */
export class LatencyHistogram {
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

/** What the node gauges read at each scrape (never on the request path). */
export interface NodeGaugeReading {
  readonly region: number;
  readonly ready: boolean;
  readonly reason: string;
  readonly slotHeld: boolean;
  readonly slots: number;
}

/** The serving layer's instruments, on a meter the app's SDK provides; its hooks go to {@link createServingPort}. */
export interface ServingMetrics {
  /** Records each RPC's count and latency by method and code. */
  readonly interceptor: Interceptor;
  /** Counts a request the server cancelled at its deadline. */
  countTimeout(): void;
  /** Counts one refusal of the serving port by its reason. */
  countRefusal(reason: string): void;
  /** Records one RPC answered outside connect-es (the fast path): `code` undefined means ok. */
  recordRpc(service: string, method: string, code: Code | undefined, startNs: bigint, ids: number): void;
  /** The hooks of {@link ServingPortOptions.metrics}. */
  readonly hooks: ServingMetricsHooks;
  /**
   * Registers the node gauges ({@link ServingMetricNames.nodeReady}, `nodeReadiness`, `slotHeld`, `regionSlots`);
   * `read` is called once per scrape. `reasons` lists every readiness reason, each reported 0 or 1.
   */
  observeNode(reasons: readonly string[], read: () => NodeGaugeReading): void;
  /**
   * The request-duration histograms, one per method and code, for the app's exporter to read at collection time
   * ({@link ServingMetricNames.duration}): recording through an SDK Histogram sorts, JSON-encodes and looks up the
   * attributes on every call (~10% of the server's CPU at 80,000 NextIds/s), these cost a map lookup and a few additions.
   */
  latencies(): readonly LatencyHistogram[];
}

function codeName(code: Code): string {
  // Code[code] is the enum's name, e.g. "Unavailable"; the wire spells it snake_case.
  return (Code[code] ?? 'unknown').replace(/([a-z])([A-Z])/g, '$1_$2').toLowerCase();
}

/** Creates the serving layer's instruments on `meter` (the OpenTelemetry API only: the SDK is the app's). */
export function createServingMetrics(meter: Meter): ServingMetrics {
  // Request and ID counts are kept in plain numbers and read at collection time, and latencies in histograms the
  // exporter reads: recording through the SDK sorts and hashes the attributes on every call, which measured
  // ~11% of a NextIds(1) under load for the counter, ~10% at 80,000 req/s for the histogram.
  const histograms: LatencyHistogram[] = [];
  const calls = new Map<
    string,
    { readonly attributes: Attributes; count: number; readonly latency: LatencyHistogram }
  >();
  let idsServedTotal = 0;
  meter
    .createObservableCounter(ServingMetricNames.requests, {
      description: 'RPCs handled by the generator node, by method and status code.',
      unit: '{request}',
    })
    .addCallback((result) => {
      for (const c of calls.values()) result.observe(c.count, c.attributes);
    });
  meter
    .createObservableCounter(ServingMetricNames.idsServed, { description: 'IDs handed out by NextIds.', unit: '{id}' })
    .addCallback((result) => result.observe(idsServedTotal));
  const timeouts = meter.createCounter(ServingMetricNames.timeouts, {
    description: 'Requests the generator node cancelled at its per-request deadline.',
    unit: '{request}',
  });

  const refusals = meter.createCounter(ServingMetricNames.h2Refusals, {
    description:
      'Clients the serving port refused: HTTP/2 floods and limits cut, lifetimes over (preface, idle, stalled writer), streams refused, ' +
      'HTTP/1.1 pipelining past its bound, connections over the cap, TLS clients whose certificate is not allowed.',
    unit: '{refusal}',
  });
  // At 0 from the start (no reason yet), so rate() has a baseline before the first refusal or timeout.
  refusals.add(0);
  timeouts.add(0);

  const series = (key: string, service: string, method: string, code: string) => {
    const attributes = {
      [ServingAttributes.service]: service,
      [ServingAttributes.method]: method,
      [ServingAttributes.code]: code,
    };
    const latency = new LatencyHistogram(attributes);
    histograms.push(latency);
    const c = { attributes, count: 0, latency };
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
  const countTimeout = (): void => timeouts.add(1);
  const countRefusal = (reason: string): void => refusals.add(1, { [ServingAttributes.reason]: reason });
  const recordRpc = (service: string, method: string, code: Code | undefined, startNs: bigint, ids: number): void => {
    record(service, method, code === undefined ? 'ok' : codeName(code), startNs);
    idsServedTotal += ids;
  };

  return {
    interceptor,
    countTimeout,
    countRefusal,
    recordRpc,
    hooks: {
      interceptors: [interceptor],
      recordNextIds: (code, startNs, ids) =>
        recordRpc(IdGenerator.typeName, IdGenerator.method.nextIds.name, code, startNs, ids),
      countTimeout,
      countRefusal,
    },
    observeNode(reasons, read) {
      const ready = meter.createObservableGauge(ServingMetricNames.nodeReady, {
        description: 'Whether the node may mint now (/readyz 200): 1 or 0.',
        unit: '1',
      });
      const readiness = meter.createObservableGauge(ServingMetricNames.nodeReadiness, {
        description: "The node's readiness reason: 1 for the current one, 0 for every other.",
        unit: '1',
      });
      const held = meter.createObservableGauge(ServingMetricNames.slotHeld, {
        description: 'Whether the node holds a worker slot: 1 or 0.',
        unit: '1',
      });
      const slots = meter.createObservableGauge(ServingMetricNames.regionSlots, {
        description: 'Worker slots this node may claim in its region (--workers).',
        unit: '{slot}',
      });
      meter.addBatchObservableCallback(
        (result) => {
          const r = read();
          const region = { [ServingAttributes.region]: String(r.region) };
          result.observe(ready, r.ready ? 1 : 0, region);
          for (const reason of reasons)
            result.observe(readiness, reason === r.reason ? 1 : 0, { ...region, [ServingAttributes.reason]: reason });
          result.observe(held, r.slotHeld ? 1 : 0, region);
          result.observe(slots, r.slots, region);
        },
        [ready, readiness, held, slots],
      );
    },
    latencies: () => histograms,
  };
}
