// The frame-level rules against one attacking connection each: every flood or hold ends the connection (GOAWAY
// ENHANCE_YOUR_CALM, or the lifetime's close) after a bounded number of frames, says why through onRefusal, and
// leaves the server serving others. Each attack sends a fixed number of frames and waits for states with bounds.
import { once } from 'node:events';
import { connect as netConnect } from 'node:net';
import { connect } from 'node:http2';
import type { H2ConnectionOptions, H2Stream } from './connection.js';
import { RawClient, frame, startH2Server, words } from './connection.test-helper.js';
import { ErrorCode, Flag, FrameType, PREFACE } from './frames.js';
import { encodeHeaders, encodeInteger, HpackDecoder } from './hpack.js';
import type { H2RefusalReason } from './limits.js';

const REQUEST = encodeHeaders([
  [':method', 'GET'],
  [':scheme', 'http'],
  [':path', '/'],
  [':authority', 'a'],
]);
const POST = encodeHeaders([
  [':method', 'POST'],
  [':scheme', 'http'],
  [':path', '/'],
]);

/** A server answering every request at its end; its refusals are recorded. */
async function start(
  options: H2ConnectionOptions = {},
  handler: (stream: H2Stream) => void = (stream) => {
    stream.onend = () => {
      stream.respond(200, {});
      stream.end(Buffer.from('ok'));
    };
  },
): Promise<Awaited<ReturnType<typeof startH2Server>> & { refusals: H2RefusalReason[] }> {
  const refusals: H2RefusalReason[] = [];
  const server = await startH2Server(handler, { ...options, onRefusal: (reason) => refusals.push(reason) });
  return Object.assign(server, { refusals });
}

/** A well-behaved client's request still gets its answer (the server outlived the attack). */
async function stillServes(port: number): Promise<void> {
  const client = connect(`http://127.0.0.1:${port}`);
  client.on('error', () => undefined);
  try {
    const status = await new Promise<number | undefined>((resolve, reject) => {
      const req = client.request({ ':method': 'POST', ':path': '/after' });
      req.on('response', (h) => resolve(h[':status']));
      req.on('error', reject);
      req.end('x');
    });
    expect(status).toBe(200);
  } finally {
    client.destroy();
  }
}

function repeat(n: number, make: (i: number) => Buffer): Buffer {
  return Buffer.concat(Array.from({ length: n }, (_, i) => make(i)));
}

describe('H2Connection against frame floods', () => {
  let server: Awaited<ReturnType<typeof start>>;
  let raw: RawClient;
  afterEach(async () => {
    raw?.close();
    await server.close();
  });

  const floods: [string, H2RefusalReason, () => Buffer][] = [
    ['PING', 'ping-flood', () => repeat(5_000, () => frame(FrameType.PING, 0, 0, Buffer.alloc(8)))],
    ['SETTINGS', 'settings-flood', () => repeat(5_000, () => frame(FrameType.SETTINGS, 0, 0))],
    [
      'empty DATA',
      'empty-frame-flood',
      () =>
        Buffer.concat([
          frame(FrameType.HEADERS, Flag.END_HEADERS, 1, POST),
          repeat(5_000, () => frame(FrameType.DATA, 0, 1)),
        ]),
    ],
    ['WINDOW_UPDATE', 'window-update-flood', () => repeat(5_000, () => frame(FrameType.WINDOW_UPDATE, 0, 0, words(1)))],
    ['unknown-type', 'ignored-frame-flood', () => repeat(5_000, () => frame(0x42, 0, 0, Buffer.alloc(4)))],
    [
      'PRIORITY',
      'ignored-frame-flood',
      () => repeat(5_000, (i) => frame(FrameType.PRIORITY, 0, 2 * i + 1, Buffer.from([0, 0, 0, 0, 16]))),
    ],
  ];
  it.each(floods)('ends a %s flood with GOAWAY ENHANCE_YOUR_CALM (%s)', async (_, reason, bytes) => {
    server = await start();
    raw = await RawClient.open(server.port);
    raw.send(bytes());
    expect(await raw.goawayCode()).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    await raw.waitEnd();
    expect(server.refusals).toEqual([reason]);
    // Answered no more than its budget before the cut: PINGs answered ≤ 1,000 (the default).
    expect(raw.frames.filter((f) => f.type === FrameType.PING).length).toBeLessThanOrEqual(1_000);
    await stillServes(server.port);
  });

  it('takes a WINDOW_UPDATE for every DATA frame it sent (a load generator returning window per answer)', async () => {
    server = await start();
    raw = await RawClient.open(server.port);
    const n = 2_500;
    for (let i = 0; i < n; i += 100) {
      // 100 requests at a time (under the 128-stream limit), each answer followed by a connection WINDOW_UPDATE.
      raw.send(
        repeat(100, (k) => frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 2 * (i + k) + 1, REQUEST)),
      );
      const last = 2 * (i + 99) + 1;
      await raw.waitFor((f) => f.type === FrameType.DATA && f.stream === last);
      raw.send(repeat(100, () => frame(FrameType.WINDOW_UPDATE, 0, 0, words(2))));
    }
    raw.send(frame(FrameType.PING, 0, 0, Buffer.from('stillup?')));
    await raw.waitFor((f) => f.type === FrameType.PING && f.payload.toString() === 'stillup?');
    expect(raw.frames.filter((f) => f.type === FrameType.DATA).length).toBe(n);
    expect(raw.frames.some((f) => f.type === FrameType.GOAWAY)).toBe(false);
    expect(server.refusals).toEqual([]);
  });
});

