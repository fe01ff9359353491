import { randomBytes } from 'node:crypto';
import {
  connect,
  constants,
  type ClientHttp2Session,
  type ClientHttp2Stream,
  type IncomingHttpHeaders,
} from 'node:http2';
import fc from 'fast-check';
import type { H2Connection, H2Stream } from './connection.js';
import { RawClient, frame, startH2Server, words } from './connection.test-helper.js';
import { ErrorCode, Flag, FrameType } from './frames.js';
import { HpackDecoder, encodeHeaders } from './hpack.js';

/** Collects a stream's request body, then calls `answer` with it. */
function withBody(stream: H2Stream, answer: (body: Buffer) => void): void {
  const chunks: Buffer[] = [];
  stream.ondata = (c) => chunks.push(Buffer.from(c));
  stream.onend = () => answer(Buffer.concat(chunks));
}

/** Echo: the body back, with the request's method, path and `x-*` headers as response headers. */
function echo(stream: H2Stream): void {
  withBody(stream, (body) => {
    const headers: Record<string, string> = { 'x-method': stream.method, 'x-path': stream.path };
    for (const [name, value] of Object.entries(stream.headers)) if (name.startsWith('x-')) headers[name] = value;
    stream.respond(200, headers);
    stream.end(body, { 'x-trailer': String(body.length) });
  });
}

interface Answer {
  headers: IncomingHttpHeaders;
  trailers: IncomingHttpHeaders;
  body: Buffer;
}

function request(client: ClientHttp2Session, headers: Record<string, string>, body?: Buffer): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req: ClientHttp2Stream = client.request(
      { ':method': body === undefined ? 'GET' : 'POST', ...headers },
      { endStream: body === undefined },
    );
    let answer: IncomingHttpHeaders = {};
    let trailers: IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    req.on('response', (h) => (answer = h));
    req.on('trailers', (t) => (trailers = t));
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve({ headers: answer, trailers, body: Buffer.concat(chunks) }));
    req.on('error', reject);
    if (body !== undefined) req.end(body);
  });
}

