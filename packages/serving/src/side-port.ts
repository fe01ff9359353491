import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { formatHostPort, type HostPort } from './host-port.js';
import type { ProbeAnswer } from './transport/contracts.js';

/** A listener beside the serving port (metrics, probes): its bound address and how to stop it. */
export interface SidePort {
  /** The bound `host:port`. */
  readonly address: string;
  /** Stops listening and cuts its connections. */
  close(): Promise<void>;
}

/** What a side port answers: `GET /metrics` from `metrics`, `/healthz` and `/readyz` from `probe`, else 404. */
export interface SidePortRoutes {
  /** Answers `GET /metrics` (e.g. the Prometheus exporter's request handler). */
  readonly metrics?: (req: IncomingMessage, res: ServerResponse) => void;
  /** The serving port's probe answers (`ServingPort.probe`), so a kubelet can probe here when the serving port requires client certificates. */
  readonly probe?: (method: string | undefined, path: string) => ProbeAnswer | undefined;
}

/**
 * Opens a plain HTTP/1.1 listener for operators' tools on `listen` (port 0 picks a free one), with short
 * header and request timeouts: it serves scrapes and probes, never IDs. Rejects when it cannot listen.
 */
export function listenSidePort(listen: HostPort, routes: SidePortRoutes): Promise<SidePort> {
  const server = createServer((req, res) => {
    const path = (req.url ?? '').split('?', 1)[0] ?? '';
    if (routes.metrics !== undefined && req.method === 'GET' && path === '/metrics') return routes.metrics(req, res);
    const answer = routes.probe?.(req.method, path);
    if (answer !== undefined) {
      res.writeHead(answer.status, answer.headers).end(req.method === 'HEAD' ? undefined : answer.body);
      return;
    }
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: try /metrics, /healthz or /readyz\n');
  });
  server.requestTimeout = 10_000;
  server.headersTimeout = 5_000;
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(listen.port, listen.host, () => {
      server.off('error', reject);
      const bound = server.address();
      resolve({
        address: formatHostPort(
          typeof bound === 'object' && bound !== null ? { host: bound.address, port: bound.port } : listen,
        ),
        close: () => {
          server.closeAllConnections();
          return new Promise<void>((done) => server.close(() => done()));
        },
      });
    });
  });
}
