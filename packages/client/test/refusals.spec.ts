import { DEFAULT_LAYOUT } from '@idgen/core';
import { cleanupAll } from '@idgen/testing';
import { createIdClient, isIdsUnavailableError, type IdClient, type IdClientOptions } from '../src/index.js';
import { startAnswerProxy, type AnswerProxy } from './answer-proxy.test-helper.js';
import {
  IdLedger,
  regionOf,
  requireServerBuild,
  startServer,
  workerOf,
  type ServerNode,
} from './harness.test-helper.js';

// Issue 22, problem 5, against real idgen-server processes: a client given a node of another region refuses its IDs,
// and one given a replayed answer refuses the repeated block. The alterations come from a small HTTP/2 proxy of this
// test's own between the client and a real node (test/answer-proxy.test-helper.ts): the node itself stays honest.
jest.setTimeout(120_000);

let region0: ServerNode;
let region2: ServerNode;
const proxies: AnswerProxy[] = [];
const clients: IdClient[] = [];

beforeAll(async () => {
  requireServerBuild();
  [region0, region2] = await Promise.all([startServer({ region: 0 }), startServer({ region: 2 })]);
});

afterAll(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await Promise.all(proxies.map((p) => p.close()));
  await Promise.all([region0, region2].filter((s) => s !== undefined).map((s) => s.process.stop()));
  await cleanupAll();
});

function client(options: Partial<IdClientOptions> & Pick<IdClientOptions, 'nodes'>): IdClient {
  const c = createIdClient({ region: 2, deadlineMs: 1500, attemptTimeoutMs: 500, prefill: false, ...options });
  clients.push(c);
  return c;
}

async function failure(p: Promise<unknown>): Promise<Error> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  if (!(e instanceof Error)) throw new Error(`expected a rejection, got ${String(e)}`);
  return e;
}

it('a home node that serves region 0 to a region-2 client: its IDs are refused, counted, and named', async () => {
  const c = client({ nodes: [region0.url] });
  const e = await failure(c.nextId());
  expect(isIdsUnavailableError(e)).toBe(true);
  expect(e.message).toContain(
    `${region0.url} served IDs of region 0 (worker 0), which is neither the home region 2 nor a configured ` +
      'fallback region (none configured): refused',
  );
  const stats = c.stats();
  expect(stats.refusedForeignRegion).toBeGreaterThanOrEqual(1);
  expect(stats.buffered).toBe(0);
  expect(stats.nodes[0]?.lastFailure?.code).toBe('foreign_region');
});

it('beside a right node, the wrong one is skipped: every ID handed out is of region 2', async () => {
  const c = client({ nodes: [region0.url, region2.url], bufferSize: 20, lowWater: 10, deadlineMs: 5000 });
  const ledger = new IdLedger();
  for (let i = 0; i < 20; i++) ledger.add(...(await c.nextIds(15)));
  expect(ledger.duplicates).toEqual([]);
  expect(ledger.size).toBe(300);
  expect(c.stats().refusedForeignRegion).toBeGreaterThanOrEqual(1);
  expect(c.stats().nodes.find((n) => n.url === region0.url)?.lastFailure?.code).toBe('foreign_region');
});

it('a proxy that rewrites a region-2 node’s answers to region 5: refused; to a fallback region 5: kept', async () => {
  const proxy = await startAnswerProxy(region2.url, {
    kind: 'region',
    region: 5,
    regionShift: DEFAULT_LAYOUT.regionShiftBig,
    regionBits: DEFAULT_LAYOUT.regionBits,
  });
  proxies.push(proxy);
  const refused = client({ nodes: [proxy.url] });
  const e = await failure(refused.nextId());
  expect(e.message).toContain(`${proxy.url} served IDs of region 5`);
  expect(refused.stats().refusedForeignRegion).toBeGreaterThanOrEqual(1);
  expect(proxy.counts.answers).toBeGreaterThanOrEqual(1);

  // Region 5 configured as a fallback: those IDs are unique by their region code, so the rule lets them through.
  const kept = client({ nodes: [proxy.url], fallbackRegions: [{ region: 5, nodes: [region0.url] }] });
  expect(regionOf(await kept.nextId())).toBe(5);
  expect(kept.stats().refusedForeignRegion).toBe(0);
});

it('a proxy that repeats its first answer: the repeated block is refused and counted, never handed out twice', async () => {
  const proxy = await startAnswerProxy(region2.url, { kind: 'repeat' });
  proxies.push(proxy);
  const c = client({ nodes: [proxy.url], bufferSize: 10, lowWater: 0 });
  const first = await c.nextIds(10); // the first answer, honest
  const rest = c.stats().buffered; // the answer held more than the call took: spend the rest too
  if (rest > 0) first.push(...(await c.nextIds(rest)));
  expect(new Set(first.map(workerOf)).size).toBe(1);
  expect(proxy.counts).toEqual({ answers: 1, repeated: 0 });
  const e = await failure(c.nextIds(10)); // the buffer is spent: the refill gets the same bytes again
  expect(isIdsUnavailableError(e)).toBe(true);
  expect(e.message).toMatch(/served block \d+\+\d+ of region 2 worker \d+, not above \d+, the last ID already taken/);
  expect(proxy.counts.repeated).toBeGreaterThanOrEqual(1);
  expect(c.stats()).toMatchObject({ refusedReplayed: proxy.counts.repeated, refusedForeignRegion: 0 });

  // The proxy stops repeating: the node's fresh answers are taken again, all above the first.
  proxy.mode = { kind: 'pass' };
  // (The node is backing off after its refusals, at most 2 s: a deadline well past that.)
  const later = await c.nextIds(10, { deadlineMs: 10_000 });
  expect(later.every((id) => id > (first.at(-1) as bigint))).toBe(true);
});
