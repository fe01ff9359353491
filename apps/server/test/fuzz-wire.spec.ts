// Input fuzzing of the serving port (docs/design.md §8 rule 3: no crash, hang or leak on any input).
// One live standalone node gets thousands of generated requests over real HTTP/1.1, h2c and raw TCP
// connections (fuzz-wire-cases.test-helper.ts); every answer must be a proper protocol answer or a valid response
// (fuzz-wire-judge.test-helper.ts). Afterwards the node must still serve, be ready, and hold no more memory or file
// descriptors than a generous bound above its level after a warm-up.
//
// Reproduce a run with FUZZ_SEED=<seed> (printed); FUZZ_RUNS sets the number of batches; FUZZ_SURVEY=1 lists
// every problem at the end instead of stopping (and shrinking) at the first.
import { Agent, request as http1Request } from 'node:http';
import { gzipSync } from 'node:zlib';
import fc from 'fast-check';
import { cleanupAll, shieldFromOutsideLoad } from '@idgen/testing';
import { createSender, fdCount, rssBytes, type FuzzSender } from './fuzz-transport.test-helper.js';
import { FUZZ_LIMITS, NEXT_IDS, describeCase, wireCase, type WireCase } from './fuzz-wire-cases.test-helper.js';
import { judge, type JudgeContext } from './fuzz-wire-judge.test-helper.js';
import {
  PROTOCOLS,
  idClient,
  idsOf,
  memoryStateFile,
  sleep,
  startServer,
  type ServerNode,
} from './support.test-helper.js';

jest.setTimeout(300_000);
afterAll(() => cleanupAll());

const REGION = 5;
const SEED = Number(process.env['FUZZ_SEED'] ?? 20_261_129);
const RUNS = Number(process.env['FUZZ_RUNS'] ?? 900);
/** Batches of 1-16 concurrent requests (fast-check favours short arrays: ~6 a batch, ~5,500 requests in 900 batches). */
const BATCH = { minLength: 1, maxLength: 16 };
/** The whole generated run stops here even if batches remain (fast-check's interruptAfterTimeLimit). */
const RUN_LIMIT_MS = 90_000;
/** Per request: the node's own request deadline is 4 s; no answer in 12 s is a hang. */
const REQUEST_TIMEOUT_MS = 12_000;
/** Generous bounds for what the node may keep after the run, above its level after the warm-up. */
const RSS_GROWTH_LIMIT = 100 * 1024 * 1024;
const FD_GROWTH_LIMIT = 16;

