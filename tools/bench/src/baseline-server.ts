import type { Server } from 'node:net';

/**
 * What the baseline servers of `bench:server` (bare-http2-server.ts, raw-h2-server.ts) share: their
 * arguments (`<port> <hex body> [extra]`, exit 2 with `usage` when the port is wrong) and how they run
 * (loopback, `listening <port>` on stdout when ready, exit 0 on SIGTERM or SIGINT).
 */
export function baselineArgs(usage: string): { port: number; body: Buffer; extra: string | undefined } {
  const port = Number(process.argv[2]);
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    process.stderr.write(`usage: ${usage}\n`);
    process.exit(2);
  }
  return { port, body: Buffer.from(process.argv[3] ?? '', 'hex'), extra: process.argv[4] };
}

export function serveBaseline(server: Server, port: number): void {
  server.listen(port, '127.0.0.1', () => process.stdout.write(`listening ${port}\n`));
  const stop = (): void => {
    server.close();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
