import type { Socket } from 'node:net';
import type { HostPort } from '../host-port.js';
import { SERVING_LIMITS } from '../limits.js';
import type { ProbeAnswer, ServingServer, ServingServerOptions } from './contracts.js';
import { Dispatcher, isProbePath } from './dispatcher.js';
import { Http1Front } from './front-http1.js';
import { IdgenH2Front } from './front-idgen-h2.js';
import { NodeHttp2Front } from './front-node-http2.js';
import { Listener } from './listener.js';
import { resolveTransportSettings } from './transport-settings.js';

// The serving port's transport, in rooms (as connect-node splits its adapter from its universal handler):
// contracts.ts (the types every room shares: options, the fast path, the responder, the route; a leaf),
// dispatcher.ts (where a request goes, decided once; probes, readiness, deadlines, the in-flight count),
// front-idgen-h2.ts (@idgen/h2), front-http1.ts (node:http), front-node-http2.ts (the node:http2 fallback,
// deletable with its option), body-readers.ts (request bodies on each stack), listener.ts (the socket: sniffing,
// TLS, the connection cap, the stalled-writer sweep) and transport-settings.ts (every setting and default). This
// file puts them together.

/**
 * A socket with output waiting that the peer has not taken a byte of for this long is destroyed: a client that
 * sends requests and never reads the answers (an HTTP/1.1 slowloris) must not hold a connection and its buffers. The
 * same bound as @idgen/h2's stalled writer (SERVING_LIMITS' default).
 */
export const STALLED_WRITER_MS = SERVING_LIMITS.stalledWriteTimeoutMs.default;

/**
 * The serving server: a {@link Dispatcher} shared by three front ends and a {@link Listener}. Closing runs in
 * the order the parts depend on: refuse, ask to go away, drain (bounded), abort what is left, destroy.
 */
class TransportServer implements ServingServer {
  private readonly dispatcher: Dispatcher;
  private readonly idgenH2: IdgenH2Front | undefined;
  private readonly nodeH2: NodeHttp2Front | undefined;
  private readonly http1: Http1Front;
  private readonly listener: Listener;

  constructor(options: ServingServerOptions) {
    const settings = resolveTransportSettings(options);
    this.dispatcher = new Dispatcher(options, settings);
    this.http1 = new Http1Front(this.dispatcher, options, settings);
    let h2: (socket: Socket) => void;
    if ((options.http2Server ?? 'idgen') === 'idgen') {
      const front = new IdgenH2Front(this.dispatcher, options, settings);
      this.idgenH2 = front;
      h2 = (socket) => front.serve(socket);
    } else {
      const front = new NodeHttp2Front(this.dispatcher, options, settings);
      this.nodeH2 = front;
      h2 = (socket) => front.serve(socket);
    }
    this.listener = new Listener(this.dispatcher, options, settings, { h2, http1: this.http1 });
  }

  probe(method: string | undefined, path: string): ProbeAnswer | undefined {
    return isProbePath(path) ? this.dispatcher.probe(method, path) : undefined;
  }

  listen(listen: HostPort): Promise<HostPort> {
    return this.listener.listen(listen);
  }

  inFlight(): number {
    return this.dispatcher.inFlight;
  }

  async close(timeoutMs: number): Promise<number> {
    this.dispatcher.beginClose();
    const closed = this.listener.close();
    this.nodeH2?.close();
    this.idgenH2?.close();
    this.http1.closeIdle();
    await this.dispatcher.drain(timeoutMs);
    const left = this.dispatcher.inFlight;
    this.dispatcher.stop();
    this.nodeH2?.destroy();
    this.idgenH2?.destroy();
    this.listener.destroy();
    this.http1.close();
    await closed;
    return left;
  }
}

/**
 * Creates the serving server: HTTP/1.1 (node:http) and h2c or TLS HTTP/2 (@idgen/h2, or node:http2) on one port,
 * Connect + gRPC + gRPC-Web + probes. HTTP/2 settings are bounded so one client cannot hold much memory, on either
 * implementation (transport-settings.ts `HTTP2_SETTINGS`).
 */
export function createServingServer(options: ServingServerOptions): ServingServer {
  return new TransportServer(options);
}
