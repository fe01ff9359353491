/**
 * A rolling restart end to end (issue 25, item 1): the built `npm run chaos` with only `--faults rolling-restart`, real
 * etcd and real server processes on loopback. Every node of the region is SIGTERMed in turn and replaced, the next only
 * once the replacement serves; it asserts what must hold: 0 duplicates, 0 failed calls, every stop a clean exit (0) and
 * every replacement serving (or parked as the spare). The gaps and latencies are printed, never judged as speed.
 *
 * Needs the built server, CLI and chaos tool (the test target builds them: `npx nx run @idgen/chaos:test`), etcd and
 * libfaketime (docs/toolchain.md); a missing one fails here, naming it.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { cleanupAll, spawnProcess, tempDir, type TempDir } from '@idgen/testing';

jest.setTimeout(150_000);

const ROOT = join(__dirname, '..', '..', '..');
const CHAOS_MAIN = join(ROOT, 'tools/chaos/dist/main.js');
const NEEDED = [CHAOS_MAIN, join(ROOT, 'apps/server/dist/main.js'), join(ROOT, 'apps/cli/dist/main.js')];

interface ReportJson {
  violations: number;
  expectationsMissed: number;
  duplicates: { checked: number; duplicates: number };
  handedOutDuplicates: { duplicates: number };
  callersSummary: { failed: number }[];
  faults: { fault: { kind: string }; notes: string[]; expectationMissed?: string }[];
  callerCost: { byKind: { kind: string; runs: number; failedCalls: number }[] };
}

let dir: TempDir;

afterAll(async () => {
  await cleanupAll();
});

describe('chaos rolling-restart', () => {
  it('restarts every node in turn: clean exits, replacements serving, 0 failed calls, 0 duplicates', async () => {
    for (const f of NEEDED)
      if (!existsSync(f))
        throw new Error(
          `${f} is missing: build it (npx nx run-many -t build -p @idgen/chaos @idgen/server @idgen/cli)`,
        );
    dir = await tempDir('idgen-chaos-rolling');
    const out = join(dir.path, 'run');
    const nodes = 3;
    const run = spawnProcess(process.execPath, [
      CHAOS_MAIN,
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
      '--out',
      out,
    ]);
    const exit = await run.exited;
    const text = existsSync(join(out, 'report.txt')) ? await readFile(join(out, 'report.txt'), 'utf8') : run.tail(60);
    process.stdout.write(`${text}\n`);
    const r = JSON.parse(await readFile(join(out, 'report.json'), 'utf8')) as ReportJson;
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
