import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  NO_FAULT,
  callerCost,
  counterGrowth,
  durationsIn,
  fencesIn,
  outsideSpans,
  percentile,
  summarizeLatency,
  type CallerCostInput,
} from './caller-cost.js';
import { callerFiles, decodeLatencies, readCallerRecords, type StatsLine } from './records.js';
import { callerCostSection, callerCostTable, formatMs } from './report.js';

/** Latency records (start wall ms, duration ms, ok, late ms) as the caller writes them. */
function records(...calls: [startMs: number, ms: number, ok: boolean, lateMs?: number][]): Float64Array {
  return Float64Array.from(calls.flatMap(([at, ms, ok, late]) => [at, ms, ok ? 1 : 0, late ?? 0]));
}

const stats = (atMs: number, discarded: number, hedgesSent = 0, hedgesWon = 0): StatsLine => ({
  atMs,
  discarded,
  hedgesSent,
  hedgesWon,
  hedgeBlocksDiscarded: hedgesSent - hedgesWon,
  refusedForeignRegion: 0,
  refusedReplayed: 0,
});

describe('percentiles', () => {
  it('takes the nearest rank of 1 … 100', () => {
    const one = Float64Array.from({ length: 100 }, (_, i) => i + 1);
    expect(percentile(one, 50)).toBe(50);
    expect(percentile(one, 99)).toBe(99);
    expect(percentile(one, 100)).toBe(100);
    expect(percentile(one, 0)).toBe(1);
    expect(percentile([], 99)).toBe(0);
  });

  it('sees one slow call in a thousand at p99.9 but not at p99, and always at max', () => {
    const d = new Float64Array(1000).fill(0.02);
    d[417] = 402;
    const s = summarizeLatency(d, 1);
    expect(s).toEqual({ calls: 1000, failed: 1, p50Ms: 0.02, p99Ms: 0.02, maxMs: 402, callerLateMaxMs: 0 });
    expect(percentile(d, 99.9)).toBe(0.02);
    expect(percentile(d, 99.95)).toBe(402);
  });

  it('is 0 over no calls', () => {
    expect(summarizeLatency(new Float64Array(0), 0)).toEqual({
      calls: 0,
      failed: 0,
      p50Ms: 0,
      p99Ms: 0,
      maxMs: 0,
      callerLateMaxMs: 0,
    });
  });
});