describe('H2Connection limits applied as frames arrive', () => {
  let server: Awaited<ReturnType<typeof start>>;
  let raw: RawClient;
  afterEach(async () => {
    raw?.close();
    await server.close();
  });

  it('ends a flood of empty CONTINUATION frames after its 16th (no buffer per frame)', async () => {
    server = await start();
    raw = await RawClient.open(server.port);
    raw.send(
      frame(FrameType.HEADERS, 0, 1, REQUEST.subarray(0, 1)),
      repeat(10_000, () => frame(FrameType.CONTINUATION, 0, 1)),
    );
    expect(await raw.goawayCode()).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    expect(server.refusals).toEqual(['continuation-flood']);
    await stillServes(server.port);
  });

  it('ends a header block past 64 KiB as its bytes arrive', async () => {
    server = await start({ maxContinuationFrames: 100 });
    raw = await RawClient.open(server.port);
    raw.send(
      frame(FrameType.HEADERS, 0, 1, Buffer.alloc(16_384)),
      repeat(8, () => frame(FrameType.CONTINUATION, 0, 1, Buffer.alloc(16_384))),
    );
    expect(await raw.goawayCode()).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    expect(server.refusals).toEqual(['header-block-too-large']);
  });

  it('ends a SETTINGS frame of 2,730 entries', async () => {
    server = await start();
    raw = await RawClient.open(server.port);
    raw.send(
      frame(
        FrameType.SETTINGS,
        0,
        0,
        repeat(2_730, () => Buffer.from([0, 4, 0, 0, 0xff, 0xff])),
      ),
    );
    expect(await raw.goawayCode()).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    expect(server.refusals).toEqual(['settings-entries']);
  });

  it('answers an HPACK bomb (one 4 KB entry referenced 16,000 times) with 431 per stream, then cuts a peer that keeps at it', async () => {
    server = await start({}, (stream) => {
      stream.respond(200, {}, true);
    });
    raw = await RawClient.open(server.port);
    // Stream 1 puts a 4,000-byte value in the dynamic table (literal with incremental indexing, new name).
    const name = Buffer.from('x-bomb');
    const value = Buffer.alloc(4_000, 0x61);
    const insert = Buffer.concat([
      Buffer.from([0x40]),
      encodeInteger(name.length, 7),
      name,
      encodeInteger(value.length, 7),
      value,
    ]);
    raw.send(frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, Buffer.concat([REQUEST, insert])));
    await raw.waitFor((f) => f.type === FrameType.HEADERS && f.stream === 1);
    // Streams 3..41: the request, then index 62 (that entry) 16,000 times across HEADERS + CONTINUATION.
    const refs = Buffer.alloc(16_000, 0xbe);
    for (let id = 3; id <= 41; id += 2) {
      raw.send(
        frame(FrameType.HEADERS, Flag.END_STREAM, id, Buffer.concat([REQUEST, refs.subarray(0, 8_000)])),
        frame(FrameType.CONTINUATION, Flag.END_HEADERS, id, refs.subarray(8_000)),
      );
    }
    const last = await raw.waitFor((f) => f.type === FrameType.HEADERS && f.stream === 41);
    const fields: string[] = [];
    new HpackDecoder().decode(last.payload, 0, last.payload.length, fields);
    expect(fields[fields.indexOf(':status') + 1]).toBe('431');
    expect(server.refusals.filter((r) => r === 'header-list-too-large')).toHaveLength(20);
    expect(raw.frames.some((f) => f.type === FrameType.GOAWAY)).toBe(false);
    // A peer that keeps at it is cut with the stream errors (200 a second): 450 more, so that however a second's
    // boundary splits them, one side holds more than 200.
    raw.send(
      repeat(450, (i) =>
        Buffer.concat([
          frame(FrameType.HEADERS, Flag.END_STREAM, 43 + 2 * i, Buffer.concat([REQUEST, refs.subarray(0, 8_000)])),
          frame(FrameType.CONTINUATION, Flag.END_HEADERS, 43 + 2 * i, refs.subarray(8_000)),
        ]),
      ),
    );
    expect(await raw.goawayCode()).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    expect(server.refusals).toContain('stream-error-flood');
  });

  it('refuses streams over the limit, then ends a peer that keeps opening them (100 a second)', async () => {
    server = await start({ maxConcurrentStreams: 2 }, () => undefined); // requests never answered: both slots held
    raw = await RawClient.open(server.port);
    raw.send(repeat(1_000, (i) => frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 2 * i + 1, REQUEST)));
    expect(await raw.goawayCode()).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    const refused = raw.frames.filter(
      (f) => f.type === FrameType.RST_STREAM && f.payload.readUInt32BE(0) === ErrorCode.REFUSED_STREAM,
    );
    expect(refused).toHaveLength(100);
    expect(server.refusals.filter((r) => r === 'stream-limit')).toHaveLength(101);
    expect(server.refusals).toContain('refused-stream-flood');
  });

  it('refuses the streams admitStream turns away as over the limit, and counts them toward the same flood', async () => {
    const asked: number[] = [];
    server = await start(
      {
        admitStream: (open) => {
          asked.push(open);
          return open < 3; // a budget across connections, full: this connection keeps 3
        },
      },
      () => undefined,
    );
    raw = await RawClient.open(server.port);
    raw.send(repeat(200, (i) => frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 2 * i + 1, REQUEST)));
    expect(await raw.goawayCode()).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    const refused = raw.frames.filter(
      (f) => f.type === FrameType.RST_STREAM && f.payload.readUInt32BE(0) === ErrorCode.REFUSED_STREAM,
    );
    expect(refused[0]?.stream).toBe(7); // streams 1, 3 and 5 admitted
    expect(refused).toHaveLength(100);
    expect(asked.slice(0, 4)).toEqual([0, 1, 2, 3]);
    expect(server.refusals.filter((r) => r === 'stream-budget')).toHaveLength(101);
    expect(server.refusals).toContain('refused-stream-flood');
  });

  it('ends a peer that makes it reset streams ("MadeYouReset": a WINDOW_UPDATE of 0 on each)', async () => {
    let started = 0;
    server = await start({}, () => {
      started++;
    });
    raw = await RawClient.open(server.port);
    raw.send(
      repeat(1_000, (i) =>
        Buffer.concat([
          frame(FrameType.HEADERS, Flag.END_HEADERS, 2 * i + 1, POST),
          frame(FrameType.WINDOW_UPDATE, 0, 2 * i + 1, words(0)),
        ]),
      ),
    );
    expect(await raw.goawayCode()).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    expect(server.refusals).toEqual(['stream-error-flood']);
    expect(started).toBeLessThanOrEqual(201);
  });
});