describe('H2Connection with node:http2 as the client', () => {
  let server: Awaited<ReturnType<typeof startH2Server>>;
  let client: ClientHttp2Session;
  beforeEach(async () => {
    server = await startH2Server(echo);
    client = connect(`http://127.0.0.1:${server.port}`);
    client.on('error', () => undefined);
  });
  afterEach(async () => {
    client.destroy();
    await server.close();
  });

  it('answers a GET and a POST with their path, headers, body and trailers', async () => {
    const get = await request(client, { ':path': '/a?b=c', 'x-one': 'first' });
    expect(get.headers[':status']).toBe(200);
    expect(get.headers['x-method']).toBe('GET');
    expect(get.headers['x-path']).toBe('/a?b=c');
    expect(get.headers['x-one']).toBe('first');
    expect(get.body.length).toBe(0);
    const post = await request(client, { ':path': '/post', 'x-two': 'second' }, Buffer.from('hello'));
    expect(post.headers['x-method']).toBe('POST');
    expect(post.body.toString()).toBe('hello');
    expect(post.trailers['x-trailer']).toBe('5');
    expect(server.errors).toEqual([]);
  });

  it('takes a body larger than its windows and sends one larger than the client’s', async () => {
    // 300 KiB up (stream window 64 KiB, connection window 1 MiB: stream WINDOW_UPDATEs needed), and back
    // down to a client whose windows are node's defaults (our sending waits for its WINDOW_UPDATEs).
    const body = randomBytes(300 * 1024);
    const answer = await request(client, { ':path': '/big' }, body);
    expect(answer.body.equals(body)).toBe(true);
    expect(answer.trailers['x-trailer']).toBe(String(body.length));
  });

  it('keeps 300 requests apart on one connection, more than its 128 concurrent streams', async () => {
    const answers = await Promise.all(
      Array.from({ length: 300 }, (_, i) =>
        request(client, { ':path': `/n/${i}`, 'x-i': String(i) }, Buffer.from(String(i))),
      ),
    );
    answers.forEach((a, i) => {
      expect(a.headers['x-path']).toBe(`/n/${i}`);
      expect(a.headers['x-i']).toBe(String(i));
      expect(a.body.toString()).toBe(String(i));
    });
  });

  it('decodes any header value nghttp2 sends (Huffman, dynamic table, evictions)', async () => {
    // nghttp2 Huffman-codes values when that is shorter and indexes them: one session carries them all, so the
    // dynamic table fills and evicts as the runs go. The server's decoded fields are compared with what was sent.
    let seen: Record<string, string> = {};
    await server.close();
    server = await startH2Server((stream) => {
      seen = { ...stream.headers };
      stream.respond(204, {}, true);
    });
    client.destroy();
    client = connect(`http://127.0.0.1:${server.port}`);
    client.on('error', () => undefined);
    const value = fc
      .array(fc.oneof(fc.integer({ min: 0x21, max: 0x7e }), fc.integer({ min: 0x80, max: 0xff }), fc.constant(0x20)), {
        maxLength: 200,
      })
      .map((codes) => String.fromCharCode(...codes).trim());
    const name = fc.stringMatching(/^x-[a-z0-9-]{1,30}$/);
    await fc.assert(
      fc.asyncProperty(fc.dictionary(name, value, { minKeys: 1, maxKeys: 8 }), async (sent) => {
        await request(client, { ':path': '/h', ...sent });
        for (const [n, v] of Object.entries(sent)) expect(seen[n]).toBe(v);
      }),
      { numRuns: 200 },
    );
  });

  it('sends a header block larger than the client’s frame size as HEADERS + CONTINUATION', async () => {
    await server.close();
    const big = 'v'.repeat(40_000); // > 16,384 (the frame size node's client accepts) twice over
    server = await startH2Server((stream) => {
      stream.respond(200, { 'x-big': big });
      stream.end(Buffer.from('ok'), { 'x-big-trailer': big });
    });
    client.destroy();
    client = connect(`http://127.0.0.1:${server.port}`, {
      maxHeaderListPairs: 10,
      settings: { maxHeaderListSize: 200_000 },
    });
    client.on('error', () => undefined);
    const answer = await request(client, { ':path': '/big-headers' });
    expect(answer.headers['x-big']).toBe(big);
    expect(answer.trailers['x-big-trailer']).toBe(big);
    expect(answer.body.toString()).toBe('ok');
  });

  it('tells the handler when the client resets a stream mid-body, and keeps serving', async () => {
    const closed: number[] = [];
    await server.close();
    server = await startH2Server((stream) => {
      stream.onclose = (code) => closed.push(code);
    });
    client.destroy();
    client = connect(`http://127.0.0.1:${server.port}`);
    client.on('error', () => undefined);
    const req = client.request({ ':method': 'POST', ':path': '/slow' });
    req.on('error', () => undefined);
    req.write(Buffer.from('part'));
    await new Promise((r) => setTimeout(r, 50));
    req.close(constants.NGHTTP2_CANCEL);
    for (let i = 0; i < 100 && closed.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(closed).toEqual([ErrorCode.CANCEL]);
    expect([...server.connections][0]?.streamCount).toBe(0);
  });
});

describe('H2Connection graceful close', () => {
  it('sends GOAWAY, lets the open stream finish, refuses newer ones, then ends the socket', async () => {
    let open: H2Stream | undefined;
    let conn: H2Connection | undefined;
    const server = await startH2Server((stream, connection) => {
      conn = connection;
      open = stream;
    });
    try {
      const raw = await RawClient.open(server.port);
      const block = encodeHeaders([
        [':method', 'POST'],
        [':scheme', 'http'],
        [':path', '/x'],
        [':authority', 'a'],
      ]);
      raw.send(frame(FrameType.HEADERS, Flag.END_HEADERS, 1, block));
      await waitUntil(() => open !== undefined);
      conn?.close();
      expect(await raw.goawayCode()).toBe(ErrorCode.NO_ERROR);
      // A stream opened after GOAWAY is refused.
      raw.send(frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 3, block));
      const refused = await raw.waitFor((f) => f.type === FrameType.RST_STREAM && f.stream === 3);
      expect(refused.payload.readUInt32BE(0)).toBe(ErrorCode.REFUSED_STREAM);
      expect(raw.ended).toBe(false);
      open?.respond(200, {});
      open?.end(Buffer.from('done'));
      await raw.waitFor((f) => f.type === FrameType.DATA && f.stream === 1 && (f.flags & Flag.END_STREAM) !== 0);
      await raw.waitEnd();
    } finally {
      await server.close();
    }
  });
});

