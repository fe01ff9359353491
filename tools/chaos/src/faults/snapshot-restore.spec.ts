import { judgeSnapshotRestore, recoveryBoundMs, type SnapshotRestoreOutcome } from './snapshot-restore.js';

const TTL = 3000;

const outcome = (o: Partial<SnapshotRestoreOutcome>): SnapshotRestoreOutcome => ({
  target: 'n2#1',
  worker: 1,
  snapshotRevision: 812,
  claimant: 'n2#2',
  claimAfterMs: 2400,
  claimConfirmed: true,
  servingAtStop: ['n1#1', 'n2#2', 'n3#1'],
  startedAfter: ['n4#2'],
  downMs: 1900,
  restoreError: undefined,
  allFencedAfterMs: 700,
  servedOnRestored: [],
  distrusted: ['n1#1', 'n2#2', 'n3#1'],
  restored: {
    args: [],
    code: 0,
    stdout: ['region 1: 3 slot(s) of code(s) 1 marked unclean at 2026-12-01T23:00:00.000Z (…)'],
    stderr: [],
  },
  servingAgainAfterMs: 5200,
  recoveryBoundMs: recoveryBoundMs(TTL),
  gaveUp: [],
  ...o,
});

describe('etcd-snapshot-restore', () => {
  it('holds: every node fenced on the restored history, every slot serving again after region restored', () => {
    const j = judgeSnapshotRestore(outcome({}), TTL);
    expect(j.safetyViolation).toBeUndefined();
    expect(j.expectationMissed).toBeUndefined();
    expect(j.notes).toContain('worker 1 claimed by n2#2 2.4 s after the snapshot');
    expect(j.notes).toContain('every slot serving again 5.2 s after it (bound 16.0 s)');
  });

  it('is a safety violation when a node still serves on the restored history before the step (the old code)', () => {
    const j = judgeSnapshotRestore(
      outcome({
        allFencedAfterMs: undefined,
        servedOnRestored: ['n1#1', 'n3#1'],
        distrusted: [],
        restored: undefined,
        servingAgainAfterMs: 0,
      }),
      TTL,
    );
    expect(j.safetyViolation).toBe('served on the restored history before idgen region restored: n1#1, n3#1');
    expect(j.expectationMissed).toBe('the CLI has no idgen region restored');
    expect(j.notes).toContain("some node served all along after etcd's return");
    expect(j.notes).toContain("serving 4.0 s after etcd's return (before idgen region restored): n1#1, n3#1");
  });

  it('is a safety violation when the nodes fence but claim again on the restored records, with no step', () => {
    const j = judgeSnapshotRestore(outcome({ allFencedAfterMs: 100, servedOnRestored: ['n1#1'], distrusted: [] }), TTL);
    expect(j.safetyViolation).toBe('served on the restored history before idgen region restored: n1#1');
    expect(j.notes).toContain("no node serving 0.1 s after etcd's return");
  });

  it('misses liveness when the slots do not serve again within the bound, or the restore is slow', () => {
    const j = judgeSnapshotRestore(outcome({ servingAgainAfterMs: undefined, downMs: 3500, gaveUp: ['n1#1'] }), TTL);
    expect(j.safetyViolation).toBeUndefined();
    expect(j.expectationMissed).toBe(
      'etcd was back only 3.5 s after the stop (a quick restore is within one TTL); not every slot serving again within 16.0 s of the step (n1#1 gave up re-claiming on the binding refusal and stayed unready until restarted)',
    );
    expect(j.notes).toContain(
      'gave up re-claiming ("lease: re-claiming stopped") and never served again: n1#1 (restarted then)',
    );
  });
});
