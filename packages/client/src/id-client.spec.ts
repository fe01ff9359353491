import { Code } from '@connectrpc/connect';
import { DEFAULT_LAYOUT, createIdForms } from '@idgen/core';
import { FakeNetwork } from './fake-transport.test-helper.js';
import { ManualClock, flush } from './manual-clock.test-helper.js';
import { isIdClientError, isIdsUnavailableError } from './errors.js';
import { createIdClient, type IdClient, type IdClientOptions } from './id-client.js';
import type { DiscoveredNode, NodeDiscovery } from './node-pool.js';

const clients: IdClient[] = [];

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
});

/** A client on fake nodes `a`, `b`, … of region 1, a manual clock and a deterministic balancer. */
function setup(names: string[] = ['a', 'b', 'c'], options: Partial<IdClientOptions> = {}) {
  const clock = new ManualClock();
  const net = new FakeNetwork();
  for (const n of names) net.add(n, 1);
  const client = createIdClient({
    region: 1,
    nodes: names.map((n) => `http://${n}:8080`),
    clock,
    transport: net.factory,
    random: () => 0,
    ...options,
  });
  clients.push(client);
  return { clock, net, client };
}

function regionOf(id: bigint): number {
  return DEFAULT_LAYOUT.decompose(id).region;
}

/** Settles `p` into a tagged result, so a test can look at a rejection without an unhandled warning. */
function outcome<T>(p: Promise<T>): { value?: T; error?: unknown; done: boolean } {
  const o: { value?: T; error?: unknown; done: boolean } = { done: false };
  p.then(
    (v) => Object.assign(o, { value: v, done: true }),
    (e: unknown) => Object.assign(o, { error: e, done: true }),
  );
  return o;
}

