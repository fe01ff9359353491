// Malformed requests on the real serving stack (loopback, both HTTP/2 implementations, HTTP/1.1): a bad header
// field or content-length makes that one request malformed (RFC 9113 §8.1.1, §8.2.1; RFC 9110 §8.6). Over HTTP/2
// only its stream is reset (PROTOCOL_ERROR) and the connection keeps serving; over HTTP/1.1 it is a 400 and the
// connection closes. And h2-universal.ts never lets a field the WHATWG Headers refuses throw into @idgen/h2's
// read loop (which would end the whole connection with GOAWAY INTERNAL_ERROR).
import { once } from 'node:events';
import { connect as connectHttp2, constants } from 'node:http2';
import { createServer, connect as connectTcp, type Socket } from 'node:net';
import type { UniversalServerRequest } from '@connectrpc/connect/protocol';
import type { GuardedMinter } from '@idgen/clock-guard';
import { encodeHeaders, ErrorCode, FrameType, H2Connection, HpackDecoder, PREFACE, type H2Stream } from '@idgen/h2';
import { IdGenerator } from '@idgen/proto';
import { createNextIdsFastPath, NEXT_IDS_PATH } from '../fast-path.js';
import { universalRequestFromH2Stream } from './h2-universal.js';
import type { Http2Server, ServingServer } from './contracts.js';
import { createServingServer } from './server.js';
import { createIdGeneratorService, createNextIds } from '../service.js';
import { assignedTestGuard, testServiceDeps } from '../service.test-helper.js';

const END_STREAM = 0x1;
const END_HEADERS = 0x4;

interface Frame {
  type: number;
  flags: number;
  stream: number;
  payload: Buffer;
}

function frame(type: number, flags: number, stream: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream, 5);
  return Buffer.concat([head, payload]);
}

/** Raw HTTP/2 frames over TCP (node:http2's client refuses to send malformed fields): records what comes back. */
class RawH2 {
  readonly frames: Frame[] = [];
  /** `:status` by stream, decoded as each response block arrives (in order: the HPACK table is connection state). */
  private readonly statuses = new Map<number, string | undefined>();
  private buffered = Buffer.alloc(0);
  private ended = false;
  private readonly decoder = new HpackDecoder(4096);

