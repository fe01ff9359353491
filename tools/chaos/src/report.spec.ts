import type { KindCost } from './caller-cost.js';
import { expectationsSection, kindSummary, partitionSection, passed } from './report.js';
import type { FaultRecord } from './run.js';
import { createSchedule } from './schedule.js';

const clean = { ok: true, exitCode: 0, lines: [] };

/** Two faults of the schedule, one with a safety violation and one with a liveness expectation missed. */
function records(): FaultRecord[] {
  const [a, b] = createSchedule({
    durationMs: 60_000,
    seed: 1,
    leaseTtlMs: 3000,
    kinds: ['standalone-pause', 'etcd-member-down'],
  }).faults;
  if (a === undefined || b === undefined) throw new Error('schedule too short');
  const record = (fault: typeof a, o: Partial<FaultRecord>): FaultRecord => ({
    fault,
    startedMs: fault.atMs,
    endedMs: fault.atMs + fault.effectMs,
    target: '-',
    notes: [],
    servingAtStart: 3,
    expectationMissed: undefined,
    safetyViolation: undefined,
    ...o,
  });
  return [
    record(a, { safetyViolation: '200 ID(s) handed out by both a and b' }),
    record(b, { expectationMissed: 'one etcd follower down cost 2 lease fence(s) (expected none)' }),
  ];
}

describe('the verdict', () => {
  it('fails on a safety expectation violated, as on a rule violation or a failed audit', () => {
    expect(passed({ violations: 0, safetyViolations: 0, audit: clean })).toBe(true);
    expect(passed({ violations: 0, safetyViolations: 1, audit: clean })).toBe(false);
    expect(passed({ violations: 1, safetyViolations: 0, audit: clean })).toBe(false);
  });

  it('lists each safety violation in the summary, and counts the liveness ones (which do not fail the run)', () => {
    const faults = records();
    const lines = expectationsSection({ faults, expectationsMissed: 1, safetyViolations: 1 });
    const [first, second] = faults;
    expect(lines).toEqual([
      'safety expectations violated: 1 (they fail the run)',
      `  #${first?.fault.index} ${first?.fault.kind}: 200 ID(s) handed out by both a and b`,
      'expectations missed: 1 (liveness, reported; they do not fail the run)',
    ]);
    const byKind = kindSummary({ faults, outages: [] });
    expect(byKind.find((k) => k.kind === first?.fault.kind)).toMatchObject({ runs: 1, missed: 0, unsafe: 1 });
    expect(byKind.find((k) => k.kind === second?.fault.kind)).toMatchObject({ runs: 1, missed: 1, unsafe: 0 });
  });
});

describe('the partitions side by side', () => {
  const [a, b] = createSchedule({
    durationMs: 60_000,
    seed: 1,
    leaseTtlMs: 3000,
    kinds: ['partition-node', 'netns-partition'],
  }).faults;
  const row = (kind: string): KindCost => ({
    kind,
    runs: 1,
    failedCalls: 0,
    longestGapMs: 45,
    latency: { calls: 10, failed: 0, p50Ms: 0.02, p99Ms: 0.2, maxMs: 5, callerLateMaxMs: 30 },
    client: { discarded: 0, hedgesSent: 0, hedgesWon: 0, hedgeBlocksDiscarded: 0, refusedBlocks: 0 },
    fences: { lease: 1 },
  });
  const figures = (via: 'proxy' | 'netns', healToEtcdMs: number | undefined) => ({
    via,
    cutToFenceMs: 1394,
    fences: { lease: 1 },
    takeoverMs: 6813,
    cutMs: 7626,
    healToEtcdMs,
    healAnswer: healToEtcdMs === undefined ? undefined : 'claim refused: no free slot',
    probeOk: 646,
    probeFailed: 853,
  });

  it('prints one row per partition with its figures, then the caller cost of their kinds only', () => {
    if (a === undefined || b === undefined) throw new Error('schedule too short');
    const base = {
      startedMs: 0,
      endedMs: 1,
      notes: [],
      servingAtStart: 3,
      expectationMissed: undefined,
      safetyViolation: undefined,
    };
    const faults: FaultRecord[] = [
      { ...base, fault: a, target: 'n2#1', partition: figures('proxy', 451) },
      { ...base, fault: b, target: 'n1#1', partition: figures('netns', undefined) },
    ];
    const lines = partitionSection({
      faults,
      callerCost: {
        windows: [],
        outside: undefined as never,
        byKind: [row('(no fault)'), row(a.kind), row(b.kind), row('kill-node')],
      },
    });
    const byFault = (f: FaultRecord): string | undefined =>
      lines.find((l) => l.includes(`#${f.fault.index} ${f.fault.kind}`));
    expect(byFault(faults[0] as FaultRecord)).toMatch(
      /proxy n2#1 +7,626 ms +1,394 ms +6,813 ms +451 ms +646\/853 {2}lease 1 \(claim refused: no free slot\)/,
    );
    expect(byFault(faults[1] as FaultRecord)).toMatch(/netns n1#1 .* > 30 s .*\(no answer seen\)/);
    const costRows = lines.slice(lines.indexOf('  their caller cost (rows of the table above):') + 2);
    expect(costRows.map((l) => l.trim().split(/ +/)[0]).sort()).toEqual([a.kind, b.kind].sort());
    expect(
      partitionSection({ faults: [], callerCost: { windows: [], outside: undefined as never, byKind: [] } }),
    ).toEqual([]);
  });
});