describe('buffer', () => {
  it('prefills bufferSize IDs with one request and serves them with no further request', async () => {
    const { net, client } = setup(['a']);
    await flush();
    expect(net.log).toEqual([{ url: 'http://a:8080', count: 100 }]);
    const ids: bigint[] = [];
    for (let i = 0; i < 50; i++) ids.push(client.tryNextId() as bigint);
    expect(net.log).toHaveLength(1);
    expect(client.stats()).toMatchObject({ hits: 50, misses: 0, buffered: 50 });
    for (let i = 1; i < ids.length; i++) expect(ids[i]).toBe((ids[i - 1] as bigint) + 1n);
  });

  it('refills in the background only once the buffer falls below the low-water mark', async () => {
    const { net, client } = setup(['a'], { bufferSize: 100, lowWater: 30 });
    await flush();
    for (let i = 0; i < 70; i++) await client.nextId();
    await flush();
    expect(net.log).toHaveLength(1); // 30 left: not below the mark
    await client.nextId(); // 29 left
    await flush();
    expect(net.log).toHaveLength(2);
    expect(net.log[1]?.count).toBe(71); // back to 100
    expect(client.stats().buffered).toBe(100);
  });

  it('keeps one request in flight however many callers wait', async () => {
    const { net, client } = setup(['a'], { prefill: false });
    net.get('a').behaviour = 'manual';
    const calls = Array.from({ length: 300 }, () => client.nextId());
    await flush();
    expect(net.get('a').pending).toHaveLength(1);
    expect(net.get('a').requests).toEqual([400]); // 100 buffer + 300 owed
    net.get('a').respond();
    const ids = await Promise.all(calls);
    await flush();
    expect(new Set(ids).size).toBe(300);
    expect(net.maxInFlight).toBe(1);
  });

  it('discards IDs once maxAgeMs has passed since they arrived, and counts them', async () => {
    const { clock, net, client } = setup(['a'], { prefill: true });
    await flush();
    const first = client.tryNextId() as bigint;
    await clock.advance(999);
    const stillFresh = client.tryNextId() as bigint;
    expect(stillFresh).toBe(first + 1n);
    await clock.advance(1);
    expect(client.tryNextId()).toBeUndefined(); // 1000 ms old: discarded, not handed out
    expect(client.stats().discarded).toBe(98);
    await flush();
    const fresh = await client.nextId();
    expect(fresh > stillFresh).toBe(true);
    expect(DEFAULT_LAYOUT.decompose(fresh).timestampMs).toBeGreaterThan(DEFAULT_LAYOUT.decompose(first).timestampMs);
    expect(net.log.length).toBeGreaterThanOrEqual(2);
  });

  it('hands IDs out in increasing order within each block, blocks in arrival order', async () => {
    const { net, client } = setup(['a'], { bufferSize: 64, lowWater: 1 });
    net.get('a').blocksPerAnswer = 4;
    await flush();
    const ids = await client.nextIds(60);
    for (let i = 1; i < ids.length; i++) expect((ids[i] as bigint) > (ids[i - 1] as bigint)).toBe(true);
    expect(new Set(ids.map((id) => DEFAULT_LAYOUT.decompose(id).timestampMs)).size).toBe(4);
  });

  it('serves thousands of concurrent nextId() calls with no duplicate', async () => {
    const { net, client } = setup(['a', 'b', 'c']);
    const calls = Array.from({ length: 10_000 }, () => client.nextId());
    const ids = await Promise.all(calls);
    expect(new Set(ids).size).toBe(10_000);
    expect(net.log.every((l) => l.count >= 1 && l.count <= 4096)).toBe(true);
    expect(net.maxInFlight).toBe(1);
  });

  it('serves waiting callers in call order', async () => {
    const { net, client } = setup(['a'], { prefill: false });
    net.get('a').behaviour = 'manual';
    const order: number[] = [];
    const calls = Array.from({ length: 20 }, (_, i) => client.nextId().then((id) => (order.push(i), id)));
    await flush();
    net.get('a').respond();
    const ids = await Promise.all(calls);
    expect(order).toEqual(Array.from({ length: 20 }, (_, i) => i));
    for (let i = 1; i < ids.length; i++) expect(ids[i]).toBe((ids[i - 1] as bigint) + 1n);
  });

  it('sizes refills to observed demand, up to the server maximum', async () => {
    const { clock, net, client } = setup(['a']);
    await flush();
    // 40 IDs per ms (40,000/s) for 2 s.
    for (let ms = 0; ms < 2000; ms++) {
      for (let i = 0; i < 40; i++) await client.nextId();
      await clock.advance(1);
    }
    const counts = net.log.map((l) => l.count);
    expect(Math.max(...counts)).toBeGreaterThan(1000);
    expect(Math.max(...counts)).toBeLessThanOrEqual(4096);
    expect(net.maxInFlight).toBe(1);
  });

  it('nextIds(n) larger than one batch spans several refills without duplicates', async () => {
    const { net, client } = setup(['a', 'b']);
    const ids = await client.nextIds(10_000);
    expect(ids).toHaveLength(10_000);
    expect(new Set(ids).size).toBe(10_000);
    expect(net.log.every((l) => l.count <= 4096)).toBe(true);
  });

  it('serves a call made just as a refill loop decides to stop', async () => {
    const { net, client } = setup(['a'], { prefill: false });
    await client.nextId(); // the loop lands 101 IDs, serves this call, and stops (buffer full)
    const ids = await client.nextIds(5000); // queued in the same tick: needs a new loop
    expect(new Set(ids).size).toBe(5000);
    expect(net.log.length).toBeGreaterThanOrEqual(2);
  });

  it('nextIdString gives the decimal form', async () => {
    const { client } = setup(['a']);
    const text = await client.nextIdString();
    expect(text).toMatch(/^[1-9][0-9]*$/);
    expect(regionOf(BigInt(text))).toBe(1);
  });
});

describe('abort and deadline', () => {
  it('rejects an aborted call with the signal reason and keeps serving the others', async () => {
    const { net, client } = setup(['a'], { prefill: false });
    net.get('a').behaviour = 'manual';
    const controller = new AbortController();
    const aborted = outcome(client.nextId({ signal: controller.signal }));
    const other = client.nextId();
    await flush();
    controller.abort(new Error('caller gave up'));
    await flush();
    expect(aborted).toMatchObject({ done: true, error: new Error('caller gave up') });
    net.get('a').respond();
    await expect(other).resolves.toEqual(expect.any(BigInt));
  });

  it('rejects at once when the signal is already aborted', async () => {
    const { client } = setup(['a'], { prefill: false });
    await expect(client.nextId({ signal: AbortSignal.abort('stop') })).rejects.toBe('stop');
  });

  it('rejects with IdsUnavailableError at the deadline, not before, when no node answers', async () => {
    const { clock, net, client } = setup(['a', 'b'], { prefill: false, deadlineMs: 2000, attemptTimeoutMs: 300 });
    net.get('a').behaviour = 'hang';
    net.get('b').behaviour = 'hang';
    const call = outcome(client.nextId());
    await clock.advance(1999);
    expect(call.done).toBe(false);
    await clock.advance(1);
    expect(call.done).toBe(true);
    expect(isIdsUnavailableError(call.error)).toBe(true);
    expect(isIdClientError(call.error)).toBe(true);
    if (!isIdsUnavailableError(call.error)) throw call.error;
    expect(call.error.code).toBe('ids-unavailable');
    expect(call.error.retryable).toBe(true);
    expect(call.error.waitedMs).toBe(2000);
    expect(call.error.attempts.map((a) => a.code)).toContain('deadline_exceeded');
    expect(call.error.message).toMatch(/region 1: 2\/2 nodes failing/);
  });

  it('a per-call deadline overrides the client default', async () => {
    const { clock, net, client } = setup(['a'], { prefill: false, deadlineMs: 5000 });
    net.get('a').behaviour = 'hang';
    const call = outcome(client.nextId({ deadlineMs: 100 }));
    await clock.advance(100);
    expect(isIdsUnavailableError(call.error)).toBe(true);
  });
});

