import { connect } from 'node:http2';
import { join } from 'node:path';
import { cleanupAll, freePort, spawnProcess, tsNodeArgs } from '@idgen/testing';

// The hand-framed baseline of bench:server answers real HTTP/2 clients correctly, or its figures would
// measure a broken server: node:http2's own client, several streams at once, with and without a body.
describe('raw-h2-server (bench baseline: HTTP/2 framed by hand on node:net)', () => {
  afterAll(cleanupAll);

  it('answers each stream of a real node:http2 client with 200 and the fixed body', async () => {
    const port = await freePort();
    const server = spawnProcess(
      process.execPath,
      tsNodeArgs(join(__dirname, '..', 'src', 'raw-h2-server.ts'), String(port), 'c0ffee'),
    );
    await server.waitForLine(/^listening /, 20_000);
    const client = connect(`http://127.0.0.1:${port}`);
    try {
      const ask = (body: Buffer | undefined) =>
        new Promise<{ status: unknown; type: unknown; body: string }>((resolve, reject) => {
          const stream = client.request({ ':method': 'POST', ':path': '/x', 'content-type': 'application/proto' });
          let status: unknown;
          let type: unknown;
          const chunks: Buffer[] = [];
          stream.on('response', (h) => {
            status = h[':status'];
            type = h['content-type'];
          });
          stream.on('data', (c: Buffer) => chunks.push(c));
          stream.on('error', reject);
          stream.on('end', () => resolve({ status, type, body: Buffer.concat(chunks).toString('hex') }));
          stream.end(body);
        });
      const answers = await Promise.all([
        ...Array.from({ length: 20 }, () => ask(Buffer.from([0x08, 0x01]))),
        ask(undefined),
      ]);
      for (const a of answers) expect(a).toEqual({ status: 200, type: 'application/proto', body: 'c0ffee' });
    } finally {
      client.destroy();
      await server.stop(5000);
    }
  });
});
