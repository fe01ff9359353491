// deploy/prometheus and docs/runbook.md: promtool accepts the rules and passes their unit
// tests; every alert has a runbook section, a test that fires it and a test that does not. Whether every
// metric a rule uses is one a node exports is checked against a live node in apps/server/test/metrics.spec.ts.
import { spawnSync } from 'node:child_process';
import { accessSync, constants, readFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';

const REPO = join(__dirname, '..', '..', '..');
const RULES_DIR = join(REPO, 'deploy', 'prometheus');
const RULES = join(RULES_DIR, 'idgen.rules.yml');
const RULE_TESTS = join(RULES_DIR, 'idgen.rules.test.yml');
const RUNBOOK = join(REPO, 'docs', 'runbook.md');

/** `promtool` on PATH, or a failure that says what to install (nothing is skipped: docs/style.md "Tests"). */
function promtool(): string {
  for (const dir of (process.env['PATH'] ?? '').split(delimiter)) {
    if (dir === '') continue;
    const candidate = join(dir, 'promtool');
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  throw new Error(
    "promtool not found on PATH: install Debian's prometheus package (apt-get install prometheus), which ships /usr/bin/promtool",
  );
}

function run(args: readonly string[]): { status: number | null; output: string } {
  const r = spawnSync(promtool(), args, { cwd: RULES_DIR, encoding: 'utf8', timeout: 60_000 });
  if (r.error !== undefined) throw r.error;
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}

/** Alert names of the rules file, with their `runbook_url`. */
function alerts(): { name: string; runbook: string | undefined }[] {
  const text = readFileSync(RULES, 'utf8');
  const blocks = text.split(/^\s*- alert:\s*/m).slice(1);
  return blocks.map((b) => ({ name: (b.split('\n')[0] ?? '').trim(), runbook: /runbook_url:\s*(\S+)/.exec(b)?.[1] }));
}

/** For each alert name in the unit tests: whether a case expects it quiet (`exp_alerts: []`) and firing. */
function ruleTestCases(): Map<string, { quiet: number; firing: number }> {
  const lines = readFileSync(RULE_TESTS, 'utf8').split('\n');
  const cases = new Map<string, { quiet: number; firing: number }>();
  lines.forEach((line, i) => {
    const m = /^\s*alertname:\s*(\S+)/.exec(line);
    if (m === null) return;
    const expect = lines.slice(i + 1, i + 3).find((l) => /^\s*exp_alerts:/.test(l)) ?? '';
    const c = cases.get(m[1] ?? '') ?? { quiet: 0, firing: 0 };
    if (/exp_alerts:\s*\[\]\s*$/.test(expect)) c.quiet++;
    else if (/exp_alerts:\s*$/.test(expect)) c.firing++;
    cases.set(m[1] ?? '', c);
  });
  return cases;
}

describe('deploy/prometheus/idgen.rules.yml', () => {
  it('passes promtool check rules', () => {
    const r = run(['check', 'rules', 'idgen.rules.yml']);
    expect(r.output).toMatch(/SUCCESS: \d+ rules found/);
    expect(r.status).toBe(0);
  });

  it('passes its unit tests (promtool test rules idgen.rules.test.yml)', () => {
    const r = run(['test', 'rules', 'idgen.rules.test.yml']);
    if (r.status !== 0) throw new Error(`promtool test rules failed:\n${r.output}`);
    expect(r.output).toContain('SUCCESS');
  });

  it('has, for every alert, a test that fires it and one that does not', () => {
    const names = alerts().map((a) => a.name);
    expect(names.length).toBeGreaterThanOrEqual(12);
    const cases = ruleTestCases();
    const missing = names.filter((n) => (cases.get(n)?.quiet ?? 0) === 0 || (cases.get(n)?.firing ?? 0) === 0);
    expect(missing).toEqual([]);
    // No test of an alert that no longer exists.
    expect([...cases.keys()].filter((n) => !names.includes(n))).toEqual([]);
  });

  it('links every alert to its own section of docs/runbook.md, which says what to check and what to do', () => {
    const runbook = readFileSync(RUNBOOK, 'utf8');
    const sections = new Map(
      runbook
        .split(/^## /m)
        .slice(1)
        .map((s) => [(s.split('\n')[0] ?? '').trim(), s] as const),
    );
    for (const { name, runbook: url } of alerts()) {
      // Absolute: the runbook's URL is the deployment's external label `idgen_runbook_url`, so each deployment
      // points at its own copy of the runbook.
      expect([name, url]).toEqual([name, `"{{$externalLabels.idgen_runbook_url}}#${name.toLowerCase()}"`]);
      const section = sections.get(name);
      if (section === undefined) throw new Error(`docs/runbook.md has no "## ${name}" section`);
      expect([
        name,
        /\*\*Means\.\*\*/.test(section),
        /\*\*Check\.\*\*/.test(section),
        /\*\*Do\.\*\*/.test(section),
      ]).toEqual([name, true, true, true]);
      // What to check names the operator CLI or the node's own answers.
      expect([name, /idgen (status|leases|layout|next|decode)|\/readyz|chronyc|dashboard/.test(section)]).toEqual([
        name,
        true,
      ]);
    }
  });
});
