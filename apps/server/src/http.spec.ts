import { connect as connectHttp2 } from 'node:http2';
import { connect as connectTcp } from 'node:net';
import { createGuardedMinter, type GuardedMinter } from '@idgen/clock-guard';
import { IdGenerator } from '@idgen/proto';
import { NEXT_IDS_PATH, createNextIdsFastPath } from './fast-path.js';
import { createServingServer, type ServingServer } from './http.js';
import { createIdGeneratorService, createNextIds, type ServiceDeps } from './service.js';

// The same NextIds answered two ways on the real serving stack (loopback, real guard): through connect-es,
// and through the fast path. Callers must not be able to tell them apart (fast-path.ts).
let guard: GuardedMinter;
let servers: { name: string; server: ServingServer; base: string }[] = [];
let ready = true;

beforeAll(async () => {
  guard = createGuardedMinter({ region: 4 });
  guard.assign({ region: 4, worker: 9, floorMs: Date.now() - 1, deadlineMonoMs: Number.MAX_SAFE_INTEGER });
  const deps: ServiceDeps = {
    guard,
    lease: () => ({ nodeId: 'n', leaseId: undefined, keepAliveAgeSeconds: undefined, deadlineInMs: undefined, mode: 'standalone' }),
    phase: () => 'running',
    region: 4,
    maxCount: 100,
    timeSourceMode: 'none',
    advertise: () => 'here:1',
  };
  const fast = createNextIdsFastPath({ nextIds: createNextIds(deps), maxBodyBytes: 1024 });
  for (const name of ['connect-es', 'fast-path']) {
    const server = createServingServer({
      routes: (router) => router.service(IdGenerator, createIdGeneratorService(deps)),
      ready: () => ready,
      maxBodyBytes: 1024,
      requestTimeoutMs: 2000,
      ...(name === 'fast-path' ? { fastPath: (req, res, path) => path === NEXT_IDS_PATH && fast(req, res) } : {}),
    });
    const bound = await server.listen({ host: '127.0.0.1', port: 0 });
    servers.push({ name, server, base: `http://127.0.0.1:${bound.port}` });
  }
});

afterAll(async () => {
  await Promise.all(servers.map((s) => s.server.close(1000)));
  servers = [];
  guard.close();
});

/** Replaces the IDs in a body so two answers minted at different times compare equal. */
const masked = (text: string): string => text.replace(/"first":"\d+"/g, '"first":"<id>"');

async function post(base: string, body: string | Uint8Array, type: string): Promise<{ status: number; type: string | null; text: string; bytes: number }> {
  const res = await fetch(`${base}${NEXT_IDS_PATH}`, { method: 'POST', headers: { 'content-type': type }, body });
  const buf = Buffer.from(await res.arrayBuffer());
  return { status: res.status, type: res.headers.get('content-type'), text: masked(buf.toString('latin1')), bytes: buf.length };
}

function grpc(base: string, payload: Uint8Array): Promise<{ headers: Record<string, unknown>; trailers: Record<string, unknown>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const session = connectHttp2(base);
    const frame = Buffer.alloc(5 + payload.length);
    frame.writeUInt32BE(payload.length, 1);
    frame.set(payload, 5);
    const stream = session.request({ ':method': 'POST', ':path': NEXT_IDS_PATH, 'content-type': 'application/grpc', te: 'trailers' });
    let headers: Record<string, unknown> = {};
    let trailers: Record<string, unknown> = {};
    const chunks: Buffer[] = [];
    stream.on('response', (h) => {
      headers = { status: h[':status'], 'content-type': h['content-type'], 'grpc-status': h['grpc-status'] };
    });
    stream.on('trailers', (t) => {
      trailers = { 'grpc-status': t['grpc-status'] };
    });
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('error', reject);
    stream.on('close', () => {
      session.close();
      resolve({ headers, trailers, body: Buffer.concat(chunks) });
    });
    stream.end(frame);
  });
}

