import { connect as connectHttp2, type OutgoingHttpHeaders } from 'node:http2';
import type { GuardedMinter } from '@idgen/clock-guard';
import { IdGenerator } from '@idgen/proto';
import { NEXT_IDS_PATH, createNextIdsFastPath } from '../fast-path.js';
import { createIdGeneratorService, createNextIds } from '../service.js';
import { assignedTestGuard, testServiceDeps } from '../service.test-helper.js';
import type { Route, ServingServer } from './contracts.js';
import { Dispatcher } from './dispatcher.js';
import { createServingServer } from './server.js';

// One place decides where a request goes (Dispatcher.route): a route added there is served by all three front ends
// (node:http for HTTP/1.1, @idgen/h2 and node:http2 for HTTP/2), and each request is routed once.
const VERSION_PATH = '/version';
const VERSION: Route = {
  kind: 'probe',
  answer: { status: 200, headers: { 'content-type': 'text/plain', 'content-length': 3 }, body: 'v1\n' },
};

let guard: GuardedMinter;
const servers: { http2Server: 'idgen' | 'node'; server: ServingServer; base: string }[] = [];
const original = Dispatcher.prototype.route;
const routed: string[] = [];

beforeAll(async () => {
  // The one new route, added in one place: the dispatcher's decision, wrapped for this spec.
  jest.spyOn(Dispatcher.prototype, 'route').mockImplementation(function (this: Dispatcher, method, url, headers, h2) {
    routed.push(url ?? '');
    return url === VERSION_PATH ? VERSION : original.call(this, method, url, headers, h2);
  });
  guard = assignedTestGuard();
  const deps = testServiceDeps(guard);
  const fastPath = createNextIdsFastPath({ nextIds: createNextIds(deps), maxBodyBytes: 1024 });
  for (const http2Server of ['idgen', 'node'] as const) {
    const server = createServingServer({
      routes: (router) => router.service(IdGenerator, createIdGeneratorService(deps)),
      fastPath,
      ready: () => true,
      maxBodyBytes: 1024,
      requestTimeoutMs: 5000,
      http2Server,
    });
    const bound = await server.listen({ host: '127.0.0.1', port: 0 });
    servers.push({ http2Server, server, base: `http://127.0.0.1:${bound.port}` });
  }
});

afterAll(async () => {
  await Promise.all(servers.map((s) => s.server.close(1000)));
  guard.close();
  jest.restoreAllMocks();
});

/** One HTTP/2 request on a session of its own: status and body. */
async function h2get(base: string, headers: OutgoingHttpHeaders, body?: string): Promise<[unknown, string]> {
  const session = connectHttp2(base);
  try {
    return await new Promise((resolve, reject) => {
      session.on('error', reject);
      const stream = session.request(headers, { endStream: body === undefined });
      let status: unknown;
      const chunks: Buffer[] = [];
      stream.on('response', (h) => (status = h[':status']));
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('error', reject);
      stream.on('close', () => resolve([status, Buffer.concat(chunks).toString()]));
      if (body !== undefined) stream.end(body);
    });
  } finally {
    session.close();
  }
}

describe('Dispatcher.route is the one place a route is decided', () => {
  it.each(['idgen', 'node'] as const)(
    'a route added there is answered over HTTP/1.1 and HTTP/2 (%s) alike, each request routed once',
    async (http2Server) => {
      const { base } = servers.find((s) => s.http2Server === http2Server) as (typeof servers)[number];
      routed.length = 0;
      const http1 = await fetch(`${base}${VERSION_PATH}`);
      expect([http1.status, await http1.text()]).toEqual([200, 'v1\n']);
      expect(await h2get(base, { ':path': VERSION_PATH })).toEqual([200, 'v1\n']);
      expect(routed).toEqual([VERSION_PATH, VERSION_PATH]);

      // The routes that were there before: the fast path, connect-es and not found, each decided once.
      routed.length = 0;
      const json = { ':method': 'POST', 'content-type': 'application/json' };
      const [fastStatus, fastBody] = await h2get(base, { ...json, ':path': NEXT_IDS_PATH }, '{"count":2}');
      expect([fastStatus, JSON.parse(fastBody).blocks[0].count]).toEqual([200, 2]);
      const status = await h2get(base, { ...json, ':path': '/idgen.v1.IdGenerator/GetStatus' }, '{}');
      expect(status[0]).toBe(200);
      expect((await h2get(base, { ':path': '/nope' }))[0]).toBe(404);
      expect(routed).toEqual([NEXT_IDS_PATH, '/idgen.v1.IdGenerator/GetStatus', '/nope']);
    },
  );
});