describe('nodes and failover', () => {
  it('balances refills round-robin over healthy nodes', async () => {
    const { net, client } = setup(['a', 'b', 'c'], { bufferSize: 10, lowWater: 9 });
    for (let i = 0; i < 6; i++) {
      await flush();
      await client.nextIds(10);
    }
    await flush();
    expect(net.order().slice(0, 6)).toEqual(['a', 'b', 'c', 'a', 'b', 'c']);
  });

  it('on UNAVAILABLE or a refused connection tries the next node at once, within the same call', async () => {
    const { clock, net, client } = setup(['a', 'b', 'c'], { prefill: false });
    net.get('a').behaviour = 'unavailable';
    net.get('b').behaviour = 'refused';
    const id = await client.nextId();
    expect(regionOf(id)).toBe(1);
    expect(net.order()).toEqual(['a', 'b', 'c']);
    expect(clock.monoMs()).toBe(10_000); // no time passed: no waiting between nodes
    expect(client.stats()).toMatchObject({ retries: 2, failovers: 0 });
    const health = Object.fromEntries(client.stats().nodes.map((n) => [n.url, n.healthy]));
    expect(health).toEqual({ 'http://a:8080': false, 'http://b:8080': false, 'http://c:8080': true });
  });

  it('with hedging off, a node that hangs is abandoned after attemptTimeoutMs and the next one serves the call', async () => {
    const { clock, net, client } = setup(['a', 'b'], {
      prefill: false,
      attemptTimeoutMs: 300,
      deadlineMs: 2000,
      hedge: false,
    });
    net.get('a').behaviour = 'hang';
    const call = outcome(client.nextId());
    await clock.advance(299);
    expect(call.done).toBe(false);
    await clock.advance(1);
    expect(call.done).toBe(true);
    expect(typeof call.value).toBe('bigint');
    expect(net.order()).toEqual(['a', 'b']);
  });

  it('skips a failed node during its backoff and tries it again afterwards', async () => {
    const { clock, net, client } = setup(['a', 'b'], {
      bufferSize: 10,
      lowWater: 9,
      backoff: { initialMs: 1000, maxMs: 1000 },
    });
    net.get('a').behaviour = 'unavailable';
    await flush(); // prefill: a fails, b serves
    for (let i = 0; i < 3; i++) {
      await client.nextIds(10);
      await flush();
    }
    expect(net.order()).toEqual(['a', 'b', 'b', 'b', 'b']);
    net.get('a').behaviour = 'ok';
    await clock.advance(800); // backoff with random() = 0: 1000 × 0.8
    await client.nextIds(10);
    await flush();
    await client.nextIds(10);
    await flush();
    expect(net.order().slice(5)).toEqual(['a', 'b']);
  });

  it('INVALID_ARGUMENT is not retried on another node', async () => {
    const { net, client } = setup(['a', 'b'], { prefill: false });
    net.get('a').behaviour = 'invalid-argument';
    const error: unknown = await client.nextId().catch((e: unknown) => e);
    expect(isIdClientError(error)).toBe(true);
    expect(isIdsUnavailableError(error)).toBe(false);
    expect(error).toMatchObject({ code: 'rejected', retryable: false });
    expect(net.order()).toEqual(['a']);
    expect(client.stats().nodes.every((n) => n.healthy)).toBe(true);
  });

  it('treats a malformed response as a node failure', async () => {
    const { net, client } = setup(['a', 'b'], { prefill: false });
    net.get('a').behaviour = 'garbage';
    await client.nextId();
    expect(net.order()).toEqual(['a', 'b']);
    expect(client.stats().nodes.find((n) => n.url === 'http://a:8080')?.lastFailure?.code).toBe('internal');
  });

  it('fails over to fallback regions, in order, only when every home node failed and the buffer is empty', async () => {
    const clock = new ManualClock();
    const net = new FakeNetwork();
    net.add('h1', 2).behaviour = 'unavailable';
    net.add('h2', 2).behaviour = 'refused';
    net.add('f3', 3).behaviour = 'unavailable';
    net.add('f4', 4);
    const client = createIdClient({
      region: 2,
      nodes: ['http://h1:8080', 'h2:8080'],
      fallbackRegions: [
        { region: 3, nodes: ['http://f3:8080'] },
        { region: 4, nodes: ['http://f4:8080'] },
      ],
      clock,
      transport: net.factory,
      random: () => 0,
      prefill: false,
    });
    clients.push(client);
    const id = await client.nextId();
    expect(net.order()).toEqual(['h1', 'h2', 'f3', 'f4']);
    expect(regionOf(id)).toBe(4); // IDs from there carry that region's code
    expect(client.stats()).toMatchObject({ failovers: 1, retries: 3 });
  });

  it('a background refill does not fail over while the buffer still holds IDs', async () => {
    const clock = new ManualClock();
    const net = new FakeNetwork();
    const home = net.add('h1', 2);
    net.add('f3', 3);
    const client = createIdClient({
      region: 2,
      nodes: ['http://h1:8080'],
      fallbackRegions: [{ region: 3, nodes: ['http://f3:8080'] }],
      clock,
      transport: net.factory,
      random: () => 0,
    });
    clients.push(client);
    await flush();
    home.behaviour = 'unavailable';
    await client.nextIds(60); // 40 left, below the mark: a background refill fails on h1
    await flush();
    expect(net.order()).toEqual(['h1', 'h1']);
    await client.nextIds(40); // buffer spent
    const id = await client.nextId(); // now the fallback serves
    expect(regionOf(id)).toBe(3);
    expect(net.order()).toEqual(['h1', 'h1', 'f3']);
  });

  it('when everything is down: IdsUnavailableError once the buffer is spent, then recovery', async () => {
    const { clock, net, client } = setup(['a'], { bufferSize: 10, lowWater: 1, deadlineMs: 1000 });
    await flush();
    net.get('a').behaviour = 'refused';
    const buffered = await client.nextIds(10); // the buffer still serves
    expect(buffered).toHaveLength(10);
    const call = outcome(client.nextId());
    await clock.advance(1000);
    expect(isIdsUnavailableError(call.error)).toBe(true);
    net.get('a').behaviour = 'ok';
    const back = outcome(client.nextId());
    await clock.advance(1000);
    expect(typeof back.value).toBe('bigint');
    expect(buffered).not.toContain(back.value);
  });
});

