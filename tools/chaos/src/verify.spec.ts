import { DEFAULT_LAYOUT } from '@idgen/core';
import {
  checkClockBound,
  checkHandedOut,
  checkHolders,
  duplicatesPerWindow,
  expandBlocks,
  findDuplicates,
  outageWindows,
  type Holding,
  type ReceivedBlock,
} from './verify.js';

const T0 = Date.UTC(2026, 0, 1);
const id = (unixMs: number, worker: number, sequence = 0, region = 1): bigint =>
  DEFAULT_LAYOUT.compose({ timestampMs: unixMs - DEFAULT_LAYOUT.epochMs, region, worker, sequence });
const block = (node: string, first: bigint, count: number, receivedMs: number, caller = 0): ReceivedBlock => ({
  caller,
  node,
  first,
  count,
  receivedMs,
});
const holding = (
  node: string,
  name: string,
  worker: number,
  floorMs: number,
  seenMs: number,
  leaseId = `${name}-${worker}`,
): Holding => ({
  node,
  name,
  worker,
  leaseId,
  floorMs,
  seenMs,
});

describe('findDuplicates (rule 1)', () => {
  it('counts every ID and finds none in distinct IDs', () => {
    const ids = expandBlocks([block('a', id(T0, 0), 100, T0), block('b', id(T0, 1), 50, T0)]);
    const r = findDuplicates(ids);
    expect(r).toEqual({ checked: 150, duplicates: 0, examples: [] });
  });

  it('finds a duplicate across blocks of different callers and nodes, and names it', () => {
    const dup = id(T0 + 5, 2, 7);
    const ids = expandBlocks([
      block('a', dup - 3n, 10, T0, 0),
      block('b', dup, 1, T0, 1),
      block('c', id(T0, 0), 5, T0, 2),
    ]);
    const r = findDuplicates(ids);
    expect(r.checked).toBe(16);
    expect(r.duplicates).toBe(1);
    expect(r.examples).toEqual([dup]);
  });

  it('counts each extra copy, lists each duplicated ID once', () => {
    const r = findDuplicates(new BigUint64Array([5n, 1n, 5n, 5n, 2n, 1n]));
    expect(r.duplicates).toBe(3);
    expect(r.examples).toEqual([1n, 5n]);
  });
});

describe('checkHandedOut (the client never invents an ID)', () => {
  it('accepts IDs inside received blocks and flags one outside them', () => {
    const blocks = [block('a', 100n, 10, T0), block('b', 200n, 5, T0)];
    expect(checkHandedOut(new BigUint64Array([100n, 109n, 204n, 201n]), blocks)).toEqual({
      checked: 4,
      invented: 0,
      examples: [],
    });
    const r = checkHandedOut(new BigUint64Array([100n, 110n, 199n, 204n]), blocks);
    expect(r.invented).toBe(2);
    expect(r.examples).toEqual([110n, 199n]);
  });
});