describe('H2Connection lifetimes', () => {
  let server: Awaited<ReturnType<typeof start>>;
  afterEach(() => server.close());

  it('cuts a connection that sends the preface and nothing more', async () => {
    server = await start({ prefaceTimeoutMs: 200 });
    const raw = await RawClient.open(server.port, false);
    raw.send(PREFACE);
    await raw.waitEnd(3_000);
    expect(server.refusals).toEqual(['preface-timeout']);
  });

  it('closes an idle connection with GOAWAY NO_ERROR, and not one whose request is being served', async () => {
    let held: H2Stream | undefined;
    server = await start({ idleTimeoutMs: 300 }, (stream) => {
      if (stream.path === '/hold') held = stream;
    });
    const busy = await RawClient.open(server.port);
    busy.send(
      frame(
        FrameType.HEADERS,
        Flag.END_HEADERS | Flag.END_STREAM,
        1,
        encodeHeaders([
          [':method', 'GET'],
          [':scheme', 'http'],
          [':path', '/hold'],
        ]),
      ),
    );
    const idle = await RawClient.open(server.port);
    expect(await idle.goawayCode()).toBe(ErrorCode.NO_ERROR);
    await idle.waitEnd();
    expect(busy.ended).toBe(false);
    expect(busy.frames.some((f) => f.type === FrameType.GOAWAY)).toBe(false);
    held?.respond(200, {}, true);
    expect(await busy.goawayCode()).toBe(ErrorCode.NO_ERROR); // idle from its answer on
    expect(server.refusals).toEqual(['idle-timeout', 'idle-timeout']);
    busy.close();
  });

  it('cuts a connection whose peer stops reading the answers it asked for', async () => {
    server = await start({ stalledWriteTimeoutMs: 300, maxOutputBytes: 64 * 1024 }, (stream) => {
      stream.respond(200, {});
      stream.end(Buffer.alloc(32 * 1024 * 1024));
    });
    const socket = netConnect(server.port, '127.0.0.1');
    socket.on('error', () => undefined);
    await once(socket, 'connect');
    // Windows opened wide, one request for 32 MiB, and nothing read from then on.
    socket.write(
      Buffer.concat([
        PREFACE,
        frame(FrameType.SETTINGS, 0, 0, Buffer.from([0, 4, 0x7f, 0xff, 0xff, 0xff])),
        frame(FrameType.WINDOW_UPDATE, 0, 0, words(0x7fff_0000)),
        frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, REQUEST),
      ]),
    );
    socket.pause();
    const deadline = Date.now() + 10_000;
    while (server.refusals.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(server.refusals).toEqual(['stalled-writer']);
    expect(server.connections.size).toBe(0);
    socket.destroy();
  });
});