async function waitUntil(cond: () => boolean, ms = 2_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

const REQUEST = encodeHeaders([
  [':method', 'GET'],
  [':scheme', 'http'],
  [':path', '/'],
  [':authority', 'a'],
]);

describe('H2Connection refuses what RFC 9113 says to refuse', () => {
  let server: Awaited<ReturnType<typeof startH2Server>>;
  let raw: RawClient;
  beforeEach(async () => {
    server = await startH2Server(
      (stream) => {
        stream.onend = () => {
          stream.respond(200, { 'content-length': 0 }, true);
        };
      },
      { maxConcurrentStreams: 2 },
    );
  });
  afterEach(async () => {
    raw?.close();
    await server.close();
  });

  const connectionErrors: [string, () => Buffer[], number][] = [
    ['a bad preface', () => [Buffer.from('PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n')], ErrorCode.PROTOCOL_ERROR],
    [
      'a first frame other than SETTINGS',
      () => [frame(FrameType.PING, 0, 0, Buffer.alloc(8))],
      ErrorCode.PROTOCOL_ERROR,
    ],
    [
      'a frame over 16 KiB',
      () => [frame(FrameType.SETTINGS, 0, 0), frame(FrameType.DATA, 0, 1, Buffer.alloc(16385))],
      ErrorCode.FRAME_SIZE_ERROR,
    ],
    [
      'DATA on an idle stream',
      () => [frame(FrameType.SETTINGS, 0, 0), frame(FrameType.DATA, 0, 1, Buffer.from('x'))],
      ErrorCode.PROTOCOL_ERROR,
    ],
    [
      'HEADERS on an even stream',
      () => [frame(FrameType.SETTINGS, 0, 0), frame(FrameType.HEADERS, Flag.END_HEADERS, 2, REQUEST)],
      ErrorCode.PROTOCOL_ERROR,
    ],
    [
      'an undecodable header block',
      () => [frame(FrameType.SETTINGS, 0, 0), frame(FrameType.HEADERS, Flag.END_HEADERS, 1, Buffer.from([0x80]))],
      ErrorCode.COMPRESSION_ERROR,
    ],
    [
      'SETTINGS of a wrong length',
      () => [frame(FrameType.SETTINGS, 0, 0), frame(FrameType.SETTINGS, 0, 0, Buffer.alloc(5))],
      ErrorCode.FRAME_SIZE_ERROR,
    ],
    [
      'an initial window over 2^31-1',
      () => [frame(FrameType.SETTINGS, 0, 0, Buffer.from([0, 4, 0x80, 0, 0, 0]))],
      ErrorCode.FLOW_CONTROL_ERROR,
    ],
    [
      'a connection WINDOW_UPDATE of 0',
      () => [frame(FrameType.SETTINGS, 0, 0), frame(FrameType.WINDOW_UPDATE, 0, 0, words(0))],
      ErrorCode.PROTOCOL_ERROR,
    ],
    [
      'a connection window over 2^31-1',
      () => [frame(FrameType.SETTINGS, 0, 0), frame(FrameType.WINDOW_UPDATE, 0, 0, words(0x7fffffff))],
      ErrorCode.FLOW_CONTROL_ERROR,
    ],
    [
      'PUSH_PROMISE from a client',
      () => [frame(FrameType.SETTINGS, 0, 0), frame(FrameType.PUSH_PROMISE, 0, 1, Buffer.alloc(4))],
      ErrorCode.PROTOCOL_ERROR,
    ],
    [
      'CONTINUATION without HEADERS',
      () => [frame(FrameType.SETTINGS, 0, 0), frame(FrameType.CONTINUATION, Flag.END_HEADERS, 1, REQUEST)],
      ErrorCode.PROTOCOL_ERROR,
    ],
    [
      'another frame inside a header block',
      () => [
        frame(FrameType.SETTINGS, 0, 0),
        frame(FrameType.HEADERS, 0, 1, REQUEST),
        frame(FrameType.PING, 0, 0, Buffer.alloc(8)),
      ],
      ErrorCode.PROTOCOL_ERROR,
    ],
    [
      'a PING of 7 bytes',
      () => [frame(FrameType.SETTINGS, 0, 0), frame(FrameType.PING, 0, 0, Buffer.alloc(7))],
      ErrorCode.FRAME_SIZE_ERROR,
    ],
    [
      'RST_STREAM on stream 0',
      () => [frame(FrameType.SETTINGS, 0, 0), frame(FrameType.RST_STREAM, 0, 0, words(8))],
      ErrorCode.PROTOCOL_ERROR,
    ],
  ];
  it.each(connectionErrors)('ends the connection with GOAWAY on %s', async (_, bytes, code) => {
    raw = await RawClient.open(server.port, false);
    raw.send(Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), ...bytes());
    if (bytes()[0]?.toString('latin1', 0, 3) === 'PRI') {
      raw.close();
      raw = await RawClient.open(server.port, false);
      raw.send(...bytes());
    }
    expect(await raw.goawayCode()).toBe(code);
    await raw.waitEnd();
    expect(server.errors.length).toBeGreaterThan(0);
  });

  const fieldsOf = (pairs: [string, string][]): Buffer => encodeHeaders(pairs);
  const malformed: [string, [string, string][]][] = [
    [
      'no :path',
      [
        [':method', 'GET'],
        [':scheme', 'http'],
      ],
    ],
    [
      'an unknown pseudo-header',
      [
        [':method', 'GET'],
        [':scheme', 'http'],
        [':path', '/'],
        [':protocol', 'x'],
      ],
    ],
    [
      'a pseudo-header after a regular field',
      [
        [':method', 'GET'],
        ['x-a', '1'],
        [':scheme', 'http'],
        [':path', '/'],
      ],
    ],
    [
      'a repeated :path',
      [
        [':method', 'GET'],
        [':scheme', 'http'],
        [':path', '/'],
        [':path', '/b'],
      ],
    ],
    [
      'an uppercase name',
      [
        [':method', 'GET'],
        [':scheme', 'http'],
        [':path', '/'],
        ['X-Up', '1'],
      ],
    ],
    [
      'a connection header',
      [
        [':method', 'GET'],
        [':scheme', 'http'],
        [':path', '/'],
        ['connection', 'keep-alive'],
      ],
    ],
    [
      'te: gzip',
      [
        [':method', 'GET'],
        [':scheme', 'http'],
        [':path', '/'],
        ['te', 'gzip'],
      ],
    ],
    [
      'CONNECT',
      [
        [':method', 'CONNECT'],
        [':authority', 'a:1'],
      ],
    ],
  ];
  it.each(malformed)('resets a request with %s (PROTOCOL_ERROR) and keeps the connection', async (_, pairs) => {
    raw = await RawClient.open(server.port);
    raw.send(frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, fieldsOf(pairs)));
    const rst = await raw.waitFor((f) => f.type === FrameType.RST_STREAM && f.stream === 1);
    expect(rst.payload.readUInt32BE(0)).toBe(ErrorCode.PROTOCOL_ERROR);
    raw.send(frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 3, REQUEST));
    const ok = await raw.waitFor((f) => f.type === FrameType.HEADERS && f.stream === 3);
    expect(statusOf(ok)).toBe('200');
  });

  it('answers 431 to a header list over its limit, and keeps the connection', async () => {
    raw = await RawClient.open(server.port);
    const big = fieldsOf([
      [':method', 'GET'],
      [':scheme', 'http'],
      [':path', '/'],
      ...Array.from({ length: 70 }, (_, i): [string, string] => [`x-${i}`, 'v']),
    ]);
    raw.send(frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, big));
    const answer = await raw.waitFor((f) => f.type === FrameType.HEADERS && f.stream === 1);
    expect(statusOf(answer)).toBe('431');
    raw.send(frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 3, REQUEST));
    expect(statusOf(await raw.waitFor((f) => f.type === FrameType.HEADERS && f.stream === 3))).toBe('200');
  });

  it('refuses a stream past SETTINGS_MAX_CONCURRENT_STREAMS', async () => {
    raw = await RawClient.open(server.port);
    for (const id of [1, 3, 5]) raw.send(frame(FrameType.HEADERS, Flag.END_HEADERS, id, REQUEST));
    const rst = await raw.waitFor((f) => f.type === FrameType.RST_STREAM && f.stream === 5);
    expect(rst.payload.readUInt32BE(0)).toBe(ErrorCode.REFUSED_STREAM);
    raw.send(frame(FrameType.DATA, Flag.END_STREAM, 1));
    expect(statusOf(await raw.waitFor((f) => f.type === FrameType.HEADERS && f.stream === 1))).toBe('200');
  });

  it('resets a stream whose body does not match its content-length', async () => {
    raw = await RawClient.open(server.port);
    const post = fieldsOf([
      [':method', 'POST'],
      [':scheme', 'http'],
      [':path', '/'],
      ['content-length', '3'],
    ]);
    raw.send(
      frame(FrameType.HEADERS, Flag.END_HEADERS, 1, post),
      frame(FrameType.DATA, Flag.END_STREAM, 1, Buffer.from('four')),
    );
    const rst = await raw.waitFor((f) => f.type === FrameType.RST_STREAM && f.stream === 1);
    expect(rst.payload.readUInt32BE(0)).toBe(ErrorCode.PROTOCOL_ERROR);
  });

  it('resets a stream sent past its window (FLOW_CONTROL_ERROR)', async () => {
    await server.close();
    server = await startH2Server(() => undefined, { initialWindowSize: 1000 });
    raw = await RawClient.open(server.port);
    raw.send(
      frame(
        FrameType.HEADERS,
        Flag.END_HEADERS,
        1,
        fieldsOf([
          [':method', 'POST'],
          [':scheme', 'http'],
          [':path', '/'],
        ]),
      ),
    );
    await raw.waitFor((f) => f.type === FrameType.SETTINGS && (f.flags & Flag.ACK) !== 0);
    raw.send(frame(FrameType.SETTINGS, Flag.ACK, 0), frame(FrameType.DATA, 0, 1, Buffer.alloc(1001)));
    const rst = await raw.waitFor((f) => f.type === FrameType.RST_STREAM && f.stream === 1);
    expect(rst.payload.readUInt32BE(0)).toBe(ErrorCode.FLOW_CONTROL_ERROR);
  });

  it('answers PING, SETTINGS with ACKs, and honours padding and CONTINUATION', async () => {
    raw = await RawClient.open(server.port);
    raw.send(frame(FrameType.PING, 0, 0, Buffer.from('12345678')));
    const pong = await raw.waitFor((f) => f.type === FrameType.PING);
    expect(pong.flags & Flag.ACK).toBe(Flag.ACK);
    expect(pong.payload.toString()).toBe('12345678');
    expect((await raw.waitFor((f) => f.type === FrameType.SETTINGS && f.flags === Flag.ACK)).payload.length).toBe(0);
    // HEADERS padded with 3 bytes and split in two, then CONTINUATION.
    const padded = Buffer.concat([Buffer.from([3]), REQUEST.subarray(0, 2), Buffer.alloc(3)]);
    raw.send(
      frame(FrameType.HEADERS, Flag.PADDED | Flag.END_STREAM, 1, padded),
      frame(FrameType.CONTINUATION, Flag.END_HEADERS, 1, REQUEST.subarray(2)),
    );
    expect(statusOf(await raw.waitFor((f) => f.type === FrameType.HEADERS && f.stream === 1))).toBe('200');
  });
});

