import {
  connect as connectHttp2,
  type ClientHttp2Session,
  type IncomingHttpHeaders,
  type OutgoingHttpHeaders,
} from 'node:http2';
import { connect as connectTcp } from 'node:net';
import type { GuardedMinter } from '@idgen/clock-guard';
import { fromJsonString } from '@bufbuild/protobuf';
import { IdGenerator, NextIdsRequestSchema } from '@idgen/proto';
import { NEXT_IDS_PATH, createNextIdsFastPath } from '../fast-path.js';
import type { Http2Server, ServingServer, ServingServerOptions } from './contracts.js';
import { MAX_PIPELINED_PER_TURN, headerEnds } from './front-http1.js';
import { createServingServer } from './server.js';
import { createIdGeneratorService, createNextIds } from '../service.js';
import { assignedTestGuard, testServiceDeps } from '../service.test-helper.js';

// The same NextIds answered four ways on the real serving stack (loopback, real guard): through connect-es on
// node:http2 (the reference), through the fast path on node:http2, and both again on @idgen/h2 (for HTTP/1.1
// the two node:http2 servers and the two @idgen/h2 servers are the same node:http server). Callers must not
// be able to tell them apart (fast-path.ts).
let guard: GuardedMinter;
let servers: { name: string; server: ServingServer; base: string }[] = [];
let ready = true;
/** Calls the fast path answered (its `record` hook): the servers without it must leave this alone. */
let fastCalls = 0;

beforeAll(async () => {
  guard = assignedTestGuard();
  const deps = testServiceDeps(guard);
  const fast = createNextIdsFastPath({ nextIds: createNextIds(deps), maxBodyBytes: 1024, record: () => fastCalls++ });
  const variants: [string, Http2Server, boolean][] = [
    ['connect-es on node:http2', 'node', false],
    ['fast path on node:http2', 'node', true],
    ['connect-es on @idgen/h2', 'idgen', false],
    ['fast path on @idgen/h2', 'idgen', true],
  ];
  for (const [name, http2Server, withFastPath] of variants) {
    const server = createServingServer({
      routes: (router) => router.service(IdGenerator, createIdGeneratorService(deps)),
      ready: () => ready,
      maxBodyBytes: 1024,
      requestTimeoutMs: 2000,
      http2Server,
      ...(withFastPath ? { fastPath: fast } : {}),
    });
    const bound = await server.listen({ host: '127.0.0.1', port: 0 });
    servers.push({ name, server, base: `http://127.0.0.1:${bound.port}` });
  }
});

afterAll(async () => {
  await Promise.all(servers.map((s) => s.server.close(1000)));
  servers = [];
  guard.close();
});

/** Replaces the IDs in a body so two answers minted at different times compare equal. */
const masked = (text: string): string => text.replace(/"first":"\d+"/g, '"first":"<id>"');

async function post(
  base: string,
  body: string | Uint8Array,
  type: string,
): Promise<{ status: number; type: string | null; text: string; bytes: number }> {
  const res = await fetch(`${base}${NEXT_IDS_PATH}`, { method: 'POST', headers: { 'content-type': type }, body });
  const buf = Buffer.from(await res.arrayBuffer());
  return {
    status: res.status,
    type: res.headers.get('content-type'),
    text: masked(buf.toString('latin1')),
    bytes: buf.length,
  };
}

/** What a client sees of one HTTP/2 exchange on `session`: response headers, trailers and body. */
function exchange(
  session: ClientHttp2Session,
  headers: OutgoingHttpHeaders,
  body?: Uint8Array,
): Promise<{ headers: IncomingHttpHeaders; trailers: IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const stream = session.request(headers, { endStream: body === undefined });
    let answer: IncomingHttpHeaders = {};
    let trailers: IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    stream.on('response', (h) => (answer = h));
    stream.on('trailers', (t) => (trailers = t));
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('error', reject);
    stream.on('close', () => resolve({ headers: answer, trailers, body: Buffer.concat(chunks) }));
    if (body !== undefined) stream.end(body);
  });
}