describe('the NextIds fast path answers exactly as connect-es does', () => {
  it.each([
    ['count 3 as JSON', '{"count":3}', 'application/json'],
    ['count 3 as JSON with charset', '{"count":3}', 'application/json; charset=utf-8'],
    ['count 0', '{}', 'application/json'],
    ['count above the maximum', '{"count":101}', 'application/json'],
    ['a wrong field type', '{"count":"x"}', 'application/json'],
    ['an unknown field (ignored)', '{"count":1,"future":true}', 'application/json'],
    ['a body above the limit', `{"count":1,"pad":"${'x'.repeat(2000)}"}`, 'application/json'],
  ])('%s', async (_what, body, type) => {
    const [a, b] = await Promise.all(servers.map((s) => post(s.base, body, type)));
    expect(b).toEqual(a);
  });

  it.each([
    ['count 7 as protobuf', new Uint8Array([0x08, 0x07])],
    ['count 100 as protobuf', new Uint8Array([0x08, 0x64])],
    ['an undecodable body', new Uint8Array([0x0a, 0xff, 0xff])],
  ])('%s', async (_what, body) => {
    const [a, b] = await Promise.all(servers.map((s) => post(s.base, body, 'application/proto')));
    expect({ ...b, text: '' }).toEqual({ ...a, text: '' });
    if ((a?.status ?? 0) !== 200) expect(b?.text).toEqual(a?.text);
  });

  it.each([
    ['count 5', new Uint8Array([0x08, 0x05])],
    ['count 0', new Uint8Array([])],
    ['an undecodable message', new Uint8Array([0x0a, 0xff])],
  ])('over gRPC: %s', async (_what, payload) => {
    const [a, b] = await Promise.all(servers.map((s) => grpc(s.base, payload)));
    // An error may come as trailers-only (fast path) or as headers then trailers (connect-es): both are
    // gRPC; what a client sees is the status wherever it travels.
    const seen = (r: typeof a) => ({
      status: r?.headers['status'],
      contentType: r?.headers['content-type'],
      grpcStatus: r?.trailers['grpc-status'] ?? r?.headers['grpc-status'],
      bodyBytes: r?.body.length,
    });
    expect(seen(b)).toEqual(seen(a));
  });
});

describe('the serving port', () => {
  it('answers /healthz always and /readyz by readiness, GET or HEAD only', async () => {
    const base = servers[0]?.base ?? '';
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    ready = false;
    const notReady = await fetch(`${base}/readyz`);
    expect(notReady.status).toBe(503);
    expect(await notReady.json()).toEqual({ ready: false });
    ready = true;
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
    expect((await fetch(`${base}/readyz`, { method: 'POST' })).status).toBe(405);
  });

  it('drops an HTTP/2 connection it answered with GOAWAY once the peer stops answering, keeps a live idle one', async () => {
    const server = createServingServer({
      routes: () => undefined,
      ready: () => true,
      maxBodyBytes: 1024,
      requestTimeoutMs: 2000,
      http2ProbeMs: 200,
    });
    const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
    const live = connectHttp2(`http://127.0.0.1:${port}`);
    try {
      // A SETTINGS frame whose length is not a multiple of 6: FRAME_SIZE_ERROR, GOAWAY, and node:http2 stops
      // reading that socket. The peer keeps it open and silent: the server must not hold it to the idle timeout.
      const dead = connectTcp(port, '127.0.0.1');
      const closed = new Promise<number>((resolve) => {
        const t0 = Date.now();
        dead.on('close', () => resolve(Date.now() - t0));
      });
      dead.on('error', () => undefined);
      dead.resume(); // read, or this end never sees the server close
      dead.write(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), Buffer.from([0, 0, 5, 4, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0])]));
      const ms = await closed;
      expect(ms).toBeLessThan(10_000); // the idle timeout is 60 s; the probe drops it within ~2 × 200 ms
      // The live client, idle for many probe periods, answered the PINGs and still gets answers on the same connection.
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const answer = await new Promise<number>((resolve, reject) => {
        const stream = live.request({ ':path': '/healthz' });
        stream.on('response', (h) => resolve(Number(h[':status'])));
        stream.on('error', reject);
        stream.resume();
      });
      expect(answer).toBe(200);
      expect(live.destroyed).toBe(false);
    } finally {
      live.destroy();
      await server.close(1000);
    }
  });
});
