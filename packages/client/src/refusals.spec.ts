import { createLayout, DEFAULT_LAYOUT } from '@idgen/core';
import { BlockGuard } from './block-guard.js';
import { isIdsUnavailableError } from './errors.js';
import { FakeNetwork } from './fake-transport.test-helper.js';
import { createIdClient, MAX_BUFFER_SIZE, type IdClient, type IdClientOptions } from './id-client.js';
import { ManualClock, flush } from './manual-clock.test-helper.js';
import type { IdBlock } from './id-buffer.js';

// Issue 22, problem 5: the client refuses what is wrong. Unit level (fake transports, manual clock); the same rules
// against a real node behind a proxy that alters or repeats answers are in test/refusals.spec.ts.

const clients: IdClient[] = [];
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
});

const block = (timestampMs: number, region: number, worker: number, sequence: number, count: number): IdBlock => ({
  first: DEFAULT_LAYOUT.compose({ timestampMs, region, worker, sequence }),
  count,
});

describe('BlockGuard', () => {
  const guard = (): BlockGuard => new BlockGuard(DEFAULT_LAYOUT, new Set([2, 3]), 2);

  it('passes blocks of the home and fallback regions that rise per worker', () => {
    const g = guard();
    const blocks = [block(5, 2, 1, 0, 10), block(5, 3, 1, 0, 10)];
    expect(g.check(blocks, 'http://n')).toBeUndefined();
    g.accept(blocks);
    // Another worker's slot is independent: an older timestamp there is fine.
    expect(g.check([block(6, 2, 1, 0, 1), block(1, 2, 9, 0, 1)], 'http://n')).toBeUndefined();
  });

  it('refuses a region neither home nor fallback, naming the node, the region and the allowed ones', () => {
    expect(guard().check([block(5, 0, 4, 0, 10), block(6, 0, 4, 0, 1)], 'http://n:1')).toEqual({
      reason: 'foreign-region',
      region: 0,
      worker: 4,
      blocks: 2,
      message:
        'http://n:1 served IDs of region 0 (worker 4), which is neither the home region 2 nor a configured fallback ' +
        'region (3): refused',
    });
  });

  it('refuses a block that spills from its worker into the next slot', () => {
    expect(guard().check([block(5, 2, 4, 4090, 10)], 'http://n')?.reason).toBe('foreign-region');
  });

  it('refuses a block not above the last one taken from its worker (a repeat, an overlap), counted per block', () => {
    const g = guard();
    const first = [block(5, 2, 1, 0, 10)];
    g.accept(first);
    expect(g.check(first, 'http://n')).toMatchObject({ reason: 'replayed', region: 2, worker: 1, blocks: 1 });
    expect(g.check([block(5, 2, 1, 9, 5)], 'http://n')?.reason).toBe('replayed');
    expect(g.check([block(5, 2, 1, 10, 5)], 'http://n')).toBeUndefined();
    // A refused response is not remembered: the same good block still passes afterwards.
    expect(g.check([block(5, 2, 1, 10, 5)], 'http://n')).toBeUndefined();
  });

  it('reads region and worker from a custom layout', () => {
    const layout = createLayout({ timestampBits: 40, regionBits: 5, workerBits: 6, sequenceBits: 12 });
    const g = new BlockGuard(layout, new Set([17]), 17);
    const first = layout.compose({ timestampMs: 1, region: 17, worker: 63, sequence: 0 });
    expect(g.check([{ first, count: 4096 }], 'http://n')).toBeUndefined();
    const other = layout.compose({ timestampMs: 1, region: 16, worker: 63, sequence: 0 });
    expect(g.check([{ first: other, count: 1 }], 'http://n')).toMatchObject({ region: 16, worker: 63 });
  });
});

function client(net: FakeNetwork, options: Partial<IdClientOptions> = {}): IdClient {
  const c = createIdClient({
    region: 2,
    nodes: ['http://a:8080'],
    clock: new ManualClock(),
    transport: net.factory,
    random: () => 0,
    deadlineMs: 1000,
    ...options,
  });
  clients.push(c);
  return c;
}

