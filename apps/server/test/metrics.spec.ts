// What a live node exports on /metrics, against what the repository says it exports:
// docs/metrics.md's series table, every metric the Prometheus rules use, every metric a Grafana panel queries.
// A name that drifts in the code, docs/metrics.md, the rules or the dashboard fails here.
import { delimiter, join } from 'node:path';
import { readFileSync } from 'node:fs';
import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { Health } from '@idgen/proto';
import { CHRONY_HEALTHY, bindRegion, cleanupAll, createChronyStub, type EtcdServer, startEtcd } from '@idgen/testing';
import { idClient, startServer, waitFor, type ServerNode } from './support.test-helper.js';

jest.setTimeout(90_000);

const REPO = join(__dirname, '..', '..', '..');
const NODE_ID = 'metrics-node';
/**
 * Series of docs/metrics.md's table only a node with TLS on its serving port exports (this node is plaintext;
 * certificate-metrics.spec.ts scrapes a TLS node for them).
 */
const TLS_ONLY: ReadonlySet<string> = new Set(['idgen_tls_certificate_not_after']);

let etcd: EtcdServer;
let node: ServerNode;
/** The scrape every test reads: taken once every family docs/metrics.md lists is there (bounded wait). */
let scrape: Scrape;

interface Scrape {
  readonly text: string;
  /** Metric family → its `# TYPE`. */
  readonly families: ReadonlyMap<string, string>;
  /** Every sample name (`x_bucket`, `x_sum`, … included). */
  readonly samples: ReadonlySet<string>;
}

function parseScrape(text: string): Scrape {
  const families = new Map<string, string>();
  const samples = new Set<string>();
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type !== null) families.set(type[1] ?? '', type[2] ?? '');
    else if (line !== '' && !line.startsWith('#')) samples.add(line.split(/[{ ]/)[0] ?? '');
  }
  return { text, families, samples };
}

/** docs/metrics.md's series table: series name → the type its second column starts with. */
function readmeTable(): Map<string, string> {
  const readme = readFileSync(join(REPO, 'docs', 'metrics.md'), 'utf8');
  const section = readme.slice(
    readme.indexOf('\n## Series\n'),
    readme.indexOf('\n## ', readme.indexOf('\n## Series\n') + 5),
  );
  const table = new Map<string, string>();
  for (const row of section.split('\n').filter((l) => l.startsWith('| `'))) {
    const [names = '', type = ''] = row
      .split('|')
      .slice(1)
      .map((c) => c.trim());
    let previous = '';
    for (const [, name = ''] of names.matchAll(/`([a-z0-9_]+)`/g)) {
      // `nodejs_eventloop_delay_min`, `_max`: a name from `_` continues the previous one's stem.
      const full = name.startsWith('_') ? previous.slice(0, previous.lastIndexOf('_')) + name : name;
      table.set(full, type.split(' ')[0] ?? '');
      previous = full;
    }
  }
  return table;
}

/**
 * Metric names a PromQL text uses (the node's own prefixes; recording rules `a:b:c` are checked apart).
 * Label matchers and grouping clauses go first: `by (v8js_gc_type)` names a label, not a metric.
 */
function metricNames(promql: string): Set<string> {
  const bare = promql
    .replace(/\{[^}]*\}/g, '')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, '')
    .replace(/(label_values\([^,]*),[^)]*\)/g, '$1)')
    .replace(/\{\{[^}]*\}\}/g, '');
  return new Set(
    [...bare.matchAll(/\b((?:idgen|nodejs|v8js|process)_[a-z0-9_]+|target_info)\b/g)].map((m) => m[1] ?? ''),
  );
}

/** Every `expr` of the rules file, and the names it records. */
function rules(): { exprs: string[]; recorded: Set<string> } {
  const text = readFileSync(join(REPO, 'deploy', 'prometheus', 'idgen.rules.yml'), 'utf8');
  const exprs: string[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const m = /^(\s*)(?:- )?expr:\s*(.*)$/.exec(lines[i] ?? '');
    if (m === null) continue;
    const indent = (m[1] ?? '').length;
    let expr = m[2] === '|' || m[2] === '>' ? '' : (m[2] ?? '');
    // A block scalar's lines are indented deeper than `expr:`; the next key is not.
    const indentOf = (l: string): number => l.length - l.trimStart().length;
    while (i + 1 < lines.length && ((lines[i + 1] ?? '').trim() === '' || indentOf(lines[i + 1] ?? '') > indent)) {
      expr += `\n${lines[++i] ?? ''}`;
    }
    exprs.push(expr);
  }
  // The deployment's half (the wanted serving nodes per region) is the operator's file: its example records too.
  const deployment = readFileSync(join(REPO, 'deploy', 'prometheus', 'idgen.wanted.example.yml'), 'utf8');
  const recorded = new Set([...`${text}\n${deployment}`.matchAll(/^\s*- record:\s*(\S+)/gm)].map((m) => m[1] ?? ''));
  return { exprs, recorded };
}

/** Every `expr` of every panel target of the dashboard (nested rows included). */
function dashboardExprs(): string[] {
  const dashboard: unknown = JSON.parse(readFileSync(join(REPO, 'deploy', 'grafana', 'idgen.json'), 'utf8'));
  const out: string[] = [];
  const walk = (v: unknown): void => {
    if (Array.isArray(v)) v.forEach(walk);
    else if (typeof v === 'object' && v !== null) {
      for (const [k, x] of Object.entries(v)) {
        if (k === 'expr' && typeof x === 'string') out.push(x);
        else if (k === 'query' && typeof x === 'string' && x.includes('label_values')) out.push(x);
        else walk(x);
      }
    }
  };
  walk(dashboard);
  return out;
}

