import { Resolver } from 'node:dns/promises';
import { isIP } from 'node:net';
import type { DiscoveredNode, NodeDiscovery } from './node-pool.js';

/** Options of {@link dns}. Every duration is in milliseconds. */
export interface DnsDiscoveryOptions {
  /**
   * DNS servers to ask (`ip` or `ip:port`, `[v6]:port`), as `Resolver.setServers` takes them; default the
   * system's (`/etc/resolv.conf`). A `dns://server/host:port` target names one too.
   */
  readonly servers?: readonly string[];
  /** Re-resolve this often while the set is good (default 5000). */
  readonly intervalMs?: number;
  /** Deadline of one resolve (A and AAAA together) (default 2000): a silent DNS server ends there. */
  readonly timeoutMs?: number;
  /**
   * Soonest re-resolve after a failed resolve or a node the client marked failed (default 500); after failed
   * resolves it doubles up to `intervalMs`.
   */
  readonly retryMs?: number;
}

/**
 * A {@link NodeDiscovery} over DNS: every A and AAAA record of one name, with one port (a Kubernetes headless
 * Service lists each ready pod's address so). Resolves while a client watches it (or on `list()`), re-resolves
 * every `intervalMs` and soon after a node fails, keeps the last good set when DNS fails (and says so in
 * `problem()`), and names the DNS name as the TLS server name, so certificates are checked against the name,
 * not the pod IP.
 */
export interface DnsDiscovery extends NodeDiscovery {
  /** The name resolved. */
  readonly host: string;
  readonly port: number;
  /** The addresses now (`ip:port`, `[v6]:port`), sorted; empty before the first good resolve. */
  addresses(): readonly string[];
  /** Why the set may be stale (the last resolve failed or found no records), or `undefined`. */
  problem(): string | undefined;
  /** Resolves now (joins a resolve in flight); never rejects, an error goes to `problem()`. */
  refresh(): Promise<void>;
  /** A node this discovery listed failed an attempt: re-resolve soon (at most once per `retryMs`). */
  nodeFailed(url: string): void;
  /** Stops the timer at once and cancels a resolve in flight; idempotent. Watchers get no more calls. */
  close(): void;
}

/** A `dns:` or `host:port` target taken apart. */
export interface DnsTarget {
  readonly host: string;
  readonly port: number;
  /** The DNS server a `dns://server/host:port` target names. */
  readonly server: string | undefined;
}

/** Codes c-ares gives for "the name has no such records": an answer, not a failure. */
const NO_RECORDS = new Set(['ENODATA', 'ENOTFOUND']);

/**
 * Parses `host:port`, `dns:///host:port` or `dns://server[:port]/host:port` (gRPC's naming: the authority is the
 * DNS server). The port is required: DNS A/AAAA records carry none.
 */
export function parseDnsTarget(target: string): DnsTarget {
  const m = /^(?:dns:\/\/([^/]*)\/)?([^/:[\]]+|\[[0-9a-fA-F:.]+\]):(\d{1,5})$/.exec(target.trim());
  const port = m === null ? NaN : Number(m[3]);
  if (m === null || !(port > 0 && port < 65536)) {
    throw new RangeError(
      `a DNS target is host:port, dns:///host:port or dns://server/host:port (port 1 … 65535), got ${JSON.stringify(target)}`,
    );
  }
  const host = (m[2] as string).replace(/^\[|\]$/g, '').replace(/\.$/, '');
  return { host, port, server: m[1] === undefined || m[1] === '' ? undefined : m[1] };
}

/** Whether `target` is a `dns:` target (for the client's `nodes`). */
export function isDnsTarget(target: string): boolean {
  return /^dns:/i.test(target.trim());
}

/** `ip:port`, with brackets for IPv6. */
function hostPort(ip: string, port: number): string {
  return isIP(ip) === 6 ? `[${ip}]:${port}` : `${ip}:${port}`;
}

function positive(name: string, value: number | undefined, fallback: number): number {
  const v = value ?? fallback;
  if (!Number.isFinite(v) || v <= 0 || v > 2_147_483_647) {
    throw new RangeError(`dns(): ${name} must be a number of ms above 0 and at most 2147483647, got ${String(v)}`);
  }
  return v;
}

