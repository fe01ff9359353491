/**
 * The ceiling of the serving stack for `bench:server`: a bare `node:http2` server (h2c) that reads each
 * request body and answers with a fixed body, nothing else. Started as a child process by the benchmark,
 * like the real server, so both are loaded the same way. Uses the core `stream` API (the cheapest way to
 * answer in `node:http2`), so the figure is the stack's ceiling, not a framework's.
 *
 * Usage: `node bare-http2-server.js <port> <hex body> [stream-table]`; prints `listening <port>` when ready.
 * With `stream-table`, each session gets the GC work-around idgen-server runs (`installStreamTable` of `@idgen/serving`):
 * the like-for-like floor for idgen's tail latency.
 */
import { constants, createServer } from 'node:http2';
import { installStreamTable } from '@idgen/serving';
import { baselineArgs, serveBaseline } from './baseline-server.js';

function main(): void {
  const { port, body, extra } = baselineArgs('bare-http2-server <port> <hex body> [stream-table]');
  const streamTable = extra === 'stream-table';
  const server = createServer({ settings: { maxConcurrentStreams: 128 } });
  if (streamTable) {
    server.on('session', (session) => {
      const result = installStreamTable(session);
      if (!result.installed) {
        process.stderr.write(`bare-http2-server: stream table not installed: ${result.why}\n`);
        process.exit(1);
      }
    });
  }
  server.on('stream', (stream) => {
    stream.on('data', () => {
      // the request body is read and dropped: the answer is fixed
    });
    stream.on('end', () => {
      stream.respond({
        [constants.HTTP2_HEADER_STATUS]: 200,
        [constants.HTTP2_HEADER_CONTENT_TYPE]: 'application/proto',
      });
      stream.end(body);
    });
    stream.on('error', () => {
      // a load generator that goes away mid-stream is not an error of the ceiling
    });
  });
  serveBaseline(server, port);
}

main();
