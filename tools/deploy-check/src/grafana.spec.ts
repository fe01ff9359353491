// deploy/grafana/idgen.json: the panels the on-call engineer looks for are there, each
// queries Prometheus through the dashboard's datasource variable, and every recording rule a panel reads is
// defined in deploy/prometheus/idgen.rules.yml. Whether every metric a panel queries is one a node exports
// is checked against a live node in apps/server/test/metrics.spec.ts.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const REPO = join(__dirname, '..', '..', '..');

interface Target {
  readonly expr?: string;
  readonly datasource?: { readonly uid?: string };
}
interface Panel {
  readonly id: number;
  readonly type: string;
  readonly title: string;
  readonly description?: string;
  readonly gridPos: { readonly x: number; readonly y: number; readonly w: number; readonly h: number };
  readonly targets?: readonly Target[];
  readonly datasource?: { readonly uid?: string };
}
interface Dashboard {
  readonly uid: string;
  readonly title: string;
  readonly panels: readonly Panel[];
  readonly templating: { readonly list: readonly { readonly name: string; readonly query?: unknown }[] };
}

const dashboard = JSON.parse(readFileSync(join(REPO, 'deploy', 'grafana', 'idgen.json'), 'utf8')) as Dashboard;
// With the deployment's half (the wanted serving nodes per region: the operator's file), as its example has it.
const rules = ['idgen.rules.yml', 'idgen.wanted.example.yml']
  .map((f) => readFileSync(join(REPO, 'deploy', 'prometheus', f), 'utf8'))
  .join('\n');

/** Panels under each row, by row title. */
function sections(): Map<string, Panel[]> {
  const out = new Map<string, Panel[]>();
  let current: Panel[] = [];
  for (const p of dashboard.panels) {
    if (p.type === 'row') {
      current = [];
      out.set(p.title, current);
    } else current.push(p);
  }
  return out;
}

describe('deploy/grafana/idgen.json', () => {
  it('has the region overview and the per-node panels', () => {
    const s = sections();
    const titles = (row: string): string[] => (s.get(row) ?? []).map((p) => p.title);
    expect(titles('Region overview')).toEqual(
      expect.arrayContaining(['Serving nodes', 'Worker slots used / free', 'IDs/s', 'NextIds p99']),
    );
    expect(titles('Per node')).toEqual(
      expect.arrayContaining([
        'Fences by reason',
        'Clock rollbacks',
        'Keep-alive age',
        'Clock offset',
        'Event-loop delay',
        'GC pause time by kind',
      ]),
    );
  });

  it('queries through its datasource variable, filtered by its region and node variables', () => {
    expect(dashboard.templating.list.map((v) => v.name)).toEqual(['datasource', 'region', 'instance']);
    const panels = dashboard.panels.filter((p) => p.type !== 'row');
    expect(new Set(dashboard.panels.map((p) => p.id)).size).toBe(dashboard.panels.length);
    for (const p of panels) {
      expect([p.title, p.datasource?.uid, (p.targets ?? []).length > 0, (p.description ?? '') !== '']).toEqual([
        p.title,
        '${datasource}',
        true,
        true,
      ]);
      expect(p.gridPos.x + p.gridPos.w).toBeLessThanOrEqual(24);
      for (const t of p.targets ?? []) {
        expect([p.title, t.datasource?.uid]).toEqual([p.title, '${datasource}']);
        expect([p.title, /\$region|\$instance/.test(t.expr ?? '')]).toEqual([p.title, true]);
      }
    }
  });

  it('reads only recording rules that deploy/prometheus/idgen.rules.yml defines', () => {
    const recorded = new Set([...rules.matchAll(/^\s*- record:\s*(\S+)/gm)].map((m) => m[1]));
    const used = dashboard.panels.flatMap((p) =>
      (p.targets ?? []).flatMap((t) => [...(t.expr ?? '').matchAll(/\b(idgen:[a-z0-9_:]+)/g)].map((m) => m[1])),
    );
    expect(used.length).toBeGreaterThan(5);
    expect(used.filter((name) => !recorded.has(name))).toEqual([]);
  });
});