describe('the client refuses', () => {
  it('IDs of a node serving another region: counted, the node skipped, the error names node and region', async () => {
    const net = new FakeNetwork();
    net.add('a', 0); // listed as region 2, serves region 0
    net.add('b', 2);
    const clock = new ManualClock();
    const c = client(net, { nodes: ['http://a:8080', 'http://b:8080'], clock, prefill: false });
    const id = await c.nextId();
    expect(DEFAULT_LAYOUT.decompose(id).region).toBe(2);
    expect(net.order()).toEqual(['a', 'b']);
    expect(c.stats()).toMatchObject({ refusedForeignRegion: 1, refusedReplayed: 0 });
    const a = c.stats().nodes.find((n) => n.url === 'http://a:8080');
    expect(a?.lastFailure).toMatchObject({ code: 'foreign_region', region: 2 });
    expect(a?.lastFailure?.message).toMatch(/^http:\/\/a:8080 served IDs of region 0 .* neither the home region 2/);
  });

  it('a lone wrong-region node: the call fails naming it, and no foreign ID is ever handed out', async () => {
    const net = new FakeNetwork();
    net.add('a', 0);
    const clock = new ManualClock();
    const c = client(net, { clock, prefill: false });
    const call = c.nextId().catch((e: unknown) => e);
    await flush();
    await clock.advance(1000);
    const e = await call;
    expect(isIdsUnavailableError(e)).toBe(true);
    expect((e as Error).message).toMatch(/http:\/\/a:8080 served IDs of region 0 \(worker 0\), which is neither/);
    expect(c.stats().buffered).toBe(0);
    expect(c.stats().refusedForeignRegion).toBeGreaterThanOrEqual(1);
  });

  it('a fallback region’s IDs from a home node are unique and kept (the rule is "home or fallback")', async () => {
    const net = new FakeNetwork();
    net.add('a', 3);
    net.add('f', 3);
    const c = client(net, { prefill: false, fallbackRegions: [{ region: 3, nodes: ['http://f:8080'] }] });
    expect(DEFAULT_LAYOUT.decompose(await c.nextId()).region).toBe(3);
    expect(c.stats().refusedForeignRegion).toBe(0);
  });

  it('a repeated answer: the replayed block is refused and counted, the next node serves', async () => {
    const net = new FakeNetwork();
    const a = net.add('a', 2);
    net.add('b', 2);
    const answer = a.mint(10);
    a.mint = () => answer; // a proxy that repeats its first response
    const clock = new ManualClock();
    const c = client(net, {
      nodes: ['http://a:8080', 'http://b:8080'],
      bufferSize: 10,
      lowWater: 0,
      prefill: false,
      clock,
    });
    const ids: bigint[] = [];
    // Round-robin comes back to a (once its backoff has passed), which repeats its first answer each time.
    for (let i = 0; i < 50 && net.order().filter((n) => n === 'a').length < 3; i++) {
      ids.push(...(await c.nextIds(10)));
      await clock.advance(500);
    }
    expect(net.order().filter((n) => n === 'a')).toHaveLength(3);
    expect(ids.filter((id) => id === answer[0]?.first)).toHaveLength(1);
    expect(new Set(ids).size).toBe(ids.length);
    expect(c.stats()).toMatchObject({ refusedReplayed: 2, refusedForeignRegion: 0 });
    expect(c.stats().nodes.find((n) => n.url === 'http://a:8080')?.lastFailure?.code).toBe('replayed_block');
  });
});

describe('construction refuses out-of-range options, naming the range', () => {
  const net = new FakeNetwork();
  it.each<[Partial<IdClientOptions>, RegExp]>([
    [{ region: 9 }, /^region must be an integer from 0 to 7 \(the layout's 3 region bits\), got 9$/],
    [{ region: -1 }, /^region must be an integer from 0 to 7/],
    [
      { fallbackRegions: [{ region: 8, nodes: ['x:1'] }] },
      /^fallbackRegions\[\]\.region must be an integer from 0 to 7/,
    ],
    [
      { bufferSize: 1_000_000 },
      new RegExp(`^bufferSize must be an integer from 1 to ${MAX_BUFFER_SIZE}, got 1000000$`),
    ],
    [{ bufferSize: 0 }, /^bufferSize must be an integer from 1 to 65536/],
    [{ maxBatch: 100_000 }, /^maxBatch must be an integer from 1 to 65536, got 100000$/],
    [{ lowWater: 100 }, /^lowWater must be an integer from 0 to 99, got 100$/],
    [{ maxAgeMs: Infinity }, /^maxAgeMs must be a number of ms above 0 and at most 2147483647/],
    [{ deadlineMs: 3e9 }, /^deadlineMs must be a number of ms above 0 and at most 2147483647, got 3000000000$/],
    [{ attemptTimeoutMs: 0 }, /^attemptTimeoutMs must be/],
    [{ backoff: { maxMs: -1 } }, /^backoff\.maxMs must be/],
  ])('%p', (options, message) => {
    let caught: unknown;
    try {
      client(net, options);
    } catch (e) {
      caught = e;
    }
    expect(caught).toBeInstanceOf(RangeError);
    expect((caught as Error).message).toMatch(message);
  });

  it('takes the region range from the given layout', () => {
    const layout = createLayout({ timestampBits: 40, regionBits: 4, workerBits: 7, sequenceBits: 12 });
    expect(() => client(net, { region: 15, layout, nodes: ['x:1'] })).not.toThrow();
    expect(() => client(net, { region: 16, layout })).toThrow(/from 0 to 15 \(the layout's 4 region bits\)/);
  });
});
