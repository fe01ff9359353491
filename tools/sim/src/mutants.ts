import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readlinkSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

/**
 * `npm run sim -- --mutants` (issue 32 item 6): each patch under tools/sim/mutants/ re-introduces a known hole in
 * today's code. It is applied in a temporary `git worktree` of HEAD (never on the branch), the packages the simulator
 * runs are built there, and the simulator explores for the budget; a mutant is found when the checker reports a
 * violation. Prints one line per mutant and a table; exits 1 when any mutant was not found.
 */
export async function runMutants(o: {
  seed: number;
  budgetSeconds: number;
  simMs: number;
  /** Schedule threads side by side (`--threads`). */
  threads: number;
  /** Explore the whole deployment (`--regions`) instead of one region. */
  regions?: boolean;
  /** Only these mutants (names without `.patch`); default all. */
  only?: readonly string[];
}): Promise<number> {
  const root = execFileSync('git', ['rev-parse', '--show-toplevel'], { encoding: 'utf8' }).trim();
  const dir = join(root, 'tools', 'sim', 'mutants');
  const patches = readdirSync(dir)
    .filter((f) => f.endsWith('.patch'))
    .filter((f) => o.only === undefined || o.only.length === 0 || o.only.includes(f.replace(/\.patch$/, '')))
    .sort();
  const rows: string[] = [];
  let missed = 0;
  process.stdout.write(`sim --mutants: seed ${o.seed}, ${o.budgetSeconds} s per mutant, ${patches.length} mutants\n`);
  for (const patch of patches) {
    const name = patch.replace(/\.patch$/, '');
    const r = await runMutant(root, join(dir, patch), o);
    if (!r.found) missed++;
    const line = `${name} | ${r.found ? `found: ${r.violation ?? '?'}` : 'NOT found'} | ${r.schedules} | ${r.seconds.toFixed(1)} | ${r.replay ?? `seed ${o.seed}`}`;
    rows.push(line);
    process.stdout.write(`  ${line}\n`);
    if (r.error !== undefined) process.stdout.write(`    ${r.error}\n`);
    if (!r.found && r.violation !== undefined) process.stdout.write(`    a finding of the harness: ${r.violation}\n`);
  }
  process.stdout.write(`\nmutant | verdict: first violation | schedules | seconds | replay\n${rows.join('\n')}\n`);
  return missed === 0 ? 0 : 1;
}

interface MutantResult {
  found: boolean;
  schedules: number;
  seconds: number;
  replay?: string;
  /** The first violation the shrunk schedule showed. */
  violation?: string;
  error?: string;
}

async function runMutant(
  root: string,
  patch: string,
  o: { seed: number; budgetSeconds: number; simMs: number; threads: number; regions?: boolean },
): Promise<MutantResult> {
  const work = mkdtempSync(join(tmpdir(), 'idgen-sim-mutant-'));
  const tree = join(work, 'tree');
  const git = (...args: string[]): string => execFileSync('git', args, { cwd: root, encoding: 'utf8', stdio: 'pipe' });
  git('worktree', 'add', '--detach', tree, 'HEAD');
  try {
    execFileSync('git', ['apply', patch], { cwd: tree, stdio: 'pipe' });
    linkNodeModules(root, tree);
    // The packages the simulator runs, built from the mutated sources (tsc -b follows the references).
    execFileSync(
      process.execPath,
      [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-b', 'tools/sim/tsconfig.lib.json'],
      {
        cwd: tree,
        stdio: 'pipe',
      },
    );
    for (const p of ['core', 'clock-guard', 'lease', 'embedded'])
      writeFileSync(join(tree, 'packages', p, 'dist', 'cjs', 'package.json'), '{"type":"commonjs"}\n');
    const out = await run(
      process.execPath,
      [
        join(tree, 'tools', 'sim', 'dist', 'main.js'),
        '--seed',
        String(o.seed),
        '--budget-seconds',
        String(o.budgetSeconds),
        '--sim-seconds',
        String(o.simMs / 1000),
        '--threads',
        String(o.threads),
        // The mutants' holes are duplicates; the audit's precision is judged on main's runs, not here.
        ...(o.regions === true ? ['--regions', '--no-audit'] : []),
      ],
      tree,
    );
    const violation = /VIOLATION after ([0-9]+) schedules, ([0-9.]+) s/.exec(out);
    const replay = /replay: (.*)/.exec(out)?.[1];
    const first =
      /^ {2}((duplicate|after-deadline|after-lease|above-ceiling|audit-missed|audit-false-alarm|stuck|error) at .*)$/m.exec(
        out,
      )?.[1];
    const summary = /sim: ([0-9]+) schedules, [0-9]+ simulated s in ([0-9.]+) wall s/.exec(out);
    // A stuck schedule or a harness error is a finding of its own, not the mutant's hole.
    if (violation !== null)
      return {
        found: first !== undefined && !/^(stuck|error) /.test(first),
        schedules: Number(violation[1]),
        seconds: Number(violation[2]),
        ...(replay === undefined ? {} : { replay }),
        ...(first === undefined ? {} : { violation: first }),
      };
    return {
      found: false,
      schedules: Number(summary?.[1] ?? 0),
      seconds: Number(summary?.[2] ?? 0),
      ...(summary === null ? { error: out.split('\n').slice(-5).join(' / ') } : {}),
    };
  } catch (e) {
    const err = e as { stderr?: Buffer | string; message: string };
    return {
      found: false,
      schedules: 0,
      seconds: 0,
      error: `${err.message} ${String(err.stderr ?? '').slice(0, 500)}`,
    };
  } finally {
    // Another run's cleanup may have removed it already (a shared /tmp): the verdict stands, the run goes on.
    try {
      git('worktree', 'remove', '--force', tree);
    } catch {
      git('worktree', 'prune');
    }
  }
}

/**
 * The worktree's node_modules: the root's, entry by entry, except the workspace's own packages, which link to the
 * worktree's (mutated) sources.
 */
function linkNodeModules(root: string, tree: string): void {
  const from = join(root, 'node_modules');
  const to = join(tree, 'node_modules');
  mkdirSync(join(to, '@idgen'), { recursive: true });
  for (const e of readdirSync(from)) if (e !== '@idgen') symlinkSync(join(from, e), join(to, e));
  for (const e of readdirSync(join(from, '@idgen'))) {
    const target = readlinkSync(join(from, '@idgen', e));
    symlinkSync(resolve(join(to, '@idgen'), target), join(to, '@idgen', e));
  }
}

function run(cmd: string, args: string[], cwd: string): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('close', () => resolvePromise(out));
  });
}
