import { Code } from '@connectrpc/connect';
import { DEFAULT_LAYOUT } from '@idgen/core';
import type { ClientClock } from './clock.js';
import { isIdsUnavailableError } from './errors.js';
import { FakeNetwork } from './fake-transport.test-helper.js';
import { createIdClient, type IdClient, type IdClientOptions } from './id-client.js';
import { ManualClock, flush } from './manual-clock.test-helper.js';
import type { DiscoveredNode, NodeDiscovery } from './node-pool.js';

// Hedged refills (docs/design.md §7): a refill not answered within the hedge delay is asked of a second node; the
// first answer that passes the block checks wins, the other is discarded and counted, never handed out.

const clients: IdClient[] = [];

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
});

/** A manual clock that counts the timers scheduled on it. */
class CountingClock extends ManualClock {
  scheduled = 0;
  override schedule(fn: () => void, delayMs: number): () => void {
    this.scheduled++;
    return super.schedule(fn, delayMs);
  }
}

/** Home nodes of region 1 (held until the test answers), an optional fallback `f` of region 3. */
function setup(names: string[], options: Partial<IdClientOptions> = {}, fallback = false) {
  const clock = new CountingClock();
  const net = new FakeNetwork();
  for (const n of names) net.add(n, 1).behaviour = 'manual';
  if (fallback) net.add('f', 3);
  const client = createIdClient({
    region: 1,
    nodes: names.map((n) => `http://${n}:8080`),
    ...(fallback ? { fallbackRegions: [{ region: 3, nodes: ['http://f:8080'] }] } : {}),
    clock: clock as ClientClock,
    transport: net.factory,
    random: () => 0,
    prefill: false,
    bufferSize: 10,
    attemptTimeoutMs: 3000,
    deadlineMs: 10_000,
    hedge: { minMs: 10, maxMs: 40, latencyMultiple: 3 },
    ...options,
  });
  clients.push(client);
  return { clock, net, client };
}

function outcome<T>(p: Promise<T>): { value?: T; error?: unknown; done: boolean } {
  const o: { value?: T; error?: unknown; done: boolean } = { done: false };
  p.then(
    (v) => Object.assign(o, { value: v, done: true }),
    (e: unknown) => Object.assign(o, { error: e, done: true }),
  );
  return o;
}

const workerOf = (id: bigint): number => DEFAULT_LAYOUT.decompose(id).worker;
const regionOf = (id: bigint): number => DEFAULT_LAYOUT.decompose(id).region;

/** Every ID the client holds now, taken without starting a wait (a refill it kicks stays held). */
function drain(client: IdClient): bigint[] {
  const ids: bigint[] = [];
  for (let id = client.tryNextId(); id !== undefined; id = client.tryNextId()) ids.push(id);
  return ids;
}

