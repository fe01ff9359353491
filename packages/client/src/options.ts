import type { Meter } from '@opentelemetry/api';
import type { Layout } from '@idgen/core';
import type { ClientClock } from './clock.js';
import type { ClientProtocol, ClientTlsOptions, KeepAliveOptions } from './connect-transport.js';
import type { HedgeOptions } from './hedge.js';
import type { BackoffOptions, NodeDiscovery } from './node-pool.js';
import type { IdTransportFactory } from './transport.js';

/** Where a region's nodes come from: a static list of addresses, or discovery. */
export interface RegionNodes {
  /** The region code (its IDs carry it). */
  readonly region: number;
  /**
   * Static node addresses: base URLs (`http://10.0.0.5:8080`) or `host:port`; or one DNS target,
   * `dns:///idgen-server-r2.idgen-r2.svc.cluster.local:8080` (gRPC's convention; `dns://server/host:port` names
   * the DNS server), which is {@link dns} with its defaults, owned and closed by the client.
   */
  readonly nodes?: readonly string[];
  /** The region's serving nodes, kept current (`createDiscoveryReader` from `@idgen/discovery`). */
  readonly discovery?: NodeDiscovery;
}

/** Options of {@link createIdClient}. Every duration is in milliseconds on the monotonic clock. */
export interface IdClientOptions extends RegionNodes {
  /**
   * Neighbouring regions, tried in this order when every home node has failed and the buffer is
   * empty (docs/design.md §7). Their IDs carry their own region code, so uniqueness holds.
   */
  readonly fallbackRegions?: readonly RegionNodes[];
  /**
   * The ID layout of the deployment (default `DEFAULT_LAYOUT`): bounds the region codes accepted here and
   * tells the client where the region and worker sit in an ID, for its checks on every block it receives.
   */
  readonly layout?: Layout;
  /**
   * The deployment's key of the `keyed` form (16–64 bytes, or hex text), for `nextId({ form: 'keyed' })`; without
   * it that form is refused. Keep it secret: it decodes every keyed ID (docs/design.md §1 "Forms").
   */
  readonly keyedFormKey?: Uint8Array | string;
  /**
   * IDs to keep at hand (default 100, docs/design.md §3; 1 … 65,536); grows with observed demand up to
   * `maxBatch`.
   */
  readonly bufferSize?: number;
  /** Refill in the background once fewer IDs than this are left (default half of `bufferSize`). */
  readonly lowWater?: number;
  /** IDs not handed out within this long of arriving are discarded (default 1000, docs/design.md §3). */
  readonly maxAgeMs?: number;
  /** Largest `NextIds` count (default 4096; 1 … 65,536, the servers' largest `--max-count`); keep it ≤ theirs. */
  readonly maxBatch?: number;
  /** Default deadline of one `nextId()` / `nextIds()` call (default 2000). */
  readonly deadlineMs?: number;
  /** Time budget of one attempt on one node before the next node is tried (default 500). */
  readonly attemptTimeoutMs?: number;
  /**
   * Hedged refills (default on; `false` switches them off): a refill its node has not answered within the
   * hedge delay (3 × the node's recent 90th-percentile answer time, within 15 … 100 ms: {@link HedgeOptions})
   * is asked of the next healthy node too, or of a fallback region when no home node is left and the buffer is
   * empty. The first answer that passes the block checks is handed out; the other is discarded, never handed
   * out: a gap in the IDs, never a duplicate (docs/design.md §7). At most two requests are in flight.
   */
  readonly hedge?: boolean | HedgeOptions;
  /** How long a failed node is left alone (default 200 doubling to 2000). */
  readonly backoff?: BackoffOptions;
  /** Wire protocol (default `connect`, over HTTP/2). */
  readonly protocol?: ClientProtocol;
  /** TLS for the nodes (`host:port` addresses then become `https://`). */
  readonly tls?: ClientTlsOptions;
  /** HTTP/2 PING keep-alive (default every 10 s with a 5 s timeout). */
  readonly keepAlive?: KeepAliveOptions;
  /** Fill the buffer at once rather than at the first call (default `true`). */
  readonly prefill?: boolean;
  /** Where the metrics go (default `metrics.getMeter('@idgen/client')`). */
  readonly meter?: Meter;
  /** Monotonic clock and timers (default the process's). */
  readonly clock?: ClientClock;
  /** Creates the transport of one node (default Connect/gRPC over HTTP/2); tests pass a fake. */
  readonly transport?: IdTransportFactory;
  /** Random numbers in [0, 1) for the balancing start and backoff jitter (default `Math.random`). */
  readonly random?: () => number;
}
