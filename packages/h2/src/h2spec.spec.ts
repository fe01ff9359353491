// h2spec (the HTTP/2 conformance suite, vendored in tools/h2spec/) against a bare H2Connection, on the two
// shapes of route that exercise stream states differently: one answered at the request's headers, one answered
// after its body.
import type { H2Stream } from './connection.js';
import { startH2Server } from './connection.test-helper.js';
import { runH2spec } from '@idgen/testing';

jest.setTimeout(300_000);

/** `/at-headers` answers as soon as the headers are in (as idgen-server's probes do); `/after-body` echoes the body once it has all of it. */
function routes(stream: H2Stream): void {
  if (stream.path === '/at-headers') {
    stream.respond(200, { 'content-type': 'text/plain' });
    stream.end(Buffer.from('answered at the headers\n'));
    return;
  }
  if (stream.path === '/after-body') {
    const chunks: Buffer[] = [];
    stream.ondata = (chunk) => chunks.push(Buffer.from(chunk));
    stream.onend = () => {
      stream.respond(200, { 'content-type': 'application/octet-stream' });
      stream.end(Buffer.concat([Buffer.from('answered after the body: '), ...chunks]));
    };
    return;
  }
  stream.respond(404, { 'content-length': 0 }, true);
}

describe.each(['/at-headers', '/after-body'])('h2spec against H2Connection, path %s', (path) => {
  let server: Awaited<ReturnType<typeof startH2Server>>;
  beforeAll(async () => {
    server = await startH2Server(routes);
  });
  afterAll(() => server.close());

  it.each([false, true])('passes every case (strict: %s)', async (strict) => {
    const result = await runH2spec(server.port, path, { strict });
    expect(result.failed).toEqual([]);
    expect(result.skipped).toEqual([]); // every case ran: both routes answer with a body of more than 5 bytes
    expect(result.total).toBeGreaterThanOrEqual(strict ? 147 : 146);
  });
});
