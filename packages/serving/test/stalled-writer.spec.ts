// HTTP/1.1 clients that do not read their answers (a slowloris must not hold a connection), on the real serving
// stack in this process. One that keeps sending RPCs (never more than the pipelining bound at a time) is cut by the request deadline of the calls
// waiting behind the unread answers (or node:http's on the request it stopped parsing: the 400 it used to be sent
// waited forever behind the unread answers, held > 150 s); one that sent probe requests, answered at once and so
// under no request deadline, and reads nothing is cut once the server has had output waiting that it took nothing
// of for STALLED_WRITER_MS; a client that reads the same answers is kept.
import { connect as netConnect } from 'node:net';
import { IdGenerator } from '@idgen/proto';
import type { ServingServer } from '../src/transport/contracts.js';
import { MAX_PIPELINED_PER_TURN } from '../src/transport/front-http1.js';
import { STALLED_WRITER_MS, createServingServer } from '../src/transport/server.js';

jest.setTimeout(60_000);

/** NextIds answers of ~130 KB (4,096 blocks), so a client that does not read fills its buffers fast. */
const BLOCKS = Array.from({ length: 4_096 }, (_, i) => ({ first: BigInt(1_000_000 + i * 2), count: 1 }));
const PAD = 'x'.repeat(1_000_000);
const REQUEST =
  'POST /idgen.v1.IdGenerator/NextIds HTTP/1.1\r\nhost: a\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"count":1}';

let server: ServingServer;
let port: number;
const refusals: string[] = [];

beforeAll(async () => {
  server = createServingServer({
    routes: (router) => router.rpc(IdGenerator.method.nextIds, () => ({ blocks: BLOCKS })),
    ready: () => true,
    maxBodyBytes: 1024,
    requestTimeoutMs: 5_000,
    // /readyz answers of ~1 MB: a few fill a client's buffers.
    readyDetail: () => ({ pad: PAD }),
    onRefusal: (reason) => refusals.push(reason),
  });
  port = (await server.listen({ host: '127.0.0.1', port: 0 })).port;
});
afterAll(() => server.close(1_000));

/**
 * One connection for up to `ms` sending a batch of 4 small requests every 100 ms; `read` says whether it reads the
 * answers. Resolves with whether the server closed it, and the answer bytes it read.
 */
function client(read: boolean, ms: number): Promise<{ closedByServer: boolean; bytesRead: number }> {
  return new Promise((resolve) => {
    const socket = netConnect(port, '127.0.0.1');
    let bytesRead = 0;
    if (read) socket.on('data', (d: Buffer) => (bytesRead += d.length));
    else socket.pause();
    const batch = REQUEST.repeat(4);
    const timer = setInterval(() => {
      if (!socket.destroyed) socket.write(batch, () => undefined);
    }, 100);
    const stop = setTimeout(() => finish(false), ms);
    let done = false;
    function finish(closedByServer: boolean): void {
      if (done) return;
      done = true;
      clearInterval(timer);
      clearTimeout(stop);
      socket.destroy();
      resolve({ closedByServer, bytesRead });
    }
    socket.on('error', () => finish(true));
    socket.on('close', () => finish(true));
  });
}

describe('HTTP/1.1 stalled writers', () => {
  it('a client that keeps sending requests and never reads the answers is cut (request deadline), not for pipelining', async () => {
    expect(4).toBeLessThan(MAX_PIPELINED_PER_TURN);
    refusals.length = 0;
    const result = await client(false, 30_000);
    expect(result.closedByServer).toBe(true);
    expect(refusals).not.toContain('http1-pipelining');
  });

  it('a client that sent probe requests (no request deadline) and reads nothing is cut as a stalled writer', async () => {
    refusals.length = 0;
    // A paused socket with nothing left to write does not see the server go: look from the server's side, then read.
    const socket = netConnect(port, '127.0.0.1');
    socket.pause();
    socket.on('error', () => undefined);
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.write('GET /readyz HTTP/1.1\r\nhost: a\r\n\r\n'.repeat(16));
    try {
      const until = Date.now() + STALLED_WRITER_MS + 20_000;
      while (refusals.length === 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 200));
      expect(refusals).toEqual(['stalled-writer']);
      socket.resume();
      socket.on('data', () => undefined);
      await closed;
    } finally {
      socket.destroy();
    }
  });

  it('a client that reads the same answers is kept', async () => {
    refusals.length = 0;
    const result = await client(true, STALLED_WRITER_MS + 2_000);
    expect(result.closedByServer).toBe(false);
    expect(result.bytesRead).toBeGreaterThan(1_000_000);
    expect(refusals).toEqual([]);
  });
});
