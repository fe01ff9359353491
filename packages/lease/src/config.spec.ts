import { createLayout } from '@idgen/core';
import { resolveLeaseConfig, parseWorkerRange } from './config.js';
import type { EtcdLeaseOptions } from './config.js';
import { createEtcdLease } from './etcd-lease.js';
import { isLeaseError, LeaseConfigError } from './errors.js';
import { computeFloor, parseLastMsRecord, parseLayoutRecord, parseServingNode } from './records.js';
import { RecordingTarget } from './recording-target.test-helper.js';

const base: EtcdLeaseOptions = { endpoints: ['http://127.0.0.1:1'], region: 2 };

function problemsOf(o: Partial<EtcdLeaseOptions> & Record<string, unknown>): string[] {
  try {
    resolveLeaseConfig({ ...base, ...o } as EtcdLeaseOptions);
  } catch (e) {
    expect(e).toBeInstanceOf(LeaseConfigError);
    expect(isLeaseError(e)).toBe(true);
    return [...(e as LeaseConfigError).problems];
  }
  return [];
}

describe('lease configuration', () => {
  it('defaults match docs/design.md §3/§5', () => {
    const c = resolveLeaseConfig(base);
    expect(c).toMatchObject({
      prefix: '/idgen',
      region: 2,
      borrowSpare: false,
      workers: { first: 0, last: 127 },
      kind: 'service',
      ttlMs: 6000,
      keepAliveIntervalMs: 2000,
      keepAliveTimeoutMs: 1500,
      fenceMarginMs: 1000,
      clockBoundMs: 10,
    });
    expect(c.nodeId).toMatch(/^[A-Za-z0-9._:-]+$/);
  });

  it.each<[string, Record<string, unknown>, RegExp]>([
    ['no endpoints', { endpoints: [] }, /endpoints must list/],
    ['endpoint without scheme', { endpoints: ['127.0.0.1:2379'] }, /not an etcd client URL/],
    ['endpoint with path', { endpoints: ['http://127.0.0.1:2379/v3'] }, /not an etcd client URL/],
    ['endpoint not a string', { endpoints: [42] }, /not an etcd client URL/],
    ['prefix without slash', { prefix: 'idgen' }, /prefix must start/],
    ['prefix with trailing slash', { prefix: '/idgen/' }, /prefix must start/],
    ['prefix with space', { prefix: '/id gen' }, /prefix must start/],
    ['region too big', { region: 8 }, /region must be an integer from 0 to 7/],
    ['region negative', { region: -1 }, /region must be/],
    ['region fractional', { region: 1.5 }, /region must be/],
    ['region missing', { region: undefined }, /region must be/],
    ['borrowSpare not a boolean', { borrowSpare: 'yes' as unknown as boolean }, /borrowSpare must be true or false/],
    ['borrowSpare on a serving node', { borrowSpare: true }, /borrowSpare is for embedded callers/],
    ['workers reversed', { workers: { first: 9, last: 3 } }, /workers must be a range/],
    ['workers too big', { workers: '0-128' }, /workers must be a range within 0-127/],
    ['workers garbage', { workers: 'all' }, /workers must look like/],
    ['kind', { kind: 'batch' }, /kind must be/],
    ['node id with slash', { nodeId: 'a/b' }, /nodeId must be/],
    ['node id empty', { nodeId: '' }, /nodeId must be/],
    ['ttl fractional', { ttlSeconds: 2.5 }, /ttlSeconds must be a whole number/],
    ['ttl below etcd minimum', { ttlSeconds: 1 }, /from 2 to 3600/],
    ['interval too small', { keepAliveIntervalMs: 10 }, /keepAliveIntervalMs must be/],
    ['timeout not below interval', { keepAliveTimeoutMs: 2000 }, /keepAliveTimeoutMs must be/],
    ['margin not below ttl', { fenceMarginMs: 6000 }, /fenceMarginMs must be/],
    [
      'interval too long for the ttl',
      { ttlSeconds: 3, keepAliveIntervalMs: 1500, fenceMarginMs: 1000 },
      /would fence between keep-alives/,
    ],
    ['clock bound negative', { clockBoundMs: -1 }, /clockBoundMs/],
    ['backoff reversed', { backoff: { initialMs: 100, maxMs: 10 } }, /backoff/],
    ['tls with http endpoints', { tls: { ca: 'x' } }, /tls is set/],
    ['auth without user', { auth: { username: '', password: 'x' } }, /auth needs/],
  ])('%s is refused with a clear message', (_name, o, message) => {
    const problems = problemsOf(o);
    expect(problems.join('\n')).toMatch(message);
  });

  it('lists every problem at once', () => {
    expect(problemsOf({ region: 99, kind: 'x' as 'service', ttlSeconds: 0 })).toHaveLength(3);
  });

  it('createEtcdLease throws before any I/O (no etcd on port 1 is needed)', () => {
    expect(() => createEtcdLease({ ...base, region: 42 }, new RecordingTarget('t'))).toThrow(LeaseConfigError);
  });

  it('uses the layout for ranges', () => {
    const layout = createLayout({ regionBits: 2, workerBits: 8, timestampBits: 41, sequenceBits: 12 });
    expect(resolveLeaseConfig({ ...base, layout, region: 3 }).workers).toEqual({ first: 0, last: 255 });
    expect(problemsOf({ layout, region: 4 })[0]).toMatch(/0 to 3/);
  });

  it('parses worker ranges', () => {
    expect(parseWorkerRange('0-127')).toEqual({ first: 0, last: 127 });
    expect(parseWorkerRange(' 5 ')).toEqual({ first: 5, last: 5 });
    expect(() => parseWorkerRange('1-2-3')).toThrow(LeaseConfigError);
  });
});