describe('H2Connection against rapid reset (CVE-2023-44487)', () => {
  it('ends a connection whose peer resets more open streams a second than allowed, not one within it', async () => {
    const server = await startH2Server(() => undefined, { maxResetsPerSecond: 10 });
    const openAndReset = (raw: RawClient, ids: number[]): void => {
      for (const id of ids)
        raw.send(
          frame(FrameType.HEADERS, Flag.END_HEADERS, id, REQUEST),
          frame(FrameType.RST_STREAM, 0, id, words(ErrorCode.CANCEL)),
        );
    };
    try {
      const calm = await RawClient.open(server.port);
      openAndReset(calm, [1, 3, 5, 7, 9, 11, 13, 15, 17, 19]);
      calm.send(frame(FrameType.PING, 0, 0, Buffer.from('stillup?')));
      await calm.waitFor((f) => f.type === FrameType.PING);
      expect(calm.frames.some((f) => f.type === FrameType.GOAWAY)).toBe(false);
      calm.close();
      const rapid = await RawClient.open(server.port);
      openAndReset(rapid, [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21]);
      expect(await rapid.goawayCode()).toBe(ErrorCode.ENHANCE_YOUR_CALM);
      await rapid.waitEnd();
    } finally {
      await server.close();
    }
  });
});