/** {@link exchange} on a session of its own to `base` (h2c), closed after the answer. */
async function h2call(base: string, headers: OutgoingHttpHeaders, body?: Uint8Array): ReturnType<typeof exchange> {
  const session = connectHttp2(base);
  try {
    return await new Promise((resolve, reject) => {
      session.on('error', reject);
      exchange(session, headers, body).then(resolve, reject);
    });
  } finally {
    session.close();
  }
}

async function grpc(
  base: string,
  payload: Uint8Array,
): Promise<{ headers: Record<string, unknown>; trailers: Record<string, unknown>; body: Buffer }> {
  const answer = await h2call(
    base,
    { ':method': 'POST', ':path': NEXT_IDS_PATH, 'content-type': 'application/grpc', te: 'trailers' },
    grpcFrameOf(payload),
  );
  const h = answer.headers;
  return {
    headers: { status: h[':status'], 'content-type': h['content-type'], 'grpc-status': h['grpc-status'] },
    trailers: { 'grpc-status': answer.trailers['grpc-status'] },
    body: answer.body,
  };
}

describe('the NextIds fast path answers exactly as connect-es does', () => {
  it.each([
    ['count 3 as JSON', '{"count":3}', 'application/json'],
    ['count 3 as JSON with charset', '{"count":3}', 'application/json; charset=utf-8'],
    ['count 0', '{}', 'application/json'],
    ['count above the maximum', '{"count":101}', 'application/json'],
    ['a wrong field type', '{"count":"x"}', 'application/json'],
    ['an unknown field (refused)', '{"count":1,"future":true}', 'application/json'],
    ['a misspelt field (refused, not read as count 0)', '{"cnt":3}', 'application/json'],
    ['a body above the limit', `{"count":1,"pad":"${'x'.repeat(2000)}"}`, 'application/json'],
  ])('%s', async (_what, body, type) => {
    const [a, ...rest] = await Promise.all(servers.map((s) => post(s.base, body, type)));
    for (const b of rest) expect(b).toEqual(a);
  });

  it("refuses a key NextIdsRequest does not have as protobuf-es's JSON reader does, on both paths", async () => {
    let reader = '';
    try {
      fromJsonString(NextIdsRequestSchema, '{"cnt":3}');
    } catch (e) {
      reader = (e as Error).message;
    }
    expect(reader).toContain('"cnt"');
    for (const s of servers) {
      const r = await post(s.base, '{"cnt":3}', 'application/json');
      expect({ server: s.name, status: r.status, body: JSON.parse(r.text) as unknown }).toEqual({
        server: s.name,
        status: 400,
        body: { code: 'invalid_argument', message: reader },
      });
    }
  });

  it.each([
    ['count 7 as protobuf', new Uint8Array([0x08, 0x07])],
    ['count 100 as protobuf', new Uint8Array([0x08, 0x64])],
    ['an undecodable body', new Uint8Array([0x0a, 0xff, 0xff])],
  ])('%s', async (_what, body) => {
    const [a, ...rest] = await Promise.all(servers.map((s) => post(s.base, body, 'application/proto')));
    for (const b of rest) {
      expect({ ...b, text: '' }).toEqual({ ...a, text: '' });
      if ((a?.status ?? 0) !== 200) expect(b.text).toEqual(a?.text);
    }
  });

  it.each([
    ['count 5', new Uint8Array([0x08, 0x05])],
    ['count 0', new Uint8Array([])],
    ['an undecodable message', new Uint8Array([0x0a, 0xff])],
  ])('over gRPC: %s', async (_what, payload) => {
    const [a, ...rest] = await Promise.all(servers.map((s) => grpc(s.base, payload)));
    // An error may come as trailers-only (fast path) or as headers then trailers (connect-es): both are
    // gRPC; what a client sees is the status wherever it travels.
    const seen = (r: typeof a) => ({
      status: r?.headers['status'],
      contentType: r?.headers['content-type'],
      grpcStatus: r?.trailers['grpc-status'] ?? r?.headers['grpc-status'],
      bodyBytes: r?.body.length,
    });
    for (const b of rest) expect(seen(b)).toEqual(seen(a));
  });
});

