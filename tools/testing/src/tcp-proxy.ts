import { performance } from 'node:perf_hooks';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { track } from './registry.js';

/**
 * How {@link TcpProxy.cut} treats the link:
 * - `blackhole` (default), a network partition: open connections stay open but nothing gets through
 *   either way (bytes are dropped), new connections are accepted and then hear nothing; on
 *   {@link TcpProxy.restore} every connection that lived through the cut is closed (its byte stream has a
 *   gap), so the client reconnects;
 * - `reset`: open connections are reset at once, new ones are reset as they arrive.
 */
export type TcpProxyCutMode = 'blackhole' | 'reset';

/** Options of {@link createTcpProxy}. */
export interface TcpProxyOptions {
  /** Where every accepted connection is forwarded: `host:port` (e.g. an etcd member's client port). */
  readonly target: string;
  /** Port to listen on, on 127.0.0.1; default a free one. */
  readonly port?: number;
  /** Delay added to every chunk in each direction, in ms; default 0. */
  readonly latencyMs?: number;
}

/** A TCP proxy on loopback in front of one target, for network faults between two real processes. */
export interface TcpProxy {
  /** The port it listens on (127.0.0.1). */
  readonly port: number;
  /** `127.0.0.1:<port>`. */
  readonly address: string;
  readonly target: string;
  /** Whether the link is cut now. */
  readonly isCut: boolean;
  /** The delay added to every chunk each way now, ms. */
  readonly latencyMs: number;
  /** Open connections (forwarding or held). */
  connections(): number;
  /** Connections accepted so far. */
  accepted(): number;
  /** Cuts the link (see {@link TcpProxyCutMode}); idempotent. */
  cut(mode?: TcpProxyCutMode): void;
  /** Ends a cut: connections that lived through it are closed, new ones are forwarded again. */
  restore(): void;
  /**
   * Cuts the link (blackhole) right after the first client-to-target chunk that contains `bytes` has been forwarded:
   * a partition that falls just after a request left, so the target acts on it and its answer is lost. Resolves once
   * cut. One trigger at a time; a new call replaces an unfired one.
   */
  cutAfterSending(bytes: string | Buffer): Promise<void>;
  /**
   * Adds `ms` of delay to every chunk from now on, each direction (a round trip gains 2 × `ms`). Order is
   * kept: a chunk never overtakes one queued before it. 0 forwards at once again.
   */
  setLatency(ms: number): void;
  /** Stops listening and closes every connection; safe to call twice. */
  close(): Promise<void>;
}

interface Link {
  readonly client: Socket;
  upstream: Socket | undefined;
  /** Lived through a cut: closed on restore. */
  stale: boolean;
}

