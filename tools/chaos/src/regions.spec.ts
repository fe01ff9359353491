import { DEFAULT_LAYOUT } from '@idgen/core';
import type { CallerRecords } from './records.js';
import type { FaultRecord } from './run.js';
import { failoverReport, formatRegions, percentile, type FailoverInput, type RegionOutage } from './regions.js';
import type { ReceivedBlock } from './verify.js';

const T0 = 1_800_000_000_000;
const id = (region: number, atMs: number): bigint =>
  DEFAULT_LAYOUT.compose({ timestampMs: DEFAULT_LAYOUT.timestampOf(atMs), region, worker: 0, sequence: 0 });
const block = (caller: number, node: string, region: number, atMs: number): ReceivedBlock => ({
  caller,
  node,
  first: id(region, atMs),
  count: 10,
  receivedMs: atMs,
});
const callerOf = (caller: number, blocks: ReceivedBlock[], failuresAt: number[] = []): CallerRecords => ({
  caller,
  handedOut: new BigUint64Array(0),
  blocks,
  timeline: { caller, successMs: new Float64Array(blocks.map((b) => b.receivedMs)), failureMs: failuresAt },
  failures: failuresAt.map((atMs) => ({ atMs, code: 'unavailable', message: 'x' })),
  latencies: new Float64Array(0),
  stats: [],
});
const record = (index: number, startedMs: number): FaultRecord =>
  ({ fault: { index, kind: 'region-pool-down' }, startedMs }) as unknown as FaultRecord;

function input(callers: FailoverInput['callers'], outage: RegionOutage, r: FaultRecord): FailoverInput {
  return {
    records: [r],
    outages: new Map([[r, outage]]),
    loadStart: T0,
    loadMs: 20_000,
    callers,
    nodeRegion: new Map([
      ['http://home', 2],
      ['http://fallback', 1],
    ]),
    regionCodes: [1, 2, 3],
    fences: new Map(),
  };
}

describe('the failover table', () => {
  const r = record(1, 1000);
  const outage: RegionOutage = { region: 2, lossMs: T0 + 1000, returnMs: T0 + 6000 };

  it('times the first fallback ID after the loss and the first home ID after the return, per hit caller', () => {
    const blocks = [
      block(0, 'http://home', 2, T0 + 500),
      block(0, 'http://fallback', 1, T0 + 1150),
      block(0, 'http://fallback', 1, T0 + 6100),
      block(0, 'http://home', 2, T0 + 6400),
    ];
    const other = callerOf(1, [block(1, 'http://fallback', 1, T0 + 2000)]);
    const rep = failoverReport(
      input(
        [
          { records: callerOf(0, blocks, [T0 + 1100]), home: 2 },
          { records: other, home: 1 },
        ],
        outage,
        r,
      ),
      [],
      {
        code: 1,
        etcdMembers: 3,
        nodes: 2,
        callers: [1],
      },
    );
    expect(rep.rows).toHaveLength(1);
    expect(rep.rows[0]).toMatchObject({
      callers: 1,
      failoverMs: [150],
      returnMs: [400],
      failedCalls: 1,
      fallbackBlocks: 2,
    });
    expect(rep.wrongCode).toBe(0);
    expect(rep.fallbackBlocksChecked).toBe(2);
    expect(formatRegions(rep).join('\n')).toMatch(
      /\| #1 region-pool-down \| 2 \| 1 \| 150 \/ 150 \/ 150 \| 400 \/ 400 \/ 400 \| 1 \|/,
    );
  });

  it("counts a block whose IDs carry another code than its node's region", () => {
    // A node of region 2 minting region 1's code (a pool started with the wrong --region on an etcd bound to it).
    const blocks = [block(0, 'http://home', 1, T0 + 500), block(0, 'http://fallback', 1, T0 + 1500)];
    const rep = failoverReport(input([{ records: callerOf(0, blocks), home: 2 }], outage, r), [], {
      code: 1,
      etcdMembers: 3,
      nodes: 2,
      callers: [],
    });
    expect(rep.wrongCode).toBe(1);
    expect(rep.wrongCodeExamples[0]).toMatch(/from http:\/\/home \(region 2\) carries region 1/);
    expect(formatRegions(rep).join('\n')).toMatch(/region codes: VIOLATED/);
  });

  it('takes nearest-rank percentiles', () => {
    expect(percentile([], 0.5)).toBe(0);
    expect(percentile([1, 2, 3, 4], 0.5)).toBe(2);
    expect(percentile([1, 2, 3, 4], 0.99)).toBe(4);
  });
});
