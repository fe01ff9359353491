/**
 * A byte relay between a TCP port and a Unix socket (issue 25, item 5): the netns node's only ways in and out that
 * are not the namespace network. A path-bound Unix socket is the same file in every network namespace, so a relay in
 * the root namespace and one inside a member namespace (`relay-main.ts`, started with `ip netns exec`) meet there,
 * and the root namespace gets no route, address or interface of its own. Every accepted connection gets one upstream
 * connection; when either side ends or fails, both are destroyed (a relay never holds a half-dead pair).
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

/** Where a relay listens or connects: `unix:/path` or `tcp:host:port`. */
export type Endpoint = { readonly unix: string } | { readonly host: string; readonly port: number };

/** Parses `unix:/path` or `tcp:host:port`. */
export function parseEndpoint(spec: string): Endpoint {
  if (spec.startsWith('unix:')) return { unix: spec.slice('unix:'.length) };
  const m = /^tcp:(.+):(\d+)$/.exec(spec);
  if (m === null)
    throw new RangeError(`relay endpoint must be unix:/path or tcp:host:port, got ${JSON.stringify(spec)}`);
  return { host: m[1] as string, port: Number(m[2]) };
}

export function formatEndpoint(e: Endpoint): string {
  return 'unix' in e ? `unix:${e.unix}` : `tcp:${e.host}:${e.port}`;
}

/** A running relay. */
export interface Relay {
  /** Stops listening and destroys every open pair; resolves once the listener is closed. */
  close(): Promise<void>;
}

function dial(target: Endpoint): Socket {
  return 'unix' in target ? connect({ path: target.unix }) : connect({ host: target.host, port: target.port });
}

/** Listens on `listen` and relays each connection to `target`; resolves once listening. */
export function startRelay(listen: Endpoint, target: Endpoint): Promise<Relay> {
  const open = new Set<Socket>();
  const server: Server = createServer((down) => {
    const up = dial(target);
    open.add(down);
    open.add(up);
    const end = (): void => {
      down.destroy();
      up.destroy();
      open.delete(down);
      open.delete(up);
    };
    for (const s of [down, up]) {
      s.on('error', end);
      s.on('close', end);
      if (!('unix' in target) || !('unix' in listen)) s.setNoDelay?.(true);
    }
    down.pipe(up);
    up.pipe(down);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    const ready = (): void => {
      server.off('error', reject);
      resolve({
        close: () =>
          new Promise<void>((done) => {
            for (const s of open) s.destroy();
            open.clear();
            server.close(() => done());
          }),
      });
    };
    if ('unix' in listen) server.listen({ path: listen.unix }, ready);
    else server.listen({ host: listen.host, port: listen.port }, ready);
  });
}
