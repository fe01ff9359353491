import { auditDeployment, regionViewOf, type RegionView } from '@idgen/lease/records';
import { auditSection, passed } from '../report.js';
import { auditConfig, judgeFindings } from './audit.js';

const LAYOUT = '{"epochMs":1735689600000,"timestampBits":41,"regionBits":3,"workerBits":7,"sequenceBits":12}';

/** A region bound to code 1, with slot 1/0's tenure record holding `tenures` (as regionViewOf reads etcd's keys). */
function region(name: string, tenures: readonly object[]): RegionView {
  return regionViewOf({
    name,
    where: `${name} (etcd test)`,
    prefix: '/idgen',
    clusterId: '7',
    revision: '812',
    kvs: [
      { key: '/idgen/layout', value: LAYOUT, lease: '0' },
      { key: '/idgen/region', value: '{"code":1,"clusterId":"7","at":"t"}', lease: '0' },
      {
        key: '/idgen/regions/1/tenures/0',
        value: JSON.stringify({ tenures, compacted: { count: 0, maxLastMs: -1 } }),
        lease: '0',
      },
    ],
  });
}

const tenure = (nodeId: string, firstMs: number, lastMs: number): object => ({
  code: 1,
  worker: 0,
  kind: 'service',
  nodeId,
  leaseId: `${nodeId}-lease`,
  firstMs,
  lastMs,
  end: 'released',
  startedAt: 't',
});

describe('the audit at the end of a chaos run (auditDeployment, in process)', () => {
  it('writes the deployment file idgen audit --config reads: one region, its etcd and prefix', () => {
    expect(
      JSON.parse(
        auditConfig([{ name: 'region-1', etcd: ['http://127.0.0.1:1', 'http://127.0.0.1:2'], prefix: '/idgen' }]),
      ),
    ).toEqual({
      regions: [{ name: 'region-1', etcd: ['http://127.0.0.1:1', 'http://127.0.0.1:2'], prefix: '/idgen' }],
    });
  });

  it('passes a clean audit, with the region it read', () => {
    const views = [region('region-1', [tenure('n1', 1000, 1999), tenure('n2', 2000, 2999)])];
    const a = judgeFindings(views, auditDeployment(views), []);
    expect(a.ok).toBe(true);
    expect(a.lines[0]).toBe('audit: 1 region(s) read, 2 tenure(s) on record: clean');
    expect(a.lines).toContain('  region region-1: bound to code 1, cluster 7, revision 812, 1 slot(s) read');
    expect(passed({ violations: 0, safetyViolations: 0, audit: a })).toBe(true);
    expect(auditSection(a)[0]).toMatch(/^audit \(.*\): OK$/);
  });

  it('fails the run on a violation, and the report carries the finding naming both holders', () => {
    const views = [region('old', [tenure('n1', 1000, 9000)]), region('new', [tenure('n9', 5000, 6000)])];
    const a = judgeFindings(views, auditDeployment(views), []);
    expect(a.ok).toBe(false);
    expect(a.exitCode).toBe(1);
    expect(passed({ violations: 0, safetyViolations: 0, audit: a })).toBe(false);
    const section = auditSection(a);
    expect(section[0]).toMatch(/^audit \(.*\): FAILED$/);
    expect(section).toContain(
      '    VIOLATION overlap: slot 1/0: old: n1 (service, lease n1-lease, 1000…9000, released) and new: n9 (service, lease n9-lease, 5000…6000, released) may both have minted in ms 5000…6000',
    );
  });

  it('fails the run when an etcd did not answer', () => {
    const a = judgeFindings([], [], ['region-1 (etcd http://127.0.0.1:1): fetch failed']);
    expect(a.ok).toBe(false);
    expect(a.exitCode).toBe(3);
    expect(a.lines).toContain('  UNREACHABLE: region-1 (etcd http://127.0.0.1:1): fetch failed');
  });
});