/** Parses `host:port` (IPv4 or a name; `[v6]:port`). */
function parseTarget(target: string): { host: string; port: number } {
  const m = /^\[?([^\]]+?)\]?:(\d{1,5})$/.exec(target.replace(/^[a-z]+:\/\//, ''));
  const port = m === null ? NaN : Number(m[2]);
  if (m === null || !(port > 0 && port < 65536))
    throw new RangeError(`createTcpProxy: target must be host:port, got ${JSON.stringify(target)}`);
  return { host: m[1] as string, port };
}

/**
 * Starts a TCP proxy on 127.0.0.1 that forwards every connection to `target`, and can cut the link,
 * restore it, and add latency while real processes talk through it. Tracked by the cleanup registry.
 */
export async function createTcpProxy(options: TcpProxyOptions): Promise<TcpProxy> {
  const target = parseTarget(options.target);
  const links = new Set<Link>();
  let cutMode: TcpProxyCutMode | undefined;
  let latencyMs = checkLatency(options.latencyMs ?? 0);
  let accepted = 0;
  let closed = false;
  let trigger: { bytes: Buffer; fired: () => void } | undefined;

  const destroy = (link: Link, reset: boolean): void => {
    links.delete(link);
    if (reset && typeof link.client.resetAndDestroy === 'function' && !link.client.destroyed)
      link.client.resetAndDestroy();
    else link.client.destroy();
    if (link.upstream !== undefined) {
      if (reset && typeof link.upstream.resetAndDestroy === 'function' && !link.upstream.destroyed)
        link.upstream.resetAndDestroy();
      else link.upstream.destroy();
    }
  };

  /**
   * Forwards `from` to `to` with the current latency, in order, dropping bytes while the link is cut; `toTarget`:
   * the client-to-target direction, where {@link TcpProxy.cutAfterSending} looks for its bytes.
   */
  const forward = (link: Link, from: Socket, to: Socket, toTarget: boolean): void => {
    const queue: { due: number; chunk: Buffer | null }[] = [];
    let timer: NodeJS.Timeout | undefined;
    let draining = false;
    // The end of the last chunk forwarded, so bytes split across two chunks are found too.
    let tail = Buffer.alloc(0);
    const deliver = (chunk: Buffer | null): void => {
      if (to.destroyed) return;
      if (chunk === null) {
        to.end();
        return;
      }
      if (toTarget && trigger !== undefined) {
        const t = trigger;
        const seen = Buffer.concat([tail, chunk]);
        tail = seen.subarray(Math.max(0, seen.length - t.bytes.length + 1));
        if (seen.includes(t.bytes)) {
          to.write(chunk);
          trigger = undefined;
          cut('blackhole');
          t.fired();
          return;
        }
      }
      // Backpressure: stop reading until the slow side has taken what it was given (one listener at a time).
      if (!to.write(chunk) && !draining) {
        draining = true;
        from.pause();
        to.once('drain', () => {
          draining = false;
          from.resume();
        });
      }
    };
    const flush = (): void => {
      timer = undefined;
      const now = performance.now();
      while (queue.length > 0 && (queue[0] as { due: number }).due <= now) {
        const item = queue.shift() as { chunk: Buffer | null };
        if (cutMode === undefined && !link.stale) deliver(item.chunk);
      }
      schedule();
    };
    const schedule = (): void => {
      if (timer !== undefined || queue.length === 0) return;
      timer = setTimeout(flush, Math.max(0, (queue[0] as { due: number }).due - performance.now()));
    };
    const push = (chunk: Buffer | null): void => {
      if (cutMode !== undefined || link.stale) return; // a partition drops what is sent into it
      if (latencyMs === 0 && queue.length === 0) deliver(chunk);
      else {
        queue.push({ due: performance.now() + latencyMs, chunk });
        schedule();
      }
    };
    from.on('data', (chunk: Buffer) => push(chunk));
    from.on('end', () => push(null));
    from.on('close', () => {
      if (timer !== undefined) clearTimeout(timer);
    });
  };

  const server: Server = createServer((client) => {
    accepted++;
    client.setNoDelay(true);
    const link: Link = { client, upstream: undefined, stale: false };
    client.on('error', () => undefined);
    client.on('close', () => destroy(link, false));
    if (cutMode === 'reset') {
      destroy(link, true);
      return;
    }
    links.add(link);
    if (cutMode === 'blackhole') {
      // Accepted, then silence: like a SYN that got through to a host that never answers again.
      link.stale = true;
      client.resume(); // read and drop
      return;
    }
    const upstream = connect({ host: target.host, port: target.port });
    link.upstream = upstream;
    upstream.setNoDelay(true);
    upstream.on('error', () => undefined);
    upstream.on('close', () => destroy(link, false));
    forward(link, client, upstream, true);
    forward(link, upstream, client, false);
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address();
  if (address === null || typeof address === 'string')
    throw new Error('createTcpProxy: the listener has no TCP address');
  const port = address.port;

  function cut(mode: TcpProxyCutMode = 'blackhole'): void {
    if (closed || cutMode !== undefined) return;
    cutMode = mode;
    for (const link of [...links]) {
      if (mode === 'reset') destroy(link, true);
      else link.stale = true;
    }
  }

  const closeAll = (): void => {
    closed = true;
    for (const link of [...links]) destroy(link, false);
  };
  const untrack = track({
    cleanup: async () => {
      closeAll();
      await new Promise<void>((r) => server.close(() => r()));
    },
    cleanupSync: () => {
      closeAll();
      server.close();
    },
  });

  return {
    port,
    address: `127.0.0.1:${port}`,
    target: options.target,
    get isCut() {
      return cutMode !== undefined;
    },
    get latencyMs() {
      return latencyMs;
    },
    connections: () => links.size,
    accepted: () => accepted,
    cut,
    cutAfterSending(bytes: string | Buffer) {
      const wanted = typeof bytes === 'string' ? Buffer.from(bytes) : bytes;
      if (wanted.length === 0) throw new RangeError('createTcpProxy: cutAfterSending needs at least one byte');
      return new Promise<void>((fired) => {
        trigger = { bytes: wanted, fired };
      });
    },
    restore() {
      if (cutMode === undefined) return;
      cutMode = undefined;
      for (const link of [...links]) if (link.stale) destroy(link, false);
    },
    setLatency(ms: number) {
      latencyMs = checkLatency(ms);
    },
    async close() {
      if (closed) return;
      untrack();
      closeAll();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

function checkLatency(ms: number): number {
  if (!Number.isFinite(ms) || ms < 0)
    throw new RangeError(`createTcpProxy: latency must be a finite number ≥ 0, got ${ms}`);
  return ms;
}
