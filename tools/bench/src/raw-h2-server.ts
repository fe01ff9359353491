/**
 * The floor of `bench:server`: HTTP/2 (h2c) framed by hand on `node:net`, without `node:http2`, answering
 * every request with the same fixed body as `bare-http2-server.ts`. It reads no header (HPACK blocks are
 * skipped, not decoded) and keeps no per-stream object, so it shows what Node itself can do on this machine
 * when no V8 string is made of each request's header values, which is where `node:http2`'s Mark-Compact
 * pauses come from (tools/bench/README.md). A measuring baseline, not a server: no HPACK, no flow control
 * beyond giving the peer its window back, no stream states, no limits.
 *
 * Usage: `node raw-h2-server.js <port> <hex body>`; prints `listening <port>` when ready.
 */
import { createServer } from 'node:net';
import { Flag, FrameType, PREFACE } from '@idgen/h2';
import { baselineArgs, serveBaseline } from './baseline-server.js';

// The protocol's numbers from @idgen/h2 (its constants only: none of its framing, so the floor stays bare).
const { DATA, HEADERS, SETTINGS, PING, WINDOW_UPDATE } = FrameType;
const { END_STREAM, END_HEADERS, ACK } = Flag;
const PREFACE_LENGTH = PREFACE.length;

function frameHeader(length: number, type: number, flags: number, stream: number): Buffer {
  const h = Buffer.allocUnsafe(9);
  h.writeUIntBE(length, 0, 3);
  h[3] = type;
  h[4] = flags;
  h.writeUInt32BE(stream, 5);
  return h;
}

function main(): void {
  const { port, body } = baselineArgs('raw-h2-server <port> <hex body>');
  // :status 200 (static index 8), then content-type: application/proto as a literal without indexing
  // (static name index 31: 0x0f 0x10), the value not Huffman-coded.
  const contentType = Buffer.from('application/proto');
  const responseHeaders = Buffer.concat([Buffer.from([0x88, 0x0f, 0x10, contentType.length]), contentType]);

  const server = createServer((socket) => {
    socket.setNoDelay(true);
    socket.on('error', () => undefined); // a load generator that goes away is not an error of the floor
    socket.write(frameHeader(0, SETTINGS, 0, 0));
    let pending: Buffer = Buffer.alloc(0);
    let prefaceSeen = false;
    socket.on('data', (chunk: Buffer) => {
      const input = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
      let at = 0;
      if (!prefaceSeen) {
        if (input.length < PREFACE_LENGTH) {
          pending = input;
          return;
        }
        at = PREFACE_LENGTH;
        prefaceSeen = true;
      }
      const out: Buffer[] = [];
      const answer = (stream: number): void => {
        out.push(frameHeader(responseHeaders.length, HEADERS, END_HEADERS, stream), responseHeaders);
        out.push(frameHeader(body.length, DATA, END_STREAM, stream), body);
      };
      while (input.length - at >= 9) {
        const length = input.readUIntBE(at, 3);
        if (input.length - at - 9 < length) break;
        const type = input[at + 3] ?? 0;
        const flags = input[at + 4] ?? 0;
        const stream = input.readUInt32BE(at + 5) & 0x7fffffff;
        const payload = at + 9;
        if (type === DATA) {
          if (length > 0) {
            const increment = Buffer.allocUnsafe(4);
            increment.writeUInt32BE(length);
            out.push(frameHeader(4, WINDOW_UPDATE, 0, 0), increment);
          }
          if (flags & END_STREAM) answer(stream);
        } else if (type === HEADERS) {
          if (flags & END_STREAM) answer(stream); // a request without a body
        } else if (type === SETTINGS && !(flags & ACK)) {
          out.push(frameHeader(0, SETTINGS, ACK, 0));
        } else if (type === PING && !(flags & ACK) && length === 8) {
          out.push(frameHeader(8, PING, ACK, 0), input.subarray(payload, payload + 8));
        }
        at = payload + length;
      }
      pending = at === input.length ? Buffer.alloc(0) : input.subarray(at);
      if (out.length > 0) socket.write(Buffer.concat(out));
    });
  });
  serveBaseline(server, port);
}

main();
