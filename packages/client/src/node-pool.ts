import type { AttemptFailure } from './errors.js';
import type { IdTransport } from './transport.js';
import { CLIENT_DEFAULTS } from './defaults.js';

/** A node as discovery lists it: `ServingNode` from `@idgen/discovery` fits this shape. */
export interface DiscoveredNode {
  /** `host:port` (or a full base URL). */
  readonly address: string;
  /** The region the node serves; nodes of another region are ignored. */
  readonly region?: number;
  /**
   * The name to check the node's TLS certificate against, when the address is an IP a name resolved to
   * ({@link dns}: the DNS name). The client's `tls.servername`, when set, wins.
   */
  readonly servername?: string;
}

/**
 * A live list of a region's serving nodes. Structurally `@idgen/discovery`'s reader
 * (`createDiscoveryReader`), so the client itself needs no etcd: the caller owns (and closes) it.
 */
export interface NodeDiscovery {
  list(): Promise<readonly DiscoveredNode[]>;
  /** Calls `fn` with the whole current list on every change; returns an unsubscribe function. */
  watch(fn: (nodes: readonly DiscoveredNode[]) => void): () => void;
  /**
   * What is wrong with the discovery's source now (`@idgen/discovery`: etcd not answering, a lost watch), or
   * `undefined`. Optional; when present, an `IdsUnavailableError` includes it, so an outage caused by etcd names etcd.
   */
  problem?(): string | undefined;
  /**
   * Called with a node's base URL when an attempt on it failed. Optional; {@link dns} re-resolves soon, since a
   * failing node may be one whose record is gone.
   */
  nodeFailed?(url: string): void;
}

/** How long a failed node is left alone (docs/design.md §7: "marks the node" unhealthy). */
export interface BackoffOptions {
  /** First backoff after a failure, ms (default 200). */
  readonly initialMs?: number;
  /** Cap of the doubling backoff, ms (default 2000: a returning node is probed again within 2 s). */
  readonly maxMs?: number;
}

/** One node's health as this client sees it. */
export interface NodeState {
  readonly url: string;
  readonly region: number;
  /** TLS name to verify (from discovery), or `undefined`: the URL's host. */
  servername: string | undefined;
  transport: IdTransport | undefined;
  /** Consecutive failed attempts; 0 once an attempt succeeds. */
  failures: number;
  /** Monotonic ms before which the node is not tried (0: healthy). */
  unhealthyUntilMs: number;
  lastFailure: AttemptFailure | undefined;
  /** Attempts running now (a removed node's transport is closed once this reaches 0). */
  inFlight: number;
  removed: boolean;
  /** The node's last {@link LATENCY_WINDOW} answer times, ms, a ring (its hedge delay comes from them: hedge.ts). */
  readonly latencies: Float64Array;
  /** Answers timed so far (the ring's next slot is this modulo {@link LATENCY_WINDOW}). */
  latencySamples: number;
}

/** How many of a node's latest answer times its hedge delay looks at. */
export const LATENCY_WINDOW = 16;

/** Records how long one of the node's answers took (a fixed ring: no allocation per refill). */
export function recordLatency(node: NodeState, ms: number): void {
  node.latencies[node.latencySamples % LATENCY_WINDOW] = ms;
  node.latencySamples++;
}

/** Turns `host:port` into a base URL; full URLs are kept (without a trailing slash). */
export function toBaseUrl(address: string, tls: boolean): string {
  const trimmed = address.trim().replace(/\/+$/, '');
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(trimmed) ? trimmed : `${tls ? 'https' : 'http'}://${trimmed}`;
}

/**
 * The nodes of one region with their health, and the balancing policy: round-robin over the healthy
 * nodes, starting at a random node per client. With one refill in flight per client, a
 * client never has more than one request outstanding (two while a refill is hedged), so least-outstanding would see all zeros and
 * degenerate to "always the first node"; round-robin spreads each client's refills over the pool, and
 * the random start spreads a fleet of clients. A retry within one refill never repeats a node.
 */
export class NodeGroup {
  private nodes: NodeState[] = [];
  private cursor: number;
  private readonly initialMs: number;
  private readonly maxMs: number;