describe('merging the callers records', () => {
  const origin = 1_000_000;

  it('charges a call to the window its start lies in, over every caller, and counts the failed ones', () => {
    const a = records([origin + 5, 1, true, 90], [origin + 10, 300, true], [origin + 20, 2000, false, 3]);
    const b = records([origin + 9, 7, true, 12], [origin + 30, 4, true, 50]);
    const { durations, failed, lateMaxMs } = durationsIn([a, b], [{ startMs: 8, endMs: 25 }], origin);
    expect(Array.from(durations).sort((x, y) => x - y)).toEqual([7, 300, 2000]);
    expect(failed).toBe(1);
    expect(lateMaxMs).toBe(12); // the calls at 5 and 30 are outside the span
  });

  it("charges the growth of each caller's counters to a span, read at the last sample at or before its ends", () => {
    const c0 = [stats(origin, 0), stats(origin + 100, 10, 2, 1), stats(origin + 300, 25, 3, 1)];
    const c1 = [stats(origin + 50, 4)];
    expect(counterGrowth([c0, c1], [{ startMs: 0, endMs: 200 }], origin)).toEqual({
      discarded: 14,
      hedgesSent: 2,
      hedgesWon: 1,
      hedgeBlocksDiscarded: 1,
      refusedBlocks: 0,
    });
    // Two spans add; the time between them is not counted.
    expect(
      counterGrowth(
        [c0],
        [
          { startMs: 0, endMs: 150 },
          { startMs: 250, endMs: 400 },
        ],
        origin,
      ).discarded,
    ).toBe(10 + 15);
  });

  it('counts fence lines by reason in the spans', () => {
    const events = [
      { atMs: origin + 10, reason: 'lease' },
      { atMs: origin + 11, reason: 'lease' },
      { atMs: origin + 12, reason: 'clock-ahead' },
      { atMs: origin + 500, reason: 'lease' },
    ];
    expect(fencesIn(events, [{ startMs: 0, endMs: 100 }], origin)).toEqual({ lease: 2, 'clock-ahead': 1 });
  });

  it('finds the time outside every planned fault window, a late undoing included', () => {
    const faults = [
      { startedMs: 2000, endedMs: 3000, windowMs: 5000 }, // busy 2000 … 7000
      { startedMs: 9000, endedMs: 20_000, windowMs: 4000 }, // undone late: busy 9000 … 20000
      { startedMs: 20_000, endedMs: 20_500, windowMs: 1000 }, // back to back: busy to 21000
    ];
    expect(outsideSpans(faults, 30_000)).toEqual([
      { startMs: 0, endMs: 2000 },
      { startMs: 7000, endMs: 9000 },
      { startMs: 21_000, endMs: 30_000 },
    ]);
    expect(outsideSpans([], 5000)).toEqual([{ startMs: 0, endMs: 5000 }]);
    // The run waited 1.5 s for the first fault's recovery before the second began: that time is the first's.
    const [first, second] = faults as [(typeof faults)[0], (typeof faults)[0]];
    expect(outsideSpans([first, { ...second, settleWaitMs: 1500 }], 30_000)).toEqual([
      { startMs: 0, endMs: 2000 },
      { startMs: 7000, endMs: 7500 },
      { startMs: 20_000, endMs: 30_000 },
    ]);
  });

  it('reads back the latency and stats files a caller wrote, dropping a torn record', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'chaos-cost-'));
    try {
      const f = callerFiles(dir, 2);
      const rec = records([origin, 0.5, true], [origin + 10, 2000, false]);
      await writeFile(f.latency, Buffer.concat([Buffer.from(rec.buffer), Buffer.from([1, 2, 3])]));
      await writeFile(f.stats, `${JSON.stringify(stats(origin + 9, 3))}\n${JSON.stringify(stats(origin, 1))}\n{"at`);
      const r = await readCallerRecords(dir, 2);
      expect(Array.from(r.latencies)).toEqual([origin, 0.5, 1, 0, origin + 10, 2000, 0, 0]);
      expect(r.stats.map((l) => l.discarded)).toEqual([1, 3]); // ascending by time
      expect(decodeLatencies(Buffer.alloc(30)).length).toBe(0);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('what each fault costs a caller', () => {
  const origin = 5_000_000;
  /** Warm-up 0 … 1000, a pause-node 1000 … 3000, a kill-node 3000 … 4000, a second pause-node 4000 … 6000. */
  function input(): CallerCostInput {
    const fast = (from: number, to: number): [number, number, boolean, number][] =>
      Array.from({ length: (to - from) / 10 }, (_, i) => [origin + from + i * 10, 0.02, true, 1]);
    const calls = [
      ...fast(0, 1000),
      ...fast(1000, 1500),
      [origin + 1500, 400, true, 0] as [number, number, boolean, number], // the pause: one call waits 400 ms
      ...fast(1900, 3000),
      ...fast(3000, 3500),
      [origin + 3500, 0.02, true, 180] as [number, number, boolean, number], // the caller itself stalled 180 ms
      ...fast(3510, 4000),
      ...fast(4000, 4500),
      [origin + 4500, 2000, false, 0] as [number, number, boolean, number], // the second pause: one call fails
      ...fast(4500, 6000),
    ];
    const successMs = calls.filter((c) => c[2]).map((c) => c[0] - origin);
    return {
      windows: [
        { label: 'warm-up (no fault)', kind: undefined, startMs: 0, endMs: 1000 },
        { label: '#1 pause-node', kind: 'pause-node', startMs: 1000, endMs: 3000 },
        { label: '#2 kill-node', kind: 'kill-node', startMs: 3000, endMs: 4000 },
        { label: '#3 pause-node', kind: 'pause-node', startMs: 4000, endMs: 6000 },
      ],
      outside: [{ startMs: 0, endMs: 1000 }],
      originMs: origin,
      loadMs: 6000,
      latencies: [records(...calls)],
      stats: [[stats(origin, 0), stats(origin + 1600, 10, 1, 1), stats(origin + 4600, 30, 2, 1)]],
      timelines: [{ caller: 0, successMs, failureMs: [4500] }],
      fences: [
        { atMs: origin + 2000, reason: 'lease' },
        { atMs: origin + 5000, reason: 'lease' },
        { atMs: origin + 5001, reason: 'draining' },
      ],
    };
  }

  it('merges the windows of a kind: percentiles over all their calls, counts and fences added', () => {
    const c = callerCost(input());
    expect(c.byKind.map((k) => k.kind)).toEqual([NO_FAULT, 'kill-node', 'pause-node']);
    const pause = c.byKind.find((k) => k.kind === 'pause-node');
    expect(pause).toMatchObject({
      runs: 2,
      failedCalls: 1,
      longestGapMs: 400, // 1500 → 1900
      latency: { failed: 1, p50Ms: 0.02, maxMs: 2000, callerLateMaxMs: 1 },
      client: { discarded: 30, hedgesSent: 2, hedgesWon: 1 },
      fences: { lease: 2, draining: 1 },
    });
    expect(pause?.latency.calls).toBe(50 + 1 + 110 + 50 + 1 + 150);
    expect(c.byKind[0]).toMatchObject({ runs: 0, failedCalls: 0, latency: { calls: 100, maxMs: 0.02 }, fences: {} });
    expect(c.windows[1]).toMatchObject({ label: '#1 pause-node', latency: { maxMs: 400 }, client: { discarded: 10 } });
  });

  it('prints the table, the no-fault row first, and a line per window', () => {
    const c = callerCost(input());
    const table = callerCostTable(c.byKind);
    expect(table[0]).toMatch(/^what each fault costs a caller/);
    expect(table[1]).toBe(
      '  kind                     runs failed longest gap  p50 ms  p99 ms  max ms own stall discarded      hedges  fences by reason',
    );
    expect(table.slice(2)).toEqual([
      '  (no fault)                  -      0       10 ms   0.020   0.020   0.020      1.00         0         0/0  none',
      '  kill-node                   1      0       10 ms   0.020   0.020   0.020       180         0         0/0  none',
      '  pause-node                  2      1      400 ms   0.020   0.020    2000      1.00        30         2/1  lease 2, draining 1',
    ]);
    const section = callerCostSection(c);
    expect(section).toHaveLength(1 + 4 + 2);
    expect(section[2]).toBe(
      "  #1 pause-node            t+   1.0s  161 calls (0 failed)  p50 0.020 ms  p99 0.020 ms  max 400 ms  caller's own timer late ≤ 1.00 ms  discarded 10 IDs  hedges 1 sent / 1 won (0 losing blocks dropped)  refused 0 blocks  fences lease 1",
    );
    expect(section[5]).toMatch(/^ {2}outside any fault {8}1\.0s in 1 spans {2}100 calls/);
  });

  it('formats latencies by size', () => {
    expect([formatMs(0.0123), formatMs(3.456), formatMs(12.34), formatMs(402.4)]).toEqual([
      '0.012',
      '3.46',
      '12.3',
      '402',
    ]);
  });
});
