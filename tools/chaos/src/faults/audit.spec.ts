import { auditSection, passed } from '../report.js';
import { auditConfig, judgeAudit } from './audit.js';

// `idgen audit --json` as apps/cli/src/audit-verbs.ts writes it.
const answer = (o: { clean: boolean; findings?: object[]; unreachable?: string[] }): string =>
  JSON.stringify({
    clean: o.clean,
    regions: [{ name: 'region-1', code: 1, clusterId: '7f3a', revision: '812', slots: 5 }],
    unreachable: o.unreachable ?? [],
    findings: o.findings ?? [],
  });

describe('the audit at the end of a chaos run', () => {
  it('writes the deployment file idgen audit --config reads: one region, its etcd and prefix', () => {
    expect(
      JSON.parse(
        auditConfig([{ name: 'region-1', etcd: ['http://127.0.0.1:1', 'http://127.0.0.1:2'], prefix: '/idgen' }]),
      ),
    ).toEqual({
      regions: [{ name: 'region-1', etcd: ['http://127.0.0.1:1', 'http://127.0.0.1:2'], prefix: '/idgen' }],
    });
  });

  it('passes a clean audit (exit 0), with the region it read', () => {
    const a = judgeAudit(0, [answer({ clean: true })]);
    expect(a.ok).toBe(true);
    expect(a.lines[0]).toBe('idgen audit: exit 0 (clean): clean');
    expect(a.lines).toContain('  region region-1: bound to code 1, cluster 7f3a, revision 812, 5 slot(s) read');
    expect(passed({ violations: 0, safetyViolations: 0, audit: a })).toBe(true);
    expect(auditSection(a)[0]).toMatch(/^audit \(.*\): OK$/);
  });

  it('fails the run on a violation (exit 1), and the report carries the audit lines', () => {
    const message = 'region 1 worker 2: tenure of chaos-n1-3 overlaps chaos-n4-2';
    const a = judgeAudit(1, [answer({ clean: false, findings: [{ kind: 'overlap', message }] })]);
    expect(a.ok).toBe(false);
    expect(passed({ violations: 0, safetyViolations: 0, audit: a })).toBe(false);
    const section = auditSection(a);
    expect(section[0]).toMatch(/^audit \(.*\): FAILED$/);
    expect(section).toContain('  idgen audit: exit 1 (violation): 1 violation(s), 0 etcd(s) unreachable');
    expect(section).toContain(`    VIOLATION overlap: ${message}`);
  });

  it('fails the run when an etcd did not answer (exit 3)', () => {
    const a = judgeAudit(3, [answer({ clean: false, unreachable: ['region-1 (etcd http://127.0.0.1:1)'] })]);
    expect(a.ok).toBe(false);
    expect(a.lines).toContain('  UNREACHABLE: region-1 (etcd http://127.0.0.1:1)');
  });

  it('fails without the JSON answer, or when the answer and the exit code disagree, showing the output', () => {
    const none = judgeAudit(2, [], ['idgen audit: --config x.json: not JSON']);
    expect(none.ok).toBe(false);
    expect(none.lines[0]).toBe('idgen audit: exit 2 (usage error): no JSON answer');
    expect(none.lines).toContain('  | idgen audit: --config x.json: not JSON');
    expect(judgeAudit(null, [answer({ clean: true })]).ok).toBe(false); // killed past its time limit
    expect(judgeAudit(0, [answer({ clean: false })]).ok).toBe(false);
  });
});
