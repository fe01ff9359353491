import { connect as tlsConnect, createSecureContext, type SecureContext } from 'node:tls';
import { isIP, type Socket } from 'node:net';
import { CallCredentials, Channel, ChannelCredentials, type ChannelOptions } from '@grpc/grpc-js';
import type { Etcd3 } from 'etcd3';

/** TLS for etcd: PEM contents (not paths). */
export interface EtcdTlsOptions {
  readonly ca?: string | Buffer;
  readonly cert?: string | Buffer;
  readonly key?: string | Buffer;
}

/** What grpc-js hands a channel's credentials (its `GrpcUri`; the path is `host:port`). */
interface ChannelTarget {
  readonly path: string;
}

/** `host` of `host:port` or `[v6]:port`. */
function hostOf(address: string): string {
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(address);
  if (bracketed !== null) return bracketed[1] ?? address;
  const colon = address.lastIndexOf(':');
  return colon > 0 && address.indexOf(':') === colon ? address.slice(0, colon) : address;
}

/** How long a TLS handshake with etcd may take before its socket is destroyed (grpc-js sets no limit). */
const HANDSHAKE_TIMEOUT_MS = 10_000;

/**
 * TLS to etcd as grpc-js does it, less one thing: no server name (SNI) when etcd is given by IP address.
 * grpc-js always sends the target's host as the server name, an IP when etcd is given by IP, which RFC 6066
 * forbids and Node 24 reports as DEP0123 on every start. The certificate is checked as before:
 * against the CA, and its name against the host (Node's `checkServerIdentity` on `host`, so an IP address must
 * be among the certificate's IP SANs); only the SNI extension is left out for an IP.
 */
class EtcdTlsCredentials extends ChannelCredentials {
  private readonly context: SecureContext;
  constructor(tls: { ca: Buffer; key?: Buffer; cert?: Buffer }) {
    super();
    // No CA given: the system's roots, as grpc-js does.
    this.context = createSecureContext({ ca: tls.ca.length === 0 ? undefined : tls.ca, key: tls.key, cert: tls.cert });
  }
  _isSecure(): boolean {
    return true;
  }
  _equals(other: ChannelCredentials): boolean {
    return other === this;
  }
  _createSecureConnector(channelTarget: ChannelTarget) {
    const host = hostOf(channelTarget.path);
    const context = this.context;
    return {
      connect: (socket: Socket) =>
        new Promise<{ socket: Socket; secure: boolean }>((resolve, reject) => {
          // grpc-js sets no limit on a handshake, and a socket in one holds the process open after close() (an etcd
          // that accepts and never answers, or paused mid-handshake). Until the handshake is done the
          // socket does not keep the process alive (unref), and it is destroyed after HANDSHAKE_TIMEOUT_MS.
          socket.unref();
          const tlsSocket = tlsConnect(
            {
              socket,
              secureContext: context,
              host,
              ...(isIP(host) === 0 ? { servername: host } : {}),
              ALPNProtocols: ['h2'],
            },
            () => {
              clearTimeout(timer);
              socket.ref();
              if (!tlsSocket.authorized) reject(tlsSocket.authorizationError);
              else resolve({ socket: tlsSocket, secure: true });
            },
          );
          const timer = setTimeout(() => {
            const e = new Error(
              `TLS handshake with etcd ${channelTarget.path} not done within ${HANDSHAKE_TIMEOUT_MS} ms`,
            );
            tlsSocket.destroy(e);
            reject(e);
          }, HANDSHAKE_TIMEOUT_MS);
          timer.unref();
          tlsSocket.on('error', (e) => {
            clearTimeout(timer);
            reject(e);
          });
        }),
      waitForReady: () => Promise.resolve(),
      getCallCredentials: () => CallCredentials.createEmpty(),
      destroy: () => undefined,
    };
  }
}

/** {@link EtcdTlsCredentials} put on an etcd3 client (etcd3 builds its own credentials and has no other way in). */
export interface EtcdTls {
  /** For `IOptions.grpcOptions`: every service channel on these credentials. */
  readonly channelOptions: ChannelOptions;
  /**
   * The same for the `Authenticate` call (a user and password), which etcd3 1.1.2 makes on a channel of its own,
   * built from its credentials without `grpcOptions` (connection-pool.js, `Authenticator`). Set on its internal
   * field: if a later etcd3 moves it, the DEP0123 specs (etcd-tls.spec.ts, audit-deployment.spec.ts) fail.
   */
  authenticateWith(client: Etcd3): void;
}

/** TLS to etcd with no server name for an IP: {@link EtcdTlsCredentials} for every channel etcd3 opens. */
export function createEtcdTls(tls: { ca: Buffer; key?: Buffer; cert?: Buffer }): EtcdTls {
  const credentials = new EtcdTlsCredentials(tls);
  return {
    channelOptions: {
      channelFactoryOverride: (address: string, _etcd3s: ChannelCredentials, options: ChannelOptions) =>
        new Channel(address, credentials, options),
    },
    authenticateWith(client) {
      const authenticator = (client as unknown as { pool?: { authenticator?: { credentials?: unknown } } }).pool
        ?.authenticator;
      if (authenticator !== undefined && 'credentials' in authenticator) authenticator.credentials = credentials;
    },
  };
}
