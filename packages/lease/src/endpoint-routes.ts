import { EtcdLeaseInvalidError, castGrpcError, type Etcd3 } from 'etcd3';
import { deadlineIn } from './etcd-client.js';

/**
 * The route a holder's refreshes take to etcd (docs/design.md §5, "one member down costs nothing"). With several
 * endpoints, one client per endpoint, used one at a time: a keep-alive or `last-ms` refresh that fails on one member
 * (down, paused, slow) is asked again at once of the next, within the fence margin, instead of waiting for the next
 * interval on a random host that may be the same dead one. The route stays on a member that answers.
 */
export class EndpointRoutes {
  private readonly clients: readonly Etcd3[];
  private index = 0;

  /** `make(endpoint)` builds a client of one endpoint; with one endpoint, `single` is used for everything. */
  constructor(endpoints: readonly string[], single: Etcd3, make: (endpoint: string) => Etcd3) {
    this.clients = endpoints.length > 1 ? endpoints.map(make) : [single];
  }

  /** How many members there are to try. */
  get size(): number {
    return this.clients.length;
  }

  /** The client refreshes go through now. */
  current(): Etcd3 {
    return this.clients[this.index] as Etcd3;
  }

  /** A refresh through `client` failed: the next one goes to the next endpoint (unless another failure moved on). */
  failed(client: Etcd3): void {
    if (this.clients[this.index] === client) this.index = (this.index + 1) % this.clients.length;
  }

  /** Closes the per-endpoint clients (not the single one it was given). */
  close(): void {
    if (this.clients.length > 1) for (const c of this.clients) c.close();
  }
}

/**
 * One keep-alive of lease `leaseId` through `client` (what etcd3's `Lease.keepaliveOnce` does, on a client of our
 * choosing), resolving to the answer's header. Rejects with etcd3's `EtcdLeaseInvalidError` when etcd says the lease
 * is gone (TTL 0).
 */
export async function keepAliveOnce(
  client: Etcd3,
  leaseId: string,
  timeoutMs: number,
): Promise<{ readonly cluster_id: string; readonly revision: string } | undefined> {
  const stream = await client.leaseClient.leaseKeepAlive(deadlineIn(timeoutMs));
  try {
    const res = await new Promise<{ TTL: string; header?: { cluster_id: string; revision: string } }>(
      (resolve, reject) => {
        stream.on('data', resolve);
        stream.on('error', (e: Error) => reject(castGrpcError(e)));
        stream.write({ ID: leaseId });
      },
    );
    if (res.TTL === '0') throw new EtcdLeaseInvalidError(leaseId);
    return res.header;
  } finally {
    stream.end();
  }
}