  constructor(
    readonly region: number,
    backoff: BackoffOptions,
    private readonly random: () => number,
    private readonly closeTransport: (node: NodeState) => void,
  ) {
    this.initialMs = backoff.initialMs ?? CLIENT_DEFAULTS.backoffInitialMs;
    this.maxMs = Math.max(this.initialMs, backoff.maxMs ?? CLIENT_DEFAULTS.backoffMaxMs);
    this.cursor = Math.floor(random() * 1_000_000);
  }

  /** The current nodes (for status and tests). */
  list(): readonly NodeState[] {
    return this.nodes;
  }

  /**
   * Replaces the node list, keeping the health of nodes that stay; nodes that left are closed (at once,
   * or when their running attempt ends). Returns whether the set changed.
   */
  setUrls(urls: readonly string[], servernames?: ReadonlyMap<string, string>): boolean {
    const wanted = [...new Set(urls)].sort();
    const byUrl = new Map(this.nodes.map((n) => [n.url, n]));
    const next: NodeState[] = [];
    for (const url of wanted) {
      const kept = byUrl.get(url);
      if (kept !== undefined) {
        byUrl.delete(url);
        kept.servername = servernames?.get(url);
        next.push(kept);
      } else {
        next.push({
          url,
          region: this.region,
          servername: servernames?.get(url),
          transport: undefined,
          failures: 0,
          unhealthyUntilMs: 0,
          lastFailure: undefined,
          inFlight: 0,
          removed: false,
          latencies: new Float64Array(LATENCY_WINDOW),
          latencySamples: 0,
        });
      }
    }
    const changed = byUrl.size > 0 || next.length !== this.nodes.length;
    for (const gone of byUrl.values()) {
      gone.removed = true;
      if (gone.inFlight === 0) this.closeTransport(gone);
    }
    this.nodes = next;
    return changed;
  }

  /**
   * The next healthy node not in `tried`, round-robin, an idle one first; `undefined` when none is left. A node
   * still holding a request is one a hedged refill outran (slow or frozen, docs/design.md §7): asking it again
   * before that request ends would only wait on it a second time. Without hedging every node is idle here.
   */
  pick(nowMs: number, tried: ReadonlySet<NodeState>): NodeState | undefined {
    return this.pickWhere(nowMs, tried, true) ?? this.pickWhere(nowMs, tried, false);
  }

  private pickWhere(nowMs: number, tried: ReadonlySet<NodeState>, idleOnly: boolean): NodeState | undefined {
    const n = this.nodes.length;
    for (let i = 0; i < n; i++) {
      const index = (this.cursor + i) % n;
      const node = this.nodes[index] as NodeState;
      if (node.unhealthyUntilMs <= nowMs && !tried.has(node) && (!idleOnly || node.inFlight === 0)) {
        this.cursor = index + 1;
        return node;
      }
    }
    return undefined;
  }

  /** A failed attempt: back off the node, doubling per consecutive failure, with ±20 % jitter. */
  markFailed(node: NodeState, nowMs: number, failure: AttemptFailure): void {
    node.failures++;
    node.lastFailure = failure;
    const base = Math.min(this.maxMs, this.initialMs * 2 ** Math.min(node.failures - 1, 20));
    node.unhealthyUntilMs = nowMs + Math.round(base * (0.8 + 0.4 * this.random()));
  }

  /** A successful attempt: the node is healthy again. */
  markOk(node: NodeState): void {
    node.failures = 0;
    node.unhealthyUntilMs = 0;
  }

  /** Whether some node may be tried now. */
  hasHealthy(nowMs: number): boolean {
    return this.nodes.some((n) => n.unhealthyUntilMs <= nowMs);
  }

  /** The earliest moment a backing-off node may be tried again (`undefined`: no nodes at all). */
  earliestRetryMs(): number | undefined {
    let earliest: number | undefined;
    for (const n of this.nodes) {
      if (earliest === undefined || n.unhealthyUntilMs < earliest) earliest = n.unhealthyUntilMs;
    }
    return earliest;
  }

  /** Closes every node's transport (client close). */
  closeAll(): void {
    for (const n of this.nodes) {
      n.removed = true;
      this.closeTransport(n);
    }
    this.nodes = [];
  }
}
