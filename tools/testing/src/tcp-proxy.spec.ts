import { once } from 'node:events';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { cleanupAll } from './registry.js';
import { createTcpProxy, type TcpProxy } from './tcp-proxy.js';

jest.setTimeout(30_000);

/** A real echo server on loopback that counts the bytes it received. */
interface Echo {
  readonly server: Server;
  readonly address: string;
  received: number;
  connections: number;
}

let echo: Echo;
const sockets: Socket[] = [];

beforeAll(async () => {
  const e: Echo = { server: createServer(), address: '', received: 0, connections: 0 };
  e.server.on('connection', (s) => {
    e.connections++;
    s.on('error', () => undefined);
    s.on('data', (chunk: Buffer) => {
      e.received += chunk.length;
      s.write(chunk);
    });
  });
  e.server.listen(0, '127.0.0.1');
  await once(e.server, 'listening');
  const a = e.server.address();
  if (a === null || typeof a === 'string') throw new Error('no address');
  echo = Object.assign(e, { address: `127.0.0.1:${a.port}` });
});

afterEach(() => {
  for (const s of sockets.splice(0)) s.destroy();
});

afterAll(async () => {
  await cleanupAll();
  await new Promise<void>((r) => echo.server.close(() => r()));
});

/** A client connection through `proxy`, collecting what comes back. */
async function dial(proxy: TcpProxy): Promise<{ socket: Socket; data: () => string; closed: Promise<void> }> {
  const socket = connect({ host: '127.0.0.1', port: proxy.port });
  sockets.push(socket);
  let text = '';
  socket.on('data', (c: Buffer) => (text += c.toString('latin1')));
  socket.on('error', () => undefined);
  const closed = new Promise<void>((r) => socket.once('close', () => r()));
  await once(socket, 'connect');
  return { socket, data: () => text, closed };
}

/** Resolves once `read()` returns `want` (the echo came back); bounded by the test timeout. */
async function until(read: () => string, want: string): Promise<void> {
  while (read() !== want) await new Promise((r) => setTimeout(r, 5));
}

describe('createTcpProxy', () => {
  it('forwards both ways to its target', async () => {
    const proxy = await createTcpProxy({ target: echo.address });
    expect(proxy.address).toBe(`127.0.0.1:${proxy.port}`);
    const c = await dial(proxy);
    c.socket.write('hello');
    await until(c.data, 'hello');
    expect(proxy.connections()).toBe(1);
    expect(proxy.accepted()).toBe(1);
    c.socket.end();
    await c.closed;
    await proxy.close();
  });

  it('cut (blackhole): nothing gets through either way, new connections hear nothing; restore closes them and forwards again', async () => {
    const proxy = await createTcpProxy({ target: echo.address });
    const before = await dial(proxy);
    before.socket.write('a');
    await until(before.data, 'a');
    const receivedBefore = echo.received;

    proxy.cut();
    expect(proxy.isCut).toBe(true);
    before.socket.write('lost');
    const during = await dial(proxy); // accepted: a partition does not refuse, it stays silent
    during.socket.write('also lost');
    // Let the bytes reach the proxy: they go nowhere (the target never sees them, nothing comes back).
    await new Promise((r) => setTimeout(r, 300));
    expect(echo.received).toBe(receivedBefore);
    expect(before.data()).toBe('a');
    expect(during.data()).toBe('');
    expect(proxy.connections()).toBe(2);

    proxy.restore();
    expect(proxy.isCut).toBe(false);
    // Connections that lived through the cut have a gap in their byte stream: closed, so the client reconnects.
    await Promise.all([before.closed, during.closed]);
    const after = await dial(proxy);
    after.socket.write('back');
    await until(after.data, 'back');
    expect(echo.received).toBe(receivedBefore + 'back'.length);
    await proxy.close();
  });

  it('cutAfterSending: the chunk with the bytes reaches the target, then the link is cut (its answer is lost)', async () => {
    const proxy = await createTcpProxy({ target: echo.address });
    const c = await dial(proxy);
    c.socket.write('first');
    await until(c.data, 'first');
    const receivedBefore = echo.received;
    const cut = proxy.cutAfterSending('MARK');
    expect(() => void proxy.cutAfterSending('')).toThrow(RangeError);
    c.socket.write('request-MA');
    c.socket.write('RK-end'); // the bytes may span two chunks
    await cut;
    expect(proxy.isCut).toBe(true);
    // The target got the request up to and including the chunk that completed the bytes, and echoed it into the cut.
    const end = performance.now() + 10_000;
    while (echo.received < receivedBefore + 'request-MARK-end'.length && performance.now() < end)
      await new Promise((r) => setTimeout(r, 5));
    expect(echo.received).toBe(receivedBefore + 'request-MARK-end'.length);
    c.socket.write('after the cut');
    await new Promise((r) => setTimeout(r, 200));
    expect(echo.received).toBe(receivedBefore + 'request-MARK-end'.length);
    // The echo of the chunk that completed the bytes never came back (the one before it may have, if apart).
    expect(['first', 'firstrequest-MA']).toContain(c.data());
    proxy.restore();
    await c.closed;
    await proxy.close();
  });

  it('cut (reset): open connections are reset, new ones are closed on arrival, until restored', async () => {
    const proxy = await createTcpProxy({ target: echo.address });
    const before = await dial(proxy);
    before.socket.write('x');
    await until(before.data, 'x');
    proxy.cut('reset');
    await before.closed;
    const during = connect({ host: '127.0.0.1', port: proxy.port });
    sockets.push(during);
    during.on('error', () => undefined);
    await new Promise((r) => during.once('close', r)); // an ECONNRESET or a plain close: either way, closed
    expect(proxy.connections()).toBe(0);
    proxy.restore();
    const after = await dial(proxy);
    after.socket.write('ok');
    await until(after.data, 'ok');
    await proxy.close();
  });

  it('latency: each chunk is held that long each way, in order; 0 forwards at once again', async () => {
    const proxy = await createTcpProxy({ target: echo.address, latencyMs: 150 });
    expect(proxy.latencyMs).toBe(150);
    const c = await dial(proxy);
    const t0 = performance.now();
    c.socket.write('ping');
    await until(c.data, 'ping');
    // A lower bound only: the echo cannot come back before both delays have passed.
    expect(performance.now() - t0).toBeGreaterThanOrEqual(2 * 150 - 1);

    // Many chunks, written while the delay changes: they arrive complete and in order.
    const parts = Array.from({ length: 50 }, (_, i) => `<${i}>`);
    proxy.setLatency(40);
    for (const [i, p] of parts.entries()) {
      if (i === 25) proxy.setLatency(5);
      c.socket.write(p);
      await new Promise((r) => setImmediate(r));
    }
    await until(c.data, `ping${parts.join('')}`);

    proxy.setLatency(0);
    expect(proxy.latencyMs).toBe(0);
    c.socket.write('!');
    await until(c.data, `ping${parts.join('')}!`);
    expect(() => proxy.setLatency(-1)).toThrow(RangeError);
    await proxy.close();
    await c.closed;
  });

  it('a closed target closes the client connection; a bad target is refused', async () => {
    const down = createServer();
    down.listen(0, '127.0.0.1');
    await once(down, 'listening');
    const port = (down.address() as { port: number }).port;
    await new Promise<void>((r) => down.close(() => r()));
    const proxy = await createTcpProxy({ target: `127.0.0.1:${port}` });
    const c = await dial(proxy);
    await c.closed;
    await proxy.close();
    await expect(createTcpProxy({ target: 'nowhere' })).rejects.toThrow(RangeError);
  });
});