/**
 * DNS discovery for the client: `discovery: dns('idgen-server-r2.idgen-r2.svc.cluster.local:8080')`. See
 * {@link DnsDiscovery}. Use a fully qualified name: `node:dns` queries the name as given (no search domains).
 */
export function dns(target: string, options: DnsDiscoveryOptions = {}): DnsDiscovery {
  return new DnsNodeDiscovery(parseDnsTarget(target), options);
}

type ResolveState =
  | { readonly kind: 'never' }
  | { readonly kind: 'ok'; readonly atMs: number }
  | { readonly kind: 'failed'; readonly atMs: number; readonly failures: number; readonly message: string };

class DnsNodeDiscovery implements DnsDiscovery {
  readonly host: string;
  readonly port: number;
  private readonly literal: boolean;
  private readonly resolver: Resolver;
  private readonly intervalMs: number;
  private readonly timeoutMs: number;
  private readonly retryMs: number;
  /** The last good addresses per family (one family failing keeps its own: a server refusing AAAA costs no A). */
  private v4: readonly string[] = [];
  private v6: readonly string[] = [];
  private current: readonly string[] = [];
  private state: ResolveState = { kind: 'never' };
  private readonly watchers = new Set<(nodes: readonly DiscoveredNode[]) => void>();
  private resolving: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private timerAtMs = Infinity;
  private closed = false;
  /** Whether the watchers have been told a set once (the first, even empty, ends a client's wait for a list). */
  private announced = false;

  constructor(t: DnsTarget, options: DnsDiscoveryOptions) {
    this.host = t.host;
    this.port = t.port;
    this.intervalMs = positive('intervalMs', options.intervalMs, 5000);
    this.timeoutMs = positive('timeoutMs', options.timeoutMs, 2000);
    this.retryMs = Math.min(positive('retryMs', options.retryMs, 500), this.intervalMs);
    this.literal = isIP(t.host) !== 0;
    // c-ares's own timeout per try; the deadline below bounds the whole resolve whatever it does.
    this.resolver = new Resolver({ timeout: Math.max(50, Math.floor(this.timeoutMs / 2)), tries: 2 });
    const servers = [...(t.server === undefined ? [] : [t.server]), ...(options.servers ?? [])];
    if (servers.length > 0) this.resolver.setServers(servers);
  }

  addresses(): readonly string[] {
    return this.current;
  }

  async list(): Promise<readonly DiscoveredNode[]> {
    if (this.state.kind === 'never' && !this.closed) await this.refresh();
    if (this.current.length === 0 && this.state.kind === 'failed') throw new Error(this.state.message);
    return this.nodes();
  }

  watch(fn: (nodes: readonly DiscoveredNode[]) => void): () => void {
    this.watchers.add(fn);
    if (this.state.kind === 'never') void this.refresh();
    else {
      fn(this.nodes());
      this.schedule(this.intervalMs);
    }
    return () => {
      this.watchers.delete(fn);
      // Nobody watches: no timer (a client's close() unwatches, and ends the resolving with it).
      if (this.watchers.size === 0) this.clearTimer();
    };
  }

  problem(): string | undefined {
    if (this.state.kind !== 'failed') return undefined;
    const kept = this.current.length > 0 ? `, keeping the last ${this.current.length} addresses` : '';
    return `${this.state.message}${kept}`;
  }

  refresh(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.resolving ??= this.resolveOnce().finally(() => {
      this.resolving = undefined;
    });
    return this.resolving;
  }

  nodeFailed(): void {
    if (this.closed || this.watchers.size === 0) return;
    const last = this.state.kind === 'never' ? -Infinity : this.state.atMs;
    this.schedule(Math.max(0, last + this.retryMs - Date.now()));
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.clearTimer();
    this.watchers.clear();
    this.resolver.cancel();
  }

  private nodes(): readonly DiscoveredNode[] {
    // An IP literal is no name to verify (and SNI carries no IPs): the certificate is checked against the IP.
    return this.current.map((address) => (this.literal ? { address } : { address, servername: this.host }));
  }

