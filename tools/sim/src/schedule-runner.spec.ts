import fc from 'fast-check';
import type { Scenario } from './deployment.js';
import { explore } from './main.js';
import { ScheduleRunner } from './schedule-runner.js';

/** A schedule whose process stops making progress 1 simulated second in (the harness's `freeze` self-test fault). */
const frozen: Scenario = {
  nodes: 2,
  workers: 1,
  members: 1,
  ttlSeconds: 2,
  // Pinned at the TTL: the default ceiling's start hold (6 s) would outlast the schedule, and nothing would mint.
  ttlCeilingSeconds: 2,
  durationMs: 5_000,
  lostAnswerPerMille: 0,
  faults: [{ atMs: 1_000, fault: { kind: 'freeze' } }],
};

describe('a schedule that would never end', () => {
  test('is reported stuck (its thread terminated), and the next schedule runs on a fresh thread', async () => {
    const runner = new ScheduleRunner({ stallMs: 1_500 });
    try {
      const stuck = await runner.run(frozen, 1);
      expect(stuck.violations.map((v) => v.kind)).toEqual(['stuck']);
      expect(stuck.violations[0]?.message).toMatch(/simulated time stopped at \+1[0-9]{3} ms/);
      const next = await runner.run({ ...frozen, faults: [] }, 1);
      expect(next.violations).toEqual([]);
      expect(next.simulatedMs).toBe(frozen.durationMs);
      expect(next.minted).toBeGreaterThan(0);
    } finally {
      await runner.close();
    }
  }, 120_000);

  test('is a finding of `npm run sim` with the command that replays it, not a hang', async () => {
    const lines: string[] = [];
    const r = await explore({
      seed: 5,
      budgetMs: 60_000,
      simMs: frozen.durationMs,
      shrinkMs: 0,
      bounds: { stallMs: 1_500 },
      arb: fc.constant({ scenario: frozen, netSeed: 1 }),
      out: (l) => lines.push(l),
    });
    expect(r.code).toBe(1);
    expect(r.violation).toMatch(/^stuck at \+1[0-9]{3} ms/);
    expect(r.found).toMatch(/^npm run sim -- --seed 5 --sim-seconds 5 --path [0-9:]+$/);
    expect(lines.join('\n')).toContain('VIOLATION');
  }, 120_000);
});
