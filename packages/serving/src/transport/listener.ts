import { readFileSync } from 'node:fs';
import { createServer as createNetServer, type Server, type Socket } from 'node:net';
import { createServer as createTlsServer, type TLSSocket, type Server as TlsServer } from 'node:tls';
import type { HostPort } from '../host-port.js';
import type { TlsServing } from '../tls.js';
import type { ServingServerOptions } from './contracts.js';
import type { Dispatcher } from './dispatcher.js';
import type { Http1Front } from './front-http1.js';
import type { TransportSettings } from './transport-settings.js';

/** Descriptors kept spare below the open-files limit, for what is not a client: etcd, chronyc's pipes, the log. */
export const DESCRIPTOR_HEADROOM = 128;

/** The soft open-files limit of this process (Linux: /proc/self/limits), undefined where it cannot be read. */
export function openFilesLimit(limitsText?: string): number | undefined {
  let text = limitsText;
  if (text === undefined) {
    try {
      text = readFileSync('/proc/self/limits', 'latin1');
    } catch {
      return undefined;
    }
  }
  const soft = /^Max open files\s+(\S+)/m.exec(text)?.[1];
  return soft === undefined || !/^\d+$/.test(soft) ? undefined : Number(soft);
}

/**
 * The connection cap the serving port can keep: `configured`, lowered to the open-files limit less
 * {@link DESCRIPTOR_HEADROOM} (at least 1), so clients holding connections cannot take the descriptors etcd and
 * chronyc need (1,004 idle connections at `ulimit -n 1024` made `spawn chronyc` fail with EMFILE, and
 * the node fenced itself on its time source).
 */
export function connectionCap(
  configured: number,
  limit = openFilesLimit(),
): { maxConnections: number; openFilesLimit: number | undefined; lowered: boolean } {
  const room = limit === undefined ? configured : Math.max(1, limit - DESCRIPTOR_HEADROOM);
  return { maxConnections: Math.min(configured, room), openFilesLimit: limit, lowered: room < configured };
}

/** Where the listener hands a connection once it knows its protocol. */
export interface ListenerFronts {
  /** An HTTP/2 connection (h2c preface, or TLS with ALPN `h2`). */
  readonly h2: (socket: Socket) => void;
  readonly http1: Http1Front;
}

/**
 * The serving port's socket: accepts connections (at most `maxConnections`), closes idle ones, cuts stalled
 * writers, and hands each connection to its front end. HTTP/2 with prior knowledge (h2c: gRPC, Connect over h2)
 * and HTTP/1.1 (Connect JSON from curl and browsers, gRPC-Web) share one port: Node's http2 server takes
 * `allowHTTP1` only with TLS, so the listener sniffs each plaintext connection's first bytes: the HTTP/2 preface
 * starts with "PRI", which no HTTP/1.1 request does (RFC 9113 §3.4). With TLS, ALPN chooses.
 */
export class Listener {
  private readonly server: Server;
  private readonly tlsServer: TlsServer | undefined;
  private readonly sockets = new Set<Socket>();
  // Sockets with output waiting: how much of it the peer had taken (flushed to the kernel) and since when.
  private readonly writers = new Map<Socket, { flushed: number; since: number }>();
  private readonly sweep: ReturnType<typeof setInterval>;

  constructor(
    private readonly dispatcher: Dispatcher,
    private readonly options: ServingServerOptions,
    private readonly settings: TransportSettings,
    private readonly fronts: ListenerFronts,
  ) {
    this.tlsServer = options.tls === undefined ? undefined : this.createTls(options.tls);
    this.server = createNetServer((socket: Socket) => this.accept(socket));
    this.server.maxConnections = settings.maxConnections;
    this.server.on('drop', () => options.onRefusal?.('connection-limit'));
    this.sweep = setInterval(() => this.sweepWriters(Date.now()), settings.connectionSweepMs);
    this.sweep.unref();
  }

