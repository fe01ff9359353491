import type * as http2 from 'node:http2';
import { createClient, type Client } from '@connectrpc/connect';
import {
  Http2SessionManager,
  createConnectTransport as createConnectNodeTransport,
  createGrpcTransport,
} from '@connectrpc/connect-node';
import { IdGenerator } from '@idgen/proto';
import type { IdBlock } from './id-buffer.js';
import type { AttemptOptions, IdTransport, NodeTarget } from './transport.js';
import { CLIENT_DEFAULTS } from './defaults.js';

/** Which wire protocol to speak (the server serves both on one port: docs/design.md §6). */
export type ClientProtocol = 'connect' | 'grpc';

/** TLS settings for `https://` nodes (passed to `http2.connect`). */
export interface ClientTlsOptions {
  /** Trusted CA certificates (PEM); default: Node's bundled roots. */
  readonly ca?: string | Buffer | ReadonlyArray<string | Buffer>;
  /** Client certificate (PEM) for mutual TLS. */
  readonly cert?: string | Buffer;
  /** Client private key (PEM) for mutual TLS. */
  readonly key?: string | Buffer;
  /** Server name to verify, when it differs from the node's host. */
  readonly servername?: string;
  /** `false` only for local testing with self-signed certificates; default `true`. */
  readonly rejectUnauthorized?: boolean;
}

/** HTTP/2 PING keep-alive, so a dead or frozen node is noticed between refills. */
export interface KeepAliveOptions {
  /** Interval between PINGs on a connection, ms (default 10,000). `0` turns PINGs off. */
  readonly intervalMs?: number;
  /** A PING unanswered this long closes the connection, ms (default 5,000). */
  readonly timeoutMs?: number;
  /** Also PING idle connections (default `false`: a stale idle connection is verified before use). */
  readonly idleConnections?: boolean;
}

/** Options of {@link createConnectTransport}. */
export interface ConnectTransportOptions {
  /** Default `connect` (Connect protocol, binary, over HTTP/2). */
  readonly protocol?: ClientProtocol;
  readonly tls?: ClientTlsOptions;
  readonly keepAlive?: KeepAliveOptions;
}

/**
 * The real transport of one node: a Connect (or gRPC) client over one HTTP/2 connection, kept alive
 * with PINGs. `h2c` for `http://` URLs (the server's default), TLS for `https://`.
 */
export function createConnectTransport(target: NodeTarget, options: ConnectTransportOptions = {}): IdTransport {
  const keepAlive = options.keepAlive ?? {};
  const intervalMs = keepAlive.intervalMs ?? CLIENT_DEFAULTS.keepAliveIntervalMs;
  const tls = options.tls;
  const nodeOptions: http2.SecureClientSessionOptions = {};
  if (tls !== undefined) {
    if (tls.ca !== undefined) nodeOptions.ca = tls.ca as http2.SecureClientSessionOptions['ca'];
    if (tls.cert !== undefined) nodeOptions.cert = tls.cert;
    if (tls.key !== undefined) nodeOptions.key = tls.key;
    // An explicit name wins; else the name discovery resolved: the certificate is checked against the DNS
    // name, not the pod IP the name resolved to, which a certificate rarely names.
    const servername = tls.servername ?? target.servername;
    if (servername !== undefined) nodeOptions.servername = servername;
    if (tls.rejectUnauthorized !== undefined) nodeOptions.rejectUnauthorized = tls.rejectUnauthorized;
  }
  // Our own session manager, so close() can drop the connection when the node leaves discovery.
  const sessionManager = new Http2SessionManager(
    target.url,
    intervalMs > 0
      ? {
          pingIntervalMs: intervalMs,
          pingTimeoutMs: keepAlive.timeoutMs ?? CLIENT_DEFAULTS.keepAliveTimeoutMs,
          pingIdleConnection: keepAlive.idleConnections ?? false,
        }
      : {},
    nodeOptions,
  );
  const common = { baseUrl: target.url, httpVersion: '2' as const, sessionManager };
  const transport =
    options.protocol === 'grpc'
      ? createGrpcTransport(common)
      : createConnectNodeTransport({ ...common, useBinaryFormat: true });
  const client: Client<typeof IdGenerator> = createClient(IdGenerator, transport);
  return {
    async nextIds(count: number, attempt: AttemptOptions): Promise<readonly IdBlock[]> {
      const response = await client.nextIds({ count }, { signal: attempt.signal, timeoutMs: attempt.timeoutMs });
      return response.blocks;
    },
    close(): void {
      sessionManager.abort();
    },
  };
}
