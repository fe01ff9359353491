import * as http2 from 'node:http2';
import type { AddressInfo, Socket } from 'node:net';
import { Code, ConnectError, type ConnectRouter } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { IdGenerator } from '@idgen/proto';
import { freePort } from '@idgen/testing';
import { createConnectTransport, type ClientProtocol } from './connect-transport.js';
import { classifyFailure } from './transport.js';

// The real transport over real HTTP/2 sockets, against a minimal in-test Connect handler whose
// failures can be chosen (the generator node itself is exercised by the suites under test/).
type Mode = 'ok' | 'unavailable' | 'invalid' | 'hang' | 'reset';

let mode: Mode = 'ok';
let server: http2.Http2Server;
let url: string;
const sockets = new Set<Socket>();

beforeAll(async () => {
  const routes = (router: ConnectRouter): void => {
    router.service(IdGenerator, {
      async nextIds(req, ctx) {
        switch (mode) {
          case 'unavailable':
            throw new ConnectError('fenced: lease', Code.Unavailable);
          case 'invalid':
            throw new ConnectError(`count must be from 1 to 4096, got ${req.count}`, Code.InvalidArgument);
          case 'hang':
            await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve));
            throw new ConnectError('gone', Code.Canceled);
          case 'reset':
            for (const s of sockets) s.destroy();
            await new Promise((resolve) => setTimeout(resolve, 50));
            throw new ConnectError('gone', Code.Canceled);
          default:
            return { blocks: [{ first: 1000n, count: req.count }] };
        }
      },
      getStatus() {
        return {};
      },
    });
  };
  server = http2.createServer(connectNodeAdapter({ routes }));
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  for (const s of sockets) s.destroy();
  await new Promise((resolve) => server.close(resolve));
});

async function call(protocol: ClientProtocol, count = 5, timeoutMs = 2000, target = url) {
  const transport = createConnectTransport({ url: target, region: 0 }, { protocol });
  try {
    return await transport.nextIds(count, { signal: new AbortController().signal, timeoutMs });
  } finally {
    transport.close();
  }
}

async function failure(protocol: ClientProtocol, timeoutMs = 2000, target = url) {
  const e = await call(protocol, 5, timeoutMs, target).then(
    () => new Error('expected a failure'),
    (e: unknown) => e,
  );
  return classifyFailure(e);
}

describe.each<ClientProtocol>(['connect', 'grpc'])('createConnectTransport over %s', (protocol) => {
  beforeEach(() => {
    mode = 'ok';
  });

  it('fetches blocks as bigint first and count', async () => {
    expect(await call(protocol, 7)).toEqual([expect.objectContaining({ first: 1000n, count: 7 })]);
  });

  it('UNAVAILABLE is a node failure', async () => {
    mode = 'unavailable';
    expect(await failure(protocol)).toMatchObject({ kind: 'node', code: 'unavailable', message: 'fenced: lease' });
  });

  it('INVALID_ARGUMENT is a request failure', async () => {
    mode = 'invalid';
    expect(await failure(protocol)).toMatchObject({ kind: 'request', code: 'invalid_argument' });
  });

  it('a refused connection is a node failure', async () => {
    const closedPort = await freePort();
    expect(await failure(protocol, 2000, `http://127.0.0.1:${closedPort}`)).toMatchObject({
      kind: 'node',
      code: 'unavailable',
    });
  });

  it('a node that does not answer within the timeout is a node failure', async () => {
    mode = 'hang';
    expect(await failure(protocol, 200)).toMatchObject({ kind: 'node', code: 'deadline_exceeded' });
  });

  it('a connection reset mid-call is a node failure', async () => {
    mode = 'reset';
    // The in-test handler logs its own broken stream; that is the point of this test, not noise to show.
    const quiet = jest.spyOn(console, 'error').mockImplementation(() => undefined);
    try {
      expect((await failure(protocol)).kind).toBe('node');
      await new Promise((resolve) => setTimeout(resolve, 100));
    } finally {
      quiet.mockRestore();
    }
  });
});
