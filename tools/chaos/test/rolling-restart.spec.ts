/**
 * A rolling restart end to end (issue 25, item 1): the built `npm run chaos` with only `--faults rolling-restart`, real
 * etcd and real server processes on loopback. Every node of the region is SIGTERMed in turn and replaced, the next only
 * once the replacement serves; it asserts what must hold: 0 duplicates, 0 failed calls, every stop a clean exit (0) and
 * every replacement serving (or parked as the spare). The gaps and latencies are printed, never judged as speed.
 *
 * Needs the built server, CLI and chaos tool (the test target builds them: `npx nx run @idgen/chaos:test`), etcd and
 * libfaketime (docs/toolchain.md); a missing one fails here, naming it.
 */
import { cleanupAll } from '@idgen/testing';
import { runBuiltChaos } from './built-run.test-helper.js';

jest.setTimeout(150_000);

interface ReportJson {
  violations: number;
  expectationsMissed: number;
  duplicates: { checked: number; duplicates: number };
  handedOutDuplicates: { duplicates: number };
  callersSummary: { failed: number }[];
  faults: { fault: { kind: string }; notes: string[]; expectationMissed?: string }[];
  callerCost: { byKind: { kind: string; runs: number; failedCalls: number }[] };
}

afterAll(async () => {
  await cleanupAll();
});

describe('chaos rolling-restart', () => {
  it('restarts every node in turn: clean exits, replacements serving, 0 failed calls, 0 duplicates', async () => {
    const nodes = 3;
    const run = await runBuiltChaos<ReportJson>('idgen-chaos-rolling', [
      '--faults',
      'rolling-restart',
      '--duration',
      '30',
      '--seed',
      '25',
      '--callers',
      '2',
      '--embedded',
      '0',
      '--nodes',
      String(nodes),
      '--slots',
      '2',
    ]);
    const { exit } = run;
    const r = await run.report();
    const rolls = r.faults.filter((f) => f.fault.kind === 'rolling-restart');
    expect(rolls.map((f) => f.expectationMissed ?? 'held')).toEqual(rolls.map(() => 'held'));
    expect(exit.code).toBe(0);
    expect(r.violations).toBe(0);
    expect(r.expectationsMissed).toBe(0);
    expect(r.duplicates.duplicates).toBe(0);
    expect(r.handedOutDuplicates.duplicates).toBe(0);
    expect(r.duplicates.checked).toBeGreaterThan(10_000);
    expect(r.callersSummary.map((c) => c.failed)).toEqual([0, 0]);
    expect(rolls.length).toBeGreaterThanOrEqual(1);
    for (const f of rolls) {
      // One note per position after the "N serving" one: `n1#1 (tree, worker 0) exit 0 released → n1#2 (tree) serving …`.
      const steps = f.notes.filter((n) => n.includes(' → '));
      expect(steps).toHaveLength(nodes);
      for (const s of steps)
        expect(s).toMatch(
          /^(n\d: none running|n\d#\d+ \(tree, worker [\d-]+\) exit 0 released) → n\d#\d+ \(tree\) (serving worker \d|parked as the spare)/,
        );
    }
    const cost = r.callerCost.byKind.find((k) => k.kind === 'rolling-restart');
    expect(cost?.runs).toBe(rolls.length);
    expect(cost?.failedCalls).toBe(0);
  });
});