describe('hedged refills', () => {
  it('asks a second node once the hedge delay has passed, and not before', async () => {
    const { clock, net, client } = setup(['a', 'b']);
    const call = outcome(client.nextId());
    await clock.advance(39); // no answer times known yet: the delay is the cap, 40 ms
    expect(net.order()).toEqual(['a']);
    expect(client.stats().hedgesSent).toBe(0);
    await clock.advance(1);
    expect(net.order()).toEqual(['a', 'b']);
    expect(client.stats().hedgesSent).toBe(1);
    net.get('b').respond();
    await flush();
    expect(call.done).toBe(true);
    expect(clock.monoMs()).toBe(10_040); // 40 ms, not the 3000 ms attempt timeout
  });

  it("sets the delay from the node's answer times: 15 ms (3 × their 90th percentile) for a node answering in 5 ms", async () => {
    const { clock, net, client } = setup(['a', 'b'], { bufferSize: 1, lowWater: 0 });
    // Warm both nodes (round-robin: a, b, a, b, …) at 5 ms an answer.
    for (let i = 0; i < 8; i++) {
      const call = client.nextId();
      await clock.advance(5);
      (i % 2 === 0 ? net.get('a') : net.get('b')).respond();
      await call;
      drain(client);
    }
    expect(client.stats().hedgesSent).toBe(0);
    const call = outcome(client.nextId()); // a's turn; a is frozen from here
    await clock.advance(14);
    expect(client.stats().hedgesSent).toBe(0);
    await clock.advance(1);
    expect(client.stats().hedgesSent).toBe(1);
    net.get('b').respond();
    await flush();
    expect(call.done).toBe(true);
  });

  it('the first answer wins; the loser is discarded and counted, and only the winner’s IDs are handed out', async () => {
    const { clock, net, client } = setup(['a', 'b']);
    const a = net.get('a');
    const b = net.get('b');
    const call = outcome(client.nextIds(3));
    await clock.advance(40);
    b.respond(); // the hedge answers first
    await flush();
    expect(call.done).toBe(true);
    a.respond(); // the primary, late
    await flush();
    const handedOut = [...(call.value as bigint[]), ...drain(client)];
    expect(handedOut).toHaveLength(13); // 10 for the buffer + 3 owed, all b's
    expect(new Set(handedOut.map(workerOf))).toEqual(new Set([b.worker]));
    expect(new Set(handedOut).size).toBe(handedOut.length);
    expect(client.stats()).toMatchObject({ hedgesSent: 1, hedgesWon: 1, hedgeBlocksDiscarded: 1, refills: 1 });
    // The late answer is a loser, not a failure: a stays healthy.
    expect(client.stats().nodes.every((n) => n.healthy)).toBe(true);
  });

  it('when the primary answers first after all, the hedge’s answer is the one discarded', async () => {
    const { clock, net, client } = setup(['a', 'b']);
    const call = outcome(client.nextId());
    await clock.advance(40);
    net.get('a').respond();
    await flush();
    net.get('b').respond();
    await flush();
    const handedOut = [call.value as bigint, ...drain(client)];
    expect(new Set(handedOut.map(workerOf))).toEqual(new Set([net.get('a').worker]));
    expect(client.stats()).toMatchObject({ hedgesSent: 1, hedgesWon: 0, hedgeBlocksDiscarded: 1 });
  });

  it('hedges to the fallback region when no other home node is left and the buffer is empty', async () => {
    const { clock, net, client } = setup(['a'], {}, true);
    const call = outcome(client.nextId());
    await clock.advance(40);
    expect(net.order()).toEqual(['a', 'f']);
    await flush();
    expect(call.done).toBe(true);
    expect(regionOf(call.value as bigint)).toBe(3);
    expect(client.stats()).toMatchObject({ hedgesSent: 1, hedgesWon: 1, failovers: 1 });
    net.get('a').respond();
    await flush();
    expect(client.stats().hedgeBlocksDiscarded).toBe(1);
  });

  it('both failing: falls back as without hedging (the next node at once, then the fallback region)', async () => {
    const { clock, net, client } = setup(['a', 'b'], {}, true);
    const call = outcome(client.nextId());
    await clock.advance(40);
    net.get('b').fail(Code.Unavailable); // the hedge fails: a may hedge again at once, to the fallback
    await clock.advance(0);
    expect(call.done).toBe(true);
    expect(regionOf(call.value as bigint)).toBe(3);
    net.get('a').fail(Code.Unavailable);
    await flush();
    expect(net.order()).toEqual(['a', 'b', 'f']);
    expect(client.stats()).toMatchObject({ retries: 1, failovers: 1, hedgesSent: 2, hedgesWon: 1 });
  });

  it('every node failing: IdsUnavailableError at the deadline, never an invented ID', async () => {
    const { clock, net, client } = setup(['a', 'b'], { deadlineMs: 1000 });
    const call = outcome(client.nextId());
    await clock.advance(40);
    net.get('b').fail(Code.Unavailable);
    net.get('a').fail(Code.Unavailable);
    await clock.advance(959);
    expect(call.done).toBe(false);
    for (let t = 0; t < 10 && !call.done; t++) {
      for (const n of ['a', 'b']) while (net.get(n).pending.length > 0) net.get(n).fail(Code.Unavailable);
      await clock.advance(1);
    }
    expect(call.done).toBe(true);
    expect(isIdsUnavailableError(call.error)).toBe(true);
  });

  it('hedging off behaves as before: one request in flight, the next node only after attemptTimeoutMs', async () => {
    const { clock, net, client } = setup(['a', 'b'], { hedge: false });
    const call = outcome(client.nextId());
    await clock.advance(2999);
    expect(net.order()).toEqual(['a']);
    await clock.advance(1);
    expect(net.order()).toEqual(['a', 'b']);
    net.get('b').respond();
    await flush();
    expect(call.done).toBe(true);
    expect(net.maxInFlight).toBe(1);
    expect(client.stats()).toMatchObject({ hedgesSent: 0, hedgesWon: 0, hedgeBlocksDiscarded: 0, retries: 1 });
  });

  it('costs one timer per refill and none per buffered nextId()', async () => {
    for (const hedge of [true, false]) {
      const { clock, net, client } = setup(['a', 'b'], { hedge, bufferSize: 100 });
      net.get('a').behaviour = 'ok';
      await client.nextId(); // one refill: the attempt timeout, and with hedging the hedge timer
      expect(clock.scheduled).toBe(hedge ? 3 : 2); // + the call's own deadline
      expect(clock.pending()).toBe(0); // all cancelled once the answer came
      for (let i = 0; i < 40; i++) await client.nextId();
      expect(clock.scheduled).toBe(hedge ? 3 : 2);
    }
  });

  it('ends a loser still running on a node discovery drops, closing its connection at once', async () => {
    const clock = new ManualClock();
    const net = new FakeNetwork();
    net.add('a', 1).behaviour = 'manual';
    net.add('b', 1);
    let publish: (nodes: readonly DiscoveredNode[]) => void = () => undefined;
    const discovery: NodeDiscovery = {
      list: () => Promise.resolve([{ address: 'a:8080' }, { address: 'b:8080' }]),
      watch: (fn) => {
        publish = fn;
        return () => undefined;
      },
    };
    const client = createIdClient({
      region: 1,
      discovery,
      clock,
      transport: net.factory,
      random: () => 0,
      prefill: false,
      attemptTimeoutMs: 3000,
      hedge: { maxMs: 40 },
    });
    clients.push(client);
    const call = client.nextId();
    await clock.advance(40); // a holds the refill, the hedge on b wins
    await call;
    expect(net.get('a').pending).toHaveLength(1);
    publish([{ address: 'b:8080' }]); // a leaves discovery while its losing request runs
    await flush();
    expect(net.get('a').pending).toHaveLength(0);
    expect(net.closed).toContain('http://a:8080');
    expect(client.stats().nodes.map((n) => n.url)).toEqual(['http://b:8080']);
  });

  it('refuses options out of range, naming them', () => {
    const base = { region: 1, nodes: ['http://a:8080'], prefill: false, attemptTimeoutMs: 500 };
    expect(() => createIdClient({ ...base, hedge: { maxMs: 500 } })).toThrow(/hedge.maxMs .* below attemptTimeoutMs/);
    expect(() => createIdClient({ ...base, hedge: { minMs: 50, maxMs: 20 } })).toThrow(/hedge.minMs/);
    expect(() => createIdClient({ ...base, hedge: { latencyMultiple: 0.5 } })).toThrow(/hedge.latencyMultiple/);
  });
});

