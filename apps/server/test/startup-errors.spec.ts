// A node that cannot open its ports says why in one line an operator reads (issue 33): the port in use, by name,
// with no stack in the log line; exit 1. Real processes: a listener holding the port, the built server.
import { createServer, type Server } from 'node:net';
import { cleanupAll, freePort } from '@idgen/testing';
import { parseLine, spawnServer, standaloneStateFile } from './support.test-helper.js';

jest.setTimeout(60_000);
afterAll(() => cleanupAll());

/** Holds `port` on loopback until closed. */
async function hold(port: number): Promise<Server> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  return server;
}

describe('a port the node cannot open', () => {
  it.each([
    ['serving', '--listen', 'cannot listen on'],
    ['metrics', '--metrics-listen', 'cannot listen for metrics on'],
  ])('the %s port in use: one fatal line naming EADDRINUSE, no stack, exit 1', async (_, flag, why) => {
    const port = await freePort();
    const taken = await hold(port);
    try {
      const args = ['--standalone', '--state-file', standaloneStateFile(), '--time-source', 'none'];
      const other = flag === '--listen' ? ['--metrics-listen', 'off'] : ['--listen', '127.0.0.1:0'];
      const node = spawnServer([...args, ...other, flag, `127.0.0.1:${port}`]);
      const exit = await node.exited;
      expect(exit.code).toBe(1);
      const fatal = node.stdoutLines.map(parseLine).filter((l) => l?.level === 'fatal');
      expect(fatal).toHaveLength(1);
      expect(fatal[0]?.msg).toBe(
        `${why} 127.0.0.1:${port}: the address is already in use (EADDRINUSE): another process listens there; stop it or choose another port`,
      );
      expect(fatal[0]).toMatchObject({ code: 'EADDRINUSE', exitCode: 1 });
      expect(JSON.stringify(fatal[0])).not.toMatch(/stack| {4}at /);
    } finally {
      taken.close();
    }
  });
});
