import {
  SPARE_CODES,
  cliLine,
  doubleLoanFault,
  judgeDoubleLoan,
  unknownToCli,
  type CliRun,
  type DoubleLoanOutcome,
} from './double-loan.js';

const run = (code: number | null, stdout: string[] = [], stderr: string[] = []): CliRun => ({
  args: [],
  code,
  stdout,
  stderr,
});

const refused = run(
  1,
  [],
  [
    'idgen spare lend: spare code 5 is lent to region 1 (/idgen/spare-registry/5 in the spare-code registry, since 2026-12-01T23:00:00.000Z): not lent to region 2',
  ],
);

const outcome = (o: Partial<DoubleLoanOutcome>): DoubleLoanOutcome => ({
  code: 5,
  region: 1,
  otherRegion: 2,
  registry: true,
  otherInit: run(0, ['region 2: this etcd (cluster 1) is now bound to region code 2']),
  first: run(0, ['spare code 5: lent, lent to region 1']),
  second: refused,
  runMirror: { state: 'lent', lentTo: 1 },
  otherMirror: null,
  reclaim: run(0, ['spare code 5: reclaimed from region 1; handover written to x.json (0 worker(s))']),
  tookMs: 4200,
  ...o,
});

describe('double-loan', () => {
  it('holds when the registry refuses the second loan with a line naming the first, and no mirror has it', () => {
    const j = judgeDoubleLoan(outcome({}));
    expect(j.safetyViolation).toBeUndefined();
    expect(j.expectationMissed).toBeUndefined();
    expect(j.notes).toContain("mirrors: run's etcd lent to region 1; other etcd no record");
  });

  it("holds when the run's etcd's mirror, read through the deployment file, refuses the second loan (exit 4)", () => {
    const byMirror = run(
      4,
      [],
      [
        'idgen spare lend: /idgen/spare-codes/5 in region r1 (http://127.0.0.1:2379) says spare code 5 is lent (lent to region 1), which contradicts this lend: the registry and the regions disagree (a restored etcd?); nothing written',
      ],
    );
    expect(judgeDoubleLoan(outcome({ second: byMirror })).safetyViolation).toBeUndefined();
  });

  it('is a safety violation when the second lend succeeds (a CLI without --registry)', () => {
    const j = judgeDoubleLoan(
      outcome({
        registry: false,
        otherInit: undefined,
        second: run(0, ['spare code 5: lent, lent to region 2']),
        otherMirror: { state: 'lent', lentTo: 2 },
      }),
    );
    expect(j.safetyViolation).toBe(
      "spare code 5 lent twice (to regions 1 and 2): the second lend (to region 2) succeeded (exit 0); region 2's etcd records code 5 lent to region 2",
    );
    expect(j.notes[0]).toMatch(/has no --registry/);
    expect(j.notes[1]).toMatch(/no such verb/);
  });

  it('is a safety violation when the refusal does not name the loan, or a mirror records the other region', () => {
    expect(judgeDoubleLoan(outcome({ second: run(3, [], ['etcd unreachable']) })).safetyViolation).toMatch(
      /not refused as a loan to region 1 \(exit 3: etcd unreachable\)/,
    );
    expect(judgeDoubleLoan(outcome({ runMirror: { state: 'lent', lentTo: 2 } })).safetyViolation).toMatch(
      /the run's etcd records code 5 lent to region 2/,
    );
  });

  it('misses its expectation (not safety) when its own steps fail', () => {
    const j = judgeDoubleLoan(
      outcome({ first: run(1, [], ['idgen spare lend: no']), second: undefined, reclaim: undefined }),
    );
    expect(j.safetyViolation).toBeUndefined();
    expect(j.expectationMissed).toBe('the first lend failed (exit 1: idgen spare lend: no)');
  });

  it('knows an older CLI by commander’s answer, and runs out of spare codes after three', async () => {
    expect(unknownToCli(run(2, [], ["error: unknown option '--registry'"]), /registry/)).toBe(true);
    expect(unknownToCli(run(2, [], ["error: unknown command 'region'"]))).toBe(true);
    expect(unknownToCli(run(1, [], ["error: unknown option '--registry'"]))).toBe(false);
    expect(cliLine(run(0, ['ok']))).toBe('exit 0: ok');
    const j = await doubleLoanFault(
      {
        cliMain: '/nonexistent',
        runEtcd: [],
        region: 1,
        otherRegion: 2,
        prefix: '/idgen',
        dir: '/tmp',
        leaseTtlSeconds: 3,
        timeoutMs: 1000,
        announce: () => undefined,
      },
      SPARE_CODES.length,
    );
    expect(j).toEqual({
      notes: ['spare codes 5, 6, 7 were lent and reclaimed in this run already: none left to lend'],
      safetyViolation: undefined,
      expectationMissed: undefined,
    });
  });
});