describe('the block guard with two refills in flight', () => {
  /** A client whose guard has seen one block of b (served in its turn): b's first block can then be replayed. */
  async function withBothSeen() {
    const s = setup(['a', 'b'], { bufferSize: 5, lowWater: 0 });
    const first = s.client.nextIds(5);
    await flush();
    s.net.get('a').respond();
    await first;
    drain(s.client);
    const second = s.client.nextId();
    await flush();
    s.net.get('b').respond(); // b's first block: mint ms 1
    await second;
    drain(s.client);
    await flush();
    return s;
  }

  it("a hedge's replayed block is refused and counted, and the primary's answer is handed out", async () => {
    const { clock, net, client } = await withBothSeen();
    const b = net.get('b');
    const replay = DEFAULT_LAYOUT.compose({ timestampMs: 1, region: 1, worker: b.worker, sequence: 0 });
    const call = outcome(client.nextId()); // a's turn (round-robin), a holds it
    await clock.advance(40);
    expect(b.pending).toHaveLength(1);
    b.pending.shift()?.resolve([{ first: replay, count: 3 }]);
    await flush();
    expect(call.done).toBe(false); // refused: nothing of it handed out
    expect(client.stats().refusedReplayed).toBe(1);
    net.get('a').respond();
    await flush();
    expect(call.done).toBe(true);
    expect(workerOf(call.value as bigint)).toBe(net.get('a').worker);
    expect([call.value as bigint, ...drain(client)]).not.toContain(replay);
  });

  it("a hedge's foreign-region block is refused, and the primary's answer is handed out", async () => {
    const { clock, net, client } = setup(['a', 'b']);
    const call = outcome(client.nextId());
    await clock.advance(40);
    const foreign = DEFAULT_LAYOUT.compose({ timestampMs: 1, region: 5, worker: 3, sequence: 0 });
    net
      .get('b')
      .pending.shift()
      ?.resolve([{ first: foreign, count: 3 }]);
    await flush();
    expect(call.done).toBe(false);
    expect(client.stats().refusedForeignRegion).toBe(1);
    net.get('a').respond();
    await flush();
    expect(regionOf(call.value as bigint)).toBe(1);
    expect(drain(client).every((id) => regionOf(id) === 1)).toBe(true);
  });

  it("a loser's late, lower block from the node that won the next refill is discarded, not falsely refused", async () => {
    const { clock, net, client } = setup(['a', 'b'], { bufferSize: 5, lowWater: 0 });
    const a = net.get('a');
    const b = net.get('b');
    // Refill 1: a holds it, the hedge on b wins.
    const one = outcome(client.nextId());
    await clock.advance(40);
    b.respond();
    await flush();
    expect(one.done).toBe(true);
    drain(client);
    // Refill 2: b now fails, a (still holding refill 1) is asked again.
    b.behaviour = 'unavailable';
    const two = outcome(client.nextId());
    await flush();
    expect(a.pending).toHaveLength(2);
    const [late, current] = [a.pending[0], a.pending[1]];
    const lower = a.mint(late?.count ?? 1);
    const higher = a.mint(current?.count ?? 1);
    a.pending.splice(0, 2);
    current?.resolve(higher); // refill 2 is answered first…
    await flush();
    expect(two.done).toBe(true);
    late?.resolve(lower); // …then refill 1's answer, below what the guard has accepted from a
    await flush();
    expect(client.stats()).toMatchObject({ refusedReplayed: 0, hedgeBlocksDiscarded: 1 });
    const handedOut = [two.value as bigint, ...drain(client)];
    const lowerFirst = (lower[0] as { first: bigint }).first;
    expect(handedOut.every((id) => id >= (higher[0] as { first: bigint }).first)).toBe(true);
    expect(handedOut).not.toContain(lowerFirst);
    expect(client.stats().nodes.find((n) => n.url === a.url)?.healthy).toBe(true);
  });
});