describe('discovery', () => {
  function fakeDiscovery(initial: DiscoveredNode[]) {
    const listeners = new Set<(nodes: readonly DiscoveredNode[]) => void>();
    const discovery: NodeDiscovery = {
      list: () => Promise.resolve(initial),
      watch(fn) {
        listeners.add(fn);
        return () => listeners.delete(fn);
      },
    };
    return {
      discovery,
      publish: (nodes: DiscoveredNode[]) => listeners.forEach((fn) => fn(nodes)),
      listeners,
    };
  }

  it('uses the nodes discovery lists, picks up new ones and drops departed ones', async () => {
    const clock = new ManualClock();
    const net = new FakeNetwork();
    net.add('n1', 5);
    net.add('n2', 5);
    const d = fakeDiscovery([]);
    const client = createIdClient({
      region: 5,
      discovery: d.discovery,
      clock,
      transport: net.factory,
      random: () => 0,
    });
    clients.push(client);
    const waiting = outcome(client.nextId());
    await clock.advance(100);
    expect(waiting.done).toBe(false); // no node known yet
    d.publish([{ address: 'n1:8080', region: 5 }]);
    await clock.advance(1);
    expect(typeof waiting.value).toBe('bigint');
    d.publish([
      { address: 'n2:8080', region: 5 },
      { address: 'other:8080', region: 6 },
    ]);
    await flush();
    expect(net.closed).toEqual(['http://n1:8080']);
    expect(client.stats().nodes.map((n) => n.url)).toEqual(['http://n2:8080']);
    await client.nextIds(100);
    await flush();
    expect(net.order().at(-1)).toBe('n2');
    await client.close();
    expect(d.listeners.size).toBe(0);
  });
});

