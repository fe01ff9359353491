/**
 * The relay the netns node's callers and etcd traffic go through (relay.ts): bytes both ways between TCP and a Unix
 * socket, and a pair torn down whole when one side ends. Loopback and a temp dir only.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { freePort, tempDir, type TempDir } from '@idgen/testing';
import { formatEndpoint, parseEndpoint, startRelay, type Relay } from './relay.js';

let dir: TempDir | undefined;
let echo: Server | undefined;
const relays: Relay[] = [];

afterEach(async () => {
  await Promise.all(relays.splice(0).map((r) => r.close()));
  await new Promise<void>((r) => (echo === undefined ? r() : echo.close(() => r())));
  echo = undefined;
  await dir?.remove();
});

function roundTrip(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s: Socket = connect({ host: '127.0.0.1', port });
    let got = '';
    s.setTimeout(5000, () => s.destroy(new Error('no answer in 5 s')));
    s.on('data', (d) => {
      got += d.toString();
      if (got.length >= text.length) s.end();
    });
    s.on('close', () => resolve(got));
    s.on('error', reject);
    s.write(text);
  });
}

test('relays TCP → Unix → TCP both ways, and parses its endpoints', async () => {
  dir = await tempDir('idgen-relay');
  echo = createServer((s) => s.pipe(s));
  const target = await freePort();
  await new Promise<void>((r) => echo?.listen(target, '127.0.0.1', r));
  const sock = join(dir.path, 'a.sock');
  relays.push(await startRelay({ unix: sock }, { host: '127.0.0.1', port: target }));
  const front = await freePort();
  relays.push(await startRelay(parseEndpoint(`tcp:127.0.0.1:${front}`), parseEndpoint(`unix:${sock}`)));
  const text = 'x'.repeat(200_000);
  expect(await roundTrip(front, text)).toBe(text);
  expect(formatEndpoint(parseEndpoint(`unix:${sock}`))).toBe(`unix:${sock}`);
  expect(() => parseEndpoint('127.0.0.1:80')).toThrow(/unix:\/path or tcp:host:port/);
});

test('closes the client side when the upstream goes away', async () => {
  dir = await tempDir('idgen-relay');
  echo = createServer((s) => s.destroy());
  const target = await freePort();
  await new Promise<void>((r) => echo?.listen(target, '127.0.0.1', r));
  const front = await freePort();
  relays.push(await startRelay({ host: '127.0.0.1', port: front }, { host: '127.0.0.1', port: target }));
  expect(await roundTrip(front, 'hello')).toBe('');
});