/** Counts for the lead's report. */
class Tally {
  readonly byCategory = new Map<string, number>();
  readonly byOutcome = new Map<string, number>();
  readonly byTransport = new Map<string, number>();
  /** Slowest answer per category, in ms (for the report; no assertion on speed). */
  readonly slowest = new Map<string, number>();
  sent = 0;
  served = 0;
  idsServed = 0;
  add(c: WireCase, outcome: string, ids: number, ms: number): void {
    this.sent++;
    const top = c.category.split('/')[0] ?? c.category;
    this.slowest.set(top, Math.max(this.slowest.get(top) ?? 0, Math.round(ms)));
    this.byCategory.set(top, (this.byCategory.get(top) ?? 0) + 1);
    this.byOutcome.set(outcome, (this.byOutcome.get(outcome) ?? 0) + 1);
    this.byTransport.set(c.transport, (this.byTransport.get(c.transport) ?? 0) + 1);
    if (ids > 0) {
      this.served++;
      this.idsServed += ids;
    }
  }
  table(m: Map<string, number>): string {
    return [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .map(([k, v]) => `  ${String(v).padStart(6)}  ${k}`)
      .join('\n');
  }
}

/** Every block served in the run: a single node must never hand out one ID twice (docs/design.md §8 rule 1). */
function overlaps(blocks: { first: bigint; count: number }[]): string | undefined {
  const sorted = [...blocks].sort((a, b) => (a.first < b.first ? -1 : a.first > b.first ? 1 : 0));
  for (let i = 1; i < sorted.length; i++) {
    const prev = sorted[i - 1] as { first: bigint; count: number };
    const cur = sorted[i] as { first: bigint; count: number };
    if (cur.first < prev.first + BigInt(prev.count))
      return `blocks ${prev.first}+${prev.count} and ${cur.first}+${cur.count} overlap`;
  }
  return undefined;
}

/** Polls the node's descriptor count until it stops falling (sockets the client closed take a moment). */
async function settledFds(pid: number, atMost?: number): Promise<number> {
  let last = fdCount(pid);
  for (let i = 0; i < 40; i++) {
    await sleep(250);
    const now = fdCount(pid);
    if (atMost !== undefined ? now <= atMost : now === last) return now;
    last = now;
  }
  return last;
}

describe('wire fuzzing: generated requests against a live standalone node', () => {
  let node: ServerNode;
  const ctx: JudgeContext = { region: REGION, worker: 0, startedMs: Date.now() };

  beforeAll(async () => {
    node = await startServer([
      '--state-file',
      memoryStateFile(),
      '--time-source',
      'none',
      '--metrics-listen',
      'off',
      '--region',
      String(REGION),
      '--max-count',
      String(FUZZ_LIMITS.maxCount),
      '--max-body-bytes',
      String(FUZZ_LIMITS.maxBodyBytes),
      '--request-timeout-ms',
      '4000',
    ]);
    // The fuzz judges answers, not the node's timing: on a busy machine a starved standalone node fences for good
    // ("a valid request ... was answered connect:unavailable").
    shieldFromOutsideLoad(node.process.pid);
    shieldFromOutsideLoad(0);
    await node.ready();
  });

  afterAll(async () => {
    if (node !== undefined) expect((await node.stop()).code).toBe(0);
  });

  it('answers every request properly, never hangs, and keeps serving with bounded memory and descriptors', async () => {
    const tally = new Tally();
    const blocks: { first: bigint; count: number }[] = [];
    const failures: string[] = [];
    const pid = node.process.pid;

    const runBatch = async (sender: FuzzSender, batch: WireCase[], record: boolean): Promise<void> => {
      const results = await Promise.all(
        batch.map(async (c) => {
          const t = performance.now();
          const r = await sender.send(c);
          return { r, ms: performance.now() - t };
        }),
      );
      const problems: string[] = [];
      batch.forEach((c, i) => {
        const result = results[i];
        if (result === undefined) return;
        const v = judge(c, result.r, ctx);
        blocks.push(...v.blocks);
        if (record)
          tally.add(
            c,
            v.outcome,
            v.blocks.reduce((n, b) => n + b.count, 0),
            result.ms,
          );
        if (v.problems.length > 0) problems.push(`${v.problems.join('; ')}\n    request: ${describeCase(c)}`);
      });
      if (problems.length > 0) {
        failures.push(...problems);
        if (process.env['FUZZ_SURVEY'] === '1') return;
        throw new Error(problems.join('\n'));
      }
    };

    // Warm-up: every path once or more, so the baseline below is the node's working level, not its cold start.
    const warm = createSender(node.port, REQUEST_TIMEOUT_MS);
    for (const batch of fc.sample(fc.array(wireCase, BATCH), { numRuns: 60, seed: SEED + 1 }))
      await runBatch(warm, batch, false);
    await warm.close();
    const baseFds = await settledFds(pid);
    const baseRss = rssBytes(pid);

    const sender = createSender(node.port, REQUEST_TIMEOUT_MS);
    const t0 = Date.now();
    let interrupted = false;
    try {
      const details = await fc.check(
        fc.asyncProperty(fc.array(wireCase, BATCH), async (batch) => {
          await runBatch(sender, batch, true);
        }),
        { seed: SEED, numRuns: RUNS, interruptAfterTimeLimit: RUN_LIMIT_MS },
      );
      interrupted = details.interrupted;
      if (details.failed) {
        throw new Error(
          `fuzz failure (FUZZ_SEED=${SEED}, path ${details.counterexamplePath ?? '?'}), shrunk to:\n${details.errorInstance instanceof Error ? details.errorInstance.message : String(details.errorInstance)}`,
        );
      }
    } finally {
      await sender.close();
    }
    const runMs = Date.now() - t0;

    // Still alive and serving over all three protocols, and ready.
    for (const protocol of PROTOCOLS) {
      const ids = idsOf((await idClient(node.baseUrl, protocol).nextIds({ count: 3 })).blocks);
      expect(ids).toHaveLength(3);
      blocks.push({ first: ids[0] as bigint, count: 3 });
    }
    expect((await fetch(`${node.baseUrl}/readyz`)).status).toBe(200);
    expect(node.process.exitStatus()).toBeUndefined();

    const afterRss = rssBytes(pid);
    // A connection answered with GOAWAY (bad SETTINGS length, bad HPACK, DATA on an idle stream) must be let go:
    // @idgen/h2 (the default) ends the socket itself after its GOAWAY; on node:http2, which stops reading such
    // a connection, the server's PING probe (packages/serving/src/transport/front-node-http2.ts) destroys it ~2 × 2 s after it went silent. Either way
    // well inside settledFds' 10 s: no allowance for them.
    const goaways = [...tally.byOutcome.entries()]
      .filter(([k]) => k.startsWith('raw:h2-goaway'))
      .reduce((n, [, v]) => n + v, 0);
    const afterFds = await settledFds(pid, baseFds + FD_GROWTH_LIMIT);
    const overlap = overlaps(blocks);

    console.log(
      [
        `wire fuzz: seed ${SEED}, ${tally.sent} requests in ${(runMs / 1000).toFixed(1)} s${interrupted ? ' (stopped at the time limit)' : ''}, ` +
          `${tally.served} served with ${tally.idsServed} IDs (${blocks.length} blocks checked unique), ${failures.length} problems`,
        `by transport:\n${tally.table(tally.byTransport)}`,
        `by category:\n${tally.table(tally.byCategory)}`,
        `by outcome:\n${tally.table(tally.byOutcome)}`,
        `slowest answer per category (ms):\n${tally.table(tally.slowest)}`,
        `node RSS ${(baseRss / 2 ** 20).toFixed(1)} MiB after warm-up, ${(afterRss / 2 ** 20).toFixed(1)} MiB after the run; ` +
          `open descriptors ${baseFds} after warm-up, ${afterFds} after the run (${goaways} connections answered with GOAWAY, all let go)`,
      ].join('\n'),
    );

    if (failures.length > 0)
      console.log(`problems:\n${[...new Set(failures.map((f) => f.replace(/\d{6,}/g, 'N')))].slice(0, 60).join('\n')}`);
    expect(failures).toEqual([]);
    expect(overlap).toBeUndefined();
    expect(tally.sent).toBeGreaterThan(0);
    expect(tally.served).toBeGreaterThan(0);
    expect(afterRss - baseRss).toBeLessThan(RSS_GROWTH_LIMIT);
    expect(afterFds).toBeLessThanOrEqual(baseFds + FD_GROWTH_LIMIT);
  });

  // Bugs the generated run found, pinned as plain cases (each failed before its fix in apps/server/src).
  describe('regressions found by fuzzing', () => {
    const grpcFrame = (payload: Uint8Array, flags = 0): Uint8Array => {
      const out = new Uint8Array(5 + payload.length);
      out[0] = flags;
      new DataView(out.buffer).setUint32(1, payload.length);
      out.set(payload, 5);
      return out;
    };
    const answer = async (c: Omit<WireCase, 'category' | 'method' | 'path'>): Promise<string> => {
      const sender = createSender(node.port, REQUEST_TIMEOUT_MS);
      try {
        const full: WireCase = { category: 'regression', method: 'POST', path: NEXT_IDS, ...c };
        const v = judge(full, await sender.send(full), ctx);
        expect(v.problems).toEqual([]);
        return v.outcome;
      } finally {
        await sender.close();
      }
    };

    it('a compressed body that ends early is INVALID_ARGUMENT, not INTERNAL (decode-errors.ts)', async () => {
      const cut = gzipSync(new Uint8Array([0x08, 0x03])).subarray(0, 6);
      expect(
        await answer({
          transport: 'h1',
          headers: { 'content-type': 'application/proto', 'content-encoding': 'gzip' },
          body: cut,
        }),
      ).toBe('connect:invalid_argument');
      expect(
        await answer({
          transport: 'h2',
          headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
          body: new Uint8Array([0x1f]),
        }),
      ).toBe('connect:invalid_argument');
      expect(
        await answer({
          transport: 'h2',
          headers: { 'content-type': 'application/grpc', 'grpc-encoding': 'gzip', te: 'trailers' },
          body: grpcFrame(cut, 1),
        }),
      ).toBe('grpc:3 invalid_argument');
      expect(
        await answer({
          transport: 'h1',
          headers: { 'content-type': 'application/grpc-web+proto', 'grpc-encoding': 'gzip' },
          body: grpcFrame(cut, 1),
        }),
      ).toBe('grpc-web:3 invalid_argument');
    });

    it('gRPC and gRPC-Web JSON whose parse error cuts a surrogate pair: a gRPC status, not a bare HTTP 500 (transport/dispatcher.ts grpcFailureHeaders)', async () => {
      // Valid UTF-8 for two astral characters; JSON.parse's error quotes the text cut inside a pair.
      const astral = grpcFrame(new Uint8Array([0xf2, 0x82, 0x94, 0xa9, 0xf2, 0xa1, 0x9f, 0x87]));
      expect(
        await answer({
          transport: 'h2',
          headers: { 'content-type': 'application/grpc+json', te: 'trailers' },
          body: astral,
        }),
      ).toBe('grpc:3 invalid_argument');
      expect(
        await answer({
          transport: 'h1',
          headers: { 'content-type': 'application/grpc+json', te: 'trailers' },
          body: astral,
        }),
      ).toBe('grpc:3 invalid_argument');
      expect(
        await answer({ transport: 'h1', headers: { 'content-type': 'application/grpc-web+json' }, body: astral }),
      ).toBe('grpc-web:3 invalid_argument');
    });

    it('a body refused before it is read ends its HTTP/1.1 connection and says so; the next request on a new one is served (fast-path.ts, http.ts)', async () => {
      const agent = new Agent({ keepAlive: true, maxSockets: 1 });
      const post = (
        contentType: string,
        body: Uint8Array,
      ): Promise<{ status: number; connection: string | undefined }> =>
        new Promise((resolve, reject) => {
          const req = http1Request(
            {
              host: '127.0.0.1',
              port: node.port,
              method: 'POST',
              path: NEXT_IDS,
              agent,
              headers: { 'content-type': contentType, 'content-length': body.length },
            },
            (res) => {
              res.resume();
              res.on('end', () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection }));
            },
          );
          req.on('error', reject);
          req.setTimeout(REQUEST_TIMEOUT_MS, () => req.destroy(new Error('no answer')));
          req.end(body);
        });
      const big = new Uint8Array(FUZZ_LIMITS.maxBodyBytes * 2).fill(0x78);
      const valid = new TextEncoder().encode('{"count":2}');
      try {
        for (let i = 0; i < 5; i++) {
          // The fast path (Connect JSON) and connect-es (gRPC-Web: refused on the frame header).
          expect(await post('application/json', big)).toEqual({ status: 429, connection: 'close' });
          expect(await post('application/json', valid)).toEqual({ status: 200, connection: 'keep-alive' });
          expect(await post('application/grpc-web+proto', grpcFrame(big))).toEqual({
            status: 200,
            connection: 'close',
          });
          expect(await post('application/json', valid)).toEqual({ status: 200, connection: 'keep-alive' });
        }
      } finally {
        agent.destroy();
      }
    });
  });
});
