import { Code, type ConnectError } from '@connectrpc/connect';
import { Health, HealthCheckResponse_ServingStatus } from '@idgen/proto';
import { NEXT_IDS_PATH, createNextIdsFastPath } from '../fast-path.js';
import { CONNECT_JSON } from '../nextids-codec.js';
import { Dispatcher, HEALTHZ_PATH, READYZ_PATH, isProbePath, pathOf } from './dispatcher.js';
import type { ServingServerOptions } from './contracts.js';
import { resolveTransportSettings } from './transport-settings.js';

// The transport-independent part of the serving port, alone: no socket, no front end.
function dispatcher(over: Partial<ServingServerOptions> = {}): { d: Dispatcher; timeouts: () => number } {
  let timeouts = 0;
  const options: ServingServerOptions = {
    routes: (router) => {
      router.service(Health, { check: () => ({ status: HealthCheckResponse_ServingStatus.SERVING }) });
    },
    ready: () => true,
    maxBodyBytes: 1024,
    requestTimeoutMs: 100,
    onRequestTimeout: () => timeouts++,
    ...over,
  };
  return { d: new Dispatcher(options, resolveTransportSettings(options)), timeouts: () => timeouts };
}

/** Resolves once `condition` holds; rejects after `ms`. */
async function until(condition: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('Dispatcher', () => {
  it("routes a path to connect-es's handler of its service, nothing for any other", () => {
    const { d } = dispatcher();
    const check = d.route('POST', '/grpc.health.v1.Health/Check?x=1', {}, true);
    expect(check.kind === 'connect' && check.handler.requestPath).toBe('/grpc.health.v1.Health/Check');
    expect(d.route('POST', '/grpc.health.v1.Health/Nope', {}, true)).toEqual({ kind: 'not-found' });
    d.stop();
  });

  it('routes each request once: a probe answered, the fast path with its codec (the same route object each time), else connect-es or not found', () => {
    const { d: plain } = dispatcher();
    const fastPath = createNextIdsFastPath({ nextIds: () => [], maxBodyBytes: 1024 });
    const { d } = dispatcher({ fastPath });
    const json = { 'content-type': 'application/json' };
    const probe = d.route('GET', '/readyz?verbose=1', {}, false);
    expect(probe.kind === 'probe' && probe.answer.status).toBe(200);
    const fast = d.route('POST', NEXT_IDS_PATH, json, false);
    expect(fast).toEqual({ kind: 'fast', fast: fastPath, codec: CONNECT_JSON });
    expect(d.route('POST', `${NEXT_IDS_PATH}?x`, json, true)).toBe(fast);
    // What the fast path does not take (gRPC-Web, GET) is left to connect-es's routes: none for NextIds here.
    expect(d.route('POST', NEXT_IDS_PATH, { 'content-type': 'application/grpc-web' }, true).kind).toBe('not-found');
    expect(d.route('GET', NEXT_IDS_PATH, json, false).kind).toBe('not-found');
    expect(plain.route('POST', NEXT_IDS_PATH, json, false).kind).toBe('not-found');
    expect([d.closing, d.inFlight]).toEqual([false, 0]);
    d.beginClose();
    expect(d.closing).toBe(true);
    d.stop();
    plain.stop();
  });

  it('answers the probes: alive, ready or not with the detail, GET and HEAD only', () => {
    let ready = true;
    const { d } = dispatcher({ ready: () => ready, readyDetail: () => ({ reason: ready ? 'ready' : 'lease-lost' }) });
    const body = (path: string, method = 'GET') => JSON.parse(d.probe(method, path).body) as unknown;
    expect([d.probe('GET', HEALTHZ_PATH).status, body(HEALTHZ_PATH)]).toEqual([200, { status: 'alive' }]);
    expect([d.probe('HEAD', READYZ_PATH).status, body(READYZ_PATH)]).toEqual([200, { ready: true, reason: 'ready' }]);
    ready = false;
    expect([d.probe('GET', READYZ_PATH).status, body(READYZ_PATH)]).toEqual([
      503,
      { ready: false, reason: 'lease-lost' },
    ]);
    const post = d.probe('POST', HEALTHZ_PATH);
    expect([post.status, post.headers.allow, post.headers['cache-control']]).toEqual([405, 'GET, HEAD', 'no-store']);
    expect(post.headers['content-length']).toBe(Buffer.byteLength(post.body));
    expect([isProbePath(HEALTHZ_PATH), isProbePath(READYZ_PATH), isProbePath('/healthz/x')]).toEqual([
      true,
      true,
      false,
    ]);
    expect([pathOf('/readyz?verbose=1'), pathOf('/a'), pathOf(undefined)]).toEqual(['/readyz', '/a', '']);
    d.stop();
  });

  it('drains: waits for the last request in flight, or gives up at the bound; a late request is counted', async () => {
    const { d, timeouts } = dispatcher();
    d.requestStarted();
    d.requestStarted();
    const drained = d.drain(60_000);
    d.requestDone();
    d.requestLate();
    await drained;
    expect([d.inFlight, timeouts()]).toEqual([0, 1]);
    d.requestStarted();
    await d.drain(10); // nobody finishes it: the bound ends the wait
    expect(d.inFlight).toBe(1);
    d.stop();
  });

  it('runs the deadline sweep for each front end, and stops it and aborts the calls still open at the end', async () => {
    const { d } = dispatcher();
    const sweeps: number[] = [];
    d.onDeadlineSweep((now) => sweeps.push(now));
    await until(() => sweeps.length >= 2);
    expect(sweeps[1]).toBeGreaterThan(sweeps[0] as number);
    const aborted: ConnectError[] = [];
    const kept = (e: ConnectError) => aborted.push(e);
    const gone = (): void => {
      throw new Error('a call untracked is not aborted');
    };
    d.trackCall(kept);
    d.trackCall(gone);
    d.untrackCall(gone);
    d.stop();
    expect(aborted.map((e) => [e.code, e.rawMessage])).toEqual([[Code.Unavailable, 'the server is shutting down']]);
    const count = sweeps.length;
    await new Promise((r) => setTimeout(r, 50)); // several sweep intervals (10 ms): none may run after stop()
    expect(sweeps.length).toBe(count);
  });
});