  /** Binds `listen`; resolves with the bound address (port 0 becomes the real port). */
  listen(listen: HostPort): Promise<HostPort> {
    const server = this.server;
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(listen.port, listen.host, () => {
        server.off('error', reject);
        const a = server.address();
        resolve(typeof a === 'object' && a !== null ? { host: a.address, port: a.port } : listen);
      });
    });
  }

  /** Stops accepting connections; resolves once every connection is gone. */
  close(): Promise<void> {
    return new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** Every connection destroyed, the sweep stopped (a shutdown's end). */
  destroy(): void {
    for (const s of this.sockets) s.destroy();
    clearInterval(this.sweep);
  }

  private accept(socket: Socket): void {
    this.sockets.add(socket);
    socket.once('close', () => {
      this.sockets.delete(socket);
      this.writers.delete(socket);
    });
    socket.on('error', (e) => this.options.onConnectionError?.(e));
    // No traffic for the idle timeout: close (an idle or half-open connection must not be held forever).
    socket.setTimeout(this.settings.idleTimeoutMs, () => socket.destroy());
    if (this.dispatcher.closing) {
      socket.destroy();
      return;
    }
    if (this.tlsServer !== undefined) this.tlsServer.emit('connection', socket);
    else this.sniff(socket);
  }

  /** Reads a plaintext connection's first bytes (within the request deadline) and hands it on by its protocol. */
  private sniff(socket: Socket): void {
    let head: Buffer = Buffer.alloc(0);
    const sniffDeadline = setTimeout(() => socket.destroy(), this.settings.requestTimeoutMs);
    sniffDeadline.unref();
    socket.once('close', () => clearTimeout(sniffDeadline));
    const sniff = (chunk: Buffer): void => {
      head = head.length === 0 ? chunk : Buffer.concat([head, chunk]);
      if (head.length < 3) return;
      clearTimeout(sniffDeadline);
      socket.off('data', sniff);
      socket.pause();
      const h2 = head.toString('latin1', 0, 3) === 'PRI';
      if (!h2 && !this.fronts.http1.admitRead(socket, head)) return;
      socket.unshift(head);
      if (h2) {
        // The HTTP/2 front end reads the unshifted bytes itself (on the next tick for node:http2): no resume here.
        this.fronts.h2(socket);
      } else {
        this.fronts.http1.serve(socket);
        socket.resume();
      }
    };
    socket.on('data', sniff);
  }

  /**
   * TLS connections: node:tls's server does the handshake (within the request deadline) and client
   * verification on sockets the listener hands it; then HTTP/2 or HTTP/1.1 as ALPN chose.
   */
  private createTls(tls: TlsServing): TlsServer {
    const tlsServer = createTlsServer({
      ...tls.contextOptions(),
      ALPNProtocols: ['h2', 'http/1.1'],
      requestCert: tls.requestCert,
      rejectUnauthorized: tls.requestCert,
      handshakeTimeout: this.settings.requestTimeoutMs,
    });
    tls.onReload(() => tlsServer.setSecureContext(tls.contextOptions()));
    tlsServer.on('tlsClientError', (e, socket) => {
      this.options.onTlsError?.(e);
      socket.destroy();
    });
    tlsServer.on('secureConnection', (secure: TLSSocket) => {
      if (!tls.allowed(secure)) {
        this.options.onRefusal?.('tls-client-refused');
        secure.destroy();
        return;
      }
      secure.on('error', (e) => this.options.onConnectionError?.(e));
      if (secure.alpnProtocol === 'h2') this.fronts.h2(secure);
      else this.fronts.http1.serve(secure);
    });
    return tlsServer;
  }

  /**
   * A socket with output waiting that the peer has not taken a byte of for `stalledWriteTimeoutMs` is destroyed
   * (counted as `stalled-writer`): a client that sends requests and never reads the answers (an HTTP/1.1
   * slowloris) must not hold a connection and its buffers. The same bound as @idgen/h2's stalled writer.
   */
  private sweepWriters(now: number): void {
    for (const socket of this.sockets) {
      const waiting = socket.writableLength;
      if (waiting === 0) {
        this.writers.delete(socket);
        continue;
      }
      const flushed = (socket.bytesWritten ?? 0) - waiting;
      const seen = this.writers.get(socket);
      if (seen === undefined || seen.flushed !== flushed) {
        this.writers.set(socket, { flushed, since: now });
      } else if (now - seen.since >= this.settings.stalledWriteTimeoutMs) {
        this.writers.delete(socket);
        this.options.onRefusal?.('stalled-writer');
        socket.destroy();
      }
    }
  }
}