describe('records', () => {
  it('computes the floor per docs/design.md §5', () => {
    const o = { ttlMs: 6000, clockBoundMs: 10, epochMs: 1_704_067_200_000 };
    expect(computeFloor(undefined, o)).toBe(1_704_067_199_999);
    expect(computeFloor({ ms: 1_800_000_000_000, released: true, nodeId: 'a', at: '' }, o)).toBe(1_800_000_000_000);
    expect(computeFloor({ ms: 1_800_000_000_000, released: false, nodeId: 'a', at: '' }, o)).toBe(1_800_000_006_010);
    // the writer's longer TTL wins: never a floor lower than the truth
    expect(computeFloor({ ms: 1_800_000_000_000, released: false, nodeId: 'a', at: '', ttlMs: 60_000 }, o)).toBe(
      1_800_000_060_010,
    );
  });

  it.each([
    ['not json', '{', /not JSON/],
    ['an array', '[1]', /not a JSON object/],
    ['ms missing', '{"released":false}', /field ms/],
    ['ms a string', '{"ms":"1","released":false}', /field ms/],
    ['ms negative', '{"ms":-5,"released":false}', /field ms/],
    ['ms fractional', '{"ms":1.5,"released":false}', /field ms/],
    ['released missing', '{"ms":5}', /field released/],
    ['ttl garbage', '{"ms":5,"released":true,"ttlMs":"x"}', /field ttlMs/],
  ])('last-ms garbage (%s) is a clear CorruptRecordError naming the key', (_n, raw, message) => {
    expect(() => parseLastMsRecord('/p/regions/1/last-ms/3', raw)).toThrow(message);
    expect(() => parseLastMsRecord('/p/regions/1/last-ms/3', raw)).toThrow('/p/regions/1/last-ms/3');
  });

  it('layout and node garbage are clear errors', () => {
    expect(() => parseLayoutRecord('/p/layout', 'hello')).toThrow(/\/p\/layout holds an unreadable value \(not JSON\)/);
    expect(() => parseLayoutRecord('/p/layout', '{"epochMs":1}')).toThrow(/field timestampBits/);
    expect(() => parseServingNode('/p/n', '{"nodeId":"a","region":1,"worker":"x","address":""}')).toThrow(
      /field worker/,
    );
    expect(parseServingNode('/p/n', '{"nodeId":"a","region":1,"worker":2,"address":"h:1","startedAt":"t"}')).toEqual({
      nodeId: 'a',
      region: 1,
      worker: 2,
      address: 'h:1',
      startedAt: 't',
    });
  });
});