  private async resolveOnce(): Promise<void> {
    this.clearTimer();
    let outcome: { v4: readonly string[] | Error; v6: readonly string[] | Error };
    if (this.literal) outcome = isIP(this.host) === 4 ? { v4: [this.host], v6: [] } : { v4: [], v6: [this.host] };
    else outcome = await this.lookup();
    if (this.closed) return;
    const errors = [outcome.v4, outcome.v6].filter((r): r is Error => r instanceof Error);
    if (!(outcome.v4 instanceof Error)) this.v4 = outcome.v4;
    if (!(outcome.v6 instanceof Error)) this.v6 = outcome.v6;
    const found = [outcome.v4, outcome.v6].flatMap((r) => (r instanceof Error ? [] : r));
    const now = Date.now();
    const failures = this.state.kind === 'failed' ? this.state.failures + 1 : 1;
    if (errors.length > 0) {
      const why = errors.map((e) => e.message).join('; ');
      this.state = { kind: 'failed', atMs: now, failures, message: `DNS ${this.host}: ${why}` };
    } else if (found.length === 0) {
      // No records at all (a headless Service with no ready pod, or NXDOMAIN): the last set is kept, since dropping
      // it would leave no node to try; its nodes fail fast if they are gone.
      this.state = { kind: 'failed', atMs: now, failures, message: `DNS ${this.host}: no A or AAAA records` };
    } else {
      this.state = { kind: 'ok', atMs: now };
    }
    const next = [...this.v4, ...this.v6].map((ip) => hostPort(ip, this.port)).sort();
    if (found.length > 0 || this.current.length === 0) this.update(next);
    this.schedule(
      this.state.kind === 'ok'
        ? this.intervalMs
        : Math.min(this.intervalMs, this.retryMs * 2 ** Math.min(this.state.failures - 1, 20)),
    );
  }

  /** A and AAAA at once, within `timeoutMs`: no records is `[]`, any other failure an `Error`. */
  private async lookup(): Promise<{ v4: readonly string[] | Error; v6: readonly string[] | Error }> {
    let deadline: NodeJS.Timeout | undefined;
    const expired = new Promise<'expired'>((resolve) => {
      deadline = setTimeout(() => resolve('expired'), this.timeoutMs);
    });
    const one = (p: Promise<string[]>): Promise<readonly string[] | Error> =>
      Promise.race([p, expired]).then(
        (r) => (r === 'expired' ? new Error(`no answer within ${this.timeoutMs} ms`) : r),
        (e: unknown) => {
          const code = (e as { code?: unknown }).code;
          if (typeof code === 'string' && NO_RECORDS.has(code)) return [];
          return new Error(`${typeof code === 'string' ? code : 'error'}: ${(e as Error).message ?? String(e)}`);
        },
      );
    try {
      const [v4, v6] = await Promise.all([
        one(this.resolver.resolve4(this.host)),
        one(this.resolver.resolve6(this.host)),
      ]);
      return { v4, v6 };
    } finally {
      clearTimeout(deadline);
      // Past the deadline nothing may linger: queries c-ares still retries are dropped (a no-op when all answered).
      this.resolver.cancel();
    }
  }

  /** Takes `next` as the set, telling the watchers when it changed (and always the first time). */
  private update(next: readonly string[]): void {
    const same = next.length === this.current.length && next.every((a, i) => a === this.current[i]);
    if (same && this.announced) return;
    this.announced = true;
    this.current = next;
    const nodes = this.nodes();
    for (const fn of [...this.watchers]) fn(nodes);
  }

  /** Resolves again in `delayMs`, unless a resolve is already due sooner; only while someone watches. */
  private schedule(delayMs: number): void {
    if (this.closed || this.watchers.size === 0) return;
    const at = Date.now() + delayMs;
    if (this.timer !== undefined && this.timerAtMs <= at) return;
    this.clearTimer();
    this.timerAtMs = at;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.timerAtMs = Infinity;
      void this.refresh();
    }, delayMs);
    // Discovery alone never keeps a process alive (a forgotten close() must not hang an exit).
    this.timer.unref();
  }

  private clearTimer(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAtMs = Infinity;
  }
}
