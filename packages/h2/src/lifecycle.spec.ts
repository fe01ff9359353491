// The connection's phases and a stream's states as the outside sees them: what the one `phase` field of
// H2Connection and the one `state` field of H2Stream (docs/style.md, "Stateful code") must keep from the booleans
// they replaced. Every step is driven by a raw client, so the frames and their order are exact.
import type { H2Connection, H2Stream } from './connection.js';
import { RawClient, frame, startH2Server, words } from './connection.test-helper.js';
import { ErrorCode, Flag, FrameType, PREFACE } from './frames.js';
import { encodeHeaders } from './hpack.js';

const request = (method: string, path: string): Buffer =>
  encodeHeaders([
    [':method', method],
    [':scheme', 'http'],
    [':path', path],
  ]);

const PING = frame(FrameType.PING, 0, 0, Buffer.from('lifecycl'));
const isPingAck = (f: { type: number; flags: number }): boolean =>
  f.type === FrameType.PING && (f.flags & Flag.ACK) !== 0;
const rstOn = (id: number) => (f: { type: number; stream: number }) =>
  f.type === FrameType.RST_STREAM && f.stream === id;

async function waitUntil(cond: () => boolean, ms = 2_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('H2Stream: streamState, isClosed and isRequestComplete agree (RFC 9113 §5.1)', () => {
  it('at each callback, for streams answered at the headers, after the body, reset by the client, and drained', async () => {
    const log: string[] = [];
    const streams = new Map<number, H2Stream>();
    const note = (at: string, s: H2Stream): void => {
      log.push(`${s.id} ${at}: ${s.streamState}, closed ${s.isClosed}, complete ${s.isRequestComplete}`);
    };
    const server = await startH2Server((stream) => {
      streams.set(stream.id, stream);
      note('stream', stream);
      stream.onend = () => {
        note('end', stream);
        if (stream.path === '/after-body') {
          stream.respond(200, {});
          stream.end(Buffer.from('after'));
        }
      };
      stream.onclose = (code, s) => note(`close ${code}`, s);
      if (stream.path === '/at-headers') {
        stream.respond(200, {});
        stream.end(Buffer.from('at the headers'));
      }
    });
    const raw = await RawClient.open(server.port);
    try {
      raw.send(
        // 1: END_STREAM on HEADERS, answered at once: half-closed (remote), then closed.
        frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, request('GET', '/at-headers')),
        // 3: answered before its body: half-closed (local) (the handler's part over), closed when the body ends.
        frame(FrameType.HEADERS, Flag.END_HEADERS, 3, request('POST', '/at-headers')),
        frame(FrameType.DATA, Flag.END_STREAM, 3, Buffer.from('body')),
        // 5: reset by the client mid-request: closed, the request not complete.
        frame(FrameType.HEADERS, Flag.END_HEADERS, 5, request('POST', '/hold')),
        frame(FrameType.RST_STREAM, 0, 5, words(ErrorCode.CANCEL)),
        // 7: reset by the client after its END_STREAM: closed, the request complete.
        frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 7, request('GET', '/hold')),
        frame(FrameType.RST_STREAM, 0, 7, words(ErrorCode.CANCEL)),
        // 9: the whole request, then the answer.
        frame(FrameType.HEADERS, Flag.END_HEADERS, 9, request('POST', '/after-body')),
        frame(FrameType.DATA, Flag.END_STREAM, 9, Buffer.from('four')),
        PING,
      );
      await raw.waitFor(isPingAck);
      expect(log).toEqual([
        '1 stream: half-closed (remote), closed false, complete true',
        '1 close 0: closed, closed true, complete true',
        '3 stream: open, closed false, complete false',
        '3 close 0: half-closed (local), closed true, complete false',
        '5 stream: open, closed false, complete false',
        `5 close ${ErrorCode.CANCEL}: closed, closed true, complete false`,
        '7 stream: half-closed (remote), closed false, complete true',
        '7 end: half-closed (remote), closed false, complete true',
        `7 close ${ErrorCode.CANCEL}: closed, closed true, complete true`,
        '9 stream: open, closed false, complete false',
        '9 end: half-closed (remote), closed false, complete true',
        '9 close 0: closed, closed true, complete true',
      ]);
      // Stream 3's body was read and dropped by the connection itself, which closed it quietly.
      const drained = streams.get(3);
      expect([drained?.streamState, drained?.isClosed, drained?.isRequestComplete]).toEqual(['closed', true, true]);
      expect(raw.frames.some(rstOn(3))).toBe(false);
      expect(server.connections.values().next().value?.streamCount).toBe(0);
    } finally {
      raw.close();
      await server.close();
    }
  });
});

