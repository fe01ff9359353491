import { writeFileSync } from 'node:fs';
import { createServer, type Http2Server } from 'node:http2';
import { join } from 'node:path';
import { tempDirSync } from '@idgen/testing';
import { buildH2open, parseH2openLine, runH2open } from '../src/h2open.js';

describe('parseH2openLine', () => {
  it('reads every field of the result line', () => {
    const line =
      'sent=100 done=100 ok=98 failed=2 rate=9.8 p50_us=120 p99_us=900 p999_us=1500 max_us=2000 lag_p99_us=40';
    expect(parseH2openLine(`noise\n${line}\n`)).toEqual({
      sent: 100,
      ok: 98,
      failed: 2,
      requestsPerSecond: 9.8,
      p50Us: 120,
      p99Us: 900,
      p999Us: 1500,
      maxUs: 2000,
      lagP99Us: 40,
    });
  });

  it('refuses a line with a field missing rather than report a figure', () => {
    expect(() => parseH2openLine('sent=1 done=1 ok=1 failed=0 rate=1 p50_us=1 p99_us=1 p999_us=1 max_us=1')).toThrow(
      'lag_p99_us',
    );
    expect(() => parseH2openLine('h2open: connect: Connection refused')).toThrow("could not read h2open's result");
  });
});

// The generator itself, compiled and run against a real node:http2 server on loopback: what it counts as
// answered, failed and late must be what the server did.
describe('h2open against a real node:http2 server', () => {
  let server: Http2Server;
  let port = 0;
  const seen = new Map<string, number>();
  const dir = tempDirSync('idgen-h2open');
  const bodyFile = join(dir.path, 'body.bin');
  writeFileSync(bodyFile, Buffer.from([0x08, 0x01]));
  let binary = '';

  beforeAll(async () => {
    binary = buildH2open();
    server = createServer();
    server.on('stream', (stream, headers) => {
      stream.on('error', () => undefined);
      const path = String(headers[':path']);
      const key = `${path} ${String(headers['content-type'])}`;
      seen.set(key, (seen.get(key) ?? 0) + 1);
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        if (path === '/reset') {
          stream.close(2);
          return;
        }
        if (path === '/unavailable') {
          stream.respond({ ':status': 503 }, { endStream: true });
          return;
        }
        if (path === '/slow') {
          setTimeout(() => {
            stream.respond({ ':status': 200 });
            stream.end('late');
          }, 20);
          return;
        }
        stream.respond({ ':status': 200 });
        stream.end(Buffer.concat(chunks)); // echo: DATA comes back, so the connection window is exercised
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const address = server.address();
    port = typeof address === 'object' && address !== null ? address.port : 0;
  });

  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
    await dir.remove();
  });

  const run = (path: string, rate: number, seconds = 1) =>
    runH2open(binary, {
      host: '127.0.0.1',
      port,
      path,
      bodyFile,
      headers: ['content-type: application/proto'],
      rate,
      connections: 2,
      warmupSeconds: 0.2,
      seconds,
      seed: 7,
    });

  it('sends about the asked rate, open loop, and every request is answered and counted ok', async () => {
    const result = await run('/ok', 2000, 2);
    expect(result.failed).toBe(0);
    expect(result.ok).toBe(result.sent);
    // Poisson arrivals: 4,000 expected in 2 s, a standard deviation of ~63.
    expect(result.sent).toBeGreaterThan(3600);
    expect(result.sent).toBeLessThan(4400);
    expect(result.p50Us).toBeGreaterThan(0);
    expect(result.p99Us).toBeGreaterThanOrEqual(result.p50Us);
    expect(seen.get('/ok application/proto')).toBeGreaterThanOrEqual(result.sent);
  });

  it('measures the server: a 20 ms answer is at least 20 ms at the median', async () => {
    const result = await run('/slow', 200);
    expect(result.failed).toBe(0);
    expect(result.p50Us).toBeGreaterThanOrEqual(20_000);
  });

  it('counts a reset stream and a status other than 200 as failed, never as answered', async () => {
    const reset = await run('/reset', 300);
    expect(reset.sent).toBeGreaterThan(0);
    expect(reset.ok).toBe(0);
    expect(reset.failed).toBe(reset.sent);
    const unavailable = await run('/unavailable', 300);
    expect(unavailable.ok).toBe(0);
    expect(unavailable.failed).toBe(unavailable.sent);
  });
});