/** One request over HTTP/2 (h2c), what a client sees of it: status, content type, gRPC status wherever it travels, body. */
async function h2request(
  base: string,
  headers: Record<string, string>,
  body: Uint8Array,
): Promise<{ status: unknown; type: unknown; grpcStatus: unknown; text: string }> {
  const answer = await h2call(base, { ':method': 'POST', ':path': NEXT_IDS_PATH, ...headers }, body);
  return {
    status: answer.headers[':status'],
    type: answer.headers['content-type'],
    grpcStatus: answer.trailers['grpc-status'] ?? answer.headers['grpc-status'],
    text: masked(answer.body.toString('latin1')),
  };
}

describe('which path answers', () => {
  it.each([
    ['Connect JSON over HTTP/1.1', (base: string) => post(base, '{"count":2}', 'application/json')],
    [
      'Connect proto over HTTP/2',
      (base: string) => h2request(base, { 'content-type': 'application/proto' }, new Uint8Array([0x08, 0x02])),
    ],
    ['gRPC over HTTP/2', (base: string) => grpc(base, new Uint8Array([0x08, 0x02]))],
  ])('%s: the fast path on both HTTP/2 servers, connect-es on the others', async (_what, call) => {
    for (const s of servers) {
      const before = fastCalls;
      await call(s.base);
      expect({ server: s.name, fast: fastCalls - before }).toEqual({
        server: s.name,
        fast: s.name.startsWith('fast path') ? 1 : 0,
      });
    }
  });
});

describe('over HTTP/2 the fast path and @idgen/h2 answer exactly as connect-es on node:http2 does', () => {
  const big = `{"count":1,"pad":"${'x'.repeat(2000)}"}`;
  it.each([
    ['Connect JSON, count 3', { 'content-type': 'application/json' }, '{"count":3}'],
    ['Connect JSON, count above the maximum', { 'content-type': 'application/json' }, '{"count":101}'],
    ['Connect JSON, a wrong field type', { 'content-type': 'application/json' }, '{"count":"x"}'],
    ['Connect JSON, a body above the limit', { 'content-type': 'application/json' }, big],
    [
      'Connect JSON, a body above the limit it declared',
      { 'content-type': 'application/json', 'content-length': String(big.length) },
      big,
    ],
    ['Connect proto, count 0', { 'content-type': 'application/proto' }, new Uint8Array([])],
    ['Connect proto, an undecodable body', { 'content-type': 'application/proto' }, new Uint8Array([0x0a, 0xff, 0xff])],
    [
      'gRPC, a message above the limit',
      { 'content-type': 'application/grpc', te: 'trailers' },
      grpcFrameOf(new Uint8Array(1995)),
    ],
    [
      'gRPC, a truncated message',
      { 'content-type': 'application/grpc', te: 'trailers' },
      Buffer.from([0, 0, 0, 0, 9, 0x08]),
    ],
  ])('%s', async (_what, headers, body) => {
    const bytes = typeof body === 'string' ? Buffer.from(body) : body;
    const [a, ...rest] = await Promise.all(servers.map((s) => h2request(s.base, headers, bytes)));
    for (const b of rest) expect(b).toEqual(a);
  });

  it('Connect proto, count 7: the same IDs shape (10 bytes of ID, count 7)', async () => {
    const [a, ...rest] = await Promise.all(
      servers.map((s) => h2request(s.base, { 'content-type': 'application/proto' }, new Uint8Array([0x08, 0x07]))),
    );
    expect(a?.status).toBe(200);
    for (const b of rest) expect({ ...b, text: b.text.length }).toEqual({ ...a, text: a?.text.length });
  });
});