function statusOf(headers: { payload: Buffer }): string | undefined {
  const fields: string[] = [];
  new HpackDecoder(4096).decode(headers.payload, 0, headers.payload.length, fields);
  return fields[fields.indexOf(':status') + 1];
}

describe('H2Connection under random frames', () => {
  it('never throws out of its socket handler and either serves or ends with GOAWAY', async () => {
    const server = await startH2Server((stream) => {
      withBody(stream, (body) => {
        stream.respond(200, {});
        stream.end(body);
      });
    });
    const uncaught: unknown[] = [];
    const onUncaught = (e: unknown): void => {
      uncaught.push(e);
    };
    process.on('uncaughtException', onUncaught);
    try {
      const types = fc.oneof(fc.integer({ min: 0, max: 9 }), fc.integer({ min: 10, max: 255 }));
      const frameArb = fc.record({
        type: types,
        flags: fc.oneof(
          fc.constant(0),
          fc.constant(Flag.END_HEADERS | Flag.END_STREAM),
          fc.integer({ min: 0, max: 255 }),
        ),
        stream: fc.constantFrom(0, 1, 3, 5, 2, 0x7fffffff),
        payload: fc.oneof(
          fc.uint8Array({ maxLength: 64 }).map((a) => Buffer.from(a)),
          fc.constant(REQUEST),
          fc.constant(words(0x10000)),
          fc.constant(Buffer.alloc(8)),
        ),
      });
      await fc.assert(
        fc.asyncProperty(fc.array(frameArb, { maxLength: 12 }), async (frames) => {
          const raw = await RawClient.open(server.port);
          try {
            raw.send(...frames.map((f) => frame(f.type, f.flags, f.stream, f.payload)));
            raw.send(frame(FrameType.PING, 0, 0, Buffer.from('liveness')));
            // Either the connection is still served (our PING answered) or it ended after a GOAWAY.
            const answered = (): boolean =>
              raw.frames.some((f) => f.type === FrameType.PING && f.payload.toString() === 'liveness');
            await waitUntil(() => answered() || raw.ended);
            // Ended: with our GOAWAY, unless the random frames held one of the client's (then ending is the answer).
            const clientWentAway = frames.some(
              (f) => f.type === FrameType.GOAWAY && f.stream === 0 && f.payload.length >= 8,
            );
            if (!answered() && !clientWentAway) expect(raw.frames.some((f) => f.type === FrameType.GOAWAY)).toBe(true);
          } finally {
            raw.close();
          }
        }),
        { numRuns: Number(process.env.H2_FUZZ_RUNS ?? 1000) },
      );
      expect(uncaught).toEqual([]);
      // And a well-behaved client is still served afterwards.
      const client = connect(`http://127.0.0.1:${server.port}`);
      try {
        const answer = await request(client, { ':path': '/after' }, Buffer.from('ok'));
        expect(answer.body.toString()).toBe('ok');
      } finally {
        client.destroy();
      }
    } finally {
      process.off('uncaughtException', onUncaught);
      await server.close();
    }
  }, 120_000);
});