  private constructor(private readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.buffered = Buffer.concat([this.buffered, chunk]);
      while (this.buffered.length >= 9 && this.buffered.length >= 9 + this.buffered.readUIntBE(0, 3)) {
        const length = this.buffered.readUIntBE(0, 3);
        const f: Frame = {
          type: this.buffered[3] ?? 0,
          flags: this.buffered[4] ?? 0,
          stream: this.buffered.readUInt32BE(5) & 0x7fffffff,
          payload: Buffer.from(this.buffered.subarray(9, 9 + length)),
        };
        if (f.type === FrameType.HEADERS) {
          const fields: string[] = [];
          this.decoder.decode(f.payload, 0, f.payload.length, fields, 1 << 20, 1000);
          const at = fields.indexOf(':status');
          if (at >= 0 && !this.statuses.has(f.stream)) this.statuses.set(f.stream, fields[at + 1]);
        }
        this.frames.push(f);
        this.buffered = this.buffered.subarray(9 + length);
      }
    });
    socket.on('close', () => (this.ended = true));
    socket.on('error', () => undefined);
  }

  static async open(port: number): Promise<RawH2> {
    const socket = connectTcp(port, '127.0.0.1');
    await once(socket, 'connect');
    const client = new RawH2(socket);
    socket.write(Buffer.concat([PREFACE, frame(FrameType.SETTINGS, 0, 0)]));
    return client;
  }

  send(...bytes: Buffer[]): void {
    this.socket.write(Buffer.concat(bytes));
  }

  /** The first frame matching `match`, waiting up to 5 s. */
  async waitFor(match: (f: Frame) => boolean): Promise<Frame> {
    const deadline = Date.now() + 3_000;
    for (;;) {
      const found = this.frames.find(match);
      if (found !== undefined) return found;
      if (this.ended || Date.now() > deadline) {
        throw new Error(`no such frame; saw ${JSON.stringify(this.frames.map((f) => [f.type, f.stream]))}`);
      }
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  /** The `:status` of the response on `stream`. */
  async status(stream: number): Promise<string | undefined> {
    await this.waitFor((f) => f.type === FrameType.HEADERS && f.stream === stream);
    return this.statuses.get(stream);
  }

  async resetCode(stream: number): Promise<number> {
    return (await this.waitFor((f) => f.type === FrameType.RST_STREAM && f.stream === stream)).payload.readUInt32BE(0);
  }

  get goaway(): boolean {
    return this.frames.some((f) => f.type === FrameType.GOAWAY);
  }

  close(): void {
    this.socket.destroy();
  }
}

const request = (method: string, path: string, extra: [string, string][] = []): Buffer =>
  encodeHeaders([[':method', method], [':scheme', 'http'], [':path', path], [':authority', 'localhost'], ...extra]);
const GET_STATUS = '/idgen.v1.IdGenerator/GetStatus';
const JSON_CALL: [string, string][] = [['content-type', 'application/json']];

let guard: GuardedMinter;
beforeAll(() => {
  guard = assignedTestGuard();
});
afterAll(() => guard.close());

async function startServing(http2Server: Http2Server): Promise<{ server: ServingServer; port: number }> {
  const deps = testServiceDeps(guard);
  const server = createServingServer({
    routes: (router) => router.service(IdGenerator, createIdGeneratorService(deps)),
    ready: () => true,
    maxBodyBytes: 1024,
    requestTimeoutMs: 5000,
    http2Server,
    fastPath: createNextIdsFastPath({ nextIds: createNextIds(deps), maxBodyBytes: 1024 }),
  });
  const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
  return { server, port };
}

/**
 * One serving port for a describe block on `http2Server`, and a raw HTTP/2 connection per test (`open()`), closed
 * after it.
 */
function rawConnections(http2Server: Http2Server) {
  let serving: { server: ServingServer; port: number };
  let raw: RawH2 | undefined;
  beforeAll(async () => {
    serving = await startServing(http2Server);
  });
  afterAll(() => serving.server.close(1000));
  afterEach(() => raw?.close());
  return {
    async open(): Promise<RawH2> {
      raw = await RawH2.open(serving.port);
      return raw;
    },
    /** Stream 1 (the malformed one) is reset PROTOCOL_ERROR; `next` on stream 3 of the same connection is answered 200. */
    async expectOnlyStream1Reset(on: RawH2, next: Buffer[]): Promise<void> {
      expect(await on.resetCode(1)).toBe(ErrorCode.PROTOCOL_ERROR);
      on.send(...next);
      expect(await on.status(3)).toBe('200');
      expect(on.goaway).toBe(false);
    },
  };
}

// node:http2 (`--http2-server node`) is left out here: its nghttp2 is given an invalid-header callback by Node that
// drops such a field and serves the request without it (not what RFC 9113 §8.2.1 asks); content-length it refuses.
describe.each(['idgen'] as const)('HTTP/2 requests with a malformed field to the serving port (%s)', (http2Server) => {
  const h2 = rawConnections(http2Server);

  it('GET /healthz with a value holding CR LF: reset, not 200', async () => {
    const raw = await h2.open();
    raw.send(
      frame(FrameType.HEADERS, END_HEADERS | END_STREAM, 1, request('GET', '/healthz', [['x-a', 'a\r\nx-b: 1']])),
    );
    await h2.expectOnlyStream1Reset(raw, [
      frame(FrameType.HEADERS, END_HEADERS | END_STREAM, 3, request('GET', '/healthz')),
    ]);
  });

  it.each([
    ['a name with a space', 'x a', '1'],
    ['a colon inside a name', 'x:a', '1'],
    ['a name with an octet >= 0x80', 'x\xe9', '1'],
    ['a value with NUL', 'x-a', 'a\x00'],
  ])('a Connect call (GetStatus) with %s: that stream reset, the connection kept', async (_, name, value) => {
    const raw = await h2.open();
    const body = Buffer.from('{}');
    raw.send(
      frame(FrameType.HEADERS, END_HEADERS, 1, request('POST', GET_STATUS, [...JSON_CALL, [name, value]])),
      frame(FrameType.DATA, END_STREAM, 1, body),
    );
    await h2.expectOnlyStream1Reset(raw, [
      frame(FrameType.HEADERS, END_HEADERS, 3, request('POST', GET_STATUS, JSON_CALL)),
      frame(FrameType.DATA, END_STREAM, 3, body),
    ]);
  });

  it('a Connect call with SP around a value: answered 400 (RFC 9113 §8.2.1), the connection kept', async () => {
    const raw = await h2.open();
    const body = Buffer.from('{}');
    raw.send(
      frame(
        FrameType.HEADERS,
        END_HEADERS,
        1,
        request('POST', GET_STATUS, [...JSON_CALL, ['connect-timeout-ms', ' ']]),
      ),
      frame(FrameType.DATA, END_STREAM, 1, body),
    );
    expect(await raw.status(1)).toBe('400');
    raw.send(
      frame(FrameType.HEADERS, END_HEADERS, 3, request('POST', GET_STATUS, JSON_CALL)),
      frame(FrameType.DATA, END_STREAM, 3, body),
    );
    expect(await raw.status(3)).toBe('200');
    expect(raw.goaway).toBe(false);
  });
});

describe.each(['idgen', 'node'] as const)(
  'HTTP/2 requests with a malformed content-length to the serving port (%s)',
  (http2Server) => {
    const h2 = rawConnections(http2Server);

    it.each(['0x0b', '1e3', '+11', ''])('NextIds (fast path) with content-length %j: reset', async (length) => {
      const raw = await h2.open();
      const body = Buffer.alloc(Number(length) || 0, 0x20); // the body Number() would have matched
      raw.send(
        frame(
          FrameType.HEADERS,
          END_HEADERS,
          1,
          request('POST', NEXT_IDS_PATH, [...JSON_CALL, ['content-length', length]]),
        ),
        frame(FrameType.DATA, END_STREAM, 1, body),
      );
      const ok = Buffer.from('{"count":1}');
      await h2.expectOnlyStream1Reset(raw, [
        frame(
          FrameType.HEADERS,
          END_HEADERS,
          3,
          request('POST', NEXT_IDS_PATH, [...JSON_CALL, ['content-length', String(ok.length)]]),
        ),
        frame(FrameType.DATA, END_STREAM, 3, ok),
      ]);
    });
  },
);

describe('a malformed content-length over HTTP/1.1 (node:http, then the fast path)', () => {
  let serving: { server: ServingServer; port: number };
  beforeAll(async () => {
    serving = await startServing('idgen');
  });
  afterAll(() => serving.server.close(1000));

  it.each(['0x0b', '1e3', '+11', '', '5, 5', '-1'])(
    'content-length %j: 400 and the connection closed',
    async (length) => {
      const socket = connectTcp(serving.port, '127.0.0.1');
      await once(socket, 'connect');
      let answer = '';
      socket.on('data', (c: Buffer) => (answer += c.toString('latin1')));
      socket.write(
        `POST ${NEXT_IDS_PATH} HTTP/1.1\r\nhost: a\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n\r\n{"count":1}`,
      );
      let timer: NodeJS.Timeout | undefined;
      const closed = await Promise.race([
        once(socket, 'close').then(() => true),
        new Promise<boolean>((r) => (timer = setTimeout(() => r(false), 5_000))),
      ]);
      clearTimeout(timer);
      socket.destroy();
      expect(closed).toBe(true);
      expect(answer.split('\r\n')[0]).toBe('HTTP/1.1 400 Bad Request');
      expect(answer).not.toContain('"first"');
    },
  );
});

describe('universalRequestFromH2Stream on a field the WHATWG Headers refuses', () => {
  it('resets only that stream (PROTOCOL_ERROR), aborts its call, and the connection keeps serving', async () => {
    const closes: number[] = [];
    const requests: UniversalServerRequest[] = [];
    const errors: Error[] = [];
    // A real @idgen/h2 connection handing its streams to h2-universal.ts the way http.ts does (onend, then onclose).
    const server = createServer((socket) => {
      socket.on('error', () => undefined);
      new H2Connection(
        socket,
        (stream: H2Stream) => {
          stream.onend = () => {
            // Past @idgen/h2's checks on purpose: only a field that got through can reach new Headers().
            if (stream.path === '/bad') (stream.headers as Record<string, string>)['x-bad'] = 'a\r\nb';
            const { request } = universalRequestFromH2Stream(stream, 1024);
            requests.push(request);
            stream.onclose = (code) => closes.push(code);
            if (stream.path === '/ok') {
              stream.respond(200, { 'content-length': 0 }, true);
            }
          };
        },
        { onError: (e) => errors.push(e) },
      );
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const address = server.address();
    if (address === null || typeof address === 'string') throw new Error('no port');
    const session = connectHttp2(`http://127.0.0.1:${address.port}`);
    session.on('error', () => undefined);
    try {
      const bad = session.request({ ':method': 'GET', ':path': '/bad' });
      const rstCode = await new Promise<number>((resolve) => {
        bad.on('close', () => resolve(bad.rstCode ?? -1));
        bad.on('error', () => undefined);
        bad.resume();
      });
      expect(rstCode).toBe(constants.NGHTTP2_PROTOCOL_ERROR);
      expect(closes).toEqual([ErrorCode.PROTOCOL_ERROR]);
      expect(requests[0]?.signal.aborted).toBe(true);
      const ok = session.request({ ':method': 'GET', ':path': '/ok' });
      const [headers] = (await once(ok, 'response')) as [Record<string, string | number>];
      expect(headers[':status']).toBe(200);
      expect(session.destroyed).toBe(false);
      expect(errors).toEqual([]); // no connection error: nothing reached the read loop
    } finally {
      session.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