describe('checkHolders (rule 2)', () => {
  const A = 'http://127.0.0.1:1001';
  const B = 'http://127.0.0.1:1002';

  it('passes a clean handover: the newcomer starts above the previous holder', () => {
    const holdings = [holding(A, 'n1#1', 0, T0 - 1, T0), holding(B, 'n2#1', 0, T0 + 3010, T0 + 3100)];
    const blocks = [
      block(A, id(T0 + 10, 0), 100, T0 + 11),
      block(A, id(T0 + 2000, 0), 100, T0 + 2001),
      block(B, id(T0 + 3500, 0), 50, T0 + 3501),
    ];
    const r = checkHolders(blocks, holdings);
    expect(r.violations).toEqual([]);
    expect(r.slots).toBe(1);
    expect(r.holdings).toBe(2);
    expect(r.handovers).toBe(1);
    expect(r.spans.get(0)?.map((s) => [s.holding.name, s.ids])).toEqual([
      ['n1#1', 200],
      ['n2#1', 50],
    ]);
  });

  it('flags a paused holder that minted after the newcomer began (overlap in time)', () => {
    const holdings = [holding(A, 'n1#1', 0, T0 - 1, T0), holding(B, 'n2#1', 0, T0 + 3010, T0 + 3100)];
    const blocks = [
      block(A, id(T0 + 10, 0), 100, T0 + 11),
      block(B, id(T0 + 3500, 0), 50, T0 + 3501),
      // The old holder woke up and minted in a millisecond the newcomer also used.
      block(A, id(T0 + 3500, 0, 60), 10, T0 + 3600),
    ];
    const r = checkHolders(blocks, holdings);
    expect(r.violationCount).toBe(1);
    expect(r.violations[0]).toMatch(/worker 0: n2#1 .* not above .* n1#1/);
  });

  it('flags a block from a node that never logged holding that slot', () => {
    const r = checkHolders([block(A, id(T0 + 10, 2), 5, T0 + 11)], [holding(A, 'n1#1', 0, T0 - 1, T0)]);
    expect(r.violationCount).toBe(1);
    expect(r.violations[0]).toMatch(/never logged holding that slot/);
  });

  it('flags a block at or below the holding floor', () => {
    const r = checkHolders([block(A, id(T0 + 100, 0), 5, T0 + 101)], [holding(A, 'n1#1', 0, T0 + 100, T0)]);
    expect(r.violationCount).toBe(1);
    expect(r.violations[0]).toMatch(/at or below its floor/);
  });

  it('allows the same node to hold a slot again after another holder (A → B → A)', () => {
    const holdings = [
      holding(A, 'n1#1', 1, T0 - 1, T0, 'l1'),
      holding(B, 'n2#1', 1, T0 + 3010, T0 + 3100, 'l2'),
      holding(A, 'n1#1', 1, T0 + 9000, T0 + 9100, 'l3'),
    ];
    const blocks = [
      block(A, id(T0 + 10, 1), 10, T0 + 11),
      block(B, id(T0 + 4000, 1), 10, T0 + 4001),
      block(A, id(T0 + 9500, 1), 10, T0 + 9501),
    ];
    const r = checkHolders(blocks, holdings);
    expect(r.violations).toEqual([]);
    expect(r.holdings).toBe(3);
    expect(r.handovers).toBe(2);
  });

  it('keeps slots apart: the same milliseconds on different workers never conflict', () => {
    const holdings = [holding(A, 'n1#1', 0, T0 - 1, T0), holding(B, 'n2#1', 1, T0 - 1, T0 + 5)];
    const blocks = [block(A, id(T0 + 10, 0), 10, T0 + 11), block(B, id(T0 + 10, 1), 10, T0 + 11)];
    const r = checkHolders(blocks, holdings);
    expect(r.violations).toEqual([]);
    expect(r.slots).toBe(2);
    expect(r.handovers).toBe(0);
  });
});

describe('duplicatesPerWindow', () => {
  it('charges each duplicate to the window its millisecond lies in', () => {
    const ids = expandBlocks([
      block('a', id(T0 + 100, 0), 3, T0),
      block('b', id(T0 + 100, 0), 2, T0), // 2 duplicates at +100 ms
      block('a', id(T0 + 5000, 1), 1, T0),
      block('b', id(T0 + 5000, 1), 1, T0), // 1 at +5 s
      block('c', id(T0 + 9000, 2), 1, T0),
      block('c', id(T0 + 9000, 2), 1, T0), // 1 outside every window
      block('d', id(T0 + 200, 3), 5, T0), // no duplicate
    ]);
    expect(findDuplicates(ids).duplicates).toBe(4);
    const windows = [
      { label: '#1 kill-node', startMs: 0, endMs: 1000 },
      { label: '#2 partition-clock-forward', startMs: 1000, endMs: 8000 },
    ];
    expect(duplicatesPerWindow(ids, windows, T0)).toEqual([
      { label: '#1 kill-node', duplicates: 2 },
      { label: '#2 partition-clock-forward', duplicates: 1 },
      { label: '(none)', duplicates: 1 },
    ]);
  });
});

describe('checkClockBound (rule 3)', () => {
  it('accepts IDs older than their arrival and up to the bound ahead, flags more', () => {
    const ok = checkClockBound([block('a', id(T0, 0), 5, T0 + 3), block('a', id(T0 + 10, 0), 1, T0)], 10);
    expect(ok.violationCount).toBe(0);
    expect(ok.maxLeadMs).toBe(10);
    const bad = checkClockBound([block('a', id(T0 + 11, 0), 1, T0)], 10);
    expect(bad.violationCount).toBe(1);
    expect(bad.maxLeadMs).toBe(11);
    expect(bad.violations[0]).toMatch(/11 ms ahead/);
  });

  it('checks each block on its own and counts only those ahead', () => {
    const r = checkClockBound(
      [block('a', id(T0, 0), 4096, T0), block('a', id(T0 + 25, 0), 10, T0 + 5), block('b', id(T0 + 2, 1), 1, T0)],
      10,
    );
    expect(r.blocks).toBe(3);
    expect(r.violationCount).toBe(1);
    expect(r.maxLeadMs).toBe(20);
  });

  it('allows a forward jump the run made: only that node, only while its clock was ahead, only by the offset', () => {
    const allowance = { node: 'a', fromMs: T0, toMs: T0 + 3000, aheadMs: 2000 };
    const blocks = [
      block('a', id(T0 + 2000 + 5, 0), 1, T0 + 5), // ahead by 2 s during the jump: allowed
      block('a', id(T0 + 3000 + 2011, 0), 1, T0 + 3000), // more than offset + bound ahead: flagged
      block('b', id(T0 + 2000, 1), 1, T0), // another node at the same time: flagged
      block('a', id(T0 + 5000, 0), 1, T0 + 4000), // after the allowance: flagged
      block('a', id(T0 + 100, 0), 1, T0 + 200), // not ahead at all: fine
    ];
    const r = checkClockBound(blocks, 10, undefined, [allowance]);
    expect(r.allowedAhead).toBe(1);
    expect(r.violationCount).toBe(3);
    expect(r.maxLeadMs).toBe(2011);
    expect(checkClockBound(blocks, 10).violationCount).toBe(4);
  });
});

describe('outageWindows (rule 4)', () => {
  const windows = [
    { label: 'warm-up', startMs: 0, endMs: 1000 },
    { label: '#1 kill-node', startMs: 1000, endMs: 5000 },
    { label: '#2 etcd-pause-long', startMs: 5000, endMs: 9000 },
  ];

  it('charges each gap to the window it began in, per caller, and counts failures', () => {
    const r = outageWindows(
      [
        { caller: 0, successMs: [0, 100, 200, 1100, 3600, 3700, 5000, 8000], failureMs: [2000, 3000] },
        { caller: 1, successMs: [50, 900, 1200, 1300, 5100, 5200], failureMs: [6000] },
      ],
      windows,
      9000,
    );
    expect(r.map((w) => [w.window.label, w.longestGapMs, w.longestGapCaller, w.failedCalls])).toEqual([
      ['warm-up', 900, 0, 0],
      // caller 0: 1100 → 3600 (2500 ms); caller 1: 1300 → 5100 (3800 ms, began in this window)
      ['#1 kill-node', 3800, 1, 2],
      // caller 0: 5000 → 8000; caller 1: 5200 → end of run at 9000
      ['#2 etcd-pause-long', 3800, 1, 1],
    ]);
    expect(r[1]?.longestGapStartMs).toBe(1300);
    expect(r[1]?.calls).toBe(5);
  });

  it('reports no gap for a window in which no caller succeeded', () => {
    const r = outageWindows([{ caller: 0, successMs: [0, 9000], failureMs: [1500] }], windows, 9000);
    expect(r[0]?.longestGapMs).toBe(9000);
    expect(r[1]).toMatchObject({ longestGapMs: 0, longestGapCaller: -1, failedCalls: 1, calls: 0 });
  });
});
