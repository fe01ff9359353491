import { createSchedule } from '../schedule.js';
import {
  DRAWN_CASES,
  DR_CASES,
  drCaseOf,
  drawnCaseOf,
  judgeDisasterRecovery,
  type DisasterRecoveryOutcome,
} from './disaster-recovery.js';
import { judgeRegistryCase, type RegistryCaseOutcome } from './registry-cases.js';

const cli = (code: number, line: string) => ({ args: [], code, stdout: code === 0 ? [line] : [], stderr: [line] });

const outcome = (o: Partial<DisasterRecoveryOutcome> = {}): DisasterRecoveryOutcome => ({
  drCase: 'new-cluster',
  init: cli(0, 'region 1: bound'),
  restored: cli(0, 'region 1: 128 slot(s) marked'),
  a: { name: 'dr-1-a', ready: true, ids: new BigUint64Array([1n, 2n, 3n]), failed: 0 },
  b: { name: 'dr-1-b', ready: true, ids: new BigUint64Array([4n, 5n]), failed: 0 },
  audit: { exitCode: 0, ok: true, lines: ['audit: 2 region(s) read, 2 tenure(s) on record: clean'] },
  auditFile: '/run/dr-1-audit.json',
  tookMs: 20_000,
  ...o,
});

describe('disaster-recovery', () => {
  it('draws its case from the pick, and is in the CI run (201 s, 3 regions, netns) once a round', () => {
    expect(DR_CASES.map((_, i) => drCaseOf((i + 0.5) / DR_CASES.length))).toEqual([...DR_CASES]);
    expect(drCaseOf(0.999)).toBe('lost-holder');
    const s = createSchedule({ durationMs: 201_000, seed: 8, leaseTtlMs: 3000, regions: 3, netns: true });
    expect(s.missing).toEqual([]);
    expect(s.faults.filter((f) => f.kind === 'disaster-recovery')).toHaveLength(1);
  });

  it('passes 0 IDs in common and a clean audit', () => {
    const j = judgeDisasterRecovery(outcome());
    expect(j.safetyViolation).toBeUndefined();
    expect(j.expectationMissed).toBeUndefined();
    expect(j.notes).toContain('IDs handed out by both: 0');
  });

  it('is a safety violation with an ID handed out by both, or an audit that is not clean', () => {
    const twin = outcome({ b: { name: 'dr-1-b', ready: true, ids: new BigUint64Array([2n, 3n, 9n]), failed: 0 } });
    expect(judgeDisasterRecovery(twin).safetyViolation).toMatch(
      /^disaster recovery \(new-cluster, issue 31 case 4\) broke the deployment's invariant: 2 ID\(s\) handed out by both dr-1-a and dr-1-b$/,
    );
    const audit = { exitCode: 1, ok: false, lines: ['audit: 1 region(s) read, 1 tenure(s) on record: 1 violation(s)'] };
    expect(judgeDisasterRecovery(outcome({ drCase: 'lost-holder', audit })).safetyViolation).toMatch(
      /case 3\) broke the deployment's invariant: the audit is not clean/,
    );
  });

  it('passes a refused step (B never ready), and misses its expectation when A never served', () => {
    const refused = outcome({
      restored: cli(1, 'refused'),
      b: { name: 'dr-1-b', ready: false, ids: new BigUint64Array(), failed: 0 },
    });
    expect(judgeDisasterRecovery(refused).safetyViolation).toBeUndefined();
    const noA = outcome({ a: { name: 'dr-1-a', ready: false, ids: new BigUint64Array(), failed: 0 } });
    expect(judgeDisasterRecovery(noA).expectationMissed).toBe('dr-1-a never became ready on the old etcd');
  });

  it("draws one of issue 31's five cases per fault: the region restores and the registry's cases 1, 2 and 5", () => {
    expect(DRAWN_CASES.map((_, i) => drawnCaseOf((i + 0.5) / DRAWN_CASES.length))).toEqual([
      'new-cluster',
      'lost-holder',
      'loan-restore',
      'registry-restore',
      'two-registries',
    ]);
  });

  it('a registry case passes only when its step was refused, no ID is shared and the audit is clean', () => {
    const registry = (o: Partial<RegistryCaseOutcome> = {}): RegistryCaseOutcome => ({
      registryCase: 'registry-restore',
      setup: [],
      step: cli(4, 'idgen spare lend: … its history went back'),
      refused: true,
      refusal: 'exit 4: idgen spare lend: … its history went back',
      first: { name: 'r1', ids: 20_224 },
      second: { name: 'r2', ids: 0 },
      common: 0,
      audit: { exitCode: 0, ok: true, lines: ['audit: clean'] },
      auditFile: '/run/reg-1-audit.json',
      tookMs: 12_000,
      ...o,
    });
    expect(judgeRegistryCase(registry()).safetyViolation).toBeUndefined();
    // The step accepted (the code without the fix), even before any ID is shared: the fault found the hole.
    expect(judgeRegistryCase(registry({ refused: false, refusal: 'exit 0: lent' })).safetyViolation).toMatch(
      /^disaster recovery \(registry-restore, issue 31 case 2\) broke the deployment's invariant: the step was accepted/,
    );
    expect(
      judgeRegistryCase(registry({ registryCase: 'loan-restore', refused: false, common: 18_533 })).safetyViolation,
    ).toMatch(/case 1\) broke the deployment's invariant: 18,533 ID\(s\) handed out by both r1 and r2/);
  });
});