describe.each(['idgen', 'node'] as const)(
  'fast-path HTTP/2 streams on --http2-server %s: deadlines, resets and in-flight accounting',
  (http2Server) => {
    it('a stream whose body never ends is cancelled at the request deadline, counted, and the node serves on', async () => {
      let timeouts = 0;
      const { server, port } = await startFastPathServer({
        http2Server,
        requestTimeoutMs: 300,
        onRequestTimeout: () => timeouts++,
      });
      const session = connectHttp2(`http://127.0.0.1:${port}`);
      try {
        const stream = session.request({
          ':method': 'POST',
          ':path': NEXT_IDS_PATH,
          'content-type': 'application/grpc',
          te: 'trailers',
        });
        stream.write(Buffer.from([0, 0, 0, 0, 2])); // a frame header, then nothing: the body never ends
        const t0 = Date.now();
        const code = await new Promise<number>((resolve) => stream.on('close', () => resolve(stream.rstCode ?? -1)));
        const waited = Date.now() - t0;
        expect(code).toBe(8); // RST_STREAM CANCEL
        expect(waited).toBeGreaterThanOrEqual(250);
        expect(timeouts).toBe(1);
        expect(server.inFlight()).toBe(0);
        const answer = await h2request(
          `http://127.0.0.1:${port}`,
          { 'content-type': 'application/proto' },
          new Uint8Array([0x08, 0x02]),
        );
        expect(answer.status).toBe(200);
      } finally {
        session.destroy();
        await server.close(1000);
      }
    });

    it('a caller that resets its stream mid-body or right after sending it leaves nothing in flight and nothing thrown', async () => {
      const errors: unknown[] = [];
      const streamErrors: string[] = [];
      const { server, port } = await startFastPathServer({
        http2Server,
        onHandlerError: (e) => errors.push(e),
        onConnectionError: (e) => streamErrors.push(e.message),
      });
      const session = connectHttp2(`http://127.0.0.1:${port}`);
      try {
        const closes: Promise<void>[] = [];
        for (let i = 0; i < 50; i++) {
          const stream = session.request({
            ':method': 'POST',
            ':path': NEXT_IDS_PATH,
            'content-type': 'application/grpc',
            te: 'trailers',
          });
          stream.on('error', () => undefined);
          closes.push(new Promise((resolve) => stream.on('close', () => resolve())));
          // CANCEL (8) is how clients abort; any other code (2: INTERNAL_ERROR) makes node:http2 emit 'error'
          // on the server's stream, which would crash a process with no listener for it (@idgen/h2 has no such
          // event: a reset is the stream's onclose with its code).
          const code = i % 4 < 2 ? 8 : 2;
          if (i % 2 === 0) {
            stream.write(Buffer.from([0, 0, 0, 0, 2, 0x08]));
            stream.close(code);
          } else {
            stream.end(Buffer.from([0, 0, 0, 0, 2, 0x08, 0x01]));
            setImmediate(() => stream.close(code));
          }
        }
        await Promise.all(closes);
        const deadline = Date.now() + 2000;
        const expectErrors = http2Server === 'node';
        while ((server.inFlight() !== 0 || (expectErrors && streamErrors.length === 0)) && Date.now() < deadline) {
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
        expect(server.inFlight()).toBe(0);
        expect(errors).toEqual([]);
        if (expectErrors) {
          // The resets with INTERNAL_ERROR reached the stream's 'error' listener (none would be an uncaught
          // exception that ends a real process) and were reported as connection errors, not handler errors.
          expect(streamErrors.length).toBeGreaterThan(0);
          expect(new Set(streamErrors)).toEqual(new Set(['Stream closed with error code NGHTTP2_INTERNAL_ERROR']));
        } else {
          expect(streamErrors).toEqual([]);
        }
        const answer = await h2request(
          `http://127.0.0.1:${port}`,
          { 'content-type': 'application/grpc', te: 'trailers' },
          Buffer.from([0, 0, 0, 0, 2, 0x08, 0x03]),
        );
        expect(answer).toMatchObject({ status: 200, grpcStatus: '0' });
      } finally {
        session.destroy();
        await server.close(1000);
      }
    });

    it('close() waits for a fast-path request in flight, then counts none left', async () => {
      const { server, port } = await startFastPathServer({ http2Server });
      const session = connectHttp2(`http://127.0.0.1:${port}`);
      session.on('error', () => undefined);
      try {
        const stream = session.request({
          ':method': 'POST',
          ':path': NEXT_IDS_PATH,
          'content-type': 'application/grpc',
          te: 'trailers',
        });
        stream.on('error', () => undefined);
        let grpcStatus: unknown;
        stream.on('trailers', (t) => (grpcStatus = t['grpc-status']));
        const closed = new Promise((resolve) => stream.on('close', resolve));
        stream.resume();
        stream.write(Buffer.from([0, 0, 0, 0, 2, 0x08]));
        await new Promise((resolve) => setTimeout(resolve, 100));
        expect(server.inFlight()).toBe(1);
        const closing = server.close(3000);
        await new Promise((resolve) => setTimeout(resolve, 100));
        stream.end(Buffer.from([0x04])); // the rest of the message: count 4
        expect(await closing).toBe(0);
        await closed;
        expect(grpcStatus).toBe('0');
      } finally {
        session.destroy();
      }
    });
  },
);

function grpcFrameOf(message: Uint8Array): Buffer {
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  return frame;
}

/** A serving server with the fast path on a free loopback port; `extra` overrides the defaults. */
async function startFastPathServer(
  extra: Partial<ServingServerOptions>,
): Promise<{ server: ServingServer; port: number }> {
  const deps = testServiceDeps(guard);
  const server = createServingServer({
    routes: (router) => router.service(IdGenerator, createIdGeneratorService(deps)),
    ready: () => true,
    maxBodyBytes: 1024,
    requestTimeoutMs: 5000,
    fastPath: createNextIdsFastPath({ nextIds: createNextIds(deps), maxBodyBytes: 1024 }),
    ...extra,
  });
  const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
  return { server, port };
}

describe('pipelined HTTP/1.1 requests in one read', () => {
  /** Writes `n` pipelined /healthz requests in one write (one read on loopback) and reads until the server closes. */
  async function pipeline(port: number, n: number, close: boolean): Promise<number> {
    const socket = connectTcp(port, '127.0.0.1');
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (d: string) => (text += d));
    const ended = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.on('error', () => undefined);
    const one = 'GET /healthz HTTP/1.1\r\nhost: a\r\n\r\n';
    socket.write(one.repeat(n - 1) + (close ? 'GET /healthz HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n' : one));
    await ended;
    return text.split('HTTP/1.1 200').length - 1;
  }

  it('counts header ends up to a limit', () => {
    expect(headerEnds(Buffer.from('GET / HTTP/1.1\r\n\r\n'.repeat(3)), 10)).toBe(3);
    expect(headerEnds(Buffer.from('GET / HTTP/1.1\r\n\r\n'.repeat(300)), 65)).toBe(65);
    expect(headerEnds(Buffer.from('GET / HTTP/1.1\r\nhost: a\r\n'), 10)).toBe(0);
  });

  it('up to the bound: all answered; one more: refused before node:http parses it (no answer at all), counted', async () => {
    const refusals: string[] = [];
    const server = createServingServer({
      routes: () => undefined,
      ready: () => true,
      maxBodyBytes: 1024,
      requestTimeoutMs: 2000,
      onRefusal: (r) => refusals.push(r),
    });
    const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
    try {
      expect(await pipeline(port, MAX_PIPELINED_PER_TURN, true)).toBe(MAX_PIPELINED_PER_TURN);
      expect(refusals).toEqual([]);
      // Before: node:http parsed the whole read (a request and a response object each), answered 64 and cut at
      // the 65th (admitHttp1), so a flood of 64 KB reads (~1,800 requests each) was parsed in full every time.
      expect(await pipeline(port, MAX_PIPELINED_PER_TURN + 1, true)).toBe(0);
      expect(refusals).toEqual(['http1-pipelining']);
    } finally {
      await server.close(1000);
    }
  });
});