describe('lifecycle and options', () => {
  it('close rejects waiting calls with code closed, closes connections, and later calls reject', async () => {
    const { net, client } = setup(['a'], { prefill: false });
    net.get('a').behaviour = 'hang';
    const waiting = client.nextId().catch((e: unknown) => e);
    await flush();
    await client.close();
    expect(await waiting).toMatchObject({ code: 'closed' });
    await expect(client.nextId()).rejects.toMatchObject({ code: 'closed' });
    expect(client.tryNextId()).toBeUndefined();
    expect(net.closed).toEqual(['http://a:8080']);
  });

  it('refuses bad options with a message naming the option', () => {
    const base = { region: 1, nodes: ['a:1'], transport: new FakeNetwork().factory, prefill: false };
    expect(() => createIdClient({ ...base, nodes: undefined })).toThrow(/exactly one of `nodes`/);
    expect(() => createIdClient({ ...base, nodes: [] })).toThrow(/`nodes` is empty/);
    expect(() => createIdClient({ ...base, bufferSize: 0 })).toThrow(/bufferSize/);
    expect(() => createIdClient({ ...base, lowWater: 100 })).toThrow(/lowWater must be an integer from 0 to 99/);
    expect(() => createIdClient({ ...base, maxAgeMs: -1 })).toThrow(/maxAgeMs/);
    expect(() => createIdClient({ ...base, fallbackRegions: [{ region: 1, nodes: ['b:1'] }] })).toThrow(/listed twice/);
  });

  it('nextIds refuses a count outside 1 … 65,536', async () => {
    const { client } = setup(['a'], { prefill: false });
    await expect(client.nextIds(0)).rejects.toThrow(RangeError);
    await expect(client.nextIds(70_000)).rejects.toThrow(/1 to 65536/);
  });

  it('counts hits and misses', async () => {
    const { client } = setup(['a'], { prefill: false });
    await client.nextId(); // miss: waits for the first refill
    client.tryNextId(); // hit
    await client.nextId(); // hit
    expect(client.stats()).toMatchObject({ hits: 2, misses: 1, refills: 1 });
  });

  it('classifies a ConnectError code other than the request codes as a node failure', async () => {
    const { net, client } = setup(['a', 'b'], { prefill: false });
    net.get('a').behaviour = 'manual';
    const call = client.nextId();
    await flush();
    net.get('a').fail(Code.ResourceExhausted);
    await call;
    expect(net.order()).toEqual(['a', 'b']);
  });
});

describe('forms (docs/design.md §1 "Forms")', () => {
  const key = '000102030405060708090a0b0c0d0e0f';
  const forms = createIdForms({ key });

  it('hands out the next ID in each form, which reads back as that ID', async () => {
    const { client } = setup(['a'], { keyedFormKey: key });
    await flush();
    const first = await client.nextId();
    const base32: string = await client.nextId({ form: 'base32' });
    const decimal: string = await client.nextId({ form: 'decimal' });
    const spread: bigint = await client.nextId({ form: 'spread' });
    const keyed: bigint = await client.nextId({ form: 'keyed', deadlineMs: 500 });
    expect(base32).toMatch(/^[0-7][0-9A-Z]{12}$/);
    expect(decimal).toMatch(/^[0-9]{19}$/);
    expect([
      forms.parse(base32, 'base32'),
      forms.parse(decimal, 'decimal'),
      forms.parse(spread, 'spread'),
      forms.parse(keyed, 'keyed'),
    ]).toEqual([first + 1n, first + 2n, first + 3n, first + 4n]);
  });

  it('hands out nextIds in a form, in the order handed out', async () => {
    const { client } = setup(['a']);
    await flush();
    const texts: string[] = await client.nextIds(5, { form: 'base32' });
    expect(texts).toHaveLength(5);
    expect([...texts].sort()).toEqual(texts);
    expect(texts.map((t) => regionOf(forms.parse(t, 'base32')))).toEqual([1, 1, 1, 1, 1]);
  });

  it('refuses an unknown form, or keyed without keyedFormKey, with a TypeError and takes no ID', async () => {
    const { client } = setup(['a']);
    await flush();
    const before = client.stats().hits;
    await expect(client.nextId({ form: 'hex' as 'base32' })).rejects.toThrow(/the forms are base32, decimal/);
    await expect(client.nextId({ form: 'keyed' })).rejects.toThrow(TypeError);
    await expect(client.nextIds(2, { form: 'keyed' })).rejects.toThrow(/keyedFormKey/);
    expect(client.stats().hits).toBe(before);
  });

  it('refuses a keyedFormKey of the wrong length when created', () => {
    expect(() => setup(['a'], { keyedFormKey: new Uint8Array(8) })).toThrow(/16 to 64 bytes/);
  });
});
