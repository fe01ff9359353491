// Connection lifetimes are flags: --idle-timeout-ms and --preface-timeout-ms reach the serving port.
// With them set short, an idle HTTP/2 connection and one stuck in its preface are closed by the server well
// before the defaults (30 s, 4 s) would; the wait is bounded, and nothing else closes these connections.
import { connect, type Socket } from 'node:net';
import { PREFACE } from '@idgen/h2';
import { cleanupAll } from '@idgen/testing';
import { startServer, type ServerNode } from './support.test-helper.js';

jest.setTimeout(60_000);
afterAll(() => cleanupAll());

/** Opens a connection, writes `bytes`, and resolves when the server closes it (rejects after `boundMs`). */
function closedByServer(port: number, bytes: Buffer, boundMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket: Socket = connect(port, '127.0.0.1', () => socket.write(bytes));
    const bound = setTimeout(() => {
      socket.destroy();
      reject(new Error(`the server kept the connection for ${boundMs} ms`));
    }, boundMs);
    socket.on('data', () => undefined);
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(bound);
      resolve();
    });
  });
}

const SETTINGS = Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]);

describe('lifetimes from flags', () => {
  let node: ServerNode;
  beforeAll(async () => {
    node = await startServer([
      '--time-source',
      'none',
      '--metrics-listen',
      'off',
      '--idle-timeout-ms',
      '1000',
      '--preface-timeout-ms',
      '500',
    ]);
    await node.ready();
  });
  afterAll(() => node.stop());

  it('closes an idle HTTP/2 connection after --idle-timeout-ms', async () => {
    await closedByServer(node.port, Buffer.concat([PREFACE, SETTINGS]), 10_000);
  });

  it('closes a connection stuck in its preface after --preface-timeout-ms', async () => {
    await closedByServer(node.port, PREFACE.subarray(0, 10), 3_000);
  });
});
