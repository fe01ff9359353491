import { DEFAULT_LAYOUT } from '@idgen/core';
import { bindRegion, cleanupAll, startEtcd, type EtcdServer } from '@idgen/testing';
import { createIdClient, type IdClientStats } from '../src/index.js';
import { requireServerBuild, sleep, startServer, waitUntil, type ServerNode } from './harness.test-helper.js';

// Hedged refills against real idgen-server processes (docs/design.md §7): one caller under load on two home nodes,
// one node frozen with SIGSTOP (its connection stays up, nothing answers). With hedging the caller never waits
// anywhere near the attempt timeout; with hedging off the same scenario costs a wait of the whole attempt timeout,
// so the hedge is what saves it. The attempt timeout is large (3 s) so the assertion is structural.
jest.setTimeout(180_000);

const ATTEMPT_TIMEOUT_MS = 3000;

let etcd: EtcdServer;

beforeAll(async () => {
  requireServerBuild();
  etcd = await startEtcd();
  await bindRegion(etcd, 1);
});

afterAll(async () => {
  await etcd?.stop();
  await cleanupAll();
});

interface Scenario {
  calls: number;
  failures: unknown[];
  /** nextId() waits after the freeze, ms. */
  waits: number[];
  stats: IdClientStats;
  /** IDs handed out that were not above the previous one of their worker (a duplicate would be one). */
  notIncreasing: number;
}

/** Runs one caller on two fresh nodes, freezes one, and returns what the caller saw. */
async function frozenNodeUnderLoad(hedge: boolean): Promise<Scenario> {
  const nodes: ServerNode[] = await Promise.all([
    startServer({ region: 1, etcd: etcd.clientUrl }),
    startServer({ region: 1, etcd: etcd.clientUrl }),
  ]);
  const frozen = nodes[0] as ServerNode;
  const client = createIdClient({
    region: 1,
    nodes: nodes.map((n) => n.url),
    attemptTimeoutMs: ATTEMPT_TIMEOUT_MS,
    deadlineMs: 4 * ATTEMPT_TIMEOUT_MS, // so a call without hedging outlives the attempt timeout and succeeds
    // No background refill: every refill starts with the caller waiting for it, so a caller's wait is the whole of
    // a refill's time (with a background refill a stall would hide behind the IDs still buffered).
    lowWater: 0,
    ...(hedge ? {} : { hedge: false }),
  });
  let stopped = false;
  let frozenAtMs = Infinity;
  const result: Scenario = { calls: 0, failures: [], waits: [], stats: client.stats(), notIncreasing: 0 };
  const lastByWorker = new Map<number, bigint>();
  // One caller: ten nextId() calls, then a timer turn (so the test and the client's timers run), until stopped.
  const caller = (async () => {
    while (!stopped) {
      for (let i = 0; i < 10; i++) {
        const t0 = performance.now();
        try {
          const id = await client.nextId();
          const worker = DEFAULT_LAYOUT.decompose(id).worker;
          const last = lastByWorker.get(worker);
          if (last !== undefined && id <= last) result.notIncreasing++;
          lastByWorker.set(worker, id);
        } catch (e) {
          result.failures.push(e);
        }
        result.calls++;
        if (t0 >= frozenAtMs) result.waits.push(performance.now() - t0);
      }
      await sleep(1);
    }
  })();
  try {
    await waitUntil('both nodes have served refills', () => {
      const s = client.stats();
      return s.refills >= 20 && s.nodes.every((n) => n.failures === 0);
    });
    frozen.process.signal('SIGSTOP');
    frozenAtMs = performance.now();
    // Until the frozen node's request ran out its attempt timeout (so the caller lived through that whole
    // stretch), and a little longer, so the node's next turns after its backoff are in the figures too.
    await waitUntil(
      'the frozen node has timed out a request',
      () => client.stats().nodes.some((n) => n.url === frozen.url && n.lastFailure?.code === 'deadline_exceeded'),
      6 * ATTEMPT_TIMEOUT_MS,
    );
    await sleep(1000);
  } finally {
    stopped = true;
    await caller;
    result.stats = client.stats();
    frozen.process.signal('SIGCONT');
    await client.close();
    await Promise.all(nodes.map((n) => n.process.kill()));
  }
  return result;
}

function summary(label: string, s: Scenario): { maxMs: number; p99Ms: number } {
  const sorted = [...s.waits].sort((a, b) => a - b);
  const maxMs = sorted[sorted.length - 1] ?? 0;
  const p99Ms = sorted[Math.max(0, Math.ceil(0.99 * sorted.length) - 1)] ?? 0;
  const { refills, retries, hedgesSent, hedgesWon, hedgeBlocksDiscarded } = s.stats;
  // Most calls take a buffered ID (p99 near 0): the calls that waited for a refill are the ones over 1 ms.
  const overOneMs = sorted.filter((w) => w > 1).length;
  console.log(
    `${label}: ${s.calls} calls, ${s.waits.length} after the freeze, ${s.failures.length} failed; nextId() wait after ` +
      `the freeze max ${maxMs.toFixed(1)} ms, p99 ${p99Ms.toFixed(2)} ms, ${overOneMs} calls over 1 ms; refills ${refills}, retries ${retries}, ` +
      `hedges sent ${hedgesSent}, won ${hedgesWon}, blocks discarded ${hedgeBlocksDiscarded}`,
  );
  return { maxMs, p99Ms };
}

it('a frozen node costs the caller milliseconds with hedging: 0 failed calls, max wait far below the attempt timeout', async () => {
  const s = await frozenNodeUnderLoad(true);
  const { maxMs } = summary('hedging on', s);
  expect(s.failures).toEqual([]);
  expect(s.notIncreasing).toBe(0);
  expect(s.waits.length).toBeGreaterThan(100);
  expect(maxMs).toBeLessThan(ATTEMPT_TIMEOUT_MS / 3);
  // The hedge is what answered: refills asked of the live node while the frozen one held its request.
  expect(s.stats.hedgesSent).toBeGreaterThan(0);
  expect(s.stats.hedgesWon).toBeGreaterThan(0);
});

it('the same with hedging off: a caller waits out the whole attempt timeout (what the hedge saves)', async () => {
  const s = await frozenNodeUnderLoad(false);
  const { maxMs } = summary('hedging off', s);
  expect(s.failures).toEqual([]);
  expect(s.notIncreasing).toBe(0);
  expect(s.stats.hedgesSent).toBe(0);
  // Node timers may fire up to a millisecond early on performance.now().
  expect(maxMs).toBeGreaterThanOrEqual(ATTEMPT_TIMEOUT_MS - 5);
});
