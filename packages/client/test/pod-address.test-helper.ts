import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';

/**
 * A "pod IP" for DNS-discovery tests: a TCP forwarder listening on `ip:port` (any 127.x.y.z loopback address, so
 * several of them share one port the way pods behind a headless Service do) to a real node's `host:port`. Bytes
 * pass through untouched: TLS is end to end, the node's certificate is what the client checks.
 */
export interface PodAddress {
  /** `ip:port` it listens on. */
  readonly address: string;
  readonly ip: string;
  /** Connections accepted so far. */
  accepted(): number;
  /** Bytes forwarded from clients to the node so far. */
  bytesIn(): number;
  /** Client connections open now. */
  openConnections(): number;
  /** Stops listening and closes every connection; idempotent. */
  close(): Promise<void>;
}

/** Starts a {@link PodAddress} on `ip:port` forwarding to `target` (`host:port`). */
export async function startPodAddress(ip: string, port: number, target: string): Promise<PodAddress> {
  const [host, targetPort] = [
    target.slice(0, target.lastIndexOf(':')),
    Number(target.slice(target.lastIndexOf(':') + 1)),
  ];
  const sockets = new Set<Socket>();
  const clients = new Set<Socket>();
  let accepted = 0;
  let bytesIn = 0;
  const server = createServer((client) => {
    accepted++;
    const upstream = connect(targetPort, host);
    sockets.add(client).add(upstream);
    clients.add(client);
    const end = (): void => {
      clients.delete(client);
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('data', (chunk: Buffer) => {
      bytesIn += chunk.length;
    });
    client.pipe(upstream);
    upstream.pipe(client);
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  });
  server.listen(port, ip);
  await once(server, 'listening');
  let closing: Promise<void> | undefined;
  return {
    address: `${ip}:${port}`,
    ip,
    accepted: () => accepted,
    bytesIn: () => bytesIn,
    openConnections: () => clients.size,
    close() {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
      });
      return closing;
    },
  };
}