describe('H2Connection stream states (RFC 9113 §5.1)', () => {
  const POST = encodeHeaders([
    [':method', 'POST'],
    [':scheme', 'http'],
    [':path', '/'],
    ['content-length', '4'],
  ]);
  let server: Awaited<ReturnType<typeof startH2Server>>;
  let raw: RawClient;
  const closes: number[] = [];
  beforeEach(async () => {
    closes.length = 0;
    // Answers at the headers, as idgen-server's probes and its 404/405/431 do.
    server = await startH2Server((stream) => {
      stream.onclose = (code) => closes.push(code);
      stream.respond(200, {});
      stream.end(Buffer.from('at the headers'));
    });
    raw = await RawClient.open(server.port);
  });
  afterEach(async () => {
    raw.close();
    await server.close();
  });
  const rstOn = (id: number) => (f: { type: number; stream: number }) =>
    f.type === FrameType.RST_STREAM && f.stream === id;

  it('applies END_STREAM of HEADERS before the handler answers: no RST_STREAM, and a later DATA is STREAM_CLOSED', async () => {
    raw.send(frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, REQUEST));
    await raw.waitFor((f) => f.type === FrameType.DATA && f.stream === 1 && (f.flags & Flag.END_STREAM) !== 0);
    raw.send(frame(FrameType.DATA, Flag.END_STREAM, 1, Buffer.from('late')));
    expect(await raw.goawayCode()).toBe(ErrorCode.STREAM_CLOSED);
    expect(raw.frames.some(rstOn(1))).toBe(false);
    expect(closes).toEqual([ErrorCode.NO_ERROR]);
  });

  it('keeps a stream answered before its request ended half-closed (local), and still checks the rest of the request', async () => {
    raw.send(frame(FrameType.HEADERS, Flag.END_HEADERS, 1, POST));
    await raw.waitFor((f) => f.type === FrameType.DATA && f.stream === 1 && (f.flags & Flag.END_STREAM) !== 0);
    expect(closes).toEqual([ErrorCode.NO_ERROR]); // the handler's part ended with its answer
    expect(server.connections.values().next().value?.streamCount).toBe(1);
    raw.send(frame(FrameType.DATA, Flag.END_STREAM, 1, Buffer.from('five!')));
    expect((await raw.waitFor(rstOn(1))).payload.readUInt32BE(0)).toBe(ErrorCode.PROTOCOL_ERROR);
    // A well-formed one closes quietly when its body ends.
    raw.send(
      frame(FrameType.HEADERS, Flag.END_HEADERS, 3, POST),
      frame(FrameType.DATA, Flag.END_STREAM, 3, Buffer.from('four')),
    );
    raw.send(frame(FrameType.PING, 0, 0, Buffer.from('afterall')));
    await raw.waitFor((f) => f.type === FrameType.PING);
    expect(raw.frames.some(rstOn(3))).toBe(false);
    await waitUntil(() => server.connections.values().next().value?.streamCount === 0);
  });

  it('treats frames after the client’s RST_STREAM as STREAM_CLOSED, and ignores those after its own', async () => {
    raw.send(
      frame(FrameType.HEADERS, Flag.END_HEADERS, 1, POST),
      frame(FrameType.RST_STREAM, 0, 1, words(ErrorCode.CANCEL)),
    );
    raw.send(frame(FrameType.DATA, 0, 1, Buffer.from('four')));
    expect((await raw.waitFor(rstOn(1))).payload.readUInt32BE(0)).toBe(ErrorCode.STREAM_CLOSED);
    // Stream 3 is reset by the server (a WINDOW_UPDATE of 0 is a stream error): what the client sent after it may
    // have crossed that RST_STREAM, and is ignored.
    raw.send(frame(FrameType.HEADERS, Flag.END_HEADERS, 3, POST), frame(FrameType.WINDOW_UPDATE, 0, 3, words(0)));
    expect((await raw.waitFor(rstOn(3))).payload.readUInt32BE(0)).toBe(ErrorCode.PROTOCOL_ERROR);
    raw.send(
      frame(FrameType.DATA, Flag.END_STREAM, 3, Buffer.from('four')),
      frame(FrameType.PING, 0, 0, Buffer.from('ignored?')),
    );
    await raw.waitFor((f) => f.type === FrameType.PING);
    expect(raw.frames.filter(rstOn(3))).toHaveLength(1);
    expect(raw.frames.some((f) => f.type === FrameType.GOAWAY)).toBe(false);
  });

  it('refuses HEADERS on a stream below the last one opened (PROTOCOL_ERROR)', async () => {
    raw.send(
      frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 5, REQUEST),
      frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 3, REQUEST),
    );
    expect(await raw.goawayCode()).toBe(ErrorCode.PROTOCOL_ERROR);
  });

  it('sends the SETTINGS ACK before the DATA a raised INITIAL_WINDOW_SIZE lets go', async () => {
    raw.send(frame(FrameType.SETTINGS, 0, 0, Buffer.from([0, 4, 0, 0, 0, 0])));
    await raw.waitFor((f) => f.type === FrameType.SETTINGS && (f.flags & Flag.ACK) !== 0);
    raw.send(frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, REQUEST));
    await raw.waitFor((f) => f.type === FrameType.HEADERS && f.stream === 1);
    const acksBefore = raw.frames.filter((f) => f.type === FrameType.SETTINGS && (f.flags & Flag.ACK) !== 0).length;
    raw.send(frame(FrameType.SETTINGS, 0, 0, Buffer.from([0, 4, 0, 1, 0, 0])));
    await raw.waitFor((f) => f.type === FrameType.DATA && f.stream === 1 && (f.flags & Flag.END_STREAM) !== 0);
    const after = raw.frames.slice(raw.frames.findIndex((f) => f.type === FrameType.HEADERS && f.stream === 1));
    const ack = after.findIndex((f) => f.type === FrameType.SETTINGS && (f.flags & Flag.ACK) !== 0);
    const data = after.findIndex((f) => f.type === FrameType.DATA);
    expect(acksBefore).toBe(2); // of the client's first (empty) SETTINGS and of its window of 0
    expect(ack).toBeGreaterThan(-1);
    expect(ack).toBeLessThan(data);
  });
});

describe('H2Connection reading frames in pieces', () => {
  it('answers a request whose frames arrive a few bytes at a time', async () => {
    const server = await startH2Server(echo);
    try {
      const raw = await RawClient.open(server.port);
      raw.socket.setNoDelay(true);
      const post = encodeHeaders([
        [':method', 'POST'],
        [':scheme', 'http'],
        [':path', '/drip'],
      ]);
      const bytes = Buffer.concat([
        frame(FrameType.HEADERS, Flag.END_HEADERS, 1, post),
        frame(FrameType.DATA, Flag.END_STREAM, 1, Buffer.alloc(3_000, 0x64)),
      ]);
      for (let at = 0; at < bytes.length; at += 7) {
        raw.send(bytes.subarray(at, at + 7));
        if (at % 700 === 0) await new Promise((r) => setImmediate(r)); // let some reads see a part of a frame
      }
      const data = await raw.waitFor((f) => f.type === FrameType.DATA && f.stream === 1 && f.payload.length > 0);
      expect(data.payload.equals(Buffer.alloc(3_000, 0x64))).toBe(true);
      raw.close();
    } finally {
      await server.close();
    }
  });
});