describe('H2Connection phases', () => {
  let server: Awaited<ReturnType<typeof startH2Server>>;
  let raw: RawClient | undefined;
  afterEach(async () => {
    raw?.close();
    raw = undefined;
    await server.close();
  });
  const only = async (): Promise<H2Connection> => {
    await waitUntil(() => server.connections.size === 1);
    const connection = server.connections.values().next().value;
    if (connection === undefined) throw new Error('no connection');
    return connection;
  };

  it('reads the preface an octet at a time, then wants SETTINGS first (PROTOCOL_ERROR for a PING)', async () => {
    server = await startH2Server(() => undefined);
    raw = await RawClient.open(server.port, false);
    for (let at = 0; at < PREFACE.length; at++) {
      raw.send(PREFACE.subarray(at, at + 1));
      await new Promise((r) => setImmediate(r));
    }
    raw.send(PING);
    expect(await raw.goawayCode()).toBe(ErrorCode.PROTOCOL_ERROR);
    await raw.waitEnd();
    expect(raw.frames.some((f) => f.type === FrameType.PING)).toBe(false);
    expect(server.errors.map((e) => e.message)).toEqual(['the first frame must be SETTINGS']);
  });

  it('close() before the preface: one GOAWAY NO_ERROR naming stream 0, the socket ends, close listeners run once', async () => {
    server = await startH2Server(() => undefined);
    raw = await RawClient.open(server.port, false);
    const connection = await only();
    let closes = 0;
    connection.onClose(() => closes++);
    connection.close();
    connection.close(); // going away already: nothing more
    const goaway = await raw.waitFor((f) => f.type === FrameType.GOAWAY);
    expect([goaway.payload.readUInt32BE(0), goaway.payload.readUInt32BE(4)]).toEqual([0, ErrorCode.NO_ERROR]);
    await raw.waitEnd();
    connection.close(); // closed: nothing more
    expect(raw.frames.filter((f) => f.type === FrameType.GOAWAY)).toHaveLength(1);
    expect(closes).toBe(1);
  });

  it('the client’s GOAWAY: newer streams refused, the one being served finishes, then the socket ends', async () => {
    let held: H2Stream | undefined;
    server = await startH2Server((stream) => {
      held = stream;
    });
    raw = await RawClient.open(server.port);
    raw.send(frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, request('GET', '/hold')));
    await waitUntil(() => held !== undefined);
    raw.send(
      frame(FrameType.GOAWAY, 0, 0, words(0, ErrorCode.NO_ERROR)),
      frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 3, request('GET', '/late')),
      PING,
    );
    expect((await raw.waitFor(rstOn(3))).payload.readUInt32BE(0)).toBe(ErrorCode.REFUSED_STREAM);
    await raw.waitFor(isPingAck);
    expect(raw.ended).toBe(false);
    expect(held?.id).toBe(1);
    held?.respond(200, {}, true);
    await raw.waitFor((f) => f.type === FrameType.HEADERS && f.stream === 1 && (f.flags & Flag.END_STREAM) !== 0);
    await raw.waitEnd();
  });

  it('close() with only a stream draining its request body left: that stream is reset NO_ERROR, then the end', async () => {
    const closes: number[] = [];
    server = await startH2Server((stream) => {
      stream.onclose = (code) => closes.push(code);
      stream.respond(200, {});
      stream.end(Buffer.from('before the body'));
    });
    raw = await RawClient.open(server.port);
    raw.send(frame(FrameType.HEADERS, Flag.END_HEADERS, 1, request('POST', '/')), PING);
    await raw.waitFor(isPingAck);
    const connection = await only();
    expect(connection.streamCount).toBe(1); // half-closed (local): the body is still to come
    connection.close();
    await raw.waitEnd();
    const goaway = raw.frames.findIndex((f) => f.type === FrameType.GOAWAY);
    const reset = raw.frames.findIndex(rstOn(1));
    expect(goaway).toBeGreaterThan(-1);
    expect(reset).toBeGreaterThan(goaway);
    expect(raw.frames[goaway]?.payload.readUInt32BE(4)).toBe(ErrorCode.NO_ERROR);
    expect(raw.frames[reset]?.payload.readUInt32BE(0)).toBe(ErrorCode.NO_ERROR);
    expect(closes).toEqual([ErrorCode.NO_ERROR]); // its onclose came with the answer, and only then
  });
});