beforeAll(async () => {
  etcd = await startEtcd();
  await bindRegion(etcd, 2); // idgen region init, before the region's first node
  const chrony = createChronyStub(CHRONY_HEALTHY);
  node = await startServer(
    ['--region', '2', '--etcd', etcd.clientUrl, '--node-id', NODE_ID, '--lease-ttl', '4', '--time-source', 'chrony'],
    { PATH: `${chrony.dir}${delimiter}${process.env['PATH'] ?? ''}` },
  );
  await node.ready();
  const ids = idClient(node.baseUrl, 'grpc-h2');
  const health = createClient(Health, createGrpcTransport({ baseUrl: node.baseUrl }));
  await ids.getStatus({});
  await health.check({ service: '' });
  await ids.nextIds({ count: 0 }).catch(() => undefined); // one invalid_argument
  const wanted = [...readmeTable().keys()].filter((name) => !TLS_ONLY.has(name));
  let last: Scrape | undefined;
  // Traffic until every listed family is there: the GC histogram appears with the first collection.
  await waitFor(
    `every README family on ${node.metricsUrl ?? '?'}`,
    async () => {
      await Promise.all(Array.from({ length: 50 }, () => ids.nextIds({ count: 100 })));
      last = parseScrape(await (await fetch(node.metricsUrl ?? '', { signal: AbortSignal.timeout(5_000) })).text());
      const scraped = last;
      return wanted.every((name) => scraped.families.has(name));
    },
    30_000,
  ).catch((e: unknown) => {
    const missing = wanted.filter((name) => last?.families.has(name) !== true);
    throw new Error(`${(e as Error).message}; missing: ${missing.join(', ')}`);
  });
  if (last === undefined) throw new Error('no scrape');
  scrape = last;
});

afterAll(async () => {
  await node?.stop();
  await etcd?.stop();
  await cleanupAll();
});

describe('a live node’s /metrics', () => {
  it('exports exactly the series docs/metrics.md lists, with the type it gives', () => {
    const table = readmeTable();
    expect(table.size).toBeGreaterThan(20);
    for (const name of TLS_ONLY)
      expect([name, table.get(name), scrape.families.has(name)]).toEqual([name, 'gauge', false]);
    const plaintext = [...table].filter(([name]) => !TLS_ONLY.has(name));
    expect([...scrape.families.keys()].sort()).toEqual(plaintext.map(([name]) => name).sort());
    for (const [name, type] of plaintext) expect([name, scrape.families.get(name)]).toEqual([name, type]);
  });

  it('names the service on target_info', () => {
    const version = (JSON.parse(readFileSync(join(__dirname, '..', 'package.json'), 'utf8')) as { version: string })
      .version;
    const line = scrape.text.split('\n').find((l) => l.startsWith('target_info{'));
    expect(line).toContain('service_name="idgen-server"');
    expect(line).toContain(`service_version="${version}"`);
    expect(line).toContain(`service_instance_id="${NODE_ID}"`);
  });

  it('has every event counter from the start, at 0 until its first event', () => {
    expect(scrape.text).toMatch(/^idgen_lease_keepalive_failures_total\{[^}]*\} 0$/m);
    expect(scrape.text).toMatch(/^idgen_lease_churn_total\{event="acquired",[^}]*\} 1$/m);
    expect(scrape.text).toMatch(/^idgen_lease_churn_total\{event="lost",[^}]*\} 0$/m);
    for (const reason of [
      'not-assigned',
      'waiting-for-floor',
      'clock-rollback',
      'clock-out-of-range',
      'lease',
      'clock-ahead',
      'time-source',
      'draining',
    ]) {
      expect(scrape.text).toMatch(new RegExp(`^idgen_fences_total\\{reason="${reason}",[^}]*\\} \\d+$`, 'm'));
    }
    expect(scrape.text).toMatch(/^idgen_node_ready\{region="2",[^}]*\} 1$/m);
    expect(scrape.text).toMatch(/^idgen_node_readiness\{region="2",reason="ready",[^}]*\} 1$/m);
    expect(scrape.text).toMatch(/^v8js_gc_duration_bucket\{v8js_gc_type="(minor|major|incremental|weakcb)"/m);
  });

  it('has every metric the Prometheus rules use (deploy/prometheus/idgen.rules.yml)', () => {
    const { exprs, recorded } = rules();
    expect(exprs.length).toBeGreaterThan(10);
    const used = new Set(exprs.flatMap((e) => [...metricNames(e)]));
    expect(used.size).toBeGreaterThan(5);
    expect([...used].filter((name) => !scrape.samples.has(name) && !TLS_ONLY.has(name))).toEqual([]);
    // A recording rule used by another rule is defined in the file.
    const usedRecorded = new Set(
      exprs.flatMap((e) => [...e.matchAll(/\b(idgen:[a-z0-9_:]+)/g)].map((m) => m[1] ?? '')),
    );
    expect([...usedRecorded].filter((name) => !recorded.has(name))).toEqual([]);
  });

  it('has every metric a Grafana panel queries (deploy/grafana/idgen.json), and every recording rule it reads', () => {
    const exprs = dashboardExprs();
    expect(exprs.length).toBeGreaterThan(10);
    const used = new Set(exprs.flatMap((e) => [...metricNames(e)]));
    expect([...used].filter((name) => !scrape.samples.has(name))).toEqual([]);
    const { recorded } = rules();
    const usedRecorded = new Set(
      exprs.flatMap((e) => [...e.matchAll(/\b(idgen:[a-z0-9_:]+)/g)].map((m) => m[1] ?? '')),
    );
    expect([...usedRecorded].filter((name) => !recorded.has(name))).toEqual([]);
  });
});
