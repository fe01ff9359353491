import { expectationsSection, kindSummary, passed } from './report.js';
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
