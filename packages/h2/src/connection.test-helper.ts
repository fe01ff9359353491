import { once } from 'node:events';
import { createServer, connect as netConnect, type Server, type Socket } from 'node:net';
import { H2Connection, type H2ConnectionOptions, type H2Stream } from './connection.js';
import { FrameType, PREFACE } from './frames.js';

/** A server on 127.0.0.1 (random port) whose connections are {@link H2Connection}s calling `handler`. */
export async function startH2Server(
  handler: (stream: H2Stream, connection: H2Connection) => void,
  options: H2ConnectionOptions = {},
): Promise<{ port: number; connections: Set<H2Connection>; errors: Error[]; close(): Promise<void> }> {
  const connections = new Set<H2Connection>();
  const sockets = new Set<Socket>();
  const errors: Error[] = [];
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.once('close', () => sockets.delete(socket));
    const connection: H2Connection = new H2Connection(socket, (stream) => handler(stream, connection), {
      ...options,
      onError: (e) => errors.push(e),
    });
    connections.add(connection);
    connection.onClose(() => connections.delete(connection));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return {
    port: address.port,
    connections,
    errors,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

export interface Frame {
  type: number;
  flags: number;
  stream: number;
  payload: Buffer;
}

export function frame(type: number, flags: number, stream: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream, 5);
  return Buffer.concat([head, payload]);
}

export function words(...values: number[]): Buffer {
  const b = Buffer.alloc(values.length * 4);
  values.forEach((v, i) => b.writeUInt32BE(v >>> 0, i * 4));
  return b;
}

/** A client speaking raw frames: sends the preface and an empty SETTINGS, records every frame it reads. */
export class RawClient {
  readonly frames: Frame[] = [];
  ended = false;
  private buffered = Buffer.alloc(0);
  private waiters: (() => void)[] = [];

  private constructor(readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.buffered = Buffer.concat([this.buffered, chunk]);
      while (this.buffered.length >= 9) {
        const length = this.buffered.readUIntBE(0, 3);
        if (this.buffered.length < 9 + length) break;
        this.frames.push({
          type: this.buffered[3] ?? 0,
          flags: this.buffered[4] ?? 0,
          stream: this.buffered.readUInt32BE(5) & 0x7fffffff,
          payload: Buffer.from(this.buffered.subarray(9, 9 + length)),
        });
        this.buffered = this.buffered.subarray(9 + length);
      }
      this.wake();
    });
    const end = (): void => {
      this.ended = true;
      this.wake();
    };
    socket.on('end', end);
    socket.on('close', end);
    socket.on('error', () => undefined);
  }

  static async open(port: number, preface = true): Promise<RawClient> {
    const socket = netConnect(port, '127.0.0.1');
    await once(socket, 'connect');
    const client = new RawClient(socket);
    if (preface) client.send(PREFACE, frame(FrameType.SETTINGS, 0, 0));
    return client;
  }

  send(...bytes: Buffer[]): void {
    if (!this.socket.destroyed) this.socket.write(Buffer.concat(bytes));
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  /** The first frame matching `match` (waiting up to `ms`); throws with the frames seen on timeout. */
  async waitFor(match: (f: Frame) => boolean, ms = 2_000): Promise<Frame> {
    const deadline = Date.now() + ms;
    for (;;) {
      const found = this.frames.find(match);
      if (found !== undefined) return found;
      if (this.ended) throw new Error(`connection ended without the frame; saw ${this.describe()}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out; saw ${this.describe()}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  /** Waits for the server to end the connection. */
  async waitEnd(ms = 3_000): Promise<void> {
    const deadline = Date.now() + ms;
    while (!this.ended) {
      if (Date.now() > deadline) throw new Error(`connection still open; saw ${this.describe()}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  /** The GOAWAY the server sent: its error code. */
  async goawayCode(): Promise<number> {
    const goaway = await this.waitFor((f) => f.type === FrameType.GOAWAY);
    return goaway.payload.readUInt32BE(4);
  }

  describe(): string {
    return JSON.stringify(
      this.frames.map((f) => ({ type: f.type, flags: f.flags, stream: f.stream, length: f.payload.length })),
    );
  }

  close(): void {
    this.socket.destroy();
  }
}