describe('the serving port', () => {
  it('puts the stream table work-around on its HTTP/2 sessions (stream-table.ts), so it never warns here', async () => {
    const unavailable: string[] = [];
    const server = createServingServer({
      routes: () => undefined,
      ready: () => true,
      maxBodyBytes: 1024,
      requestTimeoutMs: 2000,
      http2Server: 'node',
      onStreamTableUnavailable: (why) => unavailable.push(why),
    });
    const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
    const session = connectHttp2(`http://127.0.0.1:${port}`);
    try {
      const status = (await exchange(session, { ':path': '/healthz' })).headers[':status'];
      expect(status).toBe(200);
      expect(unavailable).toEqual([]);
    } finally {
      session.destroy();
      await server.close(1000);
    }
  });

  it('answers /healthz always and /readyz by readiness, GET or HEAD only', async () => {
    const base = servers[0]?.base ?? '';
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    ready = false;
    const notReady = await fetch(`${base}/readyz`);
    expect(notReady.status).toBe(503);
    expect(await notReady.json()).toEqual({ ready: false });
    ready = true;
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
    expect((await fetch(`${base}/readyz`, { method: 'POST' })).status).toBe(405);
  });

  it('answers the probes over HTTP/2 the same on both implementations: GET, HEAD, POST (405), not ready (503)', async () => {
    const probe = async (base: string, method: string, path: string) => {
      const answer = await h2call(
        base,
        { ':method': method, ':path': path },
        method === 'POST' ? Buffer.from('x') : undefined,
      );
      return { status: answer.headers[':status'], allow: answer.headers['allow'], body: answer.body.toString() };
    };
    const cases: [string, string, boolean][] = [
      ['GET', '/healthz', true],
      ['HEAD', '/readyz', true],
      ['POST', '/readyz', true],
      ['GET', '/readyz', false],
      ['GET', '/readyz?x=1', true],
    ];
    try {
      for (const [method, path, readiness] of cases) {
        ready = readiness;
        const [a, ...rest] = await Promise.all(servers.map((s) => probe(s.base, method, path)));
        expect(a?.status).toBe(method === 'POST' ? 405 : readiness ? 200 : 503);
        for (const b of rest) expect(b).toEqual(a);
      }
    } finally {
      ready = true;
    }
  });

  it.each(['idgen', 'node'] as const)(
    'on --http2-server %s, drops an HTTP/2 connection it answered with GOAWAY, keeps a live idle one',
    async (http2Server) => {
      const server = createServingServer({
        routes: () => undefined,
        ready: () => true,
        maxBodyBytes: 1024,
        requestTimeoutMs: 2000,
        http2Server,
        http2ProbeMs: 200,
      });
      const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
      const live = connectHttp2(`http://127.0.0.1:${port}`);
      try {
        // A SETTINGS frame whose length is not a multiple of 6: FRAME_SIZE_ERROR, GOAWAY, and node:http2 stops
        // reading that socket. The peer keeps it open and silent: the server must not hold it to the idle timeout.
        const dead = connectTcp(port, '127.0.0.1');
        const closed = new Promise<number>((resolve) => {
          const t0 = Date.now();
          dead.on('close', () => resolve(Date.now() - t0));
        });
        dead.on('error', () => undefined);
        dead.resume(); // read, or this end never sees the server close
        dead.write(
          Buffer.concat([
            Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'),
            Buffer.from([0, 0, 5, 4, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]),
          ]),
        );
        const ms = await closed;
        expect(ms).toBeLessThan(10_000); // the idle timeout is 60 s; the probe drops it within ~2 × 200 ms
        // The live client, idle for many probe periods, answered the PINGs and still gets answers on the same connection.
        await new Promise((resolve) => setTimeout(resolve, 1000));
        const answer = (await exchange(live, { ':path': '/healthz' })).headers[':status'];
        expect(answer).toBe(200);
        expect(live.destroyed).toBe(false);
      } finally {
        live.destroy();
        await server.close(1000);
      }
    },
  );
});
