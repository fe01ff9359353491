/**
 * The namespace partition as a chaos fault kind end to end (issue 25, item 5): the built `npm run chaos` with
 * `--netns` and one `netns-partition` (node n1 in its own network namespace, cut off from etcd by the router
 * namespace's silent drop) beside one `partition-node` (the TCP proxy) in the same run. It asserts what must hold:
 * 0 duplicates, no rule or safety expectation violated, the audit clean, and for each partition the takeover of the
 * cut node's worker and the cut node's own fence while cut (the run's expectation; a node whose fence deadline does
 * not hold mints on beside its successor, and the run fails). The figures (cut→fence, heal→etcd, caller cost) are
 * printed, never judged as speed.
 *
 * Needs root and iproute2 (network namespaces), the built server, CLI and chaos tool (the test target builds them),
 * etcd and libfaketime; a missing one fails here, naming it: the run never falls back to the proxy.
 */
import { execFileSync } from 'node:child_process';
import { cleanupAll, type TempDir } from '@idgen/testing';
import { runBuiltChaos } from './built-run.test-helper.js';

jest.setTimeout(150_000);

interface Figures {
  via: string;
  cutToFenceMs?: number;
  fences: Record<string, number>;
  takeoverMs?: number;
  cutMs: number;
}

interface ReportJson {
  violations: number;
  safetyViolations: number;
  netns: boolean;
  duplicates: { checked: number; duplicates: number };
  handedOutDuplicates: { duplicates: number };
  audit: { ok: boolean };
  faults: {
    fault: { kind: string };
    target: string;
    expectationMissed?: string;
    safetyViolation?: string;
    partition?: Figures;
  }[];
}

let dir: TempDir | undefined;

afterAll(async () => {
  await cleanupAll();
  await dir?.remove();
});

describe('chaos with --netns', () => {
  it('cuts the netns node off from etcd in silence: it fences on its own deadline, its worker is taken over, 0 duplicates, beside partition-node', async () => {
    const run = await runBuiltChaos<ReportJson>('idgen-chaos-netns', [
      '--netns',
      '--faults',
      'netns-partition,partition-node',
      '--duration',
      '32',
      '--seed',
      '20261202',
      '--callers',
      '2',
      '--embedded',
      '0',
    ]);
    dir = run.dir;
    const { exit, text } = run;
    expect(exit.code).toBe(0);
    expect(text).toMatch(/^VERDICT: PASS/m);
    expect(text).toMatch(/^partitions side by side/m);

    const r = await run.report();
    expect(r.netns).toBe(true);
    expect(r.violations).toBe(0);
    expect(r.safetyViolations).toBe(0);
    expect(r.audit.ok).toBe(true);
    expect(r.duplicates.duplicates).toBe(0);
    expect(r.handedOutDuplicates.duplicates).toBe(0);
    expect(r.duplicates.checked).toBeGreaterThan(10_000);
    expect(r.faults.map((f) => f.fault.kind).sort()).toEqual(['netns-partition', 'partition-node']);
    for (const f of r.faults) {
      expect({ kind: f.fault.kind, missed: f.expectationMissed }).toEqual({ kind: f.fault.kind, missed: undefined });
      const p = f.partition as Figures;
      expect(p.via).toBe(f.fault.kind === 'netns-partition' ? 'netns' : 'proxy');
      expect(p.takeoverMs).toBeDefined();
      expect(p.cutToFenceMs).toBeDefined();
      expect(p.fences.lease ?? 0).toBeGreaterThanOrEqual(1);
    }
    // The netns node is n1, and the namespaces of the run are gone (their names carry the run's pid).
    expect(r.faults.find((f) => f.fault.kind === 'netns-partition')?.target).toMatch(/^n1#/);
    expect(execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })).not.toContain(`idgnns-${run.pid}-`);
  });
});
